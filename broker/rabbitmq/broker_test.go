package rabbitmq_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/brokertest"
	"github.com/trawlhq/trawl/broker/rabbitmq"
	"github.com/trawlhq/trawl/internal/integration"
)

func TestMain(m *testing.M) { integration.Main(m) }

// server returns the configuration of the shared server.
func server(t testing.TB) rabbitmq.Config {
	t.Helper()
	return rabbitmq.Config{URL: integration.RabbitMQ(t), ManagementURL: integration.RabbitMQManagement(t)}
}

func newBroker(t testing.TB, cfg rabbitmq.Config) *rabbitmq.Broker {
	t.Helper()
	b, err := rabbitmq.New(t.Context(), cfg)
	if err != nil {
		t.Fatalf("rabbitmq.New: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// queues records the queues a test used, to delete them when it ends:
// durable queues outlive the test, and thousands of them slow the server
// down (go test -count=N).
type queues struct {
	mu    sync.Mutex
	names map[string]bool
	parts int // the partitions of each queue (0: 1)
}

func (qs *queues) add(q string) {
	if q == "" {
		return
	}
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if qs.names == nil {
		qs.names = map[string]bool{}
	}
	qs.names[q] = true
}

// deleteAll deletes the recorded queues and their dead-letter queues
// (delay queues expire by themselves).
func (qs *queues) deleteAll(t testing.TB, url string) {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Logf("delete test queues: %v", err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Logf("delete test queues: %v", err)
		return
	}
	qs.mu.Lock()
	defer qs.mu.Unlock()
	for q := range qs.names {
		var names []string
		for p := range max(qs.parts, 1) {
			pq := q
			if p > 0 {
				pq = fmt.Sprintf("%s:p%d", q, p)
			}
			names = append(names, pq, pq+":dead")
		}
		for _, name := range names {
			if _, err := ch.QueueDelete(name, false, false, false); err != nil {
				t.Logf("delete queue %q: %v", name, err)
				return
			}
		}
	}
}

// recording is a broker that records the queues it is asked about. It
// keeps the optional interfaces of the broker it embeds.
type recording struct {
	*rabbitmq.Broker
	qs *queues
}

func (r recording) Publish(ctx context.Context, q string, msgs ...broker.Message) error {
	r.qs.add(q)
	return r.Broker.Publish(ctx, q, msgs...)
}

func (r recording) Consume(ctx context.Context, q string, prefetch int) (broker.Consumer, error) {
	r.qs.add(q)
	return r.Broker.Consume(ctx, q, prefetch)
}

func (r recording) Receive(ctx context.Context, q string, max int) ([]broker.Delivery, error) {
	r.qs.add(q)
	return r.Broker.Receive(ctx, q, max)
}

// TestConformance runs the suite with counts from the management API.
func TestConformance(t *testing.T) { conformance(t, server(t), false) }

// TestConformanceAMQPCounts runs the suite with counts over AMQP alone
// (passive declares and the workers' presence reports), as with a stock
// server, and with a server of its own restarted under an open consumer.
func TestConformanceAMQPCounts(t *testing.T) {
	base := server(t)
	base.ManagementURL = ""
	conformance(t, base, true)
}

// TestConformancePartitioned runs the suite on brokers whose queues have
// three partitions: a consumer drains them all, counts add them up.
func TestConformancePartitioned(t *testing.T) {
	base := server(t)
	base.Partitions = 3
	conformance(t, base, false)
}

func conformance(t *testing.T, base rabbitmq.Config, restart bool) {
	qs := &queues{parts: base.Partitions}
	t.Cleanup(func() { qs.deleteAll(t, base.URL) })
	newFor := func(base rabbitmq.Config) func(t *testing.T, s brokertest.Setup) broker.Broker {
		return func(t *testing.T, s brokertest.Setup) broker.Broker {
			cfg := base
			cfg.Order = s.Order
			cfg.Lease = s.Lease
			cfg.MaxDeliveries = s.MaxDeliveries
			// The suite's priorities, -5..10, fit 0..15 exactly.
			cfg.PriorityOffset = 5
			cfg.MaxPriority = 15
			return recording{newBroker(t, cfg), qs}
		}
	}
	c := brokertest.Config{
		New:    newFor(base),
		Orders: []broker.Order{broker.Priority, broker.FIFO},
		// Leases run out in the background here (another process may be
		// waiting for the message), not when the queue is next touched:
		// Purge holds two deliveries across a Reject, a Nack and a
		// count, which must fit in the lease.
		Lease: time.Second,
	}
	if restart {
		c.Restartable = func(t *testing.T) brokertest.Server {
			srv := integration.RabbitMQContainer(t)
			cfg := base
			cfg.URL = srv.URL
			return brokertest.Server{
				New: newFor(cfg),
				Restart: func(t *testing.T) {
					if err := srv.Restart(t.Context()); err != nil {
						t.Fatalf("restart RabbitMQ: %v", err)
					}
				},
			}
		}
	}
	brokertest.Run(t, c)
}

// receiveN receives exactly n deliveries of q within wait.
func receiveN(t *testing.T, b broker.Broker, q string, n int, wait time.Duration) []broker.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	var out []broker.Delivery
	for len(out) < n {
		ds, err := b.Receive(ctx, q, n-len(out))
		if err != nil {
			t.Fatalf("Receive(%q): got %d of %d: %v", q, len(out), n, err)
		}
		out = append(out, ds...)
	}
	return out
}

func body(d broker.Delivery) string { return string(d.Message().Body) }

func ackAll(t *testing.T, ds ...broker.Delivery) {
	t.Helper()
	for _, d := range ds {
		if err := d.Ack(t.Context()); err != nil {
			t.Fatalf("Ack %q: %v", body(d), err)
		}
	}
}

func publish(t *testing.T, b broker.Broker, q string, msgs ...broker.Message) {
	t.Helper()
	if err := b.Publish(t.Context(), q, msgs...); err != nil {
		t.Fatalf("Publish(%q): %v", q, err)
	}
}

func msg(s string, p int) broker.Message { return broker.Message{Body: []byte(s), Priority: p} }
