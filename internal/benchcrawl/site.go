package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/trawlhq/trawl/internal/testsite"
)

// site serves a test site and remembers when its first request arrived
// and its last response ended (control requests under /_testsite/ aside).
type site struct {
	*testsite.Site
	URL string // base URL, no trailing slash

	mu          sync.Mutex
	first, last time.Time
	n           int
}

// window is what the site saw since the last reset.
type window struct {
	First, Last time.Time
	Requests    int
}

// Elapsed is the time from the first request to the end of the last.
func (w window) Elapsed() time.Duration { return w.Last.Sub(w.First) }

// Rate is requests per second over Elapsed.
func (w window) Rate() float64 {
	if w.Requests == 0 || w.Elapsed() <= 0 {
		return 0
	}
	return float64(w.Requests) / w.Elapsed().Seconds()
}

// serveSite serves a site of pages content pages, no traps, latency added
// to each page, on a loopback port until ctx ends or stop is called; stop
// returns once it has stopped.
func serveSite(ctx context.Context, pages int, latency time.Duration) (s *site, stop func(), err error) {
	s = &site{Site: testsite.New(testsite.Config{Pages: pages, Links: 10, Seed: 1, NoTraps: true, Latency: latency})}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("test site: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	s.URL = "http://" + ln.Addr().String()
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { // ends with Shutdown below
		defer close(done)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			fmt.Printf("test site: %v\n", err)
		}
	}()
	stopped := make(chan struct{})
	go func() { // owned by wait
		defer close(stopped)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			_ = srv.Close()
		}
		<-done
	}()
	return s, func() { cancel(); <-stopped }, nil
}

// ServeHTTP serves the site, timing what is not a control request.
func (s *site) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/_testsite/") {
		s.Site.ServeHTTP(w, r)
		return
	}
	start := time.Now()
	s.Site.ServeHTTP(w, r)
	end := time.Now()
	s.mu.Lock()
	if s.n == 0 || start.Before(s.first) {
		s.first = start
	}
	if end.After(s.last) {
		s.last = end
	}
	s.n++
	s.mu.Unlock()
}

// window returns what the site saw since the last reset.
func (s *site) window() window {
	s.mu.Lock()
	defer s.mu.Unlock()
	return window{First: s.first, Last: s.last, Requests: s.n}
}

// requests returns how many requests the site has served since the last reset.
func (s *site) requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// reset forgets the timing and the site's counters, for the next run.
func (s *site) reset() {
	s.Site.Reset()
	s.mu.Lock()
	s.first, s.last, s.n = time.Time{}, time.Time{}, 0
	s.mu.Unlock()
}
