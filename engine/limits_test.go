package engine_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/testsite"
	"github.com/trawlhq/trawl/internal/testsite/sitetest"
)

// TestLongURLsNotFollowed: a link and a redirect to URLs over
// MaxURLLength are not followed, and are counted.
func TestLongURLsNotFollowed(t *testing.T) {
	long := "/" + strings.Repeat("a", engine.MaxURLLength)
	var mu sync.Mutex
	hits := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits[r.URL.Path]++
		mu.Unlock()
		switch r.URL.Path {
		case "/":
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, `<html><a href="%s">long</a><a href="/r">r</a><a href="/ok">ok</a></html>`, long)
		case "/r":
			http.Redirect(w, r, long+"b", http.StatusFound)
		default:
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, "<html></html>")
		}
	}))
	t.Cleanup(srv.Close)
	b, f := newBackends(t)
	c, err := engine.New(b, f, engine.Config{
		IdleTimeout: 200 * time.Millisecond, IgnoreRobots: true, TrustedHosts: []string{srv.Listener.Addr().String()},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Seed(ctx, engine.StartURL{URL: srv.URL + "/"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(hits) != 3 || hits["/"] != 1 || hits["/r"] != 1 || hits["/ok"] != 1 {
		t.Errorf("fetched %d paths (/ %d, /r %d, /ok %d), want /, /r and /ok once each", len(hits), hits["/"], hits["/r"], hits["/ok"])
	}
	if n := c.Stats().Get(engine.StatURLTooLong); n != 2 {
		t.Errorf("%d URLs counted as too long, want 2 (a link, a redirect)", n)
	}
	// A start URL too long is refused when seeded, with the limit named.
	err = c.Seed(ctx, engine.StartURL{URL: srv.URL + long})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprint(engine.MaxURLLength)) {
		t.Errorf("seeding a %d-byte URL: %v, want an error naming the limit", len(long), err)
	}
}

// TestCalendarTrapEnds crawls the test site's infinite calendar with the
// default configuration: the crawl ends by itself, having followed the
// calendar exactly DefaultMaxDepth hops from its start, each page once.
func TestCalendarTrapEnds(t *testing.T) {
	site, url := sitetest.Serve(t, testsite.Config{Pages: 10})
	b, f := newBackends(t)
	c, err := engine.New(b, f, engine.Config{
		Concurrency: 16, PerHost: 16, IdleTimeout: 300 * time.Millisecond, IgnoreRobots: true,
		TrustedHosts: []string{strings.TrimPrefix(url, "http://")},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.Seed(ctx, engine.StartURL{URL: url + "/calendar/"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		t.Fatalf("run: %v (the calendar is endless: only a depth limit ends the crawl)", err)
	}
	served := site.CalendarServed()
	months, days := 0, 0
	for k, n := range served {
		if n > 1 {
			t.Errorf("%s fetched %d times", k, n)
		}
		switch strings.Count(k, "/") {
		case 3:
			months++
		case 4:
			days++
		}
	}
	// /calendar/ is at depth 0, the month k months from CalendarStart at
	// 1+|k|, its days at 2+|k|.
	const d = engine.DefaultMaxDepth
	if want := 2*(d-1) + 1; months != want {
		t.Errorf("%d months fetched, want %d: every month within %d hops and no other", months, want, d)
	}
	if want := 2 * (2*(d-2) + 1); days != want {
		t.Errorf("%d days fetched, want %d", days, want)
	}
	for _, k := range []string{"/calendar/2023/5", "/calendar/2028/9"} {
		if served[k] != 0 {
			t.Errorf("%s, %d hops deep, was fetched", k, d+1)
		}
	}
}

// TestManyStartURLs seeds 3,000 start URLs (each twice) in one batch and
// garbage after them: every page is fetched exactly once, taken in batches
// while the frontier still has work, and the garbage is dead-lettered.
func TestManyStartURLs(t *testing.T) {
	const n = 3000
	var mu sync.Mutex
	hits := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits[r.URL.Path]++
		mu.Unlock()
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, "ok")
	}))
	t.Cleanup(srv.Close)
	b, f := newBackends(t)
	c, err := engine.New(b, f, engine.Config{
		Concurrency: 32, PerHost: 32, IdleTimeout: 200 * time.Millisecond, IgnoreRobots: true,
		TrustedHosts: []string{srv.Listener.Addr().String()},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	starts := make([]engine.StartURL, 0, 2*n)
	for i := range 2 * n {
		starts = append(starts, engine.StartURL{URL: fmt.Sprintf("%s/s/%d", srv.URL, i%n)})
	}
	if err := c.Seed(ctx, starts...); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, engine.StartQueue("trawl"), broker.Message{Body: []byte("garbage")}); err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(hits) != n {
		t.Errorf("%d distinct pages fetched, want %d", len(hits), n)
	}
	for p, k := range hits {
		if k != 1 {
			t.Errorf("%s fetched %d times", p, k)
		}
	}
	if got := c.Stats().Get(engine.StatStartURLsRejected); got != 1 {
		t.Errorf("%d start urls rejected, want 1", got)
	}
	if q, _ := b.Counts(ctx, engine.StartQueue("trawl")); q.Dead != 1 || q.Ready != 0 || q.InFlight != 0 {
		t.Errorf("start queue after the crawl: %+v, want one dead letter", q)
	}
}

// TestLongURLFromQueueDeadLettered: a request read from the frontier whose
// URL is over MaxURLLength (written by something other than this engine)
// is dead-lettered with the reason, not fetched.
func TestLongURLFromQueueDeadLettered(t *testing.T) {
	var mu sync.Mutex
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits++
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	b, f := newBackends(t)
	c, err := engine.New(b, f, engine.Config{
		IdleTimeout: 100 * time.Millisecond, IgnoreRobots: true, TrustedHosts: []string{srv.Listener.Addr().String()},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	body, _ := (&engine.Request{URL: srv.URL + "/" + strings.Repeat("x", engine.MaxURLLength)}).MarshalBinary()
	if err := b.Publish(ctx, engine.RequestsQueue("trawl"), broker.Message{Body: body}); err != nil {
		t.Fatal(err)
	}
	c.Run(ctx) // no page: ErrNoPages
	mu.Lock()
	if hits != 0 {
		t.Errorf("a %d-byte URL was fetched", engine.MaxURLLength+len(srv.URL)+1)
	}
	mu.Unlock()
	dls, err := b.DeadLetters(ctx, engine.RequestsQueue("trawl"), 10)
	if err != nil || len(dls) != 1 || !strings.Contains(dls[0].Reason, "too long") {
		t.Errorf("dead letters %+v (err %v), want one saying too long", dls, err)
	}
}
