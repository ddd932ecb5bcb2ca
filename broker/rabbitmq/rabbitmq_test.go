package rabbitmq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/rabbitmq"
	"github.com/trawlhq/trawl/internal/integration"
)

// TestPriorityJumpsBacklog: after a backlog of low-priority messages, a
// high-priority one published later is the next one consumed, also by a
// consumer that has been taking from the backlog all along. A Receive
// asks the server for at most its max (the prefetch window) and keeps
// nothing between calls, so the window is the batch one Receive returns:
// a message published after the server pushed a batch comes first in the
// next one.
func TestPriorityJumpsBacklog(t *testing.T) {
	t.Parallel()
	cfg := server(t)
	cfg.Lease = time.Minute
	pub, cons := newBroker(t, cfg), newBroker(t, cfg)
	q := integration.Name(t) + ":requests"
	t.Cleanup(func() { (&queues{names: map[string]bool{q: true}}).deleteAll(t, cfg.URL) })

	var backlog []broker.Message
	for i := range 200 {
		backlog = append(backlog, msg(fmt.Sprintf("low-%03d", i), -3))
	}
	publish(t, pub, q, backlog...)
	first := receiveN(t, cons, q, 10, 5*time.Second) // taking from the backlog
	for i, d := range first {
		if want := fmt.Sprintf("low-%03d", i); body(d) != want {
			t.Fatalf("backlog delivery %d = %q, want %q (FIFO among equal priorities)", i, body(d), want)
		}
	}
	ackAll(t, first...)

	publish(t, pub, q, msg("high", 5))
	ds := receiveN(t, cons, q, 1, 5*time.Second)
	if body(ds[0]) != "high" || ds[0].Message().Priority != 5 {
		t.Fatalf("after the backlog got %q priority %d, want high priority 5", body(ds[0]), ds[0].Message().Priority)
	}
	ackAll(t, ds...)

	// Within one batch too: the high one comes first.
	publish(t, pub, q, msg("urgent", 9), msg("medium", 1))
	ds = receiveN(t, cons, q, 20, 5*time.Second)
	if body(ds[0]) != "urgent" || body(ds[1]) != "medium" || body(ds[2]) != "low-010" {
		t.Fatalf("batch starts %q %q %q, want urgent medium low-010", body(ds[0]), body(ds[1]), body(ds[2]))
	}
	ackAll(t, ds...)

	// Priorities beyond 0..MaxPriority after the offset share the ends
	// but keep their own value and do not disturb in-range order.
	publish(t, pub, q, msg("far-low", -100), msg("far-high", 100), msg("top", 10), msg("mid", 2))
	rest := receiveN(t, cons, q, 4+200-28, 5*time.Second)
	var got []string
	for _, d := range rest {
		if !strings.HasPrefix(body(d), "low-") {
			got = append(got, fmt.Sprintf("%s/%d", body(d), d.Message().Priority))
		}
	}
	// far-high and top both map to 10 (FIFO between them), mid to 2,
	// far-low to 0 with the backlog (which was published first).
	if want := []string{"far-high/100", "top/10", "mid/2", "far-low/-100"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("order %q, want %q", got, want)
	}
	ackAll(t, rest...)
}

