package testsite

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// serve starts s on a loopback port for the duration of the test.
func serve(t *testing.T, s *Site) string {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	base, wait, err := s.Serve(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := wait(); err != nil {
			t.Errorf("wait: %v", err)
		}
	})
	return base
}

func get(t *testing.T, rawURL string) (*http.Response, string) {
	t.Helper()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func TestCorrectCrawlVerifies(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Config
	}{
		{"default", Config{SlowDelay: 50 * time.Millisecond}},
		{"small", Config{Pages: 7, Links: 3, Seed: 42, SlowDelay: 10 * time.Millisecond}},
		{"one page", Config{Pages: 1, SlowDelay: 10 * time.Millisecond}},
		{"no traps", Config{Pages: 300, Links: 5, Seed: 7, NoTraps: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(tc.o)
			base := serve(t, s)

			// Ask Verify concurrently with the crawl, for the race detector.
			ctx, stop := context.WithCancel(t.Context())
			var wg sync.WaitGroup
			wg.Go(func() {
				tick := time.NewTicker(2 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-ctx.Done():
						return
					case <-tick.C:
						_ = s.VerifyPartial()
						_ = s.Served()
					}
				}
			})
			items, errs := newCrawler(t, base, flaws{}).run(t.Context())
			stop()
			wg.Wait()
			for _, err := range errs {
				t.Error(err)
			}

			if err := s.Verify(); err != nil {
				t.Fatalf("Verify after a correct crawl:\n%v", err)
			}
			if items != s.Expected() {
				t.Errorf("crawler kept %d responses, Expected() = %d", items, s.Expected())
			}
			served := s.Served()
			for i := range s.Pages() {
				if n := served[pagePath(i)]; n != 1 {
					t.Errorf("%s served %d times", pagePath(i), n)
				}
			}
			want := 1 + s.Pages()
			if !tc.o.NoTraps {
				want += 17 // see Expected
				if served["/flaky/0"] != 2 {
					t.Errorf("/flaky/0 served %d times, want 2", served["/flaky/0"])
				}
				if served["/q/0?id=0&sort=asc&view=full"] != 1 {
					t.Errorf("query variant served %d times, want 1", served["/q/0?id=0&sort=asc&view=full"])
				}
				for _, k := range []string{"/leaf/area", "/leaf/next", "/leaf/base", "/leaf/broken", "/loop/b", "/redirect/1/2", "/missing/2", "/huge", "/endless"} {
					if served[k] != 1 {
						t.Errorf("%s served %d times, want 1", k, served[k])
					}
				}
			}
			if s.Expected() != want {
				t.Errorf("Expected() = %d, want %d", s.Expected(), want)
			}
			if sum := s.Summary(); sum.Succeeded != sum.Expected || sum.Problems != 0 {
				t.Errorf("summary %+v", sum)
			}

			before := len(s.Served())
			resp, body := get(t, base+"/_testsite/verify")
			if resp.StatusCode != http.StatusOK || body != "ok\n" {
				t.Errorf("GET /_testsite/verify = %d %q", resp.StatusCode, body)
			}
			if after := len(s.Served()); after != before {
				t.Errorf("control request was counted: %d keys, then %d", before, after)
			}
		})
	}
}

func TestVerifyCatchesFlawedCrawlers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		f     flaws
		is    error
		paths []string
	}{
		{"ignores robots.txt", flaws{ignoreRobots: true}, ErrDisallowed, []string{"/private/0:", "/private/2:"}},
		{"ignores base href", flaws{ignoreBase: true}, ErrNotLinked, []string{"/page/leaf/base:", "/leaf/base:"}},
		{"ignores area", flaws{noArea: true}, ErrMissed, []string{"/leaf/area:", "<area href>"}},
		{"ignores link rel=next", flaws{noLinkNext: true}, ErrMissed, []string{"/leaf/next:"}},
		{"keeps query order", flaws{rawQuery: true}, ErrDuplicate, []string{"/q/0?id=0&sort=asc&view=full:"}},
		{"keeps fragments", flaws{keepFragment: true}, ErrDuplicate, []string{"/page/"}},
		{"keeps percent-encoding", flaws{rawPercent: true}, ErrDuplicate, []string{"/page/"}},
		{"extracts links from anything", flaws{regexLinks: true}, ErrNotLinked,
			[]string{"/from-pdf/0:", "/from-script:", "/commented-out:", "/static/site.css:"}},
		{"follows redirects blindly", flaws{followRedirects: true}, ErrDuplicate, []string{"/loop/a:", "/loop/b:"}},
		{"never retries 503", flaws{noRetry: true}, ErrMissed, []string{"/flaky/0:", "never retried"}},
		{"misses a page", flaws{skip: func(p string) bool { return p == "/page/5" }}, ErrMissed, []string{"/page/5:", "linked from /page/4"}},
		{"misses huge", flaws{skip: func(p string) bool { return p == "/huge" }}, ErrMissed, []string{"/huge:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(Config{Pages: 60, Links: 5, Seed: 3, SlowDelay: time.Millisecond})
			base := serve(t, s)
			_, _ = newCrawler(t, base, tc.f).run(t.Context())
			err := s.Verify()
			if err == nil {
				t.Fatal("Verify = nil after a flawed crawl")
			}
			if !errors.Is(err, tc.is) {
				t.Errorf("Verify does not wrap %v:\n%v", tc.is, err)
			}
			for _, p := range tc.paths {
				if !strings.Contains(err.Error(), p) {
					t.Errorf("Verify does not mention %q:\n%v", p, err)
				}
			}
			resp, body := get(t, base+"/_testsite/verify")
			if resp.StatusCode != http.StatusConflict || !strings.Contains(body, tc.paths[0]) {
				t.Errorf("GET /_testsite/verify = %d %q", resp.StatusCode, body)
			}
		})
	}
}

