package deployment_test

import (
	"context"
	"testing"
	"time"

	"github.com/trawlhq/trawl/deployment"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/integration"
)

// TestRedisWorkerStopsAtOnce: a Redis worker waiting on an empty crawl,
// its consumer blocked on the queue's token (a wait as long as the lease),
// stops at once when its context ends: Run returns and the deployment
// closes within 5 s with a lease of a minute, not after its blocking pop
// or a third of the lease. Its Redis is its own, so that its blocked
// client is the worker's.
func TestRedisWorkerStopsAtOnce(t *testing.T) {
	t.Parallel()
	srv := integration.RedisContainer(t)
	watch := srv.Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const lease = time.Minute
	cfg := engine.Config{Name: integration.Name(t), Lease: lease}
	d, err := deployment.Open(ctx, deployment.Config{Broker: "redis", RedisURL: srv.URL}, cfg)
	if err != nil {
		t.Fatalf("deployment.Open: %v", err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = d.Close()
		}
	})
	c, err := d.Crawler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	run, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- c.Run(run) }()

	blocked := func() int64 { return integration.RedisInfo(t, watch, "clients")["blocked_clients"] }
	for blocked() == 0 { // an observable condition, polled
		select {
		case err := <-ran:
			t.Fatalf("Run returned before its consumer blocked: %v", err)
		case <-ctx.Done():
			t.Fatal("the worker's consumer never blocked on the queue")
		case <-time.After(10 * time.Millisecond):
		}
	}
	began := time.Now()
	stop()
	if err := <-ran; err != context.Canceled {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
	ranFor := time.Since(began)
	closed = true
	if err := d.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	took := time.Since(began)
	t.Logf("Run returned %v after its context ended, the deployment closed %v after", ranFor.Round(time.Millisecond), took.Round(time.Millisecond))
	if took > 5*time.Second {
		t.Errorf("the worker took %v to stop and close with its consumer blocked (lease %v), want at most 5s", took, lease)
	}
	if n := blocked(); n != 0 {
		t.Errorf("%d clients still blocked after Close", n)
	}
}
