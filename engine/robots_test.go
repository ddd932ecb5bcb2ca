package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const testRobots = `# test
User-agent: *
Disallow: /private
Crawl-delay: 2

User-agent: trawl
Disallow: /secret
Allow: /secret/open
Disallow: /*.pdf$
Crawl-delay: 1.5
`

// robotsServer serves body as /robots.txt with status, counting requests.
type robotsServer struct {
	url    string
	hits   atomic.Int32
	status atomic.Int32
}

func newRobotsServer(t *testing.T, body string, status int) *robotsServer {
	t.Helper()
	rs := &robotsServer{}
	rs.status.Store(int32(status))
	srv := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		rs.hits.Add(1)
		w.WriteHeader(int(rs.status.Load()))
		io.WriteString(w, body)
	})
	rs.url = srv.URL
	return rs
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestRobotsRules(t *testing.T) {
	rs := newRobotsServer(t, testRobots, 200)
	f := trusting(t, FetchConfig{})
	for _, tc := range []struct {
		agent   string
		path    string
		allowed bool
		delay   time.Duration
	}{
		// The "trawl" group applies to trawl, whatever its version and comment.
		{DefaultUserAgent, "/", true, 1500 * time.Millisecond},
		{DefaultUserAgent, "/secret", false, 1500 * time.Millisecond},
		{DefaultUserAgent, "/secret/page?x=1", false, 1500 * time.Millisecond},
		{DefaultUserAgent, "/secret/open/page", true, 1500 * time.Millisecond},
		{DefaultUserAgent, "/private", true, 1500 * time.Millisecond}, // not in its group
		{DefaultUserAgent, "/doc.pdf", false, 1500 * time.Millisecond},
		{"Trawl", "/secret", false, 1500 * time.Millisecond},
		// Other agents get "*".
		{"otherbot/1.0", "/private/x", false, 2 * time.Second},
		{"otherbot/1.0", "/secret", true, 2 * time.Second},
		{"", "/private", false, 2 * time.Second},
	} {
		r := newRobotsCache(f, tc.agent, 0)
		allowed, delay, err := r.Allowed(context.Background(), mustURL(t, rs.url+tc.path))
		if err != nil {
			t.Fatal(err)
		}
		if allowed != tc.allowed || delay != tc.delay {
			t.Errorf("agent %q path %s: allowed %v delay %v, want %v %v", tc.agent, tc.path, allowed, delay, tc.allowed, tc.delay)
		}
	}
}

func TestRobotsFetchedOnce(t *testing.T) {
	const callers = 50
	var started atomic.Int32
	release := make(chan struct{})
	var hits atomic.Int32
	srv := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		// Answer once every caller has started, so they overlap the fetch.
		deadline := time.Now().Add(2 * time.Second)
		for started.Load() < callers && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		<-release
		io.WriteString(w, testRobots)
	})
	f := trusting(t, FetchConfig{})
	r := newRobotsCache(f, "trawl", 0)
	var wg sync.WaitGroup
	var disallowed atomic.Int32
	for i := range callers {
		wg.Go(func() {
			started.Add(1)
			ok, _, err := r.Allowed(context.Background(), mustURL(t, fmt.Sprintf("%s/secret/%d", srv.URL, i)))
			if err != nil {
				t.Error(err)
			}
			if !ok {
				disallowed.Add(1)
			}
		})
	}
	close(release)
	wg.Wait()
	if n := hits.Load(); n != 1 {
		t.Errorf("robots.txt fetched %d times for %d concurrent callers", n, callers)
	}
	if disallowed.Load() != callers {
		t.Errorf("%d of %d callers disallowed", disallowed.Load(), callers)
	}
	// Later calls are answered from the cache.
	r.Allowed(context.Background(), mustURL(t, srv.URL+"/x"))
	if n := hits.Load(); n != 1 {
		t.Errorf("robots.txt fetched %d times", n)
	}
}

