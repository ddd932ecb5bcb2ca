package trawl_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trawlhq/trawl"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/syncbuf"
	"github.com/trawlhq/trawl/internal/testsite"
	"github.com/trawlhq/trawl/internal/testsite/sitetest"
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

// TestRunSaysWhyNothingWasDone: the zero Config keeps the crawl in
// ./.trawl, so a program's second run finds its start URL already crawled:
// Run says so (it returned nil, and printed nothing). Flush starts over.
func TestRunSaysWhyNothingWasDone(t *testing.T) {
	t.Chdir(t.TempDir())
	site, base := sitetest.Serve(t, testsite.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := func(cfg trawl.Config) (int, error) {
		var out syncbuf.Buffer
		cfg.Output = &out
		c := trawl.New(cfg)
		scrape(c)
		err := c.Run(ctx, base+"/shop/page/1")
		return len(products(t, out.String())), err
	}
	if n, err := run(trawl.Config{}); err != nil || n != 300 {
		t.Fatalf("first run: %d products, %v; want 300, nil", n, err)
	}
	n, err := run(trawl.Config{})
	if !errors.Is(err, trawl.ErrNothingDone) || !strings.Contains(err.Error(), "already crawled") || !strings.Contains(err.Error(), "Config.Flush") {
		t.Errorf("second run: %d products, %v; want ErrNothingDone saying already crawled, and Config.Flush", n, err)
	}
	site.Reset()
	if n, err := run(trawl.Config{Flush: true}); err != nil || n != 300 {
		t.Errorf("run with Flush: %d products, %v; want 300, nil", n, err)
	}
	if err := site.VerifyShop(); err != nil {
		t.Error(err)
	}
}

// TestRunSaysWhyOn404: a start URL that answers 404 yields nothing, and
// Run says why instead of returning nil.
func TestRunSaysWhyOn404(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	c := trawl.New(trawl.Config{InMemory: true, Output: io.Discard})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := c.Run(ctx, srv.URL+"/gone")
	if !errors.Is(err, trawl.ErrNothingDone) || !strings.Contains(err.Error(), "404") {
		t.Errorf("Run of a 404 start URL: %v; want ErrNothingDone naming the 404", err)
	}
}

// TestWarningsWithoutLogger: with no Crawl.Logger, the crawl's warnings
// reach the program's default logger (standard error), not nothing.
func TestWarningsWithoutLogger(t *testing.T) {
	var buf syncbuf.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	defer slog.SetDefault(old)
	c := trawl.New(trawl.Config{InMemory: true, Output: io.Discard})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Run(ctx); err != nil { // a worker finding an empty crawl
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "level=WARN") || !strings.Contains(buf.String(), "wrote no item") {
		t.Errorf("default log: %q; want the warning that the crawl wrote no item", buf.String())
	}
	if strings.Contains(buf.String(), "level=INFO") {
		t.Errorf("default log: %q; want warnings only", buf.String())
	}
}
