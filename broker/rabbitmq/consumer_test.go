package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/rabbitmq"
	"github.com/trawlhq/trawl/internal/integration"
)

// amqpOnly is the shared server's configuration counting over AMQP, so
// that Counts sees a consumer's read-ahead at once.
func amqpOnly(t *testing.T) rabbitmq.Config {
	cfg := server(t)
	cfg.ManagementURL = ""
	return cfg
}

func testQueue(t *testing.T, cfg rabbitmq.Config) string {
	q := integration.Name(t) + ":q"
	t.Cleanup(func() { (&queues{names: map[string]bool{q: true}}).deleteAll(t, cfg.URL) })
	return q
}

func consume(t *testing.T, b broker.Broker, q string, prefetch int) broker.Consumer {
	t.Helper()
	c, err := b.Consume(t.Context(), q, prefetch)
	if err != nil {
		t.Fatalf("Consume(%q, %d): %v", q, prefetch, err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("consumer Close: %v", err)
		}
	})
	return c
}

func next(t *testing.T, c broker.Consumer, wait time.Duration) broker.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	d, err := c.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return d
}

// waitInFlight polls b's counts of q until InFlight is want.
func waitInFlight(t *testing.T, b *rabbitmq.Broker, q string, want int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := b.Counts(t.Context(), q)
		if err != nil {
			t.Fatalf("Counts: %v", err)
		}
		if c.InFlight == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Counts(%q) = %+v, want InFlight %d", q, c, want)
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-t.Context().Done():
			return
		}
	}
}

// TestConsumerPrefetch: basic.qos bounds what a consumer holds (read
// ahead plus returned and unsettled): the rest of the queue is left to
// another worker; the consumer's deliveries come in priority order; its
// read-ahead counts as in flight.
func TestConsumerPrefetch(t *testing.T) {
	t.Parallel()
	cfg := amqpOnly(t)
	q := testQueue(t, cfg)
	a, other := newBroker(t, cfg), newBroker(t, cfg)
	publish(t, a, q, msg("low1", 0), msg("low2", 0), msg("high", 5), msg("low3", 0), msg("mid", 2))
	c := consume(t, a, q, 2)
	if d := next(t, c, 5*time.Second); body(d) != "high" {
		t.Fatalf("first delivery %q, want high", body(d))
	} else {
		defer ackAll(t, d)
	}
	// One returned, one read ahead: nothing is ready beyond the other three.
	waitInFlight(t, a, q, 2)
	ds := receiveN(t, other, q, 3, 5*time.Second)
	if got := []string{body(ds[0]), body(ds[1]), body(ds[2])}; got[0] != "low1" || got[1] != "low2" || got[2] != "low3" {
		t.Errorf("the other worker got %q, want low1 low2 low3 (mid read ahead here)", got)
	}
	ackAll(t, ds...)
	if d := next(t, c, 5*time.Second); body(d) != "mid" || d.Attempt() != 1 {
		t.Errorf("second delivery %q attempt %d, want mid attempt 1", body(d), d.Attempt())
	} else {
		ackAll(t, d)
	}
}

// TestConsumerClose: Close gives the read-ahead back at once, with its
// attempt unchanged; a delivery returned before Close can still be
// settled; Next then says ErrClosed.
func TestConsumerClose(t *testing.T) {
	t.Parallel()
	cfg := amqpOnly(t)
	cfg.Lease = time.Minute // nothing may come back by a lease
	q := testQueue(t, cfg)
	a, other := newBroker(t, cfg), newBroker(t, cfg)
	publish(t, a, q, msg("m1", 0), msg("m2", 0), msg("m3", 0), msg("m4", 0))
	c, err := a.Consume(t.Context(), q, 4)
	if err != nil {
		t.Fatal(err)
	}
	held := next(t, c, 5*time.Second)
	waitInFlight(t, a, q, 4)
	start := time.Now()
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := c.Next(t.Context()); !errors.Is(err, broker.ErrClosed) {
		t.Errorf("Next after Close: %v, want ErrClosed", err)
	}
	back := receiveN(t, other, q, 3, 5*time.Second)
	t.Logf("read-ahead back after %v", time.Since(start).Round(time.Millisecond))
	for _, d := range back {
		if body(d) == body(held) || d.Attempt() != 1 {
			t.Errorf("given back: %q attempt %d, want another message with attempt 1", body(d), d.Attempt())
		}
	}
	ackAll(t, back...)
	if err := held.Ack(t.Context()); err != nil {
		t.Fatalf("Ack of a delivery returned before Close: %v", err)
	}
	waitCounts(t, other, q, broker.Counts{})
}

