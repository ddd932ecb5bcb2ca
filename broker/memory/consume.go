package memory

import (
	"context"
	"fmt"

	"github.com/trawlhq/trawl/broker"
)

// consumer is a broker.Consumer of a memory Broker. It reads nothing
// ahead: the store is in the process, so Next waits on the queue itself
// and leases one message when it has one, as cheaply as a read-ahead
// buffer would hand it over.
type consumer struct {
	b      *Broker
	queue  string
	closed bool          // guarded by b.s.mu
	done   chan struct{} // closed by Close; wakes a waiting Next
}

// Consume opens a consumer of queue. It reads nothing ahead, whatever
// prefetch (at least 1) is; ctx is not consulted.
func (b *Broker) Consume(_ context.Context, queue string, prefetch int) (broker.Consumer, error) {
	if queue == "" {
		return nil, invalid("consume", queue, "empty queue name")
	}
	if prefetch < 1 {
		return nil, invalid("consume", queue, fmt.Sprintf("prefetch %d < 1", prefetch))
	}
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	if b.closed {
		return nil, closedErr("consume", queue)
	}
	return &consumer{b: b, queue: queue, done: make(chan struct{})}, nil
}

// Next waits until the queue has a visible message and leases it.
func (c *consumer) Next(ctx context.Context) (broker.Delivery, error) {
	ds, err := c.b.receive(ctx, c.queue, 1, c)
	if err != nil {
		return nil, err
	}
	return ds[0], nil
}

// Close ends a waiting Next with broker.ErrClosed. There is no read-ahead
// to give back; deliveries returned by Next stay valid.
func (c *consumer) Close() error {
	c.b.s.mu.Lock()
	defer c.b.s.mu.Unlock()
	if !c.closed {
		c.closed = true
		close(c.done)
	}
	return nil
}
