package crawl_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/internal/integration"
	"github.com/trawlhq/trawl/internal/testsite"
)

// missed counts the pages of site never fetched.
func missed(site *testsite.Site) int {
	err := site.Verify()
	if err == nil {
		return 0
	}
	n := 0
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		if errors.Is(e, testsite.ErrMissed) {
			n++
		}
	}
	return n
}

// stateLossCrawl seeds a crawl on srv and starts two workers, returning
// once they wrote a tenth of the site's items.
func stateLossCrawl(t *testing.T, srv *integration.RedisServer) (*testsite.Site, []*proc, *goredis.Client) {
	t.Helper()
	site, url := serveSite(t, testsite.Config{Pages: pages(), Links: 10, Seed: 31, NoTraps: true, Latency: 2 * time.Millisecond})
	name := integration.Name(t)
	args := func(more ...string) []string {
		return flags([]string{"--broker=redis", "--redis-url", srv.URL, "--name", name,
			"--allow-private", "--idle-timeout=3s", "--concurrency=16", "--per-host=16", "--lease=5s"}, more...)
	}
	mustRun(t, append([]string{"seed"}, args(url)...)...)
	ws := []*proc{start(t, append([]string{"worker"}, args()...)...), start(t, append([]string{"worker"}, args()...)...)}
	// Together: the site is one host, which one worker at a time holds
	// (the Redis limiter's host lease), so one of them may do most of it.
	waitItemsOf(t, site.Expected()/10, 2*time.Minute, ws...)
	return site, ws, srv.Client(t)
}

// TestRedisRestartedEmpty (issue 28, row 3): a Redis without persistence
// is restarted mid-crawl, losing the crawl's frontier, filter and
// settings. Each worker says so at start (the server keeps nothing on
// disk), and after the restart either completes the crawl or exits
// non-zero naming the loss: never 0 with pages missing (before: both
// exited 0, "crawl done", with 70% of the site never fetched).
func TestRedisRestartedEmpty(t *testing.T) {
	t.Parallel()
	srv := integration.RedisContainer(t)
	site, ws, _ := stateLossCrawl(t, srv)
	for _, w := range ws {
		w.waitStderr(t, "keeps nothing on disk", time.Minute)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := srv.Restart(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	restarted := time.Now()
	for _, w := range ws {
		code := w.wait(t, 5*time.Minute)
		lost := missed(site)
		switch {
		case code == 0 && lost > 0:
			t.Errorf("worker exit 0 with %d of %d pages never fetched:\n%s", lost, site.Expected(), w.stderr.String())
		case code != 0 && !strings.Contains(w.stderr.String(), "state was lost"):
			t.Errorf("worker exit %d without naming the loss:\n%s", code, w.stderr.String())
		}
		lines := strings.Split(strings.TrimSpace(w.stderr.String()), "\n")
		t.Logf("worker exit %d, %v after the restart, %d of %d pages never fetched; its last line: %s",
			code, time.Since(restarted).Round(time.Millisecond), lost, site.Expected(), lines[len(lines)-1])
	}
}

// TestRedisRolledBack (issue 28, row 2): Redis is restarted from a
// snapshot taken while the crawl ran, after the crawl went on past it:
// the server rolled back, losing the links, marks and acknowledgements of
// the pages written since. The workers, kept running, lose no page
// (before: 31 and 34 of 10,000 pages never fetched, exit 0, the links
// skipped by the workers' table of links already offered to the filter).
func TestRedisRolledBack(t *testing.T) {
	t.Parallel()
	srv := integration.RedisContainer(t)
	site, ws, c := stateLossCrawl(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.Save(ctx).Err(); err != nil {
		t.Fatalf("SAVE: %v", err)
	}
	if err := c.Set(ctx, "after-the-snapshot", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// Let the crawl go on past the snapshot: its writes since are lost.
	n := 0
	for _, w := range ws {
		n += len(w.items(t))
	}
	waitItemsOf(t, n+site.Expected()/10, 2*time.Minute, ws...)
	if err := srv.Restart(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if err := c.Get(ctx, "after-the-snapshot").Err(); !errors.Is(err, goredis.Nil) {
		t.Fatalf("the server did not roll back to its snapshot (a key written after it: %v)", err)
	}
	for _, w := range ws {
		if code := w.wait(t, 5*time.Minute); code != 0 {
			t.Fatalf("worker exit %d:\n%s", code, w.stderr.String())
		}
	}
	if lost := missed(site); lost > 0 {
		t.Errorf("%d of %d pages never fetched across the rollback", lost, site.Expected())
	}
	for _, w := range ws {
		if !strings.Contains(w.stderr.String(), "may have rolled back") {
			t.Errorf("a worker did not say that the server restarted:\n%s", w.stderr.String())
		}
	}
	_, dups := union(t, ws...)
	t.Logf("pages fetched again across the rollback: %d", dups)
}
