package crawl_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trawlhq/trawl/internal/browsertest"
	"github.com/trawlhq/trawl/internal/integration"
	"github.com/trawlhq/trawl/internal/testsite"
	"github.com/trawlhq/trawl/internal/trawlbin"
)

// envScreenshot names a file the browser test saves its screenshot of the
// dashboard to (docs/dashboard.png is one); the test always saves one in
// its temporary directory and logs where.
const envScreenshot = "TRAWL_DASHBOARD_SCREENSHOT"

// TestRedisDashboardInBrowser: see dashboardInBrowser. Its screenshot
// is docs/dashboard.png.
func TestRedisDashboardInBrowser(t *testing.T) {
	t.Parallel()
	dashboardInBrowser(t, redisDeployment(t), os.Getenv(envScreenshot))
}

// TestNATSDashboardInBrowser: the same page on NATS JetStream.
func TestNATSDashboardInBrowser(t *testing.T) {
	t.Parallel()
	dashboardInBrowser(t, natsArgs(t, integration.NATS(t)), "")
}

// dashboardInBrowser: two workers crawl while a headless chromium shows
// trawl dashboard. The page lists both workers' process ids; its figures
// change while the crawl runs, without a reload; a dead letter it shows,
// requeued with its button, is fetched again; paused from the page, the
// crawl sends the site nothing for 5 s, and resumed it completes with
// every page fetched once; and once it is done the page shows the item
// count trawl stats gives. The screenshot is saved to
// shot, if given.
func dashboardInBrowser(t *testing.T, deployment func(name string, more ...string) []string, shot string) {
	browsertest.Chromium(t)
	site, url := serveSite(t, testsite.Config{Pages: 600, Links: 5, Seed: 25, NoTraps: true, Latency: 50 * time.Millisecond})
	var healed atomic.Bool
	var fetchedHealed atomic.Int64
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !healed.Load() {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		fetchedHealed.Add(1)
		w.Header().Set("Content-Type", "text/html")
		w.Write([]byte("<html><body>back</body></html>"))
	}))
	defer flaky.Close()
	deadURL := flaky.URL + "/dead"

	name := integration.Name(t)
	args := func(more ...string) []string {
		return deployment(name, append([]string{"--idle-timeout=0", "--retry-times=0", "--concurrency=2", "--per-host=2"}, more...)...)
	}
	mustRun(t, append([]string{"seed"}, args(url, deadURL)...)...)
	dash := trawlbin.Serve(t, trawlBin, "", append([]string{"dashboard", "--addr", "127.0.0.1:0"}, deployment(name)...)...)

	tctx := browsertest.Open(t, dash, 3*time.Minute)
	// The page shows the crawl before any worker runs: what it shows
	// later comes from its own updates.
	browsertest.WaitFor(t, "the page to show the seeded crawl", time.Minute, func() bool {
		return browsertest.Eval[string](t, tctx, `document.querySelector('#queues').textContent`) != "" && browsertest.Number(t, tctx, "t-items") == 0
	})
	w1 := start(t, append([]string{"worker"}, args()...)...)
	w2 := start(t, append([]string{"worker"}, args()...)...)

	// Both workers, by process id.
	for _, w := range []*proc{w1, w2} {
		pid := strconv.Itoa(w.cmd.Process.Pid)
		browsertest.WaitFor(t, "the page to list worker "+pid, time.Minute, func() bool {
			return browsertest.Eval[bool](t, tctx, `!!document.querySelector('#workers tr[data-pid="`+pid+`"]')`)
		})
	}

	// The figures move without a reload: the page's own load counter
	// stays at one navigation.
	browsertest.WaitFor(t, "the item count to grow on the page", time.Minute, func() bool { return browsertest.Number(t, tctx, "t-items") > 0 })
	if n := browsertest.Eval[float64](t, tctx, `performance.getEntriesByType("navigation").length`); n != 1 {
		t.Errorf("the page was loaded %v times, want 1", n)
	}

	// Paused from the page, both workers say so (no page in progress)
	// and the site sees no request for 5 s.
	browsertest.Click(t, tctx, "#pause")
	browsertest.WaitFor(t, "both workers to show paused, nothing in flight", time.Minute, func() bool {
		return browsertest.Eval[float64](t, tctx, `[...document.querySelectorAll('#workers tr.paused')].filter(r => r.children[6].textContent === "0").length`) == 2
	})
	held := site.Summary().Requests
	if held >= site.Expected() {
		t.Fatalf("the crawl fetched all %d pages before the pause took hold", held)
	}
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
		if n := site.Summary().Requests; n != held {
			t.Fatalf("paused, the crawl sent the site %d more requests", n-held)
		}
		time.Sleep(100 * time.Millisecond) // the span measured, not a synchronization
	}
	if s := browsertest.Eval[string](t, tctx, `document.getElementById("status").textContent`); s != "paused" {
		t.Errorf("status %q while paused, want paused", s)
	}
	browsertest.Click(t, tctx, "#resume")
	browsertest.WaitFor(t, "requests after resume", time.Minute, func() bool { return site.Summary().Requests > held })

	// The dead letter, requeued from the page, is fetched.
	browsertest.WaitFor(t, "the page to show the dead letter of "+deadURL, time.Minute, func() bool {
		return browsertest.Eval[bool](t, tctx, `[...document.querySelectorAll('#deadletters td')].some(td => td.textContent === "`+deadURL+`")`)
	})
	healed.Store(true)
	browsertest.Click(t, tctx, "#requeue")
	browsertest.WaitFor(t, "the requeued dead letter to be fetched", time.Minute, func() bool { return fetchedHealed.Load() > 0 })

	// Done: nothing queued, every item counted in the shared stats.
	var stats map[string]int64
	browsertest.WaitFor(t, "the crawl to finish and its stats to hold every item", 2*time.Minute, func() bool {
		code, out, stderr := runOut(t, append([]string{"stats", "--json"}, deployment(name)...)...)
		if code != 0 {
			t.Fatalf("stats: exit %d: %s", code, stderr)
		}
		if err := json.Unmarshal([]byte(out), &stats); err != nil {
			t.Fatalf("stats --json: %v: %s", err, out)
		}
		written := int64(len(w1.items(t)) + len(w2.items(t)))
		var queued int64
		for k, v := range stats {
			if strings.HasSuffix(k, ":requests/ready") || strings.HasSuffix(k, ":requests/in_flight") {
				queued += v
			}
		}
		return queued == 0 && stats["item_scraped_count"] == written
	})
	want := stats["item_scraped_count"]
	browsertest.WaitFor(t, "the page to show trawl stats' item count "+strconv.FormatInt(want, 10), 30*time.Second, func() bool {
		return browsertest.Number(t, tctx, "t-items") == want
	})
	if got := browsertest.Number(t, tctx, "t-pages"); got != stats["downloader/response_count"] {
		t.Errorf("the page shows %d pages, trawl stats %d", got, stats["downloader/response_count"])
	}
	if err := site.Verify(); err != nil {
		t.Errorf("the site says the crawl was wrong: %v", err)
	}

	png := browsertest.Screenshot(t, tctx)
	out := filepath.Join(t.TempDir(), "dashboard.png")
	if shot != "" {
		out = shot
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the dashboard: %s", out)
}
