package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/brokertest"
	"github.com/trawlhq/trawl/broker/rabbitmq"
	"github.com/trawlhq/trawl/internal/integration"
)

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
	msgs := brokertest.Keyed(3000, 30)
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
	brokertest.DrainWithFault(t, ctx, b, q, msgs, func() {
		t.Logf("stopping %s, the leader of partition 1", leaders[1])
		if err := c.Stop(ctx, c.Index(leaders[1])); err != nil {
			t.Fatal(err)
		}
	})
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
	publish(t, b3, q, broker.Message{Body: []byte("x"), Key: brokertest.KeyIn(t, 2, 3)})
	cfg.Partitions = 1
	b1 := newBroker(t, cfg)
	err := b1.Publish(t.Context(), q, broker.Message{Body: []byte("y")})
	if !errors.Is(err, rabbitmq.ErrQueueMismatch) || !strings.Contains(err.Error(), "partitions") {
		t.Errorf("a broker of 1 partition on a queue of 3: Publish error %v, want ErrQueueMismatch naming the partitions", err)
	}
	cfg.Partitions = 3
	again := newBroker(t, cfg)
	publish(t, again, q, broker.Message{Body: []byte("z"), Key: brokertest.KeyIn(t, 2, 3)})
}

// TestPartitionedReadAhead (issue 24): a consumer of a queue of three
// partitions with a read-ahead of 4 holds at most ceil(4/3) = 2
// deliveries of each partition (basic.qos per partition), 6 = 4+3-1 in
// all, while messages wait in every partition: holding its 6 unsettled,
// it leaves every other message to another worker. With the whole
// read-ahead per partition it held 12, and the other worker got 18 of 24.
func TestPartitionedReadAhead(t *testing.T) {
	t.Parallel()
	const parts, perPart, readAhead = 3, 10, 4
	share := (readAhead + parts - 1) / parts
	bound := parts * share
	cfg := amqpOnly(t)
	cfg.Partitions = parts
	q := integration.Name(t) + ":q"
	t.Cleanup(func() { (&queues{names: map[string]bool{q: true}, parts: parts}).deleteAll(t, cfg.URL) })
	a, other := newBroker(t, cfg), newBroker(t, cfg)
	var msgs []broker.Message
	for p := range parts {
		key := brokertest.KeyIn(t, p, parts)
		for i := range perPart {
			msgs = append(msgs, broker.Message{Body: fmt.Appendf(nil, "%s/%d", key, i), Key: key})
		}
	}
	publish(t, a, q, msgs...)
	c := consume(t, a, q, readAhead)
	perKey := map[string]int{}
	var held []broker.Delivery
	for range bound {
		d := next(t, c, 5*time.Second)
		held = append(held, d)
		perKey[strings.SplitN(body(d), "/", 2)[0]]++
	}
	for k, n := range perKey {
		if n != share {
			t.Errorf("Next returned %d deliveries of partition key %s, want %d (its share of the read-ahead, in turn): %v", n, k, share, perKey)
		}
	}
	// The consumer holds its windows full, unsettled: every other message
	// waits in its partition for another worker, none read ahead here.
	want := len(msgs) - bound
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var got []broker.Delivery
	for len(got) < want {
		ds, err := other.Receive(ctx, q, want-len(got))
		if err != nil {
			t.Fatalf("a consumer with read-ahead %d over %d partitions, holding %d unsettled, left %d of the %d other messages to another worker (it holds %d, want at most %d = read-ahead + partitions - 1): %v",
				readAhead, parts, bound, len(got), want, len(msgs)-len(got), readAhead+parts-1, err)
		}
		got = append(got, ds...)
	}
	ackAll(t, got...)
	ackAll(t, held...)
}
