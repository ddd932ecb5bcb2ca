package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
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
	var arrivals []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		mu.Unlock()
		select { // the host's latency, not a synchronization
		case <-time.After(latency):
		case <-r.Context().Done():
			return
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
	// The site sees each request some scheduling jitter late, so one gap
	// may look short after a late arrival; the sum of gaps cannot: request
	// k arrives at least k latencies after request 0, less the jitter of
	// request 0's arrival. Without the throttle the three links come
	// together.
	const jitter = latency / 3
	for i := 1; i < len(arrivals); i++ {
		if el := arrivals[i].Sub(arrivals[0]); el < time.Duration(i)*latency-jitter {
			t.Errorf("request %d came %v after request 0, want at least %v (%d latencies of %v, less %v of jitter)",
				i, el, time.Duration(i)*latency-jitter, i, latency, jitter)
		}
	}
}