func TestVerifyReportsDoubleFetchAndPrivate(t *testing.T) {
	s := New(Config{Pages: 20, Links: 3, SlowDelay: time.Millisecond})
	base := serve(t, s)
	if _, errs := newCrawler(t, base, flaws{}).run(t.Context()); len(errs) > 0 {
		t.Fatal(errs)
	}
	if err := s.Verify(); err != nil {
		t.Fatal(err)
	}
	get(t, base+"/page/%33#again") // /page/3, spelled differently
	get(t, base+"/q/1?view=full&sort=asc&id=1")
	get(t, base+"/private/1")
	for _, err := range []error{s.Verify(), s.VerifyPartial()} {
		if !errors.Is(err, ErrDuplicate) || !errors.Is(err, ErrDisallowed) || errors.Is(err, ErrMissed) {
			t.Fatalf("want a duplicate and a disallowed fetch:\n%v", err)
		}
		for _, p := range []string{"/page/3: fetched 2 times", "/q/1?id=1&sort=asc&view=full: fetched 2 times", "/private/1: fetched 1 times"} {
			if !strings.Contains(err.Error(), p) {
				t.Errorf("no %q in\n%v", p, err)
			}
		}
	}
}

func TestVerifyPartialIgnoresIncompleteness(t *testing.T) {
	s := New(Config{Pages: 20})
	h := httptest.NewServer(s)
	defer h.Close()
	get(t, h.URL+"/")
	get(t, h.URL+"/page/0")
	if err := s.VerifyPartial(); err != nil {
		t.Errorf("VerifyPartial = %v", err)
	}
	if err := s.Verify(); !errors.Is(err, ErrMissed) || !strings.Contains(err.Error(), "/page/1:") {
		t.Errorf("Verify = %v, want /page/1 missed", err)
	}
	get(t, h.URL+"/page/0/")
	if err := s.VerifyPartial(); !errors.Is(err, ErrNotLinked) || !strings.Contains(err.Error(), "/page/0/:") {
		t.Errorf("VerifyPartial = %v, want /page/0/ not linked", err)
	}
}

func TestCanonicalKey(t *testing.T) {
	for raw, want := range map[string]string{
		"/page/7":                  "/page/7",
		"/page/%37":                "/page/7",
		"/page/../page/7":          "/page/7",
		"/page/./7":                "/page/7",
		"/page//7":                 "/page/7",
		"/page/7/":                 "/page/7/",
		"/q/1?view=%66ull&id=1":    "/q/1?id=1&view=full",
		"/q/1?b=2&a=1":             "/q/1?a=1&b=2",
		"/q/1?":                    "/q/1",
		"/":                        "/",
		"":                         "/",
		"/a/./b/../c/?z=1&y=2&z=0": "/a/c/?y=2&z=1&z=0",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := canonicalKey(u); got != want {
			t.Errorf("canonicalKey(%q) = %q, want %q", raw, got, want)
		}
	}
}

// render returns the body of path as served by s.
func render(t testing.TB, s *Site, path string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:8080"+path, nil)
	s.ServeHTTP(w, r)
	return w
}

