package engine

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestBatcher: a batch is flushed when full, or the interval after its
// first value; the batcher holds at most max values, those being flushed
// too (add waits); close flushes what is left, and add fails after it.
func TestBatcher(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var flushed [][]int
		var at []time.Duration
		release := make(chan struct{})
		began := time.Now()
		b := newBatcher(3, 5*time.Millisecond, func(vs []int) {
			mu.Lock()
			flushed = append(flushed, slices.Clone(vs))
			at = append(at, time.Since(began))
			mu.Unlock()
			if vs[0] == 10 {
				<-release // a slow flush: the batcher stays full
			}
		})
		for _, v := range []int{1, 2, 3, 4} {
			b.add(v)
		}
		synctest.Wait()
		mu.Lock()
		if len(flushed) != 1 || !slices.Equal(flushed[0], []int{1, 2, 3}) || at[0] != 0 {
			t.Fatalf("flushed %v at %v, want [1 2 3] at once (full)", flushed, at)
		}
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		synctest.Wait()
		mu.Lock()
		if len(flushed) != 2 || !slices.Equal(flushed[1], []int{4}) || at[1] != 5*time.Millisecond {
			t.Fatalf("flushed %v at %v, want [4] the interval after it was added", flushed, at)
		}
		mu.Unlock()

		for _, v := range []int{10, 11, 12} {
			b.add(v) // flushed at once, and held in the slow flush
		}
		added := make(chan struct{})
		go func() { b.add(13); close(added) }()
		synctest.Wait()
		select {
		case <-added:
			t.Fatal("add did not wait while the batcher held max values being flushed")
		default:
		}
		close(release)
		<-added
		b.close()
		if b.add(14) {
			t.Error("add after close succeeded")
		}
		mu.Lock()
		defer mu.Unlock()
		if last := flushed[len(flushed)-1]; !slices.Equal(last, []int{13}) {
			t.Errorf("close flushed %v last, want [13]", last)
		}
	})
}

// TestSettlementOutsideRun: with no settlement (outside Run) nothing is
// taken, and failed writes are held until the caller's context ends; a
// running one takes writes and acks, and quits with Run; a stopped one
// takes nothing.
func TestSettlementOutsideRun(t *testing.T) {
	var none *settlement
	ctx := context.Background()
	if none.write(pageWrite{}) || none.ack(toAck{}) {
		t.Error("no settlement took a write or an ack")
	}
	if none.quitting(ctx) != ctx {
		t.Error("no settlement: failed writes not held until the caller's context")
	}
	var wrote, acked atomic.Int32
	quit, cancel := context.WithCancel(ctx)
	defer cancel()
	s := &settlement{
		quit:   quit,
		writes: newBatcher(1, time.Millisecond, func(ps []pageWrite) { wrote.Add(int32(len(ps))) }),
		acks:   newBatcher(1, time.Millisecond, func(as []toAck) { acked.Add(int32(len(as))) }),
	}
	if !s.write(pageWrite{}) || !s.ack(toAck{}) {
		t.Error("a running settlement refused a write or an ack")
	}
	if s.quitting(ctx) != quit {
		t.Error("a running settlement does not quit with Run")
	}
	s.stop()
	if wrote.Load() != 1 || acked.Load() != 1 {
		t.Errorf("stopped after %d writes and %d acks flushed, want 1 and 1", wrote.Load(), acked.Load())
	}
	if s.write(pageWrite{}) || s.ack(toAck{}) {
		t.Error("a stopped settlement took a write or an ack")
	}
}

// TestAckerInterval: pages finishing 2ms apart, 50 of them over 100ms,
// are acknowledged in at most 6 batches (ackInterval: one batch a round
// trip; at 5ms it took 17).
func TestAckerInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var batches atomic.Int32
		b := newBatcher(batchSize(256), ackInterval, func([]int) { batches.Add(1) })
		for i := range 50 {
			b.add(i)
			time.Sleep(2 * time.Millisecond)
		}
		b.close()
		if n := batches.Load(); n > 6 {
			t.Errorf("50 acknowledgements 2ms apart went in %d batches, want at most 6", n)
		}
	})
}

// TestAckerIntervalFourWorkers: acknowledgements of one of four workers,
// a page every 5ms (200 pages/s), 100 of them over 500ms, go in at most
// 8 batches (at 20ms they took 25: a round trip each, four times as many
// a page as for one worker).
func TestAckerIntervalFourWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var batches atomic.Int32
		b := newBatcher(batchSize(256), ackInterval, func([]int) { batches.Add(1) })
		for i := range 100 {
			b.add(i)
			time.Sleep(5 * time.Millisecond)
		}
		b.close()
		if n := batches.Load(); n > 8 {
			t.Errorf("100 acknowledgements 5ms apart went in %d batches, want at most 8", n)
		}
	})
}

// BenchmarkBatcher measures the CPU a value costs the batcher, fed as a
// worker at 1,000 pages/s feeds its writer: 64 goroutines each adding a
// value every 64ms, the flush doing nothing. The goroutines' own sleeps
// are in the figure too (as much with any batcher): compare runs.
func BenchmarkBatcher(b *testing.B) {
	bt := newBatcher(maxBatch, writeInterval, func([]int) {})
	defer bt.close()
	var next atomic.Int64
	var wg sync.WaitGroup
	cpu := processCPU()
	start := time.Now()
	for range 64 {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				time.Sleep(64 * time.Millisecond)
				bt.add(1)
			}
		})
	}
	wg.Wait()
	if cpu > 0 {
		b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "adds/s")
}

// TestWriterInterval: pages finishing 1ms apart, 100 of them over 100ms
// (a worker at 1,000 pages/s), are written in at most 6 batches
// (writeInterval: a batch is a frontier round trip and a sink write
// whatever its size; at 5ms it took 19).
func TestWriterInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var batches atomic.Int32
		b := newBatcher(batchSize(256), writeInterval, func([]int) { batches.Add(1) })
		for i := range 100 {
			b.add(i)
			time.Sleep(time.Millisecond)
		}
		b.close()
		if n := batches.Load(); n > 6 {
			t.Errorf("100 pages 1ms apart went in %d batches, want at most 6", n)
		}
	})
}
