package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// TestProgressCountsLeased: the progress line's queued count is the
// crawl's backlog as the broker counts it, not only what is ready there:
// while the site holds its pages, the worker's requests in progress and
// read ahead (leased) are queued, not ready. (The line counted the ready
// ones only: 16 queued with 20 pages left; session 13 saw 0 with pages
// read ahead.)
func TestProgressCountsLeased(t *testing.T) {
	t.Parallel()
	const pages = 20
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		if r.URL.Path == "/" {
			for i := 1; i <= pages; i++ {
				fmt.Fprintf(w, `<a href="/p/%d">%d</a>`, i, i)
			}
			return
		}
		select { // the other pages wait until the test has its line
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	_, stderr := startIn(t, ctx, t.TempDir(), "crawl", "--allow-private", "--concurrency", "2", "--per-host", "2",
		"--progress-interval", "100ms", "--idle-timeout", "500ms", "--out", "items.jsonl", srv.URL+"/")
	line := regexp.MustCompile(`(?m)^trawl: crawled (\d+) pages? \(at [0-9.]+ pages/s\), (\d+) queued(?: \((\d+) ready\))?, \d+ items?, \d+ errors?$`)
	var got [][]string
	until(t, ctx, "three progress lines after the first page", func() bool {
		got = got[:0]
		for _, m := range line.FindAllStringSubmatch(stderr.String(), -1) {
			if m[1] != "0" {
				got = append(got, m)
			}
		}
		// A line may come after the root page counted and before its
		// links reached the frontier (a starved machine: the writer's
		// batch): wait until they are there, and read the last three.
		if len(got) < 3 {
			return false
		}
		n, _ := strconv.Atoi(got[len(got)-1][2])
		return n >= pages
	})
	got = got[len(got)-3:]
	// The root page is done, its 20 links wait: 2 in progress, more
	// read ahead (leased), the rest ready.
	for _, m := range got {
		n, _ := strconv.Atoi(m[2])
		ready, _ := strconv.Atoi(m[3])
		// 20 links, none done, and the root page until its
		// acknowledgement lands; some of them leased (in progress or
		// read ahead), so fewer ready than queued.
		if n < pages || n > pages+1 || ready >= n {
			t.Errorf("progress line %q: want %d queued (%d while the root page's acknowledgement is on its way), fewer of them ready (some in progress)", m[0], pages, pages+1)
		}
	}
}
