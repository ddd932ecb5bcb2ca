// Package pollconsumer is a stopgap broker.Consumer built on Receive, one
// delivery per Next, with no read-ahead. Backends use it until they have a
// native consumer; it is deleted once none does.
package pollconsumer

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/trawlhq/trawl/broker"
)

// Receiver is the part of a broker the consumer uses.
type Receiver interface {
	Receive(ctx context.Context, queue string, max int) ([]broker.Delivery, error)
}

// Consumer takes one delivery per Next with Receive.
type Consumer struct {
	r      Receiver
	queue  string
	closed atomic.Bool
	stop   context.Context
	cancel context.CancelFunc
}

// New returns a consumer of queue on r.
func New(r Receiver, queue string) *Consumer {
	stop, cancel := context.WithCancel(context.Background())
	return &Consumer{r: r, queue: queue, stop: stop, cancel: cancel}
}

// Next implements broker.Consumer.
func (c *Consumer) Next(ctx context.Context) (broker.Delivery, error) {
	if c.closed.Load() {
		return nil, fmt.Errorf("consumer of %s: %w", c.queue, broker.ErrClosed)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.stop, cancel)
	defer stop()
	ds, err := c.r.Receive(ctx, c.queue, 1)
	if err != nil {
		if c.closed.Load() {
			return nil, fmt.Errorf("consumer of %s: %w", c.queue, broker.ErrClosed)
		}
		return nil, err
	}
	return ds[0], nil
}

// Close implements broker.Consumer.
func (c *Consumer) Close() error {
	c.closed.Store(true)
	c.cancel()
	return nil
}
