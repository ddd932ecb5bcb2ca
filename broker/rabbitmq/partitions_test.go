package rabbitmq_test

import (
	"context"
	"errors"
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
