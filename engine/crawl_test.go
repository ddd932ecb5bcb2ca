package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"syscall"
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

// memSink collects items.
type memSink struct {
	mu    sync.Mutex
	items []any
}

func (s *memSink) Write(_ context.Context, items []any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.items = append(s.items, items...)
	return nil
}
func (s *memSink) Close() error { return nil }
func (s *memSink) len() int     { s.mu.Lock(); defer s.mu.Unlock(); return len(s.items) }

func newBackends(t *testing.T) (*memory.Broker, *local.Filter) {
	t.Helper()
	b, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := local.New(local.Config{Capacity: 100_000, FPRate: 1e-6})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(); f.Close() })
	return b, f
}

// retryLog returns a logger for a crawler whose test demands every page
// fetched once: if the test fails, it logs why the crawler fetched pages
// again (its retries, give-ups and warnings), which a failure of the
// site's Verify does not say.
func retryLog(t *testing.T) *slog.Logger {
	var buf syncbuf.Buffer
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		var why strings.Builder
		for line := range strings.Lines(buf.String()) {
			if strings.Contains(line, "msg=retrying") || strings.Contains(line, "msg=\"giving up\"") ||
				strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
				why.WriteString(line)
			}
		}
		t.Logf("the crawler's retries and warnings:\n%s", why.String())
	})
	return slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestCrawlTestsite crawls the synthetic site with every trap and asks the