// TestAckBatch: a batch acknowledges exactly its deliveries, also when
// others of the same channel, below and between them, stay unsettled.
func TestAckBatch(t *testing.T) {
	t.Parallel()
	cfg := amqpOnly(t)
	cfg.Lease = time.Minute
	q := testQueue(t, cfg)
	other := newBroker(t, cfg)
	a, err := rabbitmq.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var msgs []broker.Message
	for i := range 8 {
		msgs = append(msgs, msg(fmt.Sprintf("m%d", i), 0))
	}
	publish(t, a, q, msgs...)
	c := consume(t, a, q, 8)
	var ds []broker.Delivery
	for range 8 {
		ds = append(ds, next(t, c, 5*time.Second))
	}
	// m0..m2 are a run (one multiple ack) below m3, which stays held, as
	// do m4 and m6 between m5 and m7.
	if err := a.AckBatch(t.Context(), ds[2], ds[0], ds[1], ds[5], ds[7]); err != nil {
		t.Fatalf("AckBatch: %v", err)
	}
	if err := a.AckBatch(t.Context(), ds[4], ds[2]); !errors.Is(err, broker.ErrSettled) {
		t.Errorf("AckBatch with a settled delivery: %v, want ErrSettled", err)
	}
	// ds[4] was acknowledged by that batch all the same; m3 and m6 remain.
	waitInFlight(t, other, q, 2)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	back := receiveN(t, other, q, 2, 5*time.Second)
	got := map[string]bool{body(back[0]): true, body(back[1]): true}
	if !got["m3"] || !got["m6"] {
		t.Errorf("after the holder closed, %v came back; want m3 and m6", got)
	}
	ackAll(t, back...)
	expectNothing(t, other, q)
}

// TestBatchesInOneWrite: the commands of one Publish of many messages,
// and of one AckBatch that cannot use a multiple ack (a delivery below
// the batch stays held), reach the server in one write, not one write
// each (amqp091 flushes after every command): a write(2) a command cost
// bench-web's RabbitMQ worker its largest share of broker CPU, and the
// server a wakeup a command. A tap in front of the server counts the
// reads of the client's socket that carry them.
func TestBatchesInOneWrite(t *testing.T) {
	t.Parallel()
	cfg := amqpOnly(t)
	cfg.Lease = time.Minute
	q := testQueue(t, cfg)
	after, direct := q+"-after", cfg.URL
	t.Cleanup(func() { (&queues{names: map[string]bool{after: true}}).deleteAll(t, direct) })
	tap, tapped := newAMQPTap(t, cfg.URL)
	cfg.URL = tapped
	b := newBroker(t, cfg)
	const n = 200
	var msgs []broker.Message
	for i := range n {
		msgs = append(msgs, msg(fmt.Sprintf("https://example.com/page-%03d.html", i), 0))
	}
	// The first publish declares the queue: measure the second.
	publish(t, b, q, msgs[:1]...)
	sent0, reads0 := tap.commands(), tap.readsWith()
	publish(t, b, q, msgs[1:]...)
	sent, _ := since(sent0, tap.commands())
	reads, _ := since(reads0, tap.readsWith())
	// A presence report (a publish of its own) may come in between.
	if extra := sent["basic.publish"] - (n - 1); extra < 0 || reads["basic.publish"] > 2+extra {
		t.Errorf("%d publishes (%d of them the broker's presence reports) reached the server in %d reads, want at most %d: one write",
			sent["basic.publish"], extra, reads["basic.publish"], 2+extra)
	}

	c := consume(t, b, q, n)
	var ds []broker.Delivery
	for range n {
		ds = append(ds, next(t, c, 5*time.Second))
	}
	sent0, reads0 = tap.commands(), tap.readsWith()
	if err := b.AckBatch(t.Context(), ds[1:]...); err != nil { // ds[0] held: no multiple ack
		t.Fatalf("AckBatch: %v", err)
	}
	// The server answers nothing to acks: a publish sent after them and
	// confirmed passed the tap after them.
	publish(t, b, after, msg("after", 0))
	sent, _ = since(sent0, tap.commands())
	reads, _ = since(reads0, tap.readsWith())
	if sent["basic.ack"] != n-1 || reads["basic.ack"] > 2 {
		t.Errorf("AckBatch of %d deliveries above a held one: %d acks in %d reads, want %d in at most 2: one write",
			n-1, sent["basic.ack"], reads["basic.ack"], n-1)
	}
	ackAll(t, ds[0])
	waitCounts(t, b, q, broker.Counts{})
}