func TestDeterminism(t *testing.T) {
	o := Config{Pages: 200, Links: 8, Seed: 99}
	a, b := New(o), New(o)
	if !reflect.DeepEqual(a.graph, b.graph) || !reflect.DeepEqual(a.extras, b.extras) || !reflect.DeepEqual(a.res, b.res) {
		t.Fatal("same options, different sites")
	}
	o.Seed = 100
	c := New(o)
	if reflect.DeepEqual(a.graph, c.graph) {
		t.Error("different seed, same link graph")
	}
	if reflect.DeepEqual(a.extras, c.extras) {
		t.Error("different seed, same trap placement")
	}
	differ := false
	for i := range 20 {
		p := "/page/" + strconv.Itoa(i)
		x, y, z := render(t, a, p).Body.String(), render(t, b, p).Body.String(), render(t, c, p).Body.String()
		if x != y {
			t.Fatalf("%s differs between two sites with the same options", p)
		}
		differ = differ || x != z
	}
	if !differ {
		t.Error("different seed, same pages")
	}
}

func TestGraph(t *testing.T) {
	for _, o := range []Config{{}, {Pages: 2, Links: 1}, {Pages: 5, Links: 10}, {Pages: 50, Links: 49}, {Pages: 3000, Links: 3, Seed: -5}} {
		s := New(o)
		want := min(s.links, s.pages-1)
		reached := make([]bool, s.pages)
		var queue []int
		for i := range min(s.links, s.pages) { // the home page's links
			reached[i] = true
			queue = append(queue, i)
		}
		for len(queue) > 0 {
			i := queue[0]
			queue = queue[1:]
			if len(s.graph[i]) != want {
				t.Fatalf("%+v: page %d has %d links, want %d", o, i, len(s.graph[i]), want)
			}
			seen := map[int32]bool{}
			for _, to := range s.graph[i] {
				if int(to) == i || seen[to] || int(to) >= s.pages {
					t.Fatalf("%+v: page %d links to %d (self, repeated or out of range)", o, i, to)
				}
				seen[to] = true
				if !reached[to] {
					reached[to] = true
					queue = append(queue, int(to))
				}
			}
		}
		for i, ok := range reached {
			if !ok {
				t.Fatalf("%+v: page %d unreachable", o, i)
			}
		}
	}
}

func TestPageSizes(t *testing.T) {
	s := New(Config{})
	for i := range s.Pages() {
		w := render(t, s, pagePath(i))
		n := w.Body.Len()
		if n < 10<<10 || n > 20_000 {
			t.Errorf("%s is %d bytes, want 10 KiB to 20 kB", pagePath(i), n)
		}
		if cl := w.Header().Get("Content-Length"); cl != strconv.Itoa(n) {
			t.Errorf("%s: Content-Length %s, body %d", pagePath(i), cl, n)
		}
		if w.Header().Get("Content-Type") != "text/html; charset=utf-8" || !strings.Contains(w.Body.String(), "<title>Page "+strconv.Itoa(i)+" ") {
			t.Errorf("%s: not an HTML page with its title", pagePath(i))
		}
	}
}

func TestFlakyAndReset(t *testing.T) {
	s := New(Config{Pages: 10})
	for round := range 2 {
		w := render(t, s, "/flaky/1")
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
			t.Fatalf("round %d: first request: %d, Retry-After %q", round, w.Code, w.Header().Get("Retry-After"))
		}
		for range 2 {
			if w := render(t, s, "/flaky/1"); w.Code != http.StatusOK {
				t.Fatalf("round %d: later request: %d", round, w.Code)
			}
		}
		if n := s.Served()["/flaky/1"]; n != 3 {
			t.Fatalf("served %d, want 3", n)
		}
		if err := s.VerifyPartial(); !errors.Is(err, ErrDuplicate) {
			t.Fatalf("three fetches of a flaky page: %v", err)
		}
		s.Reset()
		if len(s.Served()) != 0 {
			t.Fatal("Reset left counters")
		}
	}
}