func TestRobotsStatuses(t *testing.T) {
	f := trusting(t, FetchConfig{})
	for _, status := range []int{404, 401, 403} {
		robotsMissing(t, f, status)
	}

	// RFC 9309: an unreachable robots.txt (5xx) disallows everything until
	// it can be fetched, asked for again with a growing back-off.
	for _, status := range []int{500, 503} {
		robotsUnreachable(t, f, status)
	}

	t.Run("recovery after a server error", func(t *testing.T) {
		rs := newRobotsServer(t, "User-agent: *\nDisallow: /secret\n", 503)
		r := newRobotsCache(f, "trawl", 0)
		clock := time.Now()
		r.now = func() time.Time { return clock }
		if ok, _, _ := r.Allowed(context.Background(), mustURL(t, rs.url+"/")); ok {
			t.Error("allowed during a server error")
		}
		rs.status.Store(200)
		clock = clock.Add(robotsRetryMin)
		if ok, _, err := r.Allowed(context.Background(), mustURL(t, rs.url+"/")); !ok || err != nil {
			t.Errorf("after the server recovered: allowed %v err %v", ok, err)
		}
		if ok, _, _ := r.Allowed(context.Background(), mustURL(t, rs.url+"/secret")); ok {
			t.Error("rules not applied after the server recovered")
		}
	})

	t.Run("network error disallows", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		r := newRobotsCache(f, "trawl", 0)
		ok, _, err := r.Allowed(context.Background(), mustURL(t, "http://"+addr+"/"))
		if ok || !errors.Is(err, ErrRobotsUnavailable) {
			t.Errorf("unreachable host: allowed %v err %v, want unavailable", ok, err)
		}
	})
}

// robotsMissing checks that a robots.txt answered with status (a 4xx)
// allows everything, and is asked for again once its TTL passed.
func robotsMissing(t *testing.T, f *httpFetcher, status int) {
	t.Helper()
	rs := newRobotsServer(t, "User-agent: *\nDisallow: /\n", status)
	r := newRobotsCache(f, "trawl", 0)
	clock := time.Now()
	r.now = func() time.Time { return clock }
	allowed, delay, err := r.Allowed(context.Background(), mustURL(t, rs.url+"/page"))
	if err != nil || !allowed || delay != 0 {
		t.Errorf("status %d: allowed %v delay %v err %v, want allowed", status, allowed, delay, err)
	}
	clock = clock.Add(24*time.Hour - time.Second)
	r.Allowed(context.Background(), mustURL(t, rs.url+"/page"))
	if n := rs.hits.Load(); n != 1 {
		t.Errorf("status %d: fetched %d times within the TTL", status, n)
	}
	clock = clock.Add(2 * time.Second)
	r.Allowed(context.Background(), mustURL(t, rs.url+"/page"))
	if n := rs.hits.Load(); n != 2 {
		t.Errorf("status %d: fetched %d times after the TTL, want 2", status, n)
	}
}

// robotsUnreachable checks that a robots.txt answered with status (a
// 5xx) disallows everything until it can be fetched, asked for again
// with a growing back-off.
func robotsUnreachable(t *testing.T, f *httpFetcher, status int) {
	t.Helper()
	rs := newRobotsServer(t, "", status)
	r := newRobotsCache(f, "trawl", 0)
	clock := time.Now()
	r.now = func() time.Time { return clock }
	for i, wait := range []time.Duration{robotsRetryMin, 2 * robotsRetryMin, 4 * robotsRetryMin} {
		ok, _, err := r.Allowed(context.Background(), mustURL(t, rs.url+"/page"))
		var ru *RobotsUnavailableError
		if ok || !errors.As(err, &ru) || !errors.Is(err, ErrRobotsUnavailable) {
			t.Fatalf("status %d, try %d: allowed %v err %v, want disallowed, unavailable", status, i, ok, err)
		}
		if got := ru.Until.Sub(clock); got != wait {
			t.Errorf("status %d, try %d: asked again after %v, want %v", status, i, got, wait)
		}
		clock = clock.Add(wait - time.Millisecond)
		if ok, _, _ := r.Allowed(context.Background(), mustURL(t, rs.url+"/page")); ok {
			t.Errorf("status %d: allowed during the back-off", status)
		}
		if n := rs.hits.Load(); n != int32(i+1) {
			t.Errorf("status %d: fetched %d times during back-off %d", status, n, i)
		}
		clock = clock.Add(time.Millisecond)
	}
}

