package engine_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/dedup"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/syncbuf"
	"github.com/trawlhq/trawl/internal/testsite"
	"github.com/trawlhq/trawl/internal/testsite/sitetest"
)

// noMetadata hides a broker's Metadata and Presence: a worker on it
// cannot adopt the crawl's settings and crawls by its own.
type noMetadata struct{ broker.Broker }

// TestMisconfiguredWorkerLosesNothing runs two crawlers on one broker over
// a loopback site: one may fetch private addresses, the other may not
// (no --allow-private, no trust) and, on a broker that keeps no settings,
// cannot adopt the crawl's. The second refuses what it takes and
// gives it back, never settling a page as done: every page is fetched
// exactly once, nothing is dead-lettered, and the refusing worker says
// loudly, once, what it lacks.
func TestMisconfiguredWorkerLosesNothing(t *testing.T) {
	site, url := sitetest.Serve(t, testsite.Config{Pages: 300, Links: 8, Seed: 11, SlowDelay: 100 * time.Millisecond})
	b, f := newBackends(t)
	sink := &memSink{}
	good, err := engine.New(b, f, engine.Config{
		Concurrency: 8, PerHost: 8, IdleTimeout: time.Second, RetryBackoff: 10 * time.Millisecond,
		// The default 30s fetch timeout: a timeout is a retry, a page fetched
		// twice, and on a starved machine (-race beside other work) a small
		// page has taken over 3s. A 1 MiB cap ends /endless long before.
		Fetch: engine.FetchConfig{AllowPrivate: true, MaxBodySize: 1 << 20}, Sink: sink, Logger: retryLog(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	bad, err := engine.New(noMetadata{b}, f, engine.Config{
		Concurrency: 8, PerHost: 8, IdleTimeout: time.Second, RetryBackoff: 10 * time.Millisecond,
		Sink: sink, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := good.Seed(ctx, engine.StartURL{URL: url + "/"}); err != nil {
		t.Fatal(err)
	}
	// The refusing worker starts first and takes the start URL.
	badDone := make(chan error, 1)
	go func() { badDone <- bad.Run(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for bad.Stats().Get(engine.StatRefused) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the worker without --allow-private refused nothing within 30s")
		}
		time.Sleep(5 * time.Millisecond) // polling a counter, bounded by the deadline
	}
	if err := good.Run(ctx); err != nil {
		t.Fatalf("good worker: %v", err)
	}
	if err := <-badDone; err != nil {
		t.Errorf("refusing worker: %v", err)
	}
	if err := site.Verify(); err != nil {
		t.Errorf("site says the crawl was wrong:\n%v", err)
	}
	if got, want := sink.len(), site.Expected(); got != want {
		t.Errorf("items = %d, want %d", got, want)
	}
	n, _ := b.Counts(ctx, engine.RequestsQueue("trawl"))
	if n.Dead != 0 || n.Ready != 0 || n.InFlight != 0 {
		t.Errorf("requests queue after the crawl: %+v, want empty with no dead letters", n)
	}
	refused := bad.Stats().Get(engine.StatRefused)
	if got := bad.Stats().Get(engine.StatResponses); got != 0 {
		t.Errorf("the refusing worker got %d responses", got)
	}
	out := logs.String()
	if c := strings.Count(out, "level=ERROR"); c != 1 || !strings.Contains(out, "--allow-private") {
		t.Errorf("refusing worker (%d refusals) logged %d errors, want one naming --allow-private:\n%s", refused, c, out)
	}
	t.Logf("the refusing worker gave back %d requests", refused)
}

// TestRobotsUnreachableDefers: while a site's robots.txt answers 503, its
// pages are neither fetched nor dropped nor counted as forbidden: they wait
// and are given back, and once the file can be fetched its rules apply.
func TestRobotsUnreachableDefers(t *testing.T) {
	var mu sync.Mutex
	hits := map[string]int{}
	robotsDown := 2 // the first two robots.txt requests fail
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits[r.URL.Path]++
		down := r.URL.Path == "/robots.txt" && hits[r.URL.Path] <= robotsDown
		mu.Unlock()
		switch {
		case down:
			http.Error(w, "busy", http.StatusServiceUnavailable)
		case r.URL.Path == "/robots.txt":
			fmt.Fprint(w, "User-agent: *\nDisallow: /secret\n")
		default:
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, `<html><a href="/a">a</a><a href="/secret">s</a></html>`)
		}
	}))
	t.Cleanup(srv.Close)
	b, f := newBackends(t)
	c, err := engine.New(b, f, engine.Config{
		IdleTimeout: 300 * time.Millisecond, TrustedHosts: []string{srv.Listener.Addr().String()},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.Seed(ctx, engine.StartURL{URL: srv.URL + "/"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if hits["/"] != 1 || hits["/a"] != 1 || hits["/secret"] != 0 {
		t.Errorf("fetches %v, want / and /a once, /secret never", hits)
	}
	if hits["/robots.txt"] != robotsDown+1 {
		t.Errorf("robots.txt fetched %d times, want %d", hits["/robots.txt"], robotsDown+1)
	}
	st := c.Stats()
	if st.Get(engine.StatRobotsUnavailable) == 0 {
		t.Error("no page counted as waiting for robots.txt")
	}
	if st.Get(engine.StatRobotsForbidden) != 1 {
		t.Errorf("robots-forbidden = %d, want 1 (/secret, after the file came back)", st.Get(engine.StatRobotsForbidden))
	}
	if n, _ := b.Counts(ctx, engine.RequestsQueue("trawl")); n.Dead != 0 {
		t.Errorf("%d dead letters", n.Dead)
	}
}

// TestCrawlGuardRefusalFailsOnce: when a worker's settings are the crawl's
// (the memory broker keeps them), a link to a private address is refused
// by every worker alike, so it fails once as a forbidden address: not
// given back again and again, not dead-lettered.
func TestCrawlGuardRefusalFailsOnce(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<html><a href="http://10.255.255.1/secret">private</a></html>`)
	}))
	t.Cleanup(srv.Close)
	b, f := newMemoryBackends(t)
	c, err := engine.New(b, f, engine.Config{
		Concurrency: 2, IdleTimeout: 100 * time.Millisecond, IgnoreRobots: true,
		TrustedHosts:   []string{strings.TrimPrefix(srv.URL, "http://")},
		AllowedDomains: []string{"127.0.0.1", "10.255.255.1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := c.Seed(ctx, engine.StartURL{URL: srv.URL + "/"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		t.Fatal(err)
	}
	st := c.Stats()
	if n := st.Get(engine.StatErrorKindPrefix + engine.ErrorForbiddenAddress); n != 1 {
		t.Errorf("forbidden-address errors = %d, want 1", n)
	}
	if n := st.Get(engine.StatRefused); n != 0 {
		t.Errorf("%s = %d, want 0: the crawl's own guard gives nothing back", engine.StatRefused, n)
	}
	if n := st.Get(engine.StatDeadLetters); n != 0 {
		t.Errorf("%s = %d, want 0", engine.StatDeadLetters, n)
	}
}

// joinedCrawler returns a crawler on b and f that has joined the crawl
// (stored its settings, if the crawl had none) without seeding.
func joinedCrawler(ctx context.Context, t *testing.T, b broker.Broker, f dedup.Filter, cfg engine.Config) *engine.Crawler {
	t.Helper()
	c, err := engine.New(b, f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Seed(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestEarlierJoinerTrustsLaterSeeder is the race of three workers started
// at once, one of them seeding a loopback site: a worker without start
// URLs stores the crawl's settings first (no trusted host), the seeder
// then joins and adds its start URL's host. The first worker, alone
// running, must fetch the site (its guard rereads the crawl's trusted
// hosts on a refusal), not fail its pages as forbidden.
func TestEarlierJoinerTrustsLaterSeeder(t *testing.T) {
	site, url := sitetest.Serve(t, testsite.Config{Pages: 50, Links: 5, Seed: 3})
	b, f := newBackends(t)
	sink := &memSink{}
	cfg := engine.Config{Concurrency: 4, PerHost: 4, IdleTimeout: 300 * time.Millisecond, Sink: sink}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	early := joinedCrawler(ctx, t, b, f, cfg)
	seederCfg := cfg
	seederCfg.TrustedHosts = []string{strings.TrimPrefix(url, "http://")}
	seeder, err := engine.New(b, f, seederCfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := seeder.Seed(ctx, engine.StartURL{URL: url + "/"}); err != nil {
		t.Fatal(err)
	}
	if err := early.Run(ctx); err != nil {
		t.Fatal(err)
	}
	st := early.Stats()
	if n := st.Get(engine.StatErrorKindPrefix + engine.ErrorForbiddenAddress); n != 0 {
		t.Errorf("the early worker failed %d pages as forbidden addresses", n)
	}
	if err := site.Verify(); err != nil {
		t.Errorf("site says the crawl was wrong:\n%v", err)
	}
	if got, want := sink.len(), site.Expected(); got != want {
		t.Errorf("items = %d, want %d", got, want)
	}
}

// barrierMeta is a crawl's metadata where reading the settings waits
// until n readers have read them: workers joining at once, each reading
// the crawl's settings before any writes its merge back.
type barrierMeta struct {
	broker.Metadata
	mu      sync.Mutex
	waiting int
	all     chan struct{}
}

func newBarrierMeta(m broker.Metadata, n int) *barrierMeta {
	return &barrierMeta{Metadata: m, waiting: n, all: make(chan struct{})}
}

func (b *barrierMeta) GetMeta(ctx context.Context, crawl, key string) ([]byte, error) {
	v, err := b.Metadata.GetMeta(ctx, crawl, key)
	if key != "settings" {
		return v, err
	}
	b.mu.Lock()
	if b.waiting > 0 {
		b.waiting--
		if b.waiting == 0 {
			close(b.all)
		}
	}
	b.mu.Unlock()
	select {
	case <-b.all:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return v, err
}

// TestTrustOfSeedersJoiningAtOnce: two workers seeding two loopback sites
// join at once (each reads the crawl's settings before the other writes
// its merge, so the stored settings keep one site's host only). A worker
// that joined before both, running alone, still fetches both sites whole:
// every worker's trusted hosts are kept apart from the settings, never
// overwritten.
func TestTrustOfSeedersJoiningAtOnce(t *testing.T) {
	siteA, urlA := sitetest.Serve(t, testsite.Config{Pages: 30, Links: 4, Seed: 1})
	siteB, urlB := sitetest.Serve(t, testsite.Config{Pages: 30, Links: 4, Seed: 2})
	b, f := newBackends(t)
	sink := &memSink{}
	cfg := engine.Config{Concurrency: 4, PerHost: 4, IdleTimeout: 300 * time.Millisecond, Sink: sink}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	early := joinedCrawler(ctx, t, b, f, cfg)
	meta := newBarrierMeta(b, 2)
	var wg sync.WaitGroup
	for _, u := range []string{urlA, urlB} {
		c := cfg
		c.Metadata = meta
		c.TrustedHosts = []string{strings.TrimPrefix(u, "http://")}
		seeder, err := engine.New(b, f, c)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if err := seeder.Seed(ctx, engine.StartURL{URL: u + "/"}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := early.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if n := early.Stats().Get(engine.StatErrorKindPrefix + engine.ErrorForbiddenAddress); n != 0 {
		t.Errorf("the early worker failed %d pages as forbidden addresses", n)
	}
	for _, s := range []*testsite.Site{siteA, siteB} {
		if err := s.Verify(); err != nil {
			t.Errorf("site says the crawl was wrong:\n%v", err)
		}
	}
	if got, want := sink.len(), siteA.Expected()+siteB.Expected(); got != want {
		t.Errorf("items = %d, want %d", got, want)
	}
}
