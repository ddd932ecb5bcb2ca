package engine_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker/memory"
	"github.com/trawlhq/trawl/dedup/local"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/syncbuf"
	"github.com/trawlhq/trawl/internal/testsite"
	"github.com/trawlhq/trawl/internal/testsite/sitetest"
)

// TestWaitForOthersSaysWhy: a worker with nothing to do while another
// worker, killed say, holds the crawl's start URL says once why it does
// not end (it waited in silence until the lease ended), then crawls the
// site when the start URL comes back.
func TestWaitForOthersSaysWhy(t *testing.T) {
	for _, paused := range []bool{false, true} {
		t.Run(map[bool]string{false: "running", true: "paused"}[paused], func(t *testing.T) {
			t.Parallel()
			waitForOthers(t, paused)
		})
	}
}

// waitForOthers runs TestWaitForOthersSaysWhy; paused: the crawl is
// paused until the start URL's lease ended, and the worker, which says
// that, does not say it waits for other workers (paused, they hold their
// pages on purpose).
func waitForOthers(t *testing.T, paused bool) {
	site, url := sitetest.Serve(t, testsite.Config{Pages: 10, Links: 3, Seed: 4, NoTraps: true})
	const lease = 7 * time.Second // past the 5 s after which the wait is said
	b, err := memory.New(memory.Config{Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	f, err := local.New(local.Config{FPRate: 1e-6})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(); f.Close() })
	var logs syncbuf.Buffer
	c, err := engine.New(b, f, engine.Config{
		Concurrency: 2, IdleTimeout: 300 * time.Millisecond, Lease: lease, TrustedHosts: []string{"127.0.0.1"},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Seed(ctx, engine.StartURL{URL: url + "/"}); err != nil {
		t.Fatal(err)
	}
	// Another worker takes the start URL and dies with it.
	if ds, err := b.Receive(ctx, engine.StartQueue("trawl"), 1); err != nil || len(ds) != 1 {
		t.Fatalf("taking the start URL: %d, %v", len(ds), err)
	}
	if paused {
		if err := engine.SetPaused(ctx, b, "trawl", true); err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(lease+time.Second, func() { engine.SetPaused(context.Background(), b, "trawl", false) })
	}
	if err := c.Run(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	const said = "waiting for requests other workers hold"
	if n, want := strings.Count(logs.String(), said), map[bool]int{false: 1, true: 0}[paused]; n != want {
		t.Errorf("said %d times %q, want %d; logs:\n%s", n, said, want, logs.String())
	}
	if err := site.Verify(); err != nil {
		t.Errorf("the site says the crawl was wrong:\n%v", err)
	}
}
