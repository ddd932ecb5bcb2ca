package engine_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/trawlhq/trawl/engine"
)

// latencySite serves a home page linking to pages pages, each answering
// after latency, and records when each request arrived.
type latencySite struct {
	*httptest.Server
	mu       sync.Mutex
	arrivals []time.Time
}

func newLatencySite(t *testing.T, latency time.Duration, pages int) *latencySite {
	t.Helper()
	s := &latencySite{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		s.mu.Lock()
		s.arrivals = append(s.arrivals, time.Now())
		s.mu.Unlock()
		select { // the host's latency, not a synchronization
		case <-time.After(latency):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<html><body>")
		if r.URL.Path == "/" {
			for i := range pages {
				fmt.Fprintf(w, `<a href="/p%d">p%d</a>`, i, i)
			}
		}
		fmt.Fprint(w, "</body></html>")
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *latencySite) host() string {
	u, _ := url.Parse(s.URL)
	return u.Host
}

// gaps returns the times between consecutive request arrivals.
func (s *latencySite) gaps() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []time.Duration
	for i := 1; i < len(s.arrivals); i++ {
		out = append(out, s.arrivals[i].Sub(s.arrivals[i-1]))
	}
	return out
}

func crawlThrottled(t *testing.T, cfg engine.Config, sites ...*latencySite) {
	t.Helper()
	b, f := newBackends(t)
	cfg.Concurrency, cfg.PerHost, cfg.IdleTimeout = 16, 8, 300*time.Millisecond
	cfg.TrustedHosts = []string{"127.0.0.1"}
	c, err := engine.New(b, f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var starts []engine.StartURL
	for _, s := range sites {
		starts = append(starts, engine.StartURL{URL: s.URL + "/"})
	}
	if err := c.Seed(ctx, starts...); err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
}

// TestAutoThrottleSlowAndFastHosts crawls a slow host and a fast one with
// AutoThrottle: the slow host's delay rises to its latency and its
// requests are paced by it (a fixed 8 per host would send them all at
// once), the fast host's delay falls from the start delay, never below
// Delay.
func TestAutoThrottleSlowAndFastHosts(t *testing.T) {
	const latency, start, floor = 300 * time.Millisecond, 150 * time.Millisecond, 20 * time.Millisecond
	slow, fast := newLatencySite(t, latency, 4), newLatencySite(t, 0, 6)
	lim := engine.NewPoliteness(engine.PolitenessConfig{PerHost: 8, Delay: floor,
		AutoThrottle: &engine.AutoThrottle{StartDelay: start, MaxDelay: 5 * time.Second}})
	crawlThrottled(t, engine.Config{Delay: floor, Limiter: lim, IgnoreRobots: true}, slow, fast)

	if d := lim.Delay(slow.host()); d < latency {
		t.Errorf("slow host's delay %v, want at least its latency %v", d, latency)
	}
	// The fast host's delay follows its own latency: below the slow
	// host's (by its 300ms: a loaded machine slows both alike), not
	// below Delay. (Below the start delay too when the machine is quick;
	// under -race on a loaded machine a "fast" response may take 200ms.)
	if d, ds := lim.Delay(fast.host()), lim.Delay(slow.host()); d >= ds-latency/2 || d < floor {
		t.Errorf("fast host's delay %v, want below the slow host's %v by %v and not below --delay %v", d, ds, latency/2, floor)
	}
	gaps := slow.gaps()
	if len(gaps) != 4 {
		t.Fatalf("slow host got %d requests, want 5", len(gaps)+1)
	}
	for i, g := range gaps {
		// Starts are paced by the adapted delay (≥ latency); arrivals
		// may differ from starts by a little network jitter.
		if g < latency-50*time.Millisecond {
			t.Errorf("slow host: request %d came %v after the previous, want about %v or more", i+1, g, latency)
		}
	}
}

// TestAutoThrottleConfig: Config.AutoThrottle turns it on in the
// engine's own limiter; without it the same crawl sends the slow host's
// pages together.
func TestAutoThrottleConfig(t *testing.T) {
	const latency = 300 * time.Millisecond
	paced := newLatencySite(t, latency, 3)
	crawlThrottled(t, engine.Config{IgnoreRobots: true, AutoThrottle: &engine.AutoThrottle{StartDelay: 10 * time.Millisecond}}, paced)
	for i, g := range paced.gaps() {
		if g < latency-50*time.Millisecond {
			t.Errorf("with AutoThrottle: request %d came %v after the previous, want about %v or more", i+1, g, latency)
		}
	}
	free := newLatencySite(t, latency, 3)
	crawlThrottled(t, engine.Config{IgnoreRobots: true}, free)
	gaps := free.gaps()
	if len(gaps) != 3 || gaps[1] > latency/2 || gaps[2] > latency/2 {
		t.Errorf("without AutoThrottle: gaps %v, want the 3 pages requested together", gaps)
	}
}
