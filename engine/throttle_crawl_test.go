package engine

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/trawlhq/trawl/broker/memory"
)

// latencySites serves hosts over a pipeNet: each host's home page links to
// its pages, and every response (robots.txt aside) comes after the host's
// latency. It records when each host's requests arrived. Inside a synctest
// bubble the clock is fake, so a latency is exact and a request arrives at
// the instant it is sent: the gaps are the crawler's pacing and nothing
// else, however loaded the machine.
type latencySites struct {
	latency  map[string]time.Duration // by host
	pages    map[string]int
	mu       sync.Mutex
	arrivals map[string][]time.Time
}

func (s *latencySites) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/robots.txt" {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	s.arrivals[r.Host] = append(s.arrivals[r.Host], time.Now())
	s.mu.Unlock()
	select { // the host's latency, on the bubble's clock
	case <-time.After(s.latency[r.Host]):
	case <-r.Context().Done():
		return
	}
	w.Header().Set("Content-Type", "text/html")
	fmt.Fprint(w, "<html><body>")
	if r.URL.Path == "/" {
		for i := range s.pages[r.Host] {
			fmt.Fprintf(w, `<a href="/p%d">p%d</a>`, i, i)
		}
	}
	fmt.Fprint(w, "</body></html>")
}

// gaps returns the times between host's consecutive request arrivals.
func (s *latencySites) gaps(host string) []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []time.Duration
	a := s.arrivals[host]
	for i := 1; i < len(a); i++ {
		out = append(out, a[i].Sub(a[i-1]))
	}
	return out
}

// site is one host of latencySites: its latency and how many pages its
// home page links to.
type site struct {
	host    string
	latency time.Duration
	pages   int
}

// crawlThrottled crawls sites from their home pages with cfg inside the
// caller's synctest bubble and returns what the sites saw.
func crawlThrottled(t *testing.T, cfg Config, sites ...site) *latencySites {
	t.Helper()
	ls := &latencySites{latency: map[string]time.Duration{}, pages: map[string]int{}, arrivals: map[string][]time.Time{}}
	for _, s := range sites {
		ls.latency[s.host], ls.pages[s.host] = s.latency, s.pages
	}
	pn := newPipeNet()
	srv := &http.Server{Handler: ls}
	go srv.Serve(pn)
	defer srv.Close()

	b, f := newBackends(t, memory.Config{})
	cfg.Concurrency, cfg.PerHost, cfg.IdleTimeout = 16, 8, 300*time.Millisecond
	cfg.IgnoreRobots = true
	c, err := New(b, f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.kit.fetcher.transport.DialContext = pn.dial
	defer c.kit.fetcher.transport.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var starts []StartURL
	for _, s := range sites {
		starts = append(starts, StartURL{URL: "http://" + s.host + "/"})
	}
	if err := c.Seed(ctx, starts...); err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	return ls
}

// checkPaced fails t unless host h got its home page and every page, each
// at least its latency after the previous request.
func checkPaced(t *testing.T, ls *latencySites, h site) {
	t.Helper()
	gaps := ls.gaps(h.host)
	if len(gaps) != h.pages {
		t.Fatalf("%s got %d requests, want %d", h.host, len(gaps)+1, h.pages+1)
	}
	for i, g := range gaps {
		if g < h.latency {
			t.Errorf("%s: request %d came %v after the previous, want at least its latency %v", h.host, i+1, g, h.latency)
		}
	}
}

// TestAutoThrottleSlowAndFastHosts crawls a slow host and a fast one with
// AutoThrottle: the slow host's delay rises to its latency and its
// requests are paced by it (a fixed 8 per host would send them all at
// once), the fast host's delay falls from the start delay, never below
// Delay.
func TestAutoThrottleSlowAndFastHosts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const latency, start, floor = 300 * time.Millisecond, 150 * time.Millisecond, 20 * time.Millisecond
		slow, fast := site{"slow.test", latency, 4}, site{"fast.test", 0, 6}
		lim := newPoliteness(politenessConfig{PerHost: 8, Delay: floor,
			AutoThrottle: &AutoThrottle{StartDelay: start, MaxDelay: 5 * time.Second}})
		ls := crawlThrottled(t, Config{Delay: floor, Limiter: lim}, slow, fast)

		if d := lim.currentDelay(slow.host); d < latency {
			t.Errorf("slow host's delay %v, want at least its latency %v", d, latency)
		}
		if d := lim.currentDelay(fast.host); d >= start || d < floor {
			t.Errorf("fast host's delay %v, want below the start delay %v and not below --delay %v", d, start, floor)
		}
		checkPaced(t, ls, slow)
	})
}

// TestAutoThrottleConfig: Config.AutoThrottle turns it on in the
// engine's own limiter; without it the same crawl sends the slow host's
// pages together.
func TestAutoThrottleConfig(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const latency = 300 * time.Millisecond
		paced := site{"paced.test", latency, 3}
		ls := crawlThrottled(t, Config{AutoThrottle: &AutoThrottle{StartDelay: 10 * time.Millisecond}}, paced)
		checkPaced(t, ls, paced)
		ls = crawlThrottled(t, Config{}, paced)
		gaps := ls.gaps(paced.host)
		if len(gaps) != 3 || gaps[1] != 0 || gaps[2] != 0 {
			t.Errorf("without AutoThrottle: gaps %v, want the 3 pages requested together", gaps)
		}
	})
}