// TestRobotsLarge: a robots.txt over the fetcher's body cap is parsed on
// its first 500 KiB, not taken for "allow all"; rules past them are ignored.
func TestRobotsLarge(t *testing.T) {
	var b strings.Builder
	b.WriteString("User-agent: *\nDisallow: /secret\n")
	for b.Len() < robotsMaxSize+1000 {
		b.WriteString("# padding padding padding padding padding padding padding\n")
	}
	b.WriteString("Disallow: /late\n")
	for b.Len() < 3*robotsMaxSize {
		b.WriteString("# more padding\n")
	}
	rs := newRobotsServer(t, b.String(), 200)
	f := trusting(t, FetchConfig{MaxBodySize: 100 << 10}) // pages are capped lower than robots.txt
	r := newRobotsCache(f, "trawl", 0)
	if ok, _, err := r.Allowed(context.Background(), mustURL(t, rs.url+"/secret")); ok || err != nil {
		t.Errorf("/secret in a 1.5 MB robots.txt: allowed %v err %v, want disallowed", ok, err)
	}
	if ok, _, err := r.Allowed(context.Background(), mustURL(t, rs.url+"/late")); !ok || err != nil {
		t.Errorf("/late, past 500 KiB: allowed %v err %v, want allowed", ok, err)
	}
}

func TestRobotsRedirects(t *testing.T) {
	var offHostHits atomic.Int32
	srv := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.Host, "localhost:"):
			offHostHits.Add(1)
			io.WriteString(w, "User-agent: *\nDisallow: /\n")
		case r.URL.Path == "/robots.txt" && r.URL.RawQuery == "":
			http.Redirect(w, r, "/real-robots.txt", http.StatusMovedPermanently)
		case r.URL.Path == "/real-robots.txt":
			io.WriteString(w, "User-agent: *\nDisallow: /blocked\n")
		}
	})
	f := trusting(t, FetchConfig{})
	f.Trust("localhost")
	r := newRobotsCache(f, "trawl", 0)
	if ok, _, _ := r.Allowed(context.Background(), mustURL(t, srv.URL+"/blocked")); ok {
		t.Error("rules behind a same-host redirect not applied")
	}

	// Off-host redirect: not followed, allow all.
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	off := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, fmt.Sprintf("http://localhost:%d/robots.txt", port), http.StatusFound)
	})
	if ok, _, _ := r.Allowed(context.Background(), mustURL(t, off.URL+"/blocked")); !ok {
		t.Error("off-host redirect: not allowed")
	}
	if n := offHostHits.Load(); n != 0 {
		t.Errorf("off-host redirect followed (%d hits)", n)
	}

	// A loop ends after 5 hops.
	var loopHits atomic.Int32
	loop := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		loopHits.Add(1)
		http.Redirect(w, r, "/robots.txt", http.StatusFound)
	})
	if ok, _, err := r.Allowed(context.Background(), mustURL(t, loop.URL+"/")); !ok || err != nil {
		t.Errorf("redirect loop: allowed %v err %v", ok, err)
	}
	if n := loopHits.Load(); n != robotsMaxRedirects+1 {
		t.Errorf("redirect loop: %d fetches, want %d", n, robotsMaxRedirects+1)
	}
}

