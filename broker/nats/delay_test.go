package nats_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/nats"
)

// TestDelayHeldPastEarlyRedelivery: a delayed message stays delayed when
// the server delivers its delay copy again before the delay ends. The
// test injects that redelivery: it takes the copy's first delivery from
// the delay consumer itself and sends the server a plain nak, which puts
// the copy back at once with its delivery count raised, as a delivery
// the server failed to hand over does (nats-server's didNotDeliver: a
// pull request whose subscriber had just gone). A broker that trusts the
// count (the second delivery means the nack's delay ran out) moves the
// message back to its band an hour early.
func TestDelayHeldPastEarlyRedelivery(t *testing.T) {
	const q, delay = "delay-early-redelivery", time.Hour
	nc := embeddedConn(embedded(t, ""))(t)
	b := newBroker(t, nc, nats.Config{Lease: time.Second})
	ctx := t.Context()
	if err := b.Publish(ctx, q, broker.Message{Body: []byte("delayed")}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	ds, err := b.Receive(ctx, q, 1)
	if err != nil || len(ds) != 1 {
		t.Fatalf("Receive = %d deliveries, %v; want 1", len(ds), err)
	}
	if err := ds[0].Nack(ctx, delay); err != nil {
		t.Fatalf("Nack(%v): %v", delay, err)
	}

	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream.New: %v", err)
	}
	cons, err := js.Consumer(ctx, "TRAWL_Q_"+q, "delay")
	if err != nil {
		t.Fatalf("delay consumer: %v", err)
	}
	batch, err := cons.FetchNoWait(1)
	if err != nil {
		t.Fatalf("FetchNoWait: %v", err)
	}
	var copies int
	for m := range batch.Messages() {
		copies++
		// The server confirms the nak once it applied it.
		if _, err := nc.RequestWithContext(ctx, m.Reply(), []byte("-NAK")); err != nil {
			t.Fatalf("nak the delay copy: %v", err)
		}
	}
	if copies != 1 || batch.Error() != nil {
		t.Fatalf("delay consumer gave %d copies (%v), want 1", copies, batch.Error())
	}

	// Receive until the broker has been delivered the copy again (the
	// delay consumer's delivery sequence passes 1): its Receive handles
	// what the delay consumer sends before it returns.
	for deadline := time.Now().Add(10 * time.Second); ; {
		rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		got, err := b.Receive(rctx, q, 1)
		cancel()
		if len(got) > 0 {
			t.Fatalf("Receive delivered %q after Nack(%v): a delayed message was visible early",
				got[0].Message().Body, delay)
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Receive: %v", err)
		}
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatalf("delay consumer info: %v", err)
		}
		if info.Delivered.Consumer >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the broker was not delivered the delay copy again in 10s (delay consumer: %+v)", info.Delivered)
		}
	}
	got, err := b.Counts(ctx, q)
	if err != nil {
		t.Fatalf("Counts: %v", err)
	}
	if want := (broker.Counts{Ready: 1, Delayed: 1}); got != want {
		t.Errorf("Counts = %+v after the delay copy came back early, want %+v", got, want)
	}
}