func TestRedirects(t *testing.T) {
	s := New(Config{Pages: 40, Seed: 1})
	for j := range nRedirect {
		r1 := s.res["/redirect/"+strconv.Itoa(j)]
		w := render(t, s, "/redirect/"+strconv.Itoa(j))
		if w.Code != http.StatusMovedPermanently || w.Header().Get("Location") != "/redirect/"+strconv.Itoa(j)+"/2" {
			t.Fatalf("/redirect/%d: %d %q", j, w.Code, w.Header().Get("Location"))
		}
		w = render(t, s, "/redirect/"+strconv.Itoa(j)+"/2")
		from, _ := url.Parse("http://127.0.0.1:8080/redirect/" + strconv.Itoa(j) + "/2")
		to, err := from.Parse(w.Header().Get("Location"))
		if w.Code != http.StatusFound || err != nil || to.Host != "127.0.0.1:8080" || to.Path != pagePath(r1.n) {
			t.Fatalf("/redirect/%d/2: %d %q", j, w.Code, w.Header().Get("Location"))
		}
	}
	if w := render(t, s, "/loop/a"); w.Code != http.StatusFound || w.Header().Get("Location") != "/loop/b" {
		t.Fatalf("/loop/a: %d %q", w.Code, w.Header().Get("Location"))
	}
	if w := render(t, s, "/loop/b"); w.Code != http.StatusFound || w.Header().Get("Location") != "http://127.0.0.1:8080/loop/a" {
		t.Fatalf("/loop/b: %d %q", w.Code, w.Header().Get("Location"))
	}
}

func TestOddResources(t *testing.T) {
	s := New(Config{Pages: 10, SlowDelay: 30 * time.Millisecond})
	for _, tc := range []struct {
		path, ctype string
		status      int
		contains    string
	}{
		{"/robots.txt", "text/plain", 200, "Disallow: /private/"},
		{"/missing/0", "text/plain", 404, ""},
		{"/nowhere", "text/plain", 404, ""},
		{"/files/1.pdf", "application/pdf", 200, `<a href="/from-pdf/1">`},
		{"/broken", "text/html", 200, "href=/leaf/broken>"},
		{"/binary", "text/html", 200, ""},
		{"/private/0", "text/html", 200, ""},
		{"/q/2?id=2&sort=asc&view=full", "text/html", 200, ""},
		{"/static/site.css", "text/css", 200, ""},
	} {
		w := render(t, s, tc.path)
		if w.Code != tc.status || !strings.HasPrefix(w.Header().Get("Content-Type"), tc.ctype) || !strings.Contains(w.Body.String(), tc.contains) {
			t.Errorf("%s: %d %q, body %.80q", tc.path, w.Code, w.Header().Get("Content-Type"), w.Body.String())
		}
	}
	if b := render(t, s, "/binary").Body.Bytes(); len(b) != 64<<10 || bytes.IndexByte(b, '<') >= 0 || bytes.IndexByte(b, 0) < 0 {
		t.Errorf("/binary: %d bytes, want 64 KiB of binary without '<'", len(b))
	}
	start := time.Now()
	if w := render(t, s, "/slow"); w.Code != 200 || time.Since(start) < 30*time.Millisecond {
		t.Errorf("/slow answered %d after %v, want 200 after 30ms", w.Code, time.Since(start))
	}
}

// TestLatency runs in a synctest bubble, whose clock moves only while every
// goroutine waits: the latency is exact, and a loaded machine cannot make
// the control endpoint look delayed.
func TestLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(Config{Pages: 3, Latency: 40 * time.Millisecond})
		start := time.Now()
		render(t, s, "/page/1")
		if d := time.Since(start); d != 40*time.Millisecond {
			t.Errorf("page served after %v, want 40ms", d)
		}
		start = time.Now()
		render(t, s, "/_testsite/served")
		if d := time.Since(start); d != 0 {
			t.Errorf("control endpoint delayed by %v", d)
		}
	})
}

// countingWriter is a ResponseWriter that counts and discards the body.
type countingWriter struct {
	h      http.Header
	status int
	n      int64
	onData func(n int64)
}

func (c *countingWriter) Header() http.Header { return c.h }
func (c *countingWriter) WriteHeader(s int)   { c.status = s }
func (c *countingWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	if c.onData != nil {
		c.onData(c.n)
	}
	return len(p), nil
}

func TestHugeIsStreamed(t *testing.T) {
	s := New(Config{Pages: 10})
	w := &countingWriter{h: http.Header{}}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/huge", nil))
	runtime.ReadMemStats(&after)
	if w.n != HugeSize || w.h.Get("Content-Length") != strconv.Itoa(HugeSize) || w.status != 200 {
		t.Errorf("/huge: status %d, %d bytes, Content-Length %s", w.status, w.n, w.h.Get("Content-Length"))
	}
	if a := after.TotalAlloc - before.TotalAlloc; a > 4<<20 {
		t.Errorf("/huge allocated %d bytes", a)
	}
}

