package nats_test

import (
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/nats"
	"github.com/trawlhq/trawl/internal/integration"
)

// writeCounter dials TCP and counts the writes on the connections it made.
type writeCounter struct{ writes atomic.Int64 }

func (w *writeCounter) Dial(network, address string) (net.Conn, error) {
	c, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return countedConn{c, &w.writes}, nil
}

type countedConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countedConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestConfirmAllWrites: AckBatch and ExtendBatch of 500 deliveries send
// their requests together, in a few writes to the server's connection
// (measured 3 or 4, once 16; a request each from a goroutine each, as
// they were sent, took 26 to 472), and the server confirms each: the
// acknowledged messages are gone.
func TestConfirmAllWrites(t *testing.T) {
	var w writeCounter
	nc, err := natsgo.Connect(integration.NATS(t), natsgo.SetCustomDialer(&w))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	const lease, n, most = 5 * time.Second, 500, 25
	b := newBroker(t, nc, nats.Config{Lease: lease})
	ctx := t.Context()
	q := integration.Name(t) + ":confirm"
	msgs := make([]broker.Message, n)
	for i := range msgs {
		msgs[i] = broker.Message{Body: []byte(fmt.Sprint(i))}
	}
	if err := b.Publish(ctx, q, msgs...); err != nil {
		t.Fatal(err)
	}
	var ds []broker.Delivery
	for len(ds) < n {
		got, err := b.Receive(ctx, q, n-len(ds))
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, got...)
	}
	before := w.writes.Load()
	errs := b.ExtendBatch(ctx, lease, ds...)
	extendWrites := w.writes.Load() - before
	for i, err := range errs {
		if err != nil {
			t.Fatalf("ExtendBatch: delivery %d: %v", i, err)
		}
	}
	before = w.writes.Load()
	if err := b.AckBatch(ctx, ds...); err != nil {
		t.Fatalf("AckBatch: %v", err)
	}
	ackWrites := w.writes.Load() - before
	t.Logf("%d deliveries: ExtendBatch %d writes, AckBatch %d writes", n, extendWrites, ackWrites)
	if extendWrites > most || ackWrites > most {
		t.Errorf("ExtendBatch of %d deliveries took %d writes, AckBatch %d; want at most %d each", n, extendWrites, ackWrites, most)
	}
	c, err := b.Counts(ctx, q)
	if err != nil || c != (broker.Counts{}) {
		t.Errorf("after AckBatch: counts %+v, %v; want none left", c, err)
	}
}

// BenchmarkAckBatch acknowledges batches of 100 deliveries with AckBatch;
// one op is one message (publish, receive and acknowledgement).
func BenchmarkAckBatch(b *testing.B) {
	nc, err := natsgo.Connect(integration.NATS(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	br := newBroker(b, nc, nats.Config{})
	ctx := b.Context()
	q := integration.Name(b) + ":ackbatch"
	const batch = 100
	msgs := make([]broker.Message, batch)
	for i := range msgs {
		msgs[i] = broker.Message{Body: make([]byte, 100)}
	}
	b.ReportAllocs()
	cpu := processCPU(b)
	for done := 0; done < b.N; {
		n := min(batch, b.N-done)
		if err := br.Publish(ctx, q, msgs[:n]...); err != nil {
			b.Fatal(err)
		}
		var ds []broker.Delivery
		for len(ds) < n {
			got, err := br.Receive(ctx, q, n-len(ds))
			if err != nil {
				b.Fatal(err)
			}
			ds = append(ds, got...)
		}
		if err := br.AckBatch(ctx, ds...); err != nil {
			b.Fatal(err)
		}
		done += n
	}
	b.ReportMetric(float64(processCPU(b)-cpu)/float64(b.N), "cpu-ns/op")
}

// processCPU is the CPU time this process has used (user and system),
// in nanoseconds: the client's, the server being another process.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
