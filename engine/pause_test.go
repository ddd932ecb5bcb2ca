package engine_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/memory"
	"github.com/trawlhq/trawl/dedup/local"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/syncbuf"
	"github.com/trawlhq/trawl/internal/testsite"
	"github.com/trawlhq/trawl/internal/testsite/sitetest"
)

// TestPauseResume: a paused crawl sends the site no request, for longer
// than a lease, while its worker holds deliveries; resumed, it completes
// with every page fetched once (a lease that ran out would have brought a
// held page back for a second fetch).
func TestPauseResume(t *testing.T) {
	site, url := sitetest.Serve(t, testsite.Config{Pages: 1000, Links: 5, Seed: 9, NoTraps: true, Latency: 20 * time.Millisecond})
	const lease = 2 * time.Second
	b, err := memory.New(memory.Config{Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	f, err := local.New(local.Config{FPRate: 1e-6})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(); f.Close() })
	c, err := engine.New(b, f, engine.Config{
		Concurrency: 4, PerHost: 4, IdleTimeout: 500 * time.Millisecond, Lease: lease, TrustedHosts: []string{"127.0.0.1"},
		Logger: retryLog(t),
	})
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
	poll := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case err := <-done:
				t.Fatalf("the crawl ended (%v) while waiting for %s", err, what)
			case <-ctx.Done():
				t.Fatalf("timed out waiting for %s", what)
			case <-time.After(20 * time.Millisecond): // polling an observable condition
			}
		}
	}
	poll("20 requests", func() bool { return site.Summary().Requests >= 20 })
	if err := engine.SetPaused(ctx, b, "trawl", true); err != nil {
		t.Fatal(err)
	}
	// The worker's record says when it takes nothing new and has no page
	// in progress.
	poll("the worker to say it is paused", func() bool {
		ws, err := engine.Workers(ctx, b, "trawl")
		return err == nil && len(ws) == 1 && ws[0].Paused && ws[0].InFlight == 0
	})
	n := site.Summary().Requests
	if n >= site.Expected() {
		t.Fatalf("the crawl fetched all %d pages before the pause", n)
	}
	staysStill(t, done, func() int { return site.Summary().Requests }, n, 2*lease+time.Second)
	if err := engine.SetPaused(ctx, b, "trawl", false); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if err := site.Verify(); err != nil {
		t.Errorf("after resume the site says the crawl was wrong:\n%v", err)
	}
}

// staysStill fails t if, within d, the crawl ends (done) or its requests
// (count) grow past n.
func staysStill(t *testing.T, done <-chan error, count func() int, n int, d time.Duration) {
	t.Helper()
	hold := time.Now().Add(d)
	for time.Now().Before(hold) {
		if got := count(); got != n {
			t.Fatalf("paused, the crawl sent %d more requests", got-n)
		}
		select {
		case err := <-done:
			t.Fatalf("a paused crawl ended: %v", err)
		case <-time.After(100 * time.Millisecond): // the span measured, not a synchronization
		}
	}
}

// TestPauseWakesAnIdleWorker: a worker waiting on an empty frontier parks
// when the crawl is paused (its record says so), instead of waiting for
// a message to take first.
func TestPauseWakesAnIdleWorker(t *testing.T) {
	site, url := sitetest.Serve(t, testsite.Config{Pages: 10, Links: 3, Seed: 4, NoTraps: true})
	b, f := newBackends(t)
	c, err := engine.New(b, f, engine.Config{Concurrency: 2, IdleTimeout: time.Hour, TrustedHosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.Seed(ctx, engine.StartURL{URL: url + "/"}); err != nil {
		t.Fatal(err)
	}
	run, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(run) }()
	defer func() { stop(); <-done }()
	for site.Summary().Succeeded < site.Expected() {
		select {
		case <-ctx.Done():
			t.Fatal("timed out waiting for the crawl")
		case <-time.After(20 * time.Millisecond): // polling an observable condition
		}
	}
	if err := engine.SetPaused(ctx, b, "trawl", true); err != nil {
		t.Fatal(err)
	}
	awaitParked(ctx, t, b, nil)
}

// awaitParked waits until the crawl's one worker says, in its record in
// m, that it is paused; it fails t if the crawl ends first (done; nil:
// not watched) or ctx does.
func awaitParked(ctx context.Context, t *testing.T, m broker.Metadata, done <-chan error) {
	t.Helper()
	for {
		ws, err := engine.Workers(ctx, m, "trawl")
		if err == nil && len(ws) == 1 && ws[0].Paused {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("the crawl ended (%v) before its worker said it was paused", err)
		case <-ctx.Done():
			t.Fatal("the worker never said it was paused")
		case <-time.After(50 * time.Millisecond): // polling an observable condition
		}
	}
}

// TestPausedBeforeStart: a worker that starts on a paused crawl sends
// the site no request until it is resumed (it read the pause only at its
// feeder's first tick, and fetched the 11 pages of a small crawl in the
// 200 ms before it), then crawls it whole.
func TestPausedBeforeStart(t *testing.T) {
	site, url := sitetest.Serve(t, testsite.Config{Pages: 10, Links: 3, Seed: 4, NoTraps: true})
	b, f := newBackends(t)
	var logs syncbuf.Buffer
	c, err := engine.New(b, f, engine.Config{Concurrency: 2, IdleTimeout: 300 * time.Millisecond, TrustedHosts: []string{"127.0.0.1"},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.Seed(ctx, engine.StartURL{URL: url + "/"}); err != nil {
		t.Fatal(err)
	}
	if err := engine.SetPaused(ctx, b, "trawl", true); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	awaitParked(ctx, t, b, done)
	if n := site.Summary().Requests; n != 0 {
		t.Fatalf("a worker started on a paused crawl sent the site %d requests", n)
	}
	// It says so, and how a crawl is resumed (a crawl paused from the
	// dashboard and run again later said it was paused, not how to go on).
	if l := logs.String(); !strings.Contains(l, "the crawl is paused") || !strings.Contains(l, "Resume button") {
		t.Errorf("the worker's log does not say that the crawl is paused and how to resume it:\n%s", l)
	}
	if err := engine.SetPaused(ctx, b, "trawl", false); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if err := site.Verify(); err != nil {
		t.Errorf("after resume the site says the crawl was wrong:\n%v", err)
	}
}
