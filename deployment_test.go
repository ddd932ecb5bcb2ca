package trawl_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trawlhq/trawl"
	"github.com/trawlhq/trawl/engine"
)

// TestMaxRetriesInLibrary: MaxRetries 10 in a library program means ten
// retries, eleven fetches of a page that always fails, on the broker Run
// opens: the broker's delivery limit follows the engine's retry limit, as
// the command's does. (Opened with its default limit of 5 deliveries, the
// broker dead-lettered the page after 5 fetches.)
func TestMaxRetriesInLibrary(t *testing.T) {
	var fetches atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fail" {
			fetches.Add(1)
		}
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	c := trawl.New(trawl.Config{InMemory: true, Output: io.Discard, Crawl: engine.Config{
		MaxRetries: 10, RetryBackoff: time.Millisecond, IgnoreRobots: true,
	}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := c.Run(ctx, srv.URL+"/fail")
	if got := fetches.Load(); got != 11 {
		t.Errorf("/fail fetched %d times with MaxRetries 10 (Run: %v); want 11", got, err)
	}
}

// TestRedisExampleShort: the shop scrape on Redis as a library program
// (example_workers_test.go, a whole program but for its package clause
// and func main's name) takes at most 35 lines, blank lines and comments
// aside (issue 22; Colly's single-process scrape is 30).
func TestRedisExampleShort(t *testing.T) {
	data, err := os.ReadFile("example_workers_test.go")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "//") {
			n++
		}
	}
	t.Logf("%d lines", n)
	if n > 35 {
		t.Errorf("the Redis example takes %d lines; want at most 35", n)
	}
}