// site whether the crawl was correct: every reachable page exactly once,
// nothing disallowed by robots.txt, flaky pages retried to success.
func TestCrawlTestsite(t *testing.T) {
	site, url := sitetest.Serve(t, testsite.Config{Pages: 300, Links: 8, Seed: 7, SlowDelay: 300 * time.Millisecond})
	b, f := newBackends(t)
	sink := &memSink{}
	c, err := engine.New(b, f, engine.Config{
		Concurrency: 16, PerHost: 16, IdleTimeout: 300 * time.Millisecond,
		RetryBackoff: 10 * time.Millisecond, TrustedHosts: []string{"127.0.0.1"},
		// The default 30s fetch timeout: a timeout is a retry, a page fetched
		// twice, and on a starved machine (-race beside other work) a small
		// page has taken over 3s. A 1 MiB cap ends /endless long before.
		Fetch: engine.FetchConfig{MaxBodySize: 1 << 20},
		Sink:  sink, Logger: retryLog(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.Seed(ctx, engine.StartURL{URL: url + "/"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	if err := site.Verify(); err != nil {
		t.Errorf("site says the crawl was wrong:\n%v", err)
	}
	if got, want := sink.len(), site.Expected(); got != want {
		t.Errorf("items = %d, want one per page the site expects: %d", got, want)
	}
	st := c.Stats()
	if st.Get(engine.StatRetries) == 0 {
		t.Errorf("no retries counted; the site's flaky pages fail once")
	}
	if st.Get(engine.StatRobotsForbidden) == 0 {
		t.Errorf("robots.txt forbade nothing; the site links to /private/")
	}
	if st.Get(engine.StatOffsite) == 0 {
		t.Errorf("no offsite link filtered; the site links to external hosts")
	}
	n, _ := b.Counts(ctx, engine.RequestsQueue("trawl"))
	if n.Ready != 0 || n.InFlight != 0 {
		t.Errorf("frontier not empty after the crawl: %+v", n)
	}
}

// TestGuardRefusesUntrustedLoopback: without trust, a loopback start URL is
// refused by the address guard, and Run reports that no page was fetched.
func TestGuardRefusesUntrustedLoopback(t *testing.T) {
	var hits int
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits++
		mu.Unlock()
	}))
	defer srv.Close()
	b, f := newBackends(t)
	c, err := engine.New(b, f, engine.Config{IdleTimeout: 100 * time.Millisecond, IgnoreRobots: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c.Seed(ctx, engine.StartURL{URL: srv.URL + "/"})
	err = c.Run(ctx)
	if !errors.Is(err, engine.ErrNoPages) || !errors.Is(err, engine.ErrForbiddenAddress) || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("run: %v, want ErrNoPages wrapping ErrForbiddenAddress", err)
	}
	if hits != 0 {
		t.Errorf("server saw %d requests; the guard should have refused the dial", hits)
	}
}

// TestNoPagesWrapsRetriedError: when every fetch failed after its retries
// (connection refused), Run's ErrNoPages wraps that error, so errors.Is
// finds the cause.
func TestNoPagesWrapsRetriedError(t *testing.T) {
	addr := sitetest.RefusedAddr(t)
	b, f := newBackends(t)
	c, err := engine.New(b, f, engine.Config{
		IdleTimeout: 100 * time.Millisecond, IgnoreRobots: true, RetryBackoff: time.Millisecond,
		TrustedHosts: []string{"127.0.0.1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Seed(ctx, engine.StartURL{URL: "http://" + addr + "/"}); err != nil {
		t.Fatal(err)
	}
	err = c.Run(ctx)
	if !errors.Is(err, engine.ErrNoPages) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("run: %v, want ErrNoPages wrapping ECONNREFUSED", err)
	}
	if got := c.Stats().Get(engine.StatRetriesExceeded); got != 1 {
		t.Errorf("retries exceeded %d, want 1", got)
	}
}

// TestUnknownCallbackDeadLettered: a request naming a callback the worker
// does not have is dead-lettered, unfetched, with a reason naming the
// callback, and logged at Warn once per name.
func TestUnknownCallbackDeadLettered(t *testing.T) {
	site, url := sitetest.Serve(t, testsite.Config{Pages: 5, Links: 2, NoTraps: true})
	b, f := newBackends(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q := engine.RequestsQueue("trawl")
	for _, p := range []string{"/page/1", "/page/2"} {
		body, _ := (&engine.Request{URL: url + p, Callback: "parse_product"}).MarshalBinary()
		if err := b.Publish(ctx, q, broker.Message{Body: body}); err != nil {
			t.Fatal(err)
		}
	}
	var logBuf bytes.Buffer
	var logMu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &logBuf, mu: &logMu}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := engine.New(b, f, engine.Config{
		IdleTimeout: 100 * time.Millisecond, TrustedHosts: []string{"127.0.0.1"}, Logger: log,
		Callbacks: map[string]engine.Callback{"parse_listing": func(context.Context, *engine.Response) (engine.Result, error) {
			return engine.Result{}, nil
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	// No page was fetched, and Run says why.
	if err := c.Run(ctx); !errors.Is(err, engine.ErrNoPages) || !strings.Contains(err.Error(), "parse_product") {
		t.Fatalf("run: %v, want ErrNoPages naming the unknown callback", err)
	}
	dl, err := b.DeadLetters(ctx, q, 10)
	if err != nil || len(dl) != 2 {
		t.Fatalf("dead letters %d (%v), want 2", len(dl), err)
	}
	for _, d := range dl {
		if !strings.Contains(d.Reason, `unknown callback "parse_product"`) || !strings.Contains(d.Reason, `"parse_listing"`) {
			t.Errorf("dead-letter reason %q; want it to name the unknown callback and the known ones", d.Reason)
		}
	}
	if n := site.Summary().Requests; n != 0 {
		t.Errorf("the site served %d requests; a request for an unknown callback must not be fetched", n)
	}
	logMu.Lock()
	out := logBuf.String()
	logMu.Unlock()
	if strings.Count(out, "level=WARN") != 1 || !strings.Contains(out, "callback=parse_product") {
		t.Errorf("log %q; want one Warn record naming callback=parse_product", out)
	}
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestBadPayloadDeadLettered: garbage in the frontier goes to the dead
// letters, and the crawl goes on.
func TestBadPayloadDeadLettered(t *testing.T) {
	site, url := sitetest.Serve(t, testsite.Config{Pages: 20, Links: 3, NoTraps: true})
	b, f := newBackends(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q := engine.RequestsQueue("trawl")
	if err := b.Publish(ctx, q, broker.Message{Body: []byte("\x80\x04garbage")}, broker.Message{Body: []byte(`{"url":1}`)}); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, engine.StartQueue("trawl"), broker.Message{Body: []byte("not a url")}); err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	c, _ := engine.New(b, f, engine.Config{IdleTimeout: 200 * time.Millisecond, TrustedHosts: []string{"127.0.0.1"}, Sink: sink})
	c.Seed(ctx, engine.StartURL{URL: url + "/"})
	if err := c.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if err := site.Verify(); err != nil {
		t.Error(err)
	}
	if sink.len() != site.Expected() {
		t.Errorf("items %d, want %d", sink.len(), site.Expected())
	}
	dq, _ := b.Counts(ctx, q)
	ds, _ := b.Counts(ctx, engine.StartQueue("trawl"))
	if dq.Dead != 2 || ds.Dead != 1 {
		t.Errorf("dead letters: requests %d (want 2), start urls %d (want 1)", dq.Dead, ds.Dead)
	}
	if got := c.Stats().Get(engine.StatDeadLetters); got != 3 {
		t.Errorf("dead-letter stat %d, want 3", got)
	}
}

// TestShutdownGivesBack: a crawl stopped by its context leaves nothing in
// flight, and a second crawler on the same broker and filter finishes it
// without fetching any page twice.
func TestShutdownResumes(t *testing.T) {
	site, url := sitetest.Serve(t, testsite.Config{Pages: 400, Links: 5, NoTraps: true, Latency: 2 * time.Millisecond})
	b, f := newBackends(t)
	sink := &memSink{}
	cfg := engine.Config{Concurrency: 8, PerHost: 8, IdleTimeout: 200 * time.Millisecond, TrustedHosts: []string{"127.0.0.1"}, Sink: sink}
	first, _ := engine.New(b, f, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	first.Seed(ctx, engine.StartURL{URL: url + "/"})
	done := make(chan error, 1)
	go func() { done <- first.Run(ctx) }()
	deadline := time.Now().Add(20 * time.Second)
	for sink.len() < 100 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // polling an observable condition
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("first run: %v, want context.Canceled", err)
	}
	half := sink.len()
	if half >= site.Expected() {
		t.Fatalf("the first run finished the crawl (%d items); stop it earlier", half)
	}
	n, _ := b.Counts(context.Background(), engine.RequestsQueue("trawl"))
	if n.InFlight != 0 {
		t.Errorf("%d deliveries still in flight after shutdown", n.InFlight)
	}
	second, _ := engine.New(b, f, cfg)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	if err := second.Run(ctx2); err != nil {
		t.Fatal(err)
	}
	if err := site.Verify(); err != nil {
		t.Errorf("after resume: %v", err)
	}
	if sink.len() != site.Expected() {
		t.Errorf("items %d, want %d", sink.len(), site.Expected())
	}
}

// TestCallbacks: named callbacks receive their responses, emit items and
// requests, and ErrDrop drops a request without retry.
func TestCallbacks(t *testing.T) {
	var mu sync.Mutex
	hits := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits[r.URL.Path]++
		mu.Unlock()
		switch r.URL.Path {
		case "/":
			w.Header().Set("Content-Type", "text/html")
			w.Write([]byte(`<a href="/item/1">1</a><a href="/item/2">2</a><a href="/drop">d</a>`))
		default:
			w.Write([]byte("price=" + strings.TrimPrefix(r.URL.Path, "/item/")))
		}
	}))
	defer srv.Close()
	b, f := newBackends(t)
	sink := &memSink{}
	c, err := engine.New(b, f, engine.Config{
		IdleTimeout: 100 * time.Millisecond, IgnoreRobots: true, TrustedHosts: []string{"127.0.0.1"}, Sink: sink,
		Callbacks: map[string]engine.Callback{
			"": func(ctx context.Context, r *engine.Response) (engine.Result, error) {
				var res engine.Result
				_, links := engine.ExtractLinks(r.URL, r.Body)
				for _, l := range links {
					cb := "item"
					if l.Path == "/drop" {
						cb = "drop"
					}
					res.Requests = append(res.Requests, &engine.Request{URL: l.String(), Callback: cb})
				}
				return res, nil
			},
			"item": func(ctx context.Context, r *engine.Response) (engine.Result, error) {
				return engine.Result{Items: []any{map[string]string{"price": strings.TrimPrefix(string(r.Body), "price=")}}}, nil
			},
			"drop": func(ctx context.Context, r *engine.Response) (engine.Result, error) {
				return engine.Result{}, engine.ErrDrop
			},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c.Seed(ctx, engine.StartURL{URL: srv.URL + "/"})
	if err := c.Run(ctx); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	json.NewEncoder(&buf).Encode(sink.items)
	if !strings.Contains(buf.String(), `"price":"1"`) || !strings.Contains(buf.String(), `"price":"2"`) || sink.len() != 2 {
		t.Errorf("items = %s", buf.String())
	}
	if hits["/drop"] != 1 || c.Stats().Get(engine.StatDropped) != 1 {
		t.Errorf("drop fetched %d times, dropped stat %d; want 1 and 1", hits["/drop"], c.Stats().Get(engine.StatDropped))
	}
}

// sliceStarts is a StartSource over a slice, taken at least once as
// Redis's list is: a take reads the head, DropStarts drops it. It keeps
// the payloads rejected.
type sliceStarts struct {
	mu       sync.Mutex
	ps       [][]byte
	rejected []string
	drops    int
}

func (s *sliceStarts) TakeStarts(_ context.Context, max int) ([][]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ps[:min(max, len(s.ps))]), nil
}

// DropStarts drops the payloads of taken at the head, in order, skipping
// those no longer there, but for those of keep, as Redis's script does.
func (s *sliceStarts) DropStarts(_ context.Context, taken, keep [][]byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drops++
	left := map[string]int{}
	for _, p := range keep {
		left[string(p)]++
	}
	j := 0
	var back [][]byte
	for _, p := range taken {
		if j < len(s.ps) && bytes.Equal(s.ps[j], p) {
			j++
			if left[string(p)] > 0 {
				left[string(p)]--
				back = append(back, p)
			}
		}
	}
	s.ps = append(back, s.ps[j:]...)
	return nil
}

func (s *sliceStarts) RejectStart(_ context.Context, p []byte, _ string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rejected = append(s.rejected, string(p))
	return nil
}

func (s *sliceStarts) AddStarts(_ context.Context, ps ...[]byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ps = append(s.ps, ps...)
	return nil
}

func (s *sliceStarts) PendingStarts(context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(len(s.ps)), nil
}

// TestExternalStarts: start URLs from a StartSource (plain and JSON
// payloads; garbage is dropped with a count) seed the crawl.
func TestExternalStarts(t *testing.T) {
	site, url := sitetest.Serve(t, testsite.Config{Pages: 30, Links: 3, NoTraps: true})
	b, f := newBackends(t)
	starts := &sliceStarts{}
	starts.AddStarts(context.Background(), []byte("\x00garbage"), []byte(`{"url": "`+url+`/page/5", "meta": {"k": "v"}}`))
	sink := &memSink{}
	c, _ := engine.New(b, f, engine.Config{IdleTimeout: 100 * time.Millisecond, TrustedHosts: []string{"127.0.0.1"}, Sink: sink, Starts: starts})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Seed(ctx, engine.StartURL{URL: url + "/"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if err := site.Verify(); err != nil {
		t.Error(err)
	}
	if sink.len() != site.Expected() {
		t.Errorf("items %d, want %d", sink.len(), site.Expected())
	}
	if got := c.Stats().Get(engine.StatErrors); got != 1 {
		t.Errorf("errors %d, want 1 (the garbage start url)", got)
	}
	found := false
	for _, it := range sink.items {
		if p := it.(*engine.Page); strings.HasSuffix(p.URL, "/page/5") && p.Meta["k"] == "v" {
			found = true
		}
	}
	if !found {
		t.Error("the JSON start url's meta did not reach its page item")
	}
}

// sumStats is a SharedStats in memory that counts its Add calls.
type sumStats struct {
	mu   sync.Mutex
	sum  map[string]int64
	adds int
}

func (s *sumStats) Add(_ context.Context, deltas map[string]int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sum == nil {
		s.sum = map[string]int64{}
	}
	for k, v := range deltas {
		s.sum[k] += v
	}
	s.adds++
	return nil
}

func (s *sumStats) Load(context.Context) (map[string]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.sum), nil
}

// TestSharedStats: two crawlers of one crawl sharing their counters leave
// in Config.SharedStats the sum of their own counters once Run returns,
// every counter, none counted twice.
func TestSharedStats(t *testing.T) {
	site, url := sitetest.Serve(t, testsite.Config{Pages: 200, Links: 8, Seed: 5, NoTraps: true})
	b, f := newBackends(t)
	shared := &sumStats{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var crawlers []*engine.Crawler
	for range 2 {
		c, err := engine.New(b, f, engine.Config{
			Concurrency: 8, PerHost: 8, IdleTimeout: 300 * time.Millisecond,
			TrustedHosts: []string{"127.0.0.1"}, Sink: &memSink{}, SharedStats: shared,
		})
		if err != nil {
			t.Fatal(err)
		}
		crawlers = append(crawlers, c)
	}
	if err := crawlers[0].Seed(ctx, engine.StartURL{URL: url + "/"}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, c := range crawlers {
		wg.Go(func() {
			if err := c.Run(ctx); err != nil {
				t.Errorf("run: %v", err)
			}
		})
	}
	wg.Wait()
	got, _ := shared.Load(ctx)
	want := map[string]int64{}
	for _, c := range crawlers {
		for k, v := range c.Stats().Snapshot() {
			if v != 0 {
				want[k] += v
			}
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("shared stats = %v\nwant the workers' sum %v", got, want)
	}
	if got[engine.StatItems] != int64(site.Expected()) {
		t.Errorf("shared %s = %d, want %d", engine.StatItems, got[engine.StatItems], site.Expected())
	}
}

// TestCallbackKeepsItsBody: a callback may keep the Body it was given;
// the engine reuses the buffers of bodies only its own default callback
// saw, so what a callback kept still reads as the page it was.
func TestCallbackKeepsItsBody(t *testing.T) {
	const pages = 50
	page := func(path string) []byte {
		body := "<html><title>" + path + "</title>"
		if path == "/" {
			for i := range pages {
				body += fmt.Sprintf(`<a href="/p/%d">p</a>`, i)
			}
		}
		return []byte(body + strings.Repeat("<!-- "+path+" -->", 100) + "</html>")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Write(page(r.URL.Path))
	}))
	defer srv.Close()
	var mu sync.Mutex
	kept := map[string][]byte{}
	b, f := newBackends(t)
	c, err := engine.New(b, f, engine.Config{
		Concurrency: 4, IdleTimeout: 100 * time.Millisecond, IgnoreRobots: true, TrustedHosts: []string{"127.0.0.1"},
		Callbacks: map[string]engine.Callback{
			"": func(ctx context.Context, r *engine.Response) (engine.Result, error) {
				mu.Lock()
				kept[r.URL.Path] = r.Body // not copied
				mu.Unlock()
				var res engine.Result
				_, links := engine.ExtractLinks(r.URL, r.Body)
				for _, l := range links {
					res.Requests = append(res.Requests, &engine.Request{URL: l.String()})
				}
				return res, nil
			},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c.Seed(ctx, engine.StartURL{URL: srv.URL + "/"})
	if err := c.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if len(kept) != pages+1 {
		t.Fatalf("callback saw %d pages, want %d", len(kept), pages+1)
	}
	for path, body := range kept {
		if !bytes.Equal(body, page(path)) {
			t.Errorf("the body kept for %s now reads %.60q…; want the page as served", path, body)
		}
	}
}

// retypedStarts is a StartSource whose key changes type after its first
// take: every later call fails with ErrStartsType. It cancels the crawl
// (stop) when it is asked again after that error.
type retypedStarts struct {
	sliceStarts
	mu    sync.Mutex
	takes int
	after int // takes that succeed
	stop  context.CancelFunc
}

func (s *retypedStarts) TakeStarts(ctx context.Context, max int) ([][]byte, error) {
	s.mu.Lock()
	s.takes++
	n := s.takes
	s.mu.Unlock()
	if n <= s.after {
		return s.sliceStarts.TakeStarts(ctx, max)
	}
	if n > s.after+1 {
		s.stop() // asked again after ErrStartsType: the feeder retries
	}
	return nil, fmt.Errorf("%w: test:start_urls is a set, but this crawl reads a list", engine.ErrStartsType)
}

// TestStartsTypeEndsRun: a start source that fails with ErrStartsType, at
// the first take or while the crawl runs, ends Run with its error (which
// names the key) at once, without a second take.
func TestStartsTypeEndsRun(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<html><body>ok</body></html>")
	}))
	defer srv.Close()
	for _, after := range []int{0, 1} {
		t.Run(fmt.Sprintf("after %d takes", after), func(t *testing.T) {
			b, f := newBackends(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			starts := &retypedStarts{after: after, stop: cancel}
			starts.ps = [][]byte{[]byte(srv.URL + "/")}
			c, _ := engine.New(b, f, engine.Config{IdleTimeout: time.Hour, TrustedHosts: []string{"127.0.0.1"}, Sink: &memSink{}, Starts: starts})
			err := c.Run(ctx)
			if !errors.Is(err, engine.ErrStartsType) || !strings.Contains(err.Error(), "test:start_urls") {
				t.Fatalf("Run = %v, want ErrStartsType naming test:start_urls", err)
			}
			if starts.takes != after+1 {
				t.Errorf("%d takes, want %d: the start source was asked again after ErrStartsType", starts.takes, after+1)
			}
		})
	}
}