func TestEndlessStopsWhenClientGoesAway(t *testing.T) {
	s := New(Config{Pages: 10})
	ctx, cancel := context.WithCancel(t.Context())
	w := &countingWriter{h: http.Header{}, onData: func(n int64) {
		if n > 8<<20 {
			cancel()
		}
	}}
	aborted := make(chan any, 1)
	go func() {
		defer func() { aborted <- recover() }()
		s.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/endless", nil).WithContext(ctx))
	}()
	select {
	case p := <-aborted:
		// A clean return would end the chunked body as if complete.
		if p != http.ErrAbortHandler {
			t.Errorf("/endless ended with %v, want panic(http.ErrAbortHandler)", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("/endless still writing 10s after its request context ended")
	}
	if w.n <= 8<<20 {
		t.Errorf("/endless wrote only %d bytes", w.n)
	}
}

// TestServeStopsWithContext proves that when its context ends the server
// stops (wait returns nil, no new connection is accepted) and cuts a
// response in progress: the client of /endless reads an error, never a clean
// end of the body. Either the handler is blocked writing to this client,
// which stopped reading (the write fails), or it is between writes (it
// aborts); neither ends the chunked body, so no ordering of the last write
// and the shutdown can make the body look complete.
func TestServeStopsWithContext(t *testing.T) {
	s := New(Config{Pages: 10})
	ctx, cancel := context.WithCancel(t.Context())
	base, wait, err := s.Serve(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(base, "http://127.0.0.1:") {
		t.Errorf("base URL %q", base)
	}
	resp, err := http.Get(base + "/endless")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.ReadFull(resp.Body, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- wait() }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Errorf("wait = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("server still running 10s after its context ended")
	}
	if n, err := io.Copy(io.Discard, resp.Body); err == nil {
		t.Errorf("/endless body ended cleanly %d bytes after shutdown, want an error", n)
	}
	if _, err := http.Get(base + "/"); err == nil {
		t.Error("server still answers after shutdown")
	}
	if _, _, err := s.Serve(t.Context(), "127.0.0.1:65536"); err == nil {
		t.Error("Serve on a bad address did not fail")
	}
}

func TestControlEndpoints(t *testing.T) {
	s := New(Config{Pages: 10})
	h := httptest.NewServer(s)
	defer h.Close()
	get(t, h.URL+"/page/1")
	get(t, h.URL+"/page/1")
	get(t, h.URL+"/flaky/0")
	resp, body := get(t, h.URL+"/_testsite/served")
	var got struct {
		Served  map[string]int
		Summary Summary
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil || resp.StatusCode != 200 {
		t.Fatalf("served: %d %v %q", resp.StatusCode, err, body)
	}
	if !reflect.DeepEqual(got.Served, map[string]int{"/page/1": 2, "/flaky/0": 1}) {
		t.Errorf("served map %v", got.Served)
	}
	if sum := got.Summary; sum.Requests != 3 || sum.Distinct != 2 || sum.Succeeded != 1 || sum.Expected != s.Expected() || sum.Problems == 0 {
		t.Errorf("summary %+v", sum)
	}
	resp, body = get(t, h.URL+"/_testsite/verify?partial=1")
	if resp.StatusCode != http.StatusConflict || strings.Count(body, "\n") != 1 || !strings.HasPrefix(body, "/page/1: fetched 2 times") {
		t.Errorf("verify?partial=1: %d %q", resp.StatusCode, body)
	}
	if resp, _ := get(t, h.URL+"/_testsite/reset"); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET reset: %d", resp.StatusCode)
	}
	resp, err := http.Post(h.URL+"/_testsite/reset", "", nil)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("POST reset: %v %v", resp, err)
	}
	resp.Body.Close()
	if len(s.Served()) != 0 {
		t.Errorf("after reset: %v", s.Served())
	}
}

func TestFirstServed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(Config{Pages: 10})
		t0 := time.Now()
		render(t, s, "/page/1")
		render(t, s, "/flaky/1")
		time.Sleep(time.Second)
		render(t, s, "/page/1")
		render(t, s, "/flaky/1")
		render(t, s, "/page/2")
		first := s.FirstServed()
		for key, want := range map[string]time.Time{"/page/1": t0, "/flaky/1": t0, "/page/2": t0.Add(time.Second)} {
			if got, ok := first[key]; !ok || !got.Equal(want) {
				t.Errorf("FirstServed()[%q] = %v, %v; want %v (the first request's time)", key, got, ok, want)
			}
		}
		if _, ok := first["/page/3"]; ok {
			t.Error("FirstServed has a page never requested")
		}
		s.Reset()
		if n := len(s.FirstServed()); n != 0 {
			t.Errorf("FirstServed after Reset: %d keys, want none", n)
		}
	})
}
