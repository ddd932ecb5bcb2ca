package crawl_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trawlhq/trawl/internal/integration"
)

// TestRedisAutoThrottleAcrossWorkers: two workers with --autothrottle
// (start delay 10ms, --per-host 16) crawl a host whose pages take 200ms.
// The host's adapted delay lives in Redis, so the host sees one request
// per 200ms from both together; limiters adapting per process would each
// send one per 200ms, two at a time.
func TestRedisAutoThrottleAcrossWorkers(t *testing.T) {
	t.Parallel()
	const pages, latency = 12, 200 * time.Millisecond
	var (
		mu     sync.Mutex
		starts []time.Time
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		select { // the host's latency, not a synchronization
		case <-time.After(latency):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "text/html")
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/p/"))
		for i := n*3 + 1; i <= n*3+3 && i < pages; i++ {
			fmt.Fprintf(w, `<a href="/p/%d">%d</a>`, i, i)
		}
	}))
	defer srv.Close()
	name := integration.Name(t)
	args := redisArgs(t, name, "--autothrottle", "--autothrottle-start-delay=10ms")
	mustRun(t, append([]string{"seed"}, append(args, srv.URL+"/p/0")...)...)
	ws := []*proc{start(t, append([]string{"worker"}, args...)...), start(t, append([]string{"worker"}, args...)...)}
	for i, w := range ws {
		if code := w.wait(t, 2*time.Minute); code != 0 {
			t.Fatalf("worker %d exit %d:\n%s", i, code, w.stderr.String())
		}
	}
	if d, _ := union(t, ws...); d != pages {
		t.Errorf("%d pages crawled, want %d", d, pages)
	}
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	// Starts are paced on Redis's clock; the site sees each some
	// scheduling jitter late, so one gap may look short after a late
	// arrival (64ms on a loaded machine); the sum of gaps cannot: request
	// k arrives at least k delays after request 0, less the jitter of
	// request 0's arrival. Workers pacing alone would send two per delay:
	// request k after about k/2 delays.
	const jitter = latency / 2
	for i := 1; i < len(starts); i++ {
		if el := starts[i].Sub(starts[0]); el < time.Duration(i)*latency-jitter {
			t.Errorf("request %d arrived %v after request 0, want at least %v (%d delays of %v, less %v of jitter): the adapted delay is not shared",
				i, el, time.Duration(i)*latency-jitter, i, latency, jitter)
		}
	}
}
