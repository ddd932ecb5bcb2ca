package engine

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/trawlhq/trawl/broker"
)

// leasedDelivery is a delivery that counts its extensions, failing them
// with err.
type leasedDelivery struct {
	broker.Delivery
	mu       sync.Mutex
	extended []time.Duration
	err      error
}

func (d *leasedDelivery) Extend(_ context.Context, lease time.Duration) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.extended = append(d.extended, lease)
	return d.err
}

func (d *leasedDelivery) extensions() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.extended)
}

// TestLeaseKeeper: the keeper extends, every third of the lease, the
// leases of the deliveries taken and of those held, not of those done
// or released; it counts them in flight; and it logs a failed extension
// unless the delivery was settled meanwhile.
func TestLeaseKeeper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs bytes.Buffer
		log := slog.New(slog.NewTextHandler(&logs, nil))
		var k leaseKeeper
		taken, held, both, gone := &leasedDelivery{}, &leasedDelivery{}, &leasedDelivery{}, &leasedDelivery{}
		settled := &leasedDelivery{err: broker.ErrSettled}
		lost := &leasedDelivery{err: broker.ErrNotFound}
		k.take(taken)
		k.hold(held)
		k.take(both)
		k.hold(both)
		k.take(gone)
		k.hold(settled)
		k.take(lost)
		if n := k.inFlight(); n != 7 {
			t.Fatalf("inFlight = %d, want 7 (a delivery taken and held counts twice)", n)
		}
		k.done(gone)
		done := make(chan struct{})
		stopped := make(chan struct{})
		go func() { defer close(stopped); k.keep(context.Background(), 3*time.Second, nil, done, log) }()
		time.Sleep(time.Second + time.Millisecond)
		synctest.Wait()
		// A delivery both taken and held (a page handed to the writer,
		// its goroutine not yet done) is extended once.
		for _, tc := range []struct {
			name string
			d    *leasedDelivery
			want int
		}{{"taken", taken, 1}, {"held", held, 1}, {"taken and held", both, 1}} {
			if n := tc.d.extensions(); n != tc.want {
				t.Errorf("%s: %d extensions after a third of the lease, want %d", tc.name, n, tc.want)
			}
		}
		if n := gone.extensions(); n != 0 {
			t.Errorf("a delivery done was extended %d times", n)
		}
		if got := taken.extended[0]; got != 3*time.Second {
			t.Errorf("extended by %v, want the lease, 3s", got)
		}
		if s := logs.String(); strings.Count(s, "lease extension failed") != 1 || !strings.Contains(s, broker.ErrNotFound.Error()) {
			t.Errorf("logged %q, want one failed extension: the lost lease's, not the settled delivery's", s)
		}
		k.done(taken)
		k.release(held)
		k.done(both)
		k.release(both)
		k.release(settled)
		k.done(lost)
		if n := k.inFlight(); n != 0 {
			t.Errorf("inFlight = %d once every delivery is settled, want 0", n)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if n := held.extensions(); n != 1 {
			t.Errorf("a delivery released was extended again: %d extensions", n)
		}
		close(done)
		<-stopped
	})
}

// TestLeaseKeeperDefault: with no lease configured the keeper extends by
// defaultLease, every third of it.
func TestLeaseKeeperDefault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var k leaseKeeper
		d := &leasedDelivery{}
		k.take(d)
		done := make(chan struct{})
		go k.keep(context.Background(), 0, nil, done, slog.New(slog.DiscardHandler))
		time.Sleep(defaultLease/3 - time.Millisecond)
		synctest.Wait()
		if n := d.extensions(); n != 0 {
			t.Errorf("extended %d times before a third of the default lease", n)
		}
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		if n := d.extensions(); n != 1 || d.extended[0] != defaultLease {
			t.Errorf("extensions %v after a third of the default lease, want one of %v", d.extended, defaultLease)
		}
		close(done)
	})
}

// batchExtender is a broker.BatchExtender that records its calls and
// fails the extensions of the deliveries in errs.
type batchExtender struct {
	mu    sync.Mutex
	calls [][]broker.Delivery
	lease []time.Duration
	errs  map[broker.Delivery]error
}

func (b *batchExtender) ExtendBatch(_ context.Context, lease time.Duration, ds ...broker.Delivery) []error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, slices.Clone(ds))
	b.lease = append(b.lease, lease)
	out := make([]error, len(ds))
	for i, d := range ds {
		out[i] = b.errs[d]
	}
	return out
}

// TestLeaseKeeperBatch: on a broker.BatchExtender the keeper extends
// every delivery it holds (1,000 of them, one both taken and held) in one
// call a round, each once, none through Delivery.Extend; it logs each lost
// lease the call reports and no settled delivery.
func TestLeaseKeeperBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs bytes.Buffer
		log := slog.New(slog.NewTextHandler(&logs, nil))
		var k leaseKeeper
		ds := make([]*leasedDelivery, 1000)
		for i := range ds {
			ds[i] = &leasedDelivery{}
			if i%2 == 0 {
				k.take(ds[i])
			} else {
				k.hold(ds[i])
			}
		}
		k.hold(ds[0]) // taken and held
		lost1, lost2, settled := ds[1], ds[2], ds[3]
		b := &batchExtender{errs: map[broker.Delivery]error{
			lost1:   fmt.Errorf("lost 1: %w", broker.ErrLeaseLost),
			lost2:   fmt.Errorf("lost 2: %w", broker.ErrLeaseLost),
			settled: fmt.Errorf("settled: %w", broker.ErrSettled),
		}}
		done := make(chan struct{})
		stopped := make(chan struct{})
		go func() { defer close(stopped); k.keep(context.Background(), 3*time.Second, b, done, log) }()
		time.Sleep(2*time.Second + time.Millisecond)
		synctest.Wait()
		close(done)
		<-stopped
		if len(b.calls) != 2 {
			t.Fatalf("%d ExtendBatch calls in two thirds of a lease, want 2 (one a round)", len(b.calls))
		}
		for r, call := range b.calls {
			seen := map[broker.Delivery]int{}
			for _, d := range call {
				seen[d]++
			}
			if len(call) != len(ds) || len(seen) != len(ds) {
				t.Errorf("round %d extended %d leases (%d distinct), want each of %d once", r+1, len(call), len(seen), len(ds))
			}
			if b.lease[r] != 3*time.Second {
				t.Errorf("round %d extended by %v, want the lease, 3s", r+1, b.lease[r])
			}
		}
		for i, d := range ds {
			if n := d.extensions(); n != 0 {
				t.Fatalf("delivery %d extended %d times through Delivery.Extend, want none (the batch)", i, n)
			}
		}
		s := logs.String()
		if n := strings.Count(s, "lease extension failed"); n != 2 || strings.Count(s, "failed=2 of=1000") != 2 || !strings.Contains(s, "lost 1") || !strings.Contains(s, "lost 2") || strings.Contains(s, "settled") {
			t.Errorf("logged %q, want one line a round (2) counting and quoting its two lost leases, not the settled delivery", s)
		}
	})
}

// BenchmarkLeaseKeeper is a page's bookkeeping in the keeper: taken,
// held by the writer, done, released, with 4,096 other deliveries in
// hand, from parallel goroutines.
func BenchmarkLeaseKeeper(b *testing.B) {
	var k leaseKeeper
	for range 4096 {
		k.take(&leasedDelivery{})
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		d := &leasedDelivery{}
		for pb.Next() {
			k.take(d)
			k.hold(d)
			k.done(d)
			k.release(d)
		}
	})
}
