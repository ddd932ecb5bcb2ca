package nats_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/brokertest"
	"github.com/trawlhq/trawl/broker/nats"
	"github.com/trawlhq/trawl/internal/integration"
)

// inPartition returns n messages keyed to partition p of parts, with
// bodies "<name>/<i>".
func inPartition(t *testing.T, name string, p, parts, n int) []broker.Message {
	t.Helper()
	key := brokertest.KeyIn(t, p, parts)
	msgs := make([]broker.Message, n)
	for i := range msgs {
		msgs[i] = broker.Message{Body: fmt.Appendf(nil, "%s/%d", name, i), Key: key}
	}
	return msgs
}

// TestConsumerPreferPartitions: a consumer of a queue of 4 partitions that
// prefers two of them takes their messages before the others' while they
// have some (but for what it read ahead before: at most its prefetch
// twice), takes the others' once they are empty, and follows a new Prefer
// at its next take, while Prefer is called from another goroutine
// meanwhile (run with -race). A consumer that ignores Prefer takes the
// partitions in turn: half of the first 40 would be the others'.
func TestConsumerPreferPartitions(t *testing.T) {
	e := embedded(t, "")
	const parts, prefetch, each = 4, 4, 20
	b := newBroker(t, e.Conn(), nats.Config{Partitions: parts})
	q := integration.Name(t) + ":requests"
	ctx := t.Context()
	c := consume(t, b, q, prefetch)
	c.(broker.PartitionPreferrer).Prefer([]int{1, 2})
	var msgs []broker.Message
	for p := range parts {
		msgs = append(msgs, inPartition(t, fmt.Sprintf("p%d", p), p, parts, each)...)
	}
	if err := b.Publish(ctx, q, msgs...); err != nil {
		t.Fatal(err)
	}
	// Prefer called again and again, concurrently, with the same wish.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				c.(broker.PartitionPreferrer).Prefer([]int{2, 1, 7}) // 7: no such partition, ignored
			}
		}
	})
	take := func(n int) []string {
		t.Helper()
		var got []string
		for range n {
			d := next(t, c, 10*time.Second)
			got = append(got, string(d.Message().Body))
			if err := d.Ack(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return got
	}
	foreign := func(got []string, own ...string) int {
		n := 0
		for _, body := range got {
			if !strings.HasPrefix(body, own[0]+"/") && (len(own) < 2 || !strings.HasPrefix(body, own[1]+"/")) {
				n++
			}
		}
		return n
	}
	first := take(2 * each)
	close(stop)
	wg.Wait()
	if n := foreign(first, "p1", "p2"); n > 2*prefetch {
		t.Fatalf("%d of the first %d deliveries from partitions other than the preferred 1 and 2 (want at most %d): %q",
			n, 2*each, 2*prefetch, first)
	}
	seen := map[string]bool{}
	for _, body := range append(first, take(parts*each-len(first))...) { // the others' too: stolen
		if seen[body] {
			t.Fatalf("%q delivered twice", body)
		}
		seen[body] = true
	}

	// A new preference, followed at the next take.
	c.(broker.PartitionPreferrer).Prefer([]int{3})
	msgs = append(inPartition(t, "q0", 0, parts, each), inPartition(t, "q3", 3, parts, each)...)
	if err := b.Publish(ctx, q, msgs...); err != nil {
		t.Fatal(err)
	}
	first = take(each)
	if n := foreign(first, "q3"); n > 2*prefetch {
		t.Fatalf("after Prefer([3]), %d of the first %d deliveries from partition 0 (want at most %d): %q",
			n, each, 2*prefetch, first)
	}
	take(each)
}

// TestConsumerSteals: a consumer whose preferred partition is empty takes
// the others' backlog in batches of its read-ahead (it steals, each time
// its caller has waited a second on an empty read-ahead), not one message
// per wait: taking 60 messages of partition 0 costs its connection a few
// requests a message (about 5: each steal is a wait on its own partition
// first). A consumer that only waited for the others' messages sent 1,586
// (a pull request per band and partition, 24, for each); one that never
// took them would time out.
func TestConsumerSteals(t *testing.T) {
	e := embedded(t, "")
	const parts, prefetch, n = 4, 8, 60
	b := newBroker(t, e.Conn(), nats.Config{Partitions: parts})
	q := integration.Name(t) + ":requests"
	ctx := t.Context()
	if err := b.Publish(ctx, q, inPartition(t, "p0", 0, parts, n)...); err != nil {
		t.Fatal(err)
	}
	nc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	w := newBroker(t, nc, nats.Config{Partitions: parts})
	c := consume(t, w, q, prefetch)
	c.(broker.PartitionPreferrer).Prefer([]int{3})
	before := nc.Stats().OutMsgs
	seen := map[string]bool{}
	for range n {
		d := next(t, c, 10*time.Second)
		body := string(d.Message().Body)
		if seen[body] {
			t.Fatalf("%q delivered twice", body)
		}
		seen[body] = true
		if err := d.Ack(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	sent := nc.Stats().OutMsgs - before
	t.Logf("%d messages sent for %d taken (acks included)", sent, n)
	if sent > 10*n {
		t.Fatalf("the consumer sent %d messages to take and acknowledge %d: it waited for each instead of stealing in batches", sent, n)
	}
}

// TestConsumerStealsWhenIdle: a consumer whose own partition is empty
// takes another's messages only once a Next has waited a second on its
// empty read-ahead (a worker between two pages is not idle; stealing at
// once spreads hosts over workers again). A consumer that steals as soon
// as its own partitions are empty returns the other's message at once.
func TestConsumerStealsWhenIdle(t *testing.T) {
	e := embedded(t, "")
	const parts = 4
	b := newBroker(t, e.Conn(), nats.Config{Partitions: parts})
	q := integration.Name(t) + ":requests"
	ctx := t.Context()
	c := consume(t, b, q, 4)
	c.(broker.PartitionPreferrer).Prefer([]int{2})
	// One of its own: once it is taken, the loop takes with the preference.
	if err := b.Publish(ctx, q, inPartition(t, "own", 2, parts, 1)...); err != nil {
		t.Fatal(err)
	}
	if err := next(t, c, 10*time.Second).Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, q, inPartition(t, "other", 0, parts, 4)...); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	d := next(t, c, 10*time.Second)
	took := time.Since(start)
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if took < time.Second {
		t.Fatalf("%q, of another partition, came after %v: the consumer stole before it was idle for a second", d.Message().Body, took)
	}
	t.Logf("%q, of another partition, came after %v", d.Message().Body, took)
}

// TestConsumerNextWaitsQuietly: a consumer with a preference whose
// partitions are all empty sends nothing when a Next starts waiting on its
// empty read-ahead: its waiting pull requests stay with the server, and
// only the moment it may steal moves. One that cut its wait short for
// each Next sent a stream info request and a pull request per band of its
// partition again (7 a Next here: 210 for 30).
func TestConsumerNextWaitsQuietly(t *testing.T) {
	e := embedded(t, "")
	const parts, nexts = 2, 30
	nc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	b := newBroker(t, nc, nats.Config{Partitions: parts})
	q := integration.Name(t) + ":requests"
	if err := b.Publish(t.Context(), q, inPartition(t, "own", 1, parts, 1)...); err != nil {
		t.Fatal(err)
	}
	c := consume(t, b, q, 16)
	c.(broker.PartitionPreferrer).Prefer([]int{1})
	if err := next(t, c, 10*time.Second).Ack(t.Context()); err != nil { // taken with the preference
		t.Fatal(err)
	}
	for trial := 1; ; trial++ {
		before := nc.Stats().OutMsgs
		void := false
		for range nexts {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
			start := time.Now()
			d, err := c.Next(ctx)
			cancel()
			if d != nil {
				t.Fatalf("Next on empty partitions returned %q", d.Message().Body)
			}
			if err == nil || ctx.Err() == nil {
				t.Fatalf("Next on empty partitions: %v, want its context's end", err)
			}
			void = void || time.Since(start) > 500*time.Millisecond // a steal may have come due
		}
		sent := nc.Stats().OutMsgs - before
		t.Logf("trial %d: %d messages sent over %d Nexts that waited 20ms each", trial, sent, nexts)
		switch {
		case void && trial < 5:
			continue // held up past half of stealAfter: try again
		case sent >= nexts:
			t.Fatalf("%d messages sent over %d Nexts that each waited 20ms on empty partitions: each Next sent the wait's pull requests again", sent, nexts)
		}
		return
	}
}

// TestConsumerStandingRequests: a consumer with room in its read-ahead
// keeps its wait's pull requests open with the server from one wait to the
// next, so that a message published to an idle queue costs its
// connection a few messages (the request that brought it sent again, a
// take, the ack: 3.6 here), not a pull request per band and partition
// and a subscription again (a consumer that stopped them at every wait
// sent 7.6). And the requests it kept open while it stole from another
// partition do not keep stealing: once it took the other's message and
// waits on its own again, a new message of the other partition waits for
// the next steal (a second of an idle Next).
func TestConsumerStandingRequests(t *testing.T) {
	e := embedded(t, "")
	const parts, n = 2, 20
	pub := newBroker(t, e.Conn(), nats.Config{Partitions: parts})
	nc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	b := newBroker(t, nc, nats.Config{Partitions: parts})
	q := integration.Name(t) + ":requests"
	ctx := t.Context()
	if err := pub.Publish(ctx, q, inPartition(t, "first", 1, parts, 1)...); err != nil {
		t.Fatal(err)
	}
	c := consume(t, b, q, 32)
	c.(broker.PartitionPreferrer).Prefer([]int{1})
	if err := next(t, c, 10*time.Second).Ack(ctx); err != nil {
		t.Fatal(err)
	}
	before := nc.Stats().OutMsgs
	for i := range n {
		if err := pub.Publish(ctx, q, inPartition(t, fmt.Sprintf("own%d", i), 1, parts, 1)...); err != nil {
			t.Fatal(err)
		}
		if err := next(t, c, 10*time.Second).Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sent := nc.Stats().OutMsgs - before
	t.Logf("%d messages sent for %d published one at a time (acks included)", sent, n)
	if sent > 5*n {
		t.Fatalf("the consumer sent %d messages to take %d published one at a time: it sent its wait's pull requests again for each", sent, n)
	}

	// Idle for a second, it steals: it waits on both partitions, and the
	// other's message comes through those requests. Then, once it took a
	// message of its own and waits on its own partition again, a new
	// message of the other partition waits for the next steal.
	stole := make(chan broker.Delivery, 1)
	go func() { // ends with the test's context at the latest
		d, err := c.Next(ctx)
		if err != nil {
			t.Errorf("Next: %v", err)
		}
		stole <- d
	}()
	waitOn(t, nc, 0) // the consumer waits on partition 0 too
	if err := pub.Publish(ctx, q, inPartition(t, "other", 0, parts, 1)...); err != nil {
		t.Fatal(err)
	}
	if d := <-stole; d == nil {
		t.FailNow()
	} else if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(ctx, q, inPartition(t, "own", 1, parts, 1)...); err != nil {
		t.Fatal(err)
	}
	if d := next(t, c, 10*time.Second); !strings.HasPrefix(string(d.Message().Body), "own/") {
		t.Fatalf("got %q, want own/0", d.Message().Body)
	} else if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(ctx, q, inPartition(t, "again", 0, parts, 1)...); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	d := next(t, c, 10*time.Second)
	took := time.Since(start)
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if took < time.Second {
		t.Fatalf("%q, of another partition, came after %v: a pull request kept open from the steal took it", d.Message().Body, took)
	}
}

// waitOn waits until a pull request waits on every band consumer of
// partition p of the one queue of an embedded server (its work stream is
// "TRAWL_Q_<token>" for partition 0, "TRAWL_Q_<token>_p<p>" for others).
func waitOn(t *testing.T, nc *natsgo.Conn, p int) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var stream string
		names := js.StreamNames(t.Context())
		for name := range names.Name() {
			_, part, cut := strings.Cut(strings.TrimPrefix(name, "TRAWL_Q_"), "_p")
			if strings.HasPrefix(name, "TRAWL_Q_") && (p == 0 && !cut || cut && part == fmt.Sprint(p)) {
				stream = name
			}
		}
		waiting := 0
		infos := listConsumers(t, js, stream)
		for _, info := range infos {
			if info.NumWaiting > 0 {
				waiting++
			}
		}
		if waiting == len(infos) && waiting > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s, pull requests wait on %d of the %d consumers of %s", waiting, len(infos), stream)
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		}
	}
}

