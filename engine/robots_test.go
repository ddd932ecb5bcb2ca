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
	f := trusting(t, FetchOptions{})
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
		r := NewRobots(f, tc.agent, 0)
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
	f := trusting(t, FetchOptions{})
	r := NewRobots(f, "trawl", 0)
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
	f := trusting(t, FetchOptions{})
	for _, tc := range []struct {
		status int
		ttl    time.Duration
	}{
		{404, 24 * time.Hour},
		{401, 24 * time.Hour},
		{503, robotsErrorTTL},
		{500, robotsErrorTTL},
	} {
		rs := newRobotsServer(t, "User-agent: *\nDisallow: /\n", tc.status)
		r := NewRobots(f, "trawl", 0)
		clock := time.Now()
		r.now = func() time.Time { return clock }
		allowed, delay, err := r.Allowed(context.Background(), mustURL(t, rs.url+"/page"))
		if err != nil || !allowed || delay != 0 {
			t.Errorf("status %d: allowed %v delay %v err %v, want allowed", tc.status, allowed, delay, err)
		}
		clock = clock.Add(tc.ttl - time.Second)
		r.Allowed(context.Background(), mustURL(t, rs.url+"/page"))
		if n := rs.hits.Load(); n != 1 {
			t.Errorf("status %d: fetched %d times within %v", tc.status, n, tc.ttl)
		}
		clock = clock.Add(2 * time.Second)
		r.Allowed(context.Background(), mustURL(t, rs.url+"/page"))
		if n := rs.hits.Load(); n != 2 {
			t.Errorf("status %d: fetched %d times after %v, want 2", tc.status, n, tc.ttl)
		}
	}

	t.Run("recovery after a server error", func(t *testing.T) {
		rs := newRobotsServer(t, "User-agent: *\nDisallow: /\n", 503)
		r := NewRobots(f, "trawl", 0)
		clock := time.Now()
		r.now = func() time.Time { return clock }
		if ok, _, _ := r.Allowed(context.Background(), mustURL(t, rs.url+"/")); !ok {
			t.Error("disallowed during a server error")
		}
		rs.status.Store(200)
		clock = clock.Add(robotsErrorTTL + time.Second)
		if ok, _, _ := r.Allowed(context.Background(), mustURL(t, rs.url+"/")); ok {
			t.Error("rules not applied after the server recovered")
		}
	})

	t.Run("network error allows", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		r := NewRobots(f, "trawl", 0)
		ok, _, err := r.Allowed(context.Background(), mustURL(t, "http://"+addr+"/"))
		if err != nil || !ok {
			t.Errorf("unreachable host: allowed %v err %v", ok, err)
		}
	})
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
	f := trusting(t, FetchOptions{})
	f.Trust("localhost")
	r := NewRobots(f, "trawl", 0)
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
	f := trusting(t, FetchOptions{})
	r := NewRobots(f, "trawl", 0)

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
	f := NewFetcher(FetchOptions{}) // 127.0.0.1 not trusted
	defer f.Close()
	r := NewRobots(f, "trawl", 0)
	ok, _, err := r.Allowed(context.Background(), mustURL(t, rs.url+"/"))
	if err != nil || !ok {
		t.Errorf("allowed %v err %v", ok, err)
	}
	if n := rs.hits.Load(); n != 0 {
		t.Errorf("robots.txt fetched from a forbidden address (%d hits)", n)
	}
}
