package engine_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/testsite"
	"github.com/trawlhq/trawl/internal/testsite/sitetest"
)

// closingBroker is a broker that cannot open a consumer once closed is
// set: it was closed under the worker.
type closingBroker struct {
	broker.Broker
	closed atomic.Bool
}

func (b *closingBroker) Consume(ctx context.Context, queue string, prefetch int) (broker.Consumer, error) {
	if b.closed.Load() {
		return nil, broker.ErrClosed
	}
	return b.Broker.Consume(ctx, queue, prefetch)
}

// TestResumeWithoutConsumer: a paused worker closes its consumer; if it
// cannot open another on resume (its broker was closed), Run returns the
// error. It used to panic, closing the consumer it never got.
func TestResumeWithoutConsumer(t *testing.T) {
	_, url := sitetest.Serve(t, testsite.Config{Pages: 10, Links: 3, Seed: 4, NoTraps: true})
	mb, f := newBackends(t)
	b := &closingBroker{Broker: mb}
	c, err := engine.New(b, f, engine.Config{Concurrency: 2, IdleTimeout: time.Hour, TrustedHosts: []string{"127.0.0.1"}, Metadata: mb})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.Seed(ctx, engine.StartURL{URL: url + "/"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	if err := engine.SetPaused(ctx, mb, "trawl", true); err != nil {
		t.Fatal(err)
	}
	awaitParked(ctx, t, mb, done)
	b.closed.Store(true)
	if err := engine.SetPaused(ctx, mb, "trawl", false); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, broker.ErrClosed) {
		t.Errorf("Run = %v, want the consumer's broker.ErrClosed", err)
	}
}