// expectNothing checks that q has nothing ready for a moment.
func expectNothing(t *testing.T, b broker.Broker, q string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if ds, err := b.Receive(ctx, q, 10); err == nil {
		t.Errorf("%d unexpected deliveries, first %q", len(ds), body(ds[0]))
	}
}

// TestIdleCost: an idle worker as the engine runs one (a consumer on its
// two queues, both empty, and their counts every 200ms to tell whether
// the crawl is done) sends the server at most 10 commands a second, over
// one connection. What it sends is counted by a tap in front of the
// server (see amqpTap), not by the management API, whose statistics lag
// on a loaded machine: a CI run once counted a start-up there as idle.
func TestIdleCost(t *testing.T) {
	if testing.Short() {
		t.Skip("measures for 10s")
	}
	cfg := amqpOnly(t) // counts over AMQP, as on a stock server
	tap, tapped := newAMQPTap(t, cfg.URL)
	qs := []string{testQueue(t, cfg), testQueue(t, cfg) + "-start"}
	t.Cleanup(func() { (&queues{names: map[string]bool{qs[1]: true}}).deleteAll(t, cfg.URL) })
	cfg.URL = tapped
	b := newBroker(t, cfg)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	nexts := make(chan error, len(qs))
	for _, q := range qs {
		c := consume(t, b, q, 32)
		go func() {
			_, err := c.Next(ctx)
			nexts <- err
		}()
	}
	counting, counted := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(counting)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for first := true; ; first = false {
			for _, q := range qs {
				if _, err := b.Counts(ctx, q); err != nil && ctx.Err() == nil {
					t.Errorf("Counts: %v", err)
				}
			}
			if first {
				close(counted)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	// Past the start: the first counts (and the look for delay queues
	// they wait for), and both consumers' subscriptions sent.
	<-counted
	for tap.commands()["basic.consume"] < len(qs) {
		select {
		case <-time.After(10 * time.Millisecond):
		case <-t.Context().Done():
			t.Fatal("the consumers never subscribed")
		}
	}
	before, start := tap.commands(), time.Now()
	t.Logf("start-up: %s", describe(before))
	select { // the measurement is over a span of time: nothing to poll for
	case <-time.After(10 * time.Second):
	case <-t.Context().Done():
	}
	sent, n := since(before, tap.commands())
	took := time.Since(start)
	rate := float64(n) / took.Seconds()
	t.Logf("idle: %.1f commands/s over %v: %s", rate, took.Round(time.Millisecond), describe(sent))
	if rate > 10 {
		t.Errorf("an idle worker sends %.1f commands/s, want at most 10", rate)
	}
	// The tap sees what is sent: presence reports (one every 0.5s) and
	// the counts' passive declares.
	if sent["basic.publish"] == 0 || sent["queue.declare"] == 0 {
		t.Errorf("the tap saw no report or no count in %v: it misses what the worker sends", took.Round(time.Millisecond))
	}
	if c := tap.connections(); c != 1 {
		t.Errorf("the worker opened %d connections, want 1", c)
	}
	cancel()
	<-counting
	for range qs {
		if err := <-nexts; !errors.Is(err, context.Canceled) {
			t.Errorf("Next: %v, want context.Canceled", err)
		}
	}
}

// TestManagementURLTakesAMQPCredentials: a management URL given without
// credentials is asked with the AMQP URL's (the server refuses requests
// without them: counting would fall back to AMQP with a warning).
func TestManagementURLTakesAMQPCredentials(t *testing.T) {
	t.Parallel()
	cfg := server(t)
	u, err := url.Parse(cfg.ManagementURL)
	if err != nil {
		t.Fatal(err)
	}
	if u.User == nil {
		t.Skip("the test server's management URL has no credentials to leave out")
	}
	u.User = nil
	cfg.ManagementURL = u.String()
	logs := &logRecorder{}
	cfg.Logger = slog.New(logs)
	q := testQueue(t, cfg)
	b := newBroker(t, cfg)
	publish(t, b, q, msg("a", 0), msg("b", 0))
	waitCounts(t, b, q, broker.Counts{Ready: 2})
	for _, r := range logs.all() {
		if strings.Contains(r, "management API") {
			t.Errorf("logged %q: the management API refused the AMQP URL's credentials", r)
		}
	}
}
