package nats_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/brokertest"
	"github.com/trawlhq/trawl/broker/nats"
	"github.com/trawlhq/trawl/internal/integration"
)

// TestTakeInFlightBand: a take that finds a band's messages all in flight
// (leased to workers, as a crawl's mostly are) spends one "no wait" pull
// request on it, not three round trips, when no lower band holds
// messages: nothing of lower priority could be taken in its place. A
// higher band that brought fewer than asked while that band holds
// messages is still checked (priority order). Here a Receive of 5 finds
// one message of the highest band and ten leased ones of the middle band:
// a stream info, a pull on each band, and the highest band's check
// (consumer info, stream info) make 5 requests; checking the middle band
// too made 7.
func TestTakeInFlightBand(t *testing.T) {
	e := embedded(t, "")
	nc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	b := newBroker(t, nc, nats.Config{})
	q := integration.Name(t) + ":requests"
	ctx := t.Context()
	var mid []broker.Message
	for i := range 10 {
		mid = append(mid, broker.Message{Body: fmt.Appendf(nil, "mid%d", i)})
	}
	if err := b.Publish(ctx, q, mid...); err != nil {
		t.Fatal(err)
	}
	held, err := b.Receive(ctx, q, 10)
	if err != nil || len(held) != 10 {
		t.Fatalf("Receive(10) = %d, %v", len(held), err)
	}
	if err := b.Publish(ctx, q, broker.Message{Body: []byte("high"), Priority: 2}); err != nil {
		t.Fatal(err)
	}
	before := nc.Stats().OutMsgs
	ds, err := b.Receive(ctx, q, 5)
	sent := nc.Stats().OutMsgs - before
	if err != nil || len(ds) != 1 || string(ds[0].Message().Body) != "high" {
		t.Fatalf("Receive(5) = %v, %v; want the one high message", ds, err)
	}
	if sent > 5 {
		t.Fatalf("the Receive sent %d requests, want 5 at most (the middle band's leased messages checked again)", sent)
	}
	for _, d := range append(held, ds...) {
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPullAllocations: a pull request's answer comes on a channel the
// size of its batch, not on nats.go's SubscribeSync channel of 64Ki
// messages (512 KiB to allocate and clear for each request), and so do a
// wait's. 40 Receives of one message, each a stream info and a "no wait"
// pull request on one band, allocate a few KiB each (this process runs
// the embedded server too), and so do 10 that wait on the empty queue
// until their context ends; with SubscribeSync, over 512 KiB each.
func TestPullAllocations(t *testing.T) {
	e := embedded(t, "")
	b := newBroker(t, e.Conn(), nats.Config{})
	q := integration.Name(t) + ":requests"
	ctx := context.Background()
	const n = 40
	var msgs []broker.Message
	for i := range n {
		msgs = append(msgs, broker.Message{Body: fmt.Appendf(nil, "m%d", i)})
	}
	if err := b.Publish(ctx, q, msgs...); err != nil {
		t.Fatal(err)
	}
	var ds []broker.Delivery
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		got, err := b.Receive(ctx, q, 1)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, got...)
	}
	runtime.ReadMemStats(&after)
	per := (after.TotalAlloc - before.TotalAlloc) / n
	t.Logf("%d bytes allocated a Receive", per)
	if per > 128<<10 {
		t.Fatalf("a Receive of one message allocated %d bytes, want under 128 KiB (a pull request's channel of 64Ki messages is 512 KiB)", per)
	}
	for _, d := range ds {
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	const waits = 10
	runtime.ReadMemStats(&before)
	for range waits {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		ds, err := b.Receive(wctx, q, 1)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Receive on an empty queue = %v, %v; want its context's end", ds, err)
		}
	}
	runtime.ReadMemStats(&after)
	per = (after.TotalAlloc - before.TotalAlloc) / waits
	t.Logf("%d bytes allocated a wait", per)
	if per > 128<<10 {
		t.Fatalf("a Receive that waited allocated %d bytes, want under 128 KiB", per)
	}
}

// TestCountsRequests: Counts asks the consumers of a partition's subjects
// that hold messages only (a work-queue stream keeps a message until it
// is acknowledged): a queue of 4 partitions with messages in one band,
// half of them in flight, costs 3 requests a partition (the work stream,
// that band's consumer, the dead-letter stream), not one per consumer
// too (7 with five bands and the delay consumer), and counts the same.
func TestCountsRequests(t *testing.T) {
	e := embedded(t, "")
	nc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	const parts = 4
	b := newBroker(t, nc, nats.Config{Partitions: parts})
	q := integration.Name(t) + ":requests"
	ctx := t.Context()
	if err := b.Publish(ctx, q, brokertest.Keyed(40, 40)...); err != nil {
		t.Fatal(err)
	}
	held, err := b.Receive(ctx, q, 20)
	if err != nil {
		t.Fatal(err)
	}
	before := nc.Stats().OutMsgs
	c, err := b.Counts(ctx, q)
	sent := nc.Stats().OutMsgs - before
	if err != nil {
		t.Fatal(err)
	}
	if want := (broker.Counts{Ready: 40 - int64(len(held)), InFlight: int64(len(held))}); c != want {
		t.Errorf("Counts = %+v, want %+v", c, want)
	}
	if sent > 3*parts {
		t.Fatalf("Counts of %d partitions sent %d requests, want %d at most", parts, sent, 3*parts)
	}
	for _, d := range held {
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
