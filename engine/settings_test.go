package engine_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/syncbuf"
	"github.com/trawlhq/trawl/internal/testsite"
	"github.com/trawlhq/trawl/internal/testsite/sitetest"
)

// TestJoiningWorkerAdoptsCrawlSettings is issue 13.1's scenario: a crawl
// of a loopback site seeded with AllowPrivate; a second worker joins
// without it (nothing insisted on, as trawl worker with no such flag). It
// adopts the crawl's setting, says so, and fetches pages itself: nothing
// refused, nothing lost, every page fetched once.
func TestJoiningWorkerAdoptsCrawlSettings(t *testing.T) {
	site, url := sitetest.Serve(t, testsite.Config{Pages: 200, Links: 8, Seed: 5, SlowDelay: 50 * time.Millisecond})
	b, f := newBackends(t)
	sink := &memSink{}
	first, err := engine.New(b, f, engine.Config{
		Concurrency: 4, PerHost: 8, IdleTimeout: time.Second, RetryBackoff: 10 * time.Millisecond,
		// The default 30s fetch timeout: a timeout is a retry, a page fetched
		// twice, and on a starved machine (-race beside other work) a small
		// page has taken over 3s. A 1 MiB cap ends /endless long before.
		Fetch: engine.FetchConfig{AllowPrivate: true, MaxBodySize: 1 << 20}, Sink: sink, Logger: retryLog(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	joiner, err := engine.New(b, f, engine.Config{
		Concurrency: 4, PerHost: 8, IdleTimeout: time.Second, RetryBackoff: 10 * time.Millisecond,
		Fetch: engine.FetchConfig{MaxBodySize: 1 << 20}, Sink: sink, Adopt: engine.SettingNames,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := first.Seed(ctx, engine.StartURL{URL: url + "/"}); err != nil {
		t.Fatal(err)
	}
	// The joiner starts first and takes the start URL.
	done := make(chan error, 1)
	go func() { done <- joiner.Run(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for joiner.Stats().Get(engine.StatResponses) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the joining worker fetched nothing within 30s (refused %d); log:\n%s", joiner.Stats().Get(engine.StatRefused), logs.String())
		}
		time.Sleep(5 * time.Millisecond) // polling a counter, bounded by the deadline
	}
	if err := first.Run(ctx); err != nil {
		t.Fatalf("first worker: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("joining worker: %v", err)
	}
	if err := site.Verify(); err != nil {
		t.Errorf("site says the crawl was wrong:\n%v", err)
	}
	if got, want := sink.len(), site.Expected(); got != want {
		t.Errorf("items = %d, want %d", got, want)
	}
	if n := joiner.Stats().Get(engine.StatRefused); n != 0 {
		t.Errorf("the joining worker refused %d requests", n)
	}
	out := logs.String()
	if !strings.Contains(out, "crawl settings adopted") || !strings.Contains(out, "allow-private=true") {
		t.Errorf("the joining worker did not say it adopted allow-private:\n%s", out)
	}
	t.Logf("joining worker fetched %d of %d pages", joiner.Stats().Get(engine.StatResponses), site.Expected())
}

// TestConflictingWorkerRefuses: a worker that insists on an include
// pattern the crawl does not have fails before taking anything, naming the
// setting, the crawl's value and its own; with OverrideSettings it
// replaces the crawl's.
func TestConflictingWorkerRefuses(t *testing.T) {
	b, f := newBackends(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first, err := engine.New(b, f, engine.Config{Include: []string{`/a/`}, IdleTimeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Seed(ctx); err != nil {
		t.Fatal(err)
	}
	adopt := slices.DeleteFunc(slices.Clone(engine.SettingNames), func(n string) bool { return n == engine.SettingInclude })
	cfg := engine.Config{Include: []string{`/b/`}, Adopt: adopt, IdleTimeout: time.Millisecond}
	second, err := engine.New(b, f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = second.Run(ctx)
	var se *engine.SettingsError
	if !errors.Is(err, engine.ErrSettingsConflict) || !errors.As(err, &se) {
		t.Fatalf("Run = %v, want a settings conflict", err)
	}
	if len(se.Conflicts) != 1 || se.Conflicts[0] != (engine.SettingConflict{Name: "include", Stored: `"/a/"`, Given: `"/b/"`}) {
		t.Errorf("conflicts = %+v, want include only", se.Conflicts)
	}
	if msg := err.Error(); !strings.Contains(msg, `--include: the crawl has "/a/", this worker was given "/b/"`) {
		t.Errorf("message %q does not name the flag and both values", msg)
	}
	if n := second.Stats().Get(engine.StatResponses) + second.Stats().Get(engine.StatErrors); n != 0 {
		t.Errorf("the refusing worker processed %d pages", n)
	}

	cfg.OverrideSettings = true
	third, err := engine.New(b, f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := third.Run(ctx); err != nil {
		t.Fatalf("override: %v", err)
	}
	raw, err := b.GetMeta(ctx, "trawl", "settings")
	if err != nil {
		t.Fatal(err)
	}
	s, err := engine.DecodeSettings(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Include, []string{`/b/`}) {
		t.Errorf("stored include after the override = %q, want /b/", s.Include)
	}
}

// TestSettingsEncoding: settings round-trip with their version; a later
// version and a nonsense depth are refused; trusted hosts merge.
func TestSettingsEncoding(t *testing.T) {
	s := engine.SettingsOf(engine.Config{AllowedDomains: []string{"B.example", ".a.example"}, Include: []string{"x", "x"},
		Extract: map[string]string{"t": "h1"}, Fetch: engine.FetchConfig{AllowPrivate: true}, TrustedHosts: []string{"h:1"}})
	if !slices.Equal(s.AllowedDomains, []string{"a.example", "b.example"}) || s.MaxDepth != engine.DefaultMaxDepth || len(s.Include) != 1 {
		t.Errorf("SettingsOf normalised to %+v", s)
	}
	enc, err := s.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := engine.DecodeSettings(enc)
	if err != nil || !got.Equal(s) {
		t.Errorf("round trip: %+v, %v; want %+v", got, err, s)
	}
	if _, err := engine.DecodeSettings([]byte(`{"version":3,"max_depth":3}`)); !errors.Is(err, engine.ErrSettingsVersion) {
		t.Errorf("version 3: %v, want ErrSettingsVersion", err)
	}
	if _, err := engine.DecodeSettings([]byte(`{"version":1,"max_depth":0}`)); err == nil {
		t.Error("depth 0 accepted")
	}
	merged, conflicts := s.Merge(engine.SettingsOf(engine.Config{TrustedHosts: []string{"g:2"}}), engine.SettingNames)
	if len(conflicts) != 0 || !slices.Equal(merged.TrustedHosts, []string{"g:2", "h:1"}) || !merged.AllowPrivate {
		t.Errorf("merge: %+v %+v", merged, conflicts)
	}
}

// TestPresence: a running worker is live on its crawl, and not once Run
// returned.
func TestPresence(t *testing.T) {
	b, f := newBackends(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := engine.New(b, f, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	run, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(run) }()
	var p broker.Presence = b
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := engine.LiveWorkers(ctx, p, "trawl")
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d live workers while one runs", n)
		}
		time.Sleep(5 * time.Millisecond) // polling, bounded by the deadline
	}
	if n, _ := engine.LiveWorkers(ctx, p, "other"); n != 0 {
		t.Errorf("%d live workers on another crawl", n)
	}
	stop()
	<-done
	if n, _ := engine.LiveWorkers(ctx, p, "trawl"); n != 0 {
		t.Errorf("%d live workers after Run returned", n)
	}
}
