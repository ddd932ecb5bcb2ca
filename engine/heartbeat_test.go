package engine_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/testsite"
	"github.com/trawlhq/trawl/internal/testsite/sitetest"
)

// TestWorkersRecordThemselves: each of two crawlers of one crawl keeps its
// own record in the crawl's metadata, which outlives it marked stopped,
// with its process and its own pages.
func TestWorkersRecordThemselves(t *testing.T) {
	_, url := sitetest.Serve(t, testsite.Config{Pages: 30, Links: 4, Seed: 3, NoTraps: true})
	b, f := newBackends(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if ws, err := engine.Workers(ctx, b, "trawl"); err != nil || len(ws) != 0 {
		t.Fatalf("before any worker: %v, %v; want none", ws, err)
	}
	var total int64
	for i := range 2 {
		c, err := engine.New(b, f, engine.Config{
			Concurrency: 4, IdleTimeout: 300 * time.Millisecond, TrustedHosts: []string{"127.0.0.1"},
		})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if err := c.Seed(ctx, engine.StartURL{URL: url + "/"}); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Run(ctx); err != nil && i == 0 {
			t.Fatalf("run: %v", err)
		}
		total += c.Stats().Get(engine.StatResponses)
	}
	ws, err := engine.Workers(ctx, b, "trawl")
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 2 || ws[0].ID == ws[1].ID {
		t.Fatalf("records = %+v, want one per worker", ws)
	}
	if pages := checkLeft(t, ws); pages != total || ws[0].Pages == 0 {
		t.Errorf("records' pages %d (first %d), want the crawlers' %d, the first's > 0", pages, ws[0].Pages, total)
	}
}

// checkLeft checks the records ws are of workers of this process that
// left with nothing in flight, and returns their pages.
func checkLeft(t *testing.T, ws []engine.WorkerStatus) int64 {
	t.Helper()
	var pages int64
	for _, w := range ws {
		if !w.Stopped || w.PID != os.Getpid() || w.Host == "" || w.Heartbeat.IsZero() || w.InFlight != 0 {
			t.Errorf("record %+v: want stopped, this process, a host and a heartbeat, nothing in flight", w)
		}
		if w.Lost(time.Now()) {
			t.Errorf("a worker that left is lost: %+v", w)
		}
		pages += w.Pages
	}
	return pages
}

// TestWorkerRecordsHosts: a worker's record carries its hosts, with the
// pages and errors of each (the same figures as its stats) and the delay
// its limiter has now: with AutoThrottle, the delay adapted to the
// host's latency, not the start delay.
func TestWorkerRecordsHosts(t *testing.T) {
	const latency = 20 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(latency) // the host's latency, which AutoThrottle measures
		switch r.URL.Path {
		case "/":
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, `<a href="/a">a</a> <a href="/b">b</a> <a href="/missing">m</a>`)
		case "/a", "/b":
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, `<p>page</p>`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	b, f := newBackends(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := engine.New(b, f, engine.Config{
		Concurrency: 2, IdleTimeout: 300 * time.Millisecond, TrustedHosts: []string{"127.0.0.1"}, IgnoreRobots: true,
		AutoThrottle: &engine.AutoThrottle{StartDelay: time.Millisecond, MaxDelay: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Seed(ctx, engine.StartURL{URL: srv.URL + "/"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	ws, err := engine.Workers(ctx, b, "trawl")
	if err != nil || len(ws) != 1 {
		t.Fatalf("records %+v, %v: want one", ws, err)
	}
	host := strings.TrimPrefix(srv.URL, "http://")
	st := c.Stats()
	if got := ws[0].Hosts; len(got) != 1 || got[0].Host != host || got[0].Pages != st.Get(engine.StatResponses) ||
		got[0].Pages != 4 || got[0].Errors != st.Get(engine.StatStatusPrefix+"404") || got[0].Errors != 1 {
		t.Fatalf("hosts %+v, want %s with the crawl's 4 pages and its 1 error (404)", got, host)
	}
	if d := ws[0].Hosts[0].DelayMs; d < float64(latency/time.Millisecond) {
		t.Errorf("the host's delay is %vms, want AutoThrottle's, at least the latency %v", d, latency)
	}
}