func TestRobotsContext(t *testing.T) {
	release := make(chan struct{})
	var hits atomic.Int32
	srv := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "User-agent: *\nDisallow: /x\n")
	})
	f := trusting(t, FetchConfig{})
	r := newRobotsCache(f, "trawl", 0)

	// The fetching caller gives up: its error is the context's, and the
	// answer is not cached as "allow all".
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, _, err := r.Allowed(ctx, mustURL(t, srv.URL+"/x"))
		errc <- err
	}()
	waitFor(t, "the robots.txt request", func() bool { return hits.Load() == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want canceled", err)
	}
	close(release)
	ok, _, err := r.Allowed(context.Background(), mustURL(t, srv.URL+"/x"))
	if err != nil || ok {
		t.Errorf("after a cancelled fetch: allowed %v err %v, want the file's rules", ok, err)
	}
	if n := hits.Load(); n != 2 {
		t.Errorf("%d fetches, want 2", n)
	}

	if _, _, err := r.Allowed(context.Background(), mustURL(t, "ftp://x/")); err == nil {
		t.Error("no error for an ftp URL")
	}
}

func TestRobotsGuard(t *testing.T) {
	rs := newRobotsServer(t, "User-agent: *\nDisallow: /\n", 200)
	f := newHTTPFetcher(FetchConfig{}) // 127.0.0.1 not trusted
	defer f.Close()
	r := newRobotsCache(f, "trawl", 0)
	ok, _, err := r.Allowed(context.Background(), mustURL(t, rs.url+"/"))
	if ok || !errors.Is(err, ErrLocalRefusal) {
		t.Errorf("allowed %v err %v, want a local refusal", ok, err)
	}
	if n := rs.hits.Load(); n != 0 {
		t.Errorf("robots.txt fetched from a forbidden address (%d hits)", n)
	}
}

// mapRobots is a RobotsStore in memory, as a crawl's shared store would
// be for its workers.
type mapRobots struct {
	mu    sync.Mutex
	files map[string][]byte
}

func (m *mapRobots) Robots(_ context.Context, key string) ([]byte, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f, ok := m.files[key]
	return f, ok, nil
}

func (m *mapRobots) StoreRobots(_ context.Context, key string, file []byte, _ time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.files[key] = append([]byte(nil), file...)
	return nil
}

// TestRobotsShared: with a store shared by a crawl's workers, a host's
// robots.txt is fetched by the first worker that needs it and read from
// the store by the others, whose rules and Crawl-delay are the same; an
// answer that allows everything (404) is shared too, an unreachable file
// (503) is not: each worker backs off on its own.
func TestRobotsShared(t *testing.T) {
	store := &mapRobots{files: map[string][]byte{}}
	workers := func() []*robotsCache {
		var rs []*robotsCache
		for range 3 {
			r := newRobotsCache(trusting(t, FetchConfig{}), "trawl", 0)
			r.shared = store
			rs = append(rs, r)
		}
		return rs
	}
	rs := newRobotsServer(t, testRobots, http.StatusOK)
	for i, r := range workers() {
		ok, delay, err := r.Allowed(t.Context(), mustURL(t, rs.url+"/secret/x"))
		if err != nil || ok || delay != 1500*time.Millisecond {
			t.Errorf("worker %d: allowed %v, delay %v, err %v; want the file's rules (disallowed, 1.5s)", i, ok, delay, err)
		}
	}
	if n := rs.hits.Load(); n != 1 {
		t.Errorf("robots.txt fetched %d times by 3 workers sharing a store, want 1", n)
	}
	missing := newRobotsServer(t, "", http.StatusNotFound)
	for _, r := range workers() {
		if ok, _, err := r.Allowed(t.Context(), mustURL(t, missing.url+"/a")); err != nil || !ok {
			t.Errorf("no robots.txt: allowed %v, %v; want allowed", ok, err)
		}
	}
	if n := missing.hits.Load(); n != 1 {
		t.Errorf("a missing robots.txt asked for %d times by 3 workers, want 1", n)
	}
	down := newRobotsServer(t, "", http.StatusServiceUnavailable)
	for _, r := range workers() {
		if _, _, err := r.Allowed(t.Context(), mustURL(t, down.url+"/a")); !errors.Is(err, ErrRobotsUnavailable) {
			t.Errorf("robots.txt answering 503: %v, want ErrRobotsUnavailable", err)
		}
	}
	if n := down.hits.Load(); n != 3 {
		t.Errorf("an unreachable robots.txt asked for %d times by 3 workers, want 3 (not shared)", n)
	}
}
