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

	"github.com/trawlhq/trawl/integration"
)

// TestRedisPolitenessAcrossWorkers: three workers with --per-host 2
// --delay 50ms: the site never sees more than 2 requests at once nor more
// than 20 starts per second, together (scrapy-redis applies both per
// process, so three workers would hit it three times harder).
func TestRedisPolitenessAcrossWorkers(t *testing.T) {
	const pages = 60
	var (
		mu           sync.Mutex
		active, peak int
		starts       []time.Time
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		active++
		peak = max(peak, active)
		starts = append(starts, time.Now())
		mu.Unlock()
		defer func() { mu.Lock(); active--; mu.Unlock() }()
		time.Sleep(20 * time.Millisecond) // the page takes a while
		w.Header().Set("Content-Type", "text/html")
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/p/"))
		var b strings.Builder
		for i := n*3 + 1; i <= n*3+3 && i < pages; i++ {
			fmt.Fprintf(&b, `<a href="/p/%d">%d</a>`, i, i)
		}
		fmt.Fprint(w, b.String())
	}))
	defer srv.Close()
	name := integration.Name(t)
	args := redisArgs(t, name, "--per-host=2", "--delay=50ms")
	mustRun(t, append([]string{"seed"}, append(args, srv.URL+"/p/0")...)...)
	var ws []*proc
	for range 3 {
		ws = append(ws, start(t, append([]string{"worker"}, args...)...))
	}
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
	if peak > 2 {
		t.Errorf("the site saw %d requests at once, want at most 2", peak)
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	// Any window of one second holds at most 20 starts (21 with jitter at the edges).
	for i := range starts {
		j := i
		for j < len(starts) && starts[j].Sub(starts[i]) < time.Second {
			j++
		}
		if j-i > 21 {
			t.Fatalf("%d requests started within one second from %v, want at most 20", j-i, starts[i])
		}
	}
}
