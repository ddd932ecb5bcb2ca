package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/rabbitmq"
	"github.com/trawlhq/trawl/internal/integration"
)

// keyIn returns a key of partition p among n.
func keyIn(t *testing.T, p, n int) string {
	t.Helper()
	for i := range 10_000 {
		if k := fmt.Sprintf("host%d.example", i); broker.PartitionOf(k, n) == p {
			return k
		}
	}
	t.Fatalf("no key of partition %d", p)
	return ""
}

// drain takes n deliveries of c, acknowledging each, and returns their
// bodies in order; a body seen twice fails the test.
func drain(t *testing.T, ctx context.Context, c broker.Consumer, n int) []string {
	t.Helper()
	seen := map[string]bool{}
	var out []string
	for len(out) < n {
		d, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("after %d of %d: %v", len(out), n, err)
		}
		body := string(d.Message().Body)
		if seen[body] {
			t.Fatalf("%s delivered twice", body)
		}
		seen[body] = true
		out = append(out, body)
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestPartitions: messages go to the AMQP queue of their key's partition
// (Q, Q:p1, Q:p2), PartitionCounts counts each and Counts adds them up; a
// consumer delivers every message once, from the partitions in turn, so
// that a few messages of one host come out early even behind another's
// backlog (drained partition by partition, they would come after all
// 200), and deliveries say the queue they were asked of.
func TestPartitions(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cfg := server(t)
	cfg.Partitions, cfg.Order = 3, broker.FIFO
	qs := &queues{parts: 3}
	t.Cleanup(func() { qs.deleteAll(t, cfg.URL) })
	b := newBroker(t, cfg)
	q := integration.Name(t) + ":requests"
	qs.add(q)
	busy, quiet := keyIn(t, 0, 3), keyIn(t, 2, 3)
	var msgs []broker.Message
	for i := range 200 {
		msgs = append(msgs, broker.Message{Body: fmt.Appendf(nil, "busy/%d", i), Key: busy})
	}
	publish(t, b, q, msgs...)
	for i := range 5 {
		publish(t, b, q, broker.Message{Body: fmt.Appendf(nil, "quiet/%d", i), Key: quiet})
	}
	parts, err := b.PartitionCounts(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if parts[0].Ready != 200 || parts[1].Ready != 0 || parts[2].Ready != 5 {
		t.Errorf("partition counts %+v, want 200, 0 and 5 ready", parts)
	}
	c, err := b.Consume(ctx, q, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := drain(t, ctx, c, 205)
	last := 0
	for i, body := range got {
		if body[:5] == "quiet" {
			last = i
		}
	}
	// The server pushes each partition's messages to its consumer on its
	// own time: on a loaded machine the quiet ones may reach theirs a few
	// deliveries late, never after half the backlog.
	t.Logf("the quiet partition's last message came %dth", last+1)
	if last >= 100 {
		t.Errorf("the quiet partition's last message came %dth, want within the first 100 (of 205)", last+1)
	}
	if n, err := b.Counts(ctx, q); err != nil || n.Ready+n.InFlight != 0 {
		t.Errorf("counts after the drain: %+v, %v", n, err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	publish(t, b, q, broker.Message{Body: []byte("x"), Key: quiet})
	ds, err := b.Receive(ctx, q, 1)
	if err != nil || len(ds) != 1 || ds[0].Queue() != q {
		t.Fatalf("Receive: %v, %v; want one delivery of %s", ds, err, q)
	}
	if err := ds[0].Ack(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestClusterPartitions (issue 24): on three nodes, the three partitions
// of a queue are quorum queues led by three different nodes (declared in
// turn with x-queue-leader-locator=balanced); with the leader of one
// stopped while a consumer drains them, every message is still delivered.
func TestClusterPartitions(t *testing.T) {
	c := integration.StartRabbitMQCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	q := integration.Name(t) + ":requests"
	b := newBroker(t, rabbitmq.Config{URL: c.URL(), QueueType: rabbitmq.Quorum, Order: broker.FIFO, Partitions: 3})
	const n = 3000
	var msgs []broker.Message
	for i := range n {
		key := fmt.Sprintf("host%d.example", i%30)
		msgs = append(msgs, broker.Message{Body: fmt.Appendf(nil, "%s/%d", key, i), Key: key})
	}
	publish(t, b, q, msgs...)
	var leaders []string
	for _, name := range []string{q, q + ":p1", q + ":p2"} {
		leader, typ, err := c.QueueLeader(ctx, 1, name)
		if err != nil {
			t.Fatal(err)
		}
		if typ != "quorum" {
			t.Errorf("queue %s is %q, want quorum", name, typ)
		}
		leaders = append(leaders, leader)
	}
	t.Logf("partition leaders: %q", leaders)
	if leaders[0] == leaders[1] || leaders[1] == leaders[2] || leaders[0] == leaders[2] {
		t.Fatalf("the partitions' leaders are %q, want three different nodes", leaders)
	}
	cons, err := b.Consume(ctx, q, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	seen := map[string]int{}
	stopped := false
	for len(seen) < n {
		d, err := cons.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				t.Fatalf("%d of %d delivered: %v", len(seen), n, err)
			}
			continue // a connection error while a node is away
		}
		seen[string(d.Message().Body)]++
		if err := d.Ack(ctx); err != nil {
			t.Logf("ack: %v (delivered again later)", err)
		}
		if !stopped && len(seen) == n/3 {
			i := c.Index(leaders[1])
			t.Logf("stopping %s, the leader of partition 1", leaders[1])
			if err := c.Stop(ctx, i); err != nil {
				t.Fatal(err)
			}
			stopped = true
		}
	}
	dups := 0
	for _, k := range seen {
		dups += k - 1
	}
	t.Logf("%d messages delivered, %d twice", len(seen), dups)
}

// TestFewerPartitionsRefused: a broker opened with fewer partitions than
// its queue has in use refuses the queue (ErrQueueMismatch, naming the
// partitions) rather than leave the others undrained; one opened with the
// queue's count uses it.
func TestFewerPartitionsRefused(t *testing.T) {
	cfg := server(t)
	cfg.Order = broker.FIFO
	cfg.Partitions = 3
	qs := &queues{parts: 3}
	t.Cleanup(func() { qs.deleteAll(t, cfg.URL) })
	b3 := newBroker(t, cfg)
	q := integration.Name(t) + ":requests"
	qs.add(q)
	publish(t, b3, q, broker.Message{Body: []byte("x"), Key: keyIn(t, 2, 3)})
	cfg.Partitions = 1
	b1 := newBroker(t, cfg)
	err := b1.Publish(t.Context(), q, broker.Message{Body: []byte("y")})
	if !errors.Is(err, rabbitmq.ErrQueueMismatch) || !strings.Contains(err.Error(), "partitions") {
		t.Errorf("a broker of 1 partition on a queue of 3: Publish error %v, want ErrQueueMismatch naming the partitions", err)
	}
	cfg.Partitions = 3
	again := newBroker(t, cfg)
	publish(t, again, q, broker.Message{Body: []byte("z"), Key: keyIn(t, 2, 3)})
}
