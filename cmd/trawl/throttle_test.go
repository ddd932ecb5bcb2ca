package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestAutoThrottleFlag: trawl crawl --autothrottle paces a host whose
// pages take 300ms by that latency (--per-host 8 alone sends its pages
// together; the engine's tests show the contrast), from a start delay of
// 10ms.
func TestAutoThrottleFlag(t *testing.T) {
	t.Parallel()
	const latency = 300 * time.Millisecond
	var mu sync.Mutex
	var arrivals []time.Time // of the pages /p0, /p1, /p2
	var homeAnswered time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		if r.URL.Path != "/" {
			mu.Lock()
			arrivals = append(arrivals, time.Now())
			mu.Unlock()
		}
		select { // the host's latency, not a synchronization
		case <-time.After(latency):
		case <-r.Context().Done():
			return
		}
		if r.URL.Path == "/" {
			mu.Lock()
			homeAnswered = time.Now()
			mu.Unlock()
		}
		fmt.Fprint(w, "<html><body>")
		if r.URL.Path == "/" {
			for i := range 3 {
				fmt.Fprintf(w, `<a href="/p%d">p</a>`, i)
			}
		}
		fmt.Fprint(w, "</body></html>")
	}))
	t.Cleanup(srv.Close)
	items, _ := crawlItems(t, "--autothrottle", "--autothrottle-start-delay", "10ms", "--per-host", "8", srv.URL+"/")
	if len(items) != 4 {
		t.Fatalf("%d items, want 4", len(items))
	}
	mu.Lock()
	defer mu.Unlock()
	// Bounds that hold however late the machine runs: the crawler learns
	// of the pages only once the home page is answered, and it measured
	// that answer's latency as at least 300ms, so its delay is at least
	// that; page k therefore starts, and arrives, at least k latencies
	// after the home page was answered. Without the throttle the three
	// links come together.
	if len(arrivals) != 3 {
		t.Fatalf("the site saw %d page requests, want 3", len(arrivals))
	}
	slices.SortFunc(arrivals, time.Time.Compare)
	for k, at := range arrivals {
		if el := at.Sub(homeAnswered); el < time.Duration(k)*latency {
			t.Errorf("page request %d came %v after the home page was answered, want at least %v (%d × %v)",
				k, el, time.Duration(k)*latency, k, latency)
		}
	}
}