// queueArgs returns the arguments of queue q from the management API.
func queueArgs(t *testing.T, mgmt, q string) map[string]any {
	t.Helper()
	u, err := url.Parse(mgmt)
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := u.User.Password()
	user := u.User.Username()
	u.User = nil
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, u.String()+"/api/queues/%2F/"+url.PathEscape(q), nil)
	req.SetBasicAuth(user, pw)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("management API: %v", err)
	}
	defer resp.Body.Close()
	var v struct {
		Arguments map[string]any `json:"arguments"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("management API: %v", err)
	}
	return v.Arguments
}

func TestQueueMismatch(t *testing.T) {
	t.Parallel()
	base := server(t)
	q := integration.Name(t) + ":requests"
	t.Cleanup(func() { (&queues{names: map[string]bool{q: true}}).deleteAll(t, base.URL) })

	five := base
	five.MaxPriority = 5
	publish(t, newBroker(t, five), q, msg("old", 1))

	ten := base // default MaxPriority 10
	b := newBroker(t, ten)
	err := b.Publish(t.Context(), q, msg("new", 1))
	if !errors.Is(err, rabbitmq.ErrQueueMismatch) || !errors.Is(err, broker.ErrInvalid) {
		t.Fatalf("Publish to a queue declared with x-max-priority 5 by a broker wanting 10: %v, want ErrQueueMismatch", err)
	}
	for _, want := range []string{q, "x-max-priority", "Recreate"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := b.Receive(ctx, q, 1); !errors.Is(err, rabbitmq.ErrQueueMismatch) {
		t.Fatalf("Receive: %v, want ErrQueueMismatch at once", err)
	}
	fifo := base
	fifo.Order = broker.FIFO
	if err := newBroker(t, fifo).Publish(t.Context(), q, msg("x", 0)); !errors.Is(err, rabbitmq.ErrQueueMismatch) {
		t.Errorf("FIFO broker on a priority queue: %v, want ErrQueueMismatch", err)
	}
	transient := five
	transient.NonDurable = true
	if err := newBroker(t, transient).Publish(t.Context(), q, msg("x", 0)); !errors.Is(err, rabbitmq.ErrQueueMismatch) ||
		!strings.Contains(err.Error(), "durable") {
		t.Errorf("non-durable broker on a durable queue: %v, want ErrQueueMismatch about durable", err)
	}
	if got := queueArgs(t, base.ManagementURL, q)["x-max-priority"]; got != 5.0 {
		t.Fatalf("x-max-priority after the failed declares = %v, want 5 (never changed silently)", got)
	}

	recreate := ten
	recreate.Recreate = true
	r := newBroker(t, recreate)
	publish(t, r, q, msg("new", 1))
	if got := queueArgs(t, base.ManagementURL, q)["x-max-priority"]; got != 10.0 {
		t.Fatalf("x-max-priority after Recreate = %v, want 10", got)
	}
	ds := receiveN(t, r, q, 1, 5*time.Second)
	if body(ds[0]) != "new" {
		t.Fatalf("after Recreate got %q, want new (the old queue's messages are gone)", body(ds[0]))
	}
	ackAll(t, ds...)
	// The other brokers' configuration now matches.
	publish(t, b, q, msg("again", 1))
}

func TestForeignMessages(t *testing.T) {
	t.Parallel()
	cfg := server(t)
	cfg.PriorityOffset = 2
	b := newBroker(t, cfg)
	q := integration.Name(t) + ":requests"
	t.Cleanup(func() { (&queues{names: map[string]bool{q: true}}).deleteAll(t, cfg.URL) })
	publish(t, b, q, msg("ours", 0)) // declares the queue
	ackAll(t, receiveN(t, b, q, 1, 5*time.Second)...)

	// A message published by another client, without trawl's headers.
	conn, err := amqp.Dial(cfg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(t.Context(), "", q, false, false, amqp.Publishing{Body: []byte("foreign"), Priority: 7}); err != nil {
		t.Fatal(err)
	}
	d := receiveN(t, b, q, 1, 5*time.Second)[0]
	if body(d) != "foreign" || d.Attempt() != 1 || d.Message().Priority != 5 {
		t.Fatalf("foreign message: %q attempt %d priority %d, want foreign attempt 1 priority 7-2", body(d), d.Attempt(), d.Message().Priority)
	}
	if err := d.Nack(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	d = receiveN(t, b, q, 1, 5*time.Second)[0]
	if d.Attempt() != 2 || d.Message().Priority != 5 {
		t.Fatalf("after Nack: attempt %d priority %d, want 2 and 5", d.Attempt(), d.Message().Priority)
	}
	ackAll(t, d)
}

// TestCountsSeeOtherConsumers: Counts counts what every consumer holds,
// which the engine's "crawl done" check needs: from the management API,
// and over AMQP alone.
func TestCountsSeeOtherConsumers(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"management", "amqp"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			cfg := server(t)
			if mode == "amqp" {
				cfg.ManagementURL = ""
			}
			cfg.Lease = time.Minute
			a, b := newBroker(t, cfg), newBroker(t, cfg)
			q := integration.Name(t) + ":requests"
			t.Cleanup(func() { (&queues{names: map[string]bool{q: true}}).deleteAll(t, cfg.URL) })
			publish(t, a, q, msg("1", 0), msg("2", 0), msg("3", 0))
			held := receiveN(t, a, q, 2, 5*time.Second)
			waitCounts(t, b, q, broker.Counts{Ready: 1, InFlight: 2})
			ackAll(t, held...)
			waitCounts(t, b, q, broker.Counts{Ready: 1})
			// A worker that goes away holding deliveries: they are
			// ready again, and counted so.
			receiveN(t, a, q, 1, 5*time.Second)
			waitCounts(t, b, q, broker.Counts{InFlight: 1})
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			waitCounts(t, b, q, broker.Counts{Ready: 1})
		})
	}
}

// TestCountsAMQPDelayLeftBehind: over AMQP, a broker that starts after
// the worker that nacked a message with a delay went away still counts
// that message, as delayed (it looks for the delay queues a queue can
// have).
func TestCountsAMQPDelayLeftBehind(t *testing.T) {
	t.Parallel()
	cfg := server(t)
	cfg.ManagementURL = ""
	q := integration.Name(t) + ":requests"
	t.Cleanup(func() { (&queues{names: map[string]bool{q: true}}).deleteAll(t, cfg.URL) })
	a := newBroker(t, cfg)
	publish(t, a, q, msg("later", 0))
	d := receiveN(t, a, q, 1, 5*time.Second)[0]
	if err := d.Nack(t.Context(), 50*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, newBroker(t, cfg), q, broker.Counts{Ready: 1, Delayed: 1})
}

// TestCountsAMQPSilentWorker: over AMQP, a worker that stopped reporting
// while its connection stays open is waited for (it may hold pages), with
// a warning; once its connection closes it is gone and holds nothing.
func TestCountsAMQPSilentWorker(t *testing.T) {
	t.Parallel()
	cfg := server(t)
	cfg.ManagementURL = ""
	logs := &logRecorder{}
	cfg.Logger = slog.New(logs)
	obs := newBroker(t, cfg) // declares the presence exchange
	q := integration.Name(t) + ":requests"
	t.Cleanup(func() { (&queues{names: map[string]bool{q: true}}).deleteAll(t, cfg.URL) })

	// A worker that reports once, holding a delivery, then falls silent.
	conn, err := amqp.Dial(cfg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	pq, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"id": pq.Name, "seq": 1, "queues": map[string]any{q: map[string]int{"t": 1, "f": 1}}})
	if err := ch.PublishWithContext(t.Context(), "trawl.presence", "", false, false, amqp.Publishing{Body: body}); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, obs, q, broker.Counts{InFlight: 1})
	const warning = "waiting for workers that stopped reporting but are still connected; a crawl cannot be done while they may hold pages"
	deadline := time.Now().Add(10 * time.Second)
	for !logs.has(slog.LevelWarn, warning) {
		c, err := obs.Counts(t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		if c.InFlight < 1 {
			t.Fatalf("Counts = %+v while a silent worker is connected, want InFlight >= 1", c)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no warning about the silent worker within 10s; logs: %q", logs.all())
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-t.Context().Done():
			return
		}
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, obs, q, broker.Counts{})
}

func waitCounts(t *testing.T, b *rabbitmq.Broker, q string, want broker.Counts) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := b.Counts(t.Context(), q)
		if err != nil {
			t.Fatalf("Counts: %v", err)
		}
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Counts = %+v, want %+v", got, want)
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-t.Context().Done():
			return
		}
	}
}

// waitLost polls d's lease until the broker notices that d's connection
// is gone.
func waitLost(t *testing.T, d broker.Delivery) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := d.Extend(t.Context(), time.Minute)
		if errors.Is(err, broker.ErrLeaseLost) {
			return
		}
		if err != nil {
			t.Fatalf("Extend: %v, want nil or ErrLeaseLost", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the broker never noticed that its connection was gone")
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-t.Context().Done():
			return
		}
	}
}

// interrupted checks a broker across a connection loss that cut is
// made to happen: a Receive and a consumer waiting across it get what is
// published after it, a publisher publishing across it loses nothing,
// held deliveries are lost to their holder and come back with attempt
// heldAttempt (2: the next; 1 when the server restarted, which flags
// messages as redelivered whether or not a consumer held them).
func interrupted(t *testing.T, cfg rabbitmq.Config, heldAttempt int, cut func()) {
	t.Helper()
	cfg.Lease = time.Minute
	logs := &logRecorder{}
	cfg.Logger = slog.New(logs)
	defer func() {
		if !logs.has(slog.LevelWarn, "reconnected") {
			t.Errorf("no reconnection logged at Warn; logged: %q", logs.all())
		}
	}()
	b := newBroker(t, cfg)
	q := integration.Name(t) + ":requests"
	idle := q + "-idle"
	t.Cleanup(func() { (&queues{names: map[string]bool{q: true, idle: true}}).deleteAll(t, cfg.URL) })

	publish(t, b, q, msg("h1", 0), msg("h2", 0), msg("m3", 0))
	held := receiveN(t, b, q, 2, 5*time.Second)

	// A Receive waiting on an empty queue across the cut.
	waiting := make(chan []broker.Delivery, 1)
	wctx, wcancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer wcancel()
	go func() {
		ds, err := b.Receive(wctx, idle, 1)
		if err != nil {
			t.Errorf("Receive waiting across the cut: %v", err)
		}
		waiting <- ds
	}()
	// A consumer waiting on an empty queue across the cut; Next may say
	// that the connection is gone meanwhile.
	idleC := q + "-idle-consumer"
	t.Cleanup(func() { (&queues{names: map[string]bool{idleC: true}}).deleteAll(t, cfg.URL) })
	cons, err := b.Consume(t.Context(), idleC, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	consumed := make(chan broker.Delivery, 1)
	go func() {
		for {
			d, err := cons.Next(wctx)
			if err == nil {
				consumed <- d
				return
			}
			if errors.Is(err, broker.ErrClosed) || wctx.Err() != nil {
				t.Errorf("consumer waiting across the cut: %v", err)
				consumed <- nil
				return
			}
			t.Logf("consumer across the cut: %v", err)
		}
	}()
	// A publisher publishing across the cut.
	const n = 50
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range n {
			if err := b.Publish(t.Context(), q, msg(fmt.Sprintf("p%02d", i), 0)); err != nil {
				t.Errorf("Publish across the cut: %v", err)
				return
			}
		}
	})
	cut()
	for _, d := range held {
		waitLost(t, d)
		if err := d.Ack(t.Context()); !errors.Is(err, broker.ErrLeaseLost) {
			t.Fatalf("Ack of a delivery of the lost connection: %v, want ErrLeaseLost", err)
		}
	}
	wg.Wait()
	publish(t, b, idle, msg("wake", 0))
	select {
	case ds := <-waiting:
		if len(ds) != 1 || body(ds[0]) != "wake" {
			t.Fatalf("waiting Receive got %d deliveries, want wake", len(ds))
		}
		ackAll(t, ds...)
	case <-time.After(30 * time.Second):
		t.Fatal("a Receive waiting across the cut never got the message published after it")
	}

	publish(t, b, idleC, msg("wake-consumer", 0))
	select {
	case d := <-consumed:
		if d == nil || body(d) != "wake-consumer" {
			t.Fatal("the consumer did not get the message published after the cut")
		}
		ackAll(t, d)
	case <-time.After(30 * time.Second):
		t.Fatal("a consumer waiting across the cut never got the message published after it")
	}

	seen := map[string]int{}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for len(seen) < n+3 {
		ds, err := b.Receive(ctx, q, 100)
		if err != nil {
			t.Fatalf("Receive after the cut: have %d distinct of %d: %v", len(seen), n+3, err)
		}
		for _, d := range ds {
			seen[body(d)]++
			want := 1
			if strings.HasPrefix(body(d), "h") {
				want = heldAttempt // held when the connection went
			}
			if d.Attempt() != want && seen[body(d)] == 1 {
				t.Errorf("%q: attempt %d, want %d", body(d), d.Attempt(), want)
			}
		}
		ackAll(t, ds...)
	}
	for _, m := range []string{"h1", "h2", "m3", "p00", fmt.Sprintf("p%02d", n-1)} {
		if seen[m] == 0 {
			t.Errorf("%s never came", m)
		}
	}
}

// TestReconnect cuts the broker's connection from the server side (as an
// operator or a network cut would) while it publishes, receives and holds
// deliveries.
func TestReconnect(t *testing.T) {
	t.Parallel()
	cfg := server(t)
	cfg.Name = integration.Name(t)
	interrupted(t, cfg, 2, func() {
		// The management API lists a new connection after a moment.
		deadline := time.Now().Add(10 * time.Second)
		for {
			n, err := integration.CloseAMQPConnections(t.Context(), cfg.ManagementURL, cfg.Name)
			if err != nil || n > 1 {
				t.Fatalf("CloseAMQPConnections = %d, %v; want 1", n, err)
			}
			if n == 1 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the management API never listed the broker's connection")
			}
			time.Sleep(20 * time.Millisecond) // polling the management API
		}
	})
}

// TestServerRestart restarts the server while the broker publishes,
// receives and holds deliveries; durable queues and persistent messages
// survive, the broker reconnects, and the restart costs no message an
// attempt.
func TestServerRestart(t *testing.T) {
	t.Parallel()
	srv := integration.RabbitMQContainer(t)
	cfg := rabbitmq.Config{URL: srv.URL, ManagementURL: srv.ManagementURL}
	interrupted(t, cfg, 1, func() {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		if err := srv.Restart(ctx); err != nil {
			t.Fatalf("Restart: %v", err)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	err := rabbitmq.Config{
		URL:           "http://x",
		ManagementURL: "ftp://y",
		Order:         broker.LIFO,
		Prefetch:      -1,
		Lease:         time.Millisecond,
		MaxDeliveries: -1,
	}.Validate()
	if !errors.Is(err, broker.ErrInvalid) {
		t.Fatalf("Validate = %v, want ErrInvalid", err)
	}
	for _, want := range []string{"URL", "ManagementURL", "lifo", "Prefetch", "Lease", "MaxDeliveries"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate error %q does not mention %s", err, want)
		}
	}
	if err := (rabbitmq.Config{}).Validate(); err == nil || !strings.Contains(err.Error(), "URL is empty") {
		t.Errorf("zero config: %v, want URL is empty", err)
	}
	if err := (rabbitmq.Config{URL: "amqps://u:p@h:5671/v", Order: broker.FIFO, MaxPriority: 255}).Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
}

func TestNewUnreachable(t *testing.T) {
	start := time.Now()
	_, err := rabbitmq.New(t.Context(), rabbitmq.Config{URL: "amqp://guest:guest@127.0.0.1:1/"})
	if err == nil || !strings.Contains(err.Error(), "rabbitmq broker: connect") {
		t.Fatalf("New on an unreachable server = %v, want a connect error", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("New took %v to fail", el)
	}
}

// logRecorder is a slog.Handler that keeps the level and message of each
// record.
type logRecorder struct {
	mu   sync.Mutex
	recs []string
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logRecorder) WithGroup(string) slog.Handler            { return h }

func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Level.String()+" "+r.Message)
	return nil
}

func (h *logRecorder) has(l slog.Level, msg string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.recs {
		if r == l.String()+" "+msg {
			return true
		}
	}
	return false
}

func (h *logRecorder) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.recs...)
}