// TestConsumerTakesWhatItsRequestsTell: a consumer whose wait's pull
// requests stay open takes, after a wait, from the bands whose requests
// brought a message, without asking the streams what their bands hold:
// 10 messages published one at a time cost no stream info request. One
// that asked each partition's stream before each take sent 20 (two takes
// a message) here.
func TestConsumerTakesWhatItsRequestsTell(t *testing.T) {
	e := embedded(t, "")
	const parts, n = 2, 10
	spy := e.Conn()
	var infos atomic.Int64
	sub, err := spy.Subscribe("$JS.API.STREAM.INFO.>", func(*natsgo.Msg) { infos.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	pub := newBroker(t, e.Conn(), nats.Config{Partitions: parts})
	b := newBroker(t, e.Conn(), nats.Config{Partitions: parts})
	q := integration.Name(t) + ":requests"
	ctx := t.Context()
	c := consume(t, b, q, 32)
	for i := range n + 1 {
		if i == 1 { // the first was the consumer's first take and wait
			if err := spy.Flush(); err != nil {
				t.Fatal(err)
			}
			infos.Store(0)
		}
		if err := pub.Publish(ctx, q, inPartition(t, fmt.Sprintf("m%d", i), i%parts, parts, 1)...); err != nil {
			t.Fatal(err)
		}
		if err := next(t, c, 10*time.Second).Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := infos.Load(); got > n/2 {
		t.Fatalf("%d stream info requests for %d messages published one at a time: the consumer asked the streams before each take", got, n)
	}
}
