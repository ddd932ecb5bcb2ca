package rabbitmq_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/brokertest"
	"github.com/trawlhq/trawl/broker/rabbitmq"
	"github.com/trawlhq/trawl/internal/integration"
)

// TestClusterQuorumConformance runs the suite on a three-node cluster with
// quorum queues, each broker given every node's URL (make test-cluster).
// FIFO order only: quorum queues have no priorities in RabbitMQ 3.x.
func TestClusterQuorumConformance(t *testing.T) {
	c := integration.StartRabbitMQCluster(t)
	qs := &queues{}
	t.Cleanup(func() { qs.deleteAll(t, c.URLs[0]) })
	brokertest.Run(t, brokertest.Config{
		New: func(t *testing.T, s brokertest.Setup) broker.Broker {
			return recording{newBroker(t, rabbitmq.Config{
				URL: c.URL(), QueueType: rabbitmq.Quorum, Order: s.Order, Lease: s.Lease, MaxDeliveries: s.MaxDeliveries,
			}), qs}
		},
		Orders: []broker.Order{broker.FIFO},
		Lease:  time.Second,
	})
}

// TestClusterQuorumQueues: a broker with QueueType Quorum declares its
// queue and dead-letter queue as quorum queues; a classic queue of the same
// name is a mismatch, not silently used.
func TestClusterQuorumQueues(t *testing.T) {
	c := integration.StartRabbitMQCluster(t)
	q := integration.Name(t) + ":requests"
	b := newBroker(t, rabbitmq.Config{URL: c.URL(), QueueType: rabbitmq.Quorum, Order: broker.FIFO})
	publish(t, b, q, broker.Message{Body: []byte("x")})
	for _, name := range []string{q, q + ":dead"} {
		leader, typ, err := c.QueueLeader(t.Context(), 1, name)
		if err != nil {
			t.Fatal(err)
		}
		if typ != "quorum" || c.Index(leader) < 0 {
			t.Errorf("queue %s: type %q, leader %q; want a quorum queue led by one of %v", name, typ, leader, c.Nodes)
		}
	}
	classic := newBroker(t, rabbitmq.Config{URL: c.URLs[2], Order: broker.FIFO})
	err := classic.Publish(t.Context(), q, broker.Message{Body: []byte("y")})
	if !errors.Is(err, rabbitmq.ErrQueueMismatch) {
		t.Errorf("classic broker on a quorum queue: Publish error %v, want ErrQueueMismatch", err)
	}
}

// TestQueueTypeValidate: quorum queues need FIFO order and durability; an
// unknown type and a bad URL in a list are errors.
func TestQueueTypeValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  rabbitmq.Config
		want string // "" for valid
	}{
		{rabbitmq.Config{URL: "amqp://h/", QueueType: rabbitmq.Quorum, Order: broker.FIFO}, ""},
		{rabbitmq.Config{URL: "amqp://h1/,amqp://h2:5673/", QueueType: rabbitmq.Quorum, Order: broker.FIFO}, ""},
		{rabbitmq.Config{URL: "amqp://h/", QueueType: rabbitmq.Quorum}, "no priorities"},
		{rabbitmq.Config{URL: "amqp://h/", QueueType: rabbitmq.Quorum, Order: broker.FIFO, NonDurable: true}, "durable"},
		{rabbitmq.Config{URL: "amqp://h/", QueueType: 7}, "unknown QueueType"},
		{rabbitmq.Config{URL: "amqp://h1/,http://h2/"}, "URL 2 of 2"},
	} {
		err := tc.cfg.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.cfg, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: error %v, want one containing %q", tc.cfg, err, tc.want)
		}
	}
	for _, s := range []string{"classic", "quorum"} {
		qt, err := rabbitmq.ParseQueueType(s)
		if err != nil || qt.String() != s {
			t.Errorf("ParseQueueType(%q) = %v, %v", s, qt, err)
		}
	}
	if _, err := rabbitmq.ParseQueueType("stream"); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("ParseQueueType(stream): %v, want ErrInvalid", err)
	}
}
