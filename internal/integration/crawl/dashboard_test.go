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
// change while the crawl runs, without a reload; a page held back by a
// 503's Retry-After shows as delayed on the page and in trawl stats; a
// dead letter it shows, requeued with its button, is fetched again;
// paused from the page, the crawl sends the site nothing for 5 s, and
// resumed it completes with every page fetched once; once it is done the
// page shows the item count trawl stats gives, and a hosts panel whose
// pages add up to trawl stats' pages, the flaky host's errors and the
// site's delay as AutoThrottle adapted it. A dashboard killed and started
// again shows the first one's history, a point a second. The screenshot
// is saved to shot, if given.
func dashboardInBrowser(t *testing.T, deployment func(name string, more ...string) []string, shot string) {
	browsertest.Chromium(t)
	site, url := serveSite(t, testsite.Config{Pages: 600, Links: 5, Seed: 25, NoTraps: true, Latency: 50 * time.Millisecond})
	var healed, later atomic.Bool
	var fetchedHealed, fetchedLater atomic.Int64
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" { // none: every page allowed, each fetched and counted on its host
			http.NotFound(w, r)
			return
		}
		if r.URL.Path == "/hub" { // a page whose link is delayed (a seed's retry may be kept apart)
			w.Header().Set("Content-Type", "text/html")
			w.Write([]byte(`<html><body><a href="/later">later</a></body></html>`))
			return
		}
		if r.URL.Path == "/later" {
			if !later.Load() {
				w.Header().Set("Retry-After", "20") // delayed in the broker for 20 s
				http.Error(w, "later", http.StatusServiceUnavailable)
				return
			}
			fetchedLater.Add(1)
		} else if !healed.Load() {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		fetchedHealed.Add(1)
		w.Header().Set("Content-Type", "text/html")
		w.Write([]byte("<html><body>back</body></html>"))
	}))
	defer flaky.Close()
	deadURL, hubURL := flaky.URL+"/dead", flaky.URL+"/hub"

	name := integration.Name(t)
	args := func(more ...string) []string {
		return deployment(name, append([]string{"--idle-timeout=0", "--retry-times=1", "--concurrency=2", "--per-host=2",
			"--autothrottle", "--autothrottle-start-delay=1ms", "--autothrottle-target-concurrency=4"}, more...)...)
	}
	mustRun(t, append([]string{"seed"}, args(url, deadURL, hubURL)...)...)
	dash, killDash := trawlbin.Start(t, trawlBin, "", append([]string{"dashboard", "--addr", "127.0.0.1:0"}, deployment(name)...)...)
	dashStarted := time.Now()

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

	// The page held back by Retry-After is delayed, on the page (its
	// queues table and chart) and in trawl stats, for the 20 s it waits.
	delayedCell := `[...document.querySelectorAll('#queues tr')].find(r => r.children[0].textContent.endsWith(":requests")).children[3].textContent`
	browsertest.WaitFor(t, "the page to show the delayed page", time.Minute, func() bool {
		return browsertest.Eval[float64](t, tctx, `Number((`+delayedCell+`) || 0)`) >= 1
	})
	if st := statsOf(t, deployment(name)); st[queueKey(st, "delayed")] < 1 {
		t.Errorf("trawl stats: %d delayed, want the page held back (%v)", st[queueKey(st, "delayed")], st)
	}
	later.Store(true)
	browsertest.WaitFor(t, "the chart to draw the delayed page", 10*time.Second, func() bool {
		return browsertest.Eval[bool](t, tctx, `history.some(p => p.delayed >= 1) && document.querySelector('#chart-queues polyline.delayed').getAttribute('points') !== ""`)
	})

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
	browsertest.WaitFor(t, "the delayed page to be fetched once due", time.Minute, func() bool { return fetchedLater.Load() > 0 })

	// Done: nothing queued, every item counted in the shared stats.
	var stats map[string]int64
	browsertest.WaitFor(t, "the crawl to finish and its stats to hold every item", 2*time.Minute, func() bool {
		stats = statsOf(t, deployment(name))
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

	// The hosts panel: its pages add up to trawl stats' once every
	// worker's record is renewed (every 5 s); the flaky host had errors
	// (500s and a 503); the site's delay is AutoThrottle's, adapted to
	// its 50 ms latency (no --delay is given: without AutoThrottle's
	// delay in the records it would show 0 or none).
	siteHost := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/")
	flakyHost := strings.TrimPrefix(flaky.URL, "http://")
	hostRows := `[...document.querySelectorAll('#hosts tr[data-host]')]`
	browsertest.WaitFor(t, "the hosts panel's pages to add up to trawl stats' "+strconv.FormatInt(stats["downloader/response_count"], 10), 30*time.Second, func() bool {
		return int64(browsertest.Eval[float64](t, tctx, hostRows+`.reduce((n, r) => n + Number(r.dataset.pages), 0)`)) == stats["downloader/response_count"]
	})
	if n := browsertest.Eval[float64](t, tctx, hostRows+`.length`); n != 2 {
		t.Errorf("the hosts panel lists %v hosts, want the site's and the flaky one's", n)
	}
	if e := browsertest.Eval[float64](t, tctx, `Number(document.querySelector('#hosts tr[data-host="`+flakyHost+`"]')?.dataset.errors ?? -1)`); e < 3 {
		t.Errorf("the hosts panel shows %v errors for %s, want its two 500s and a 503 at least", e, flakyHost)
	}
	if d := browsertest.Eval[float64](t, tctx, `Number(document.querySelector('#hosts tr[data-host="`+siteHost+`"]')?.dataset.delayMs ?? -1)`); d < 5 {
		t.Errorf("the hosts panel shows a delay of %vms for %s, want AutoThrottle's (about 50ms / 4)", d, siteHost)
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

	// Killed and started again, the dashboard shows the history the
	// first one kept, a point a second, short of its last 2 s at most.
	var first []struct {
		T           int64   `json:"t"`
		PagesPerSec float64 `json:"pages_per_sec"`
	}
	getJSON(t, dash+"api/history?since=0", &first)
	killDash()
	if len(first) < int(time.Since(dashStarted)/time.Second)/2 {
		t.Fatalf("the first dashboard kept %d points over %v", len(first), time.Since(dashStarted))
	}
	dash2 := trawlbin.Serve(t, trawlBin, "", append([]string{"dashboard", "--addr", "127.0.0.1:0"}, deployment(name)...)...)
	tctx2 := browsertest.Open(t, dash2, time.Minute)
	last := first[len(first)-1].T
	browsertest.WaitFor(t, "the restarted page to draw the history", 30*time.Second, func() bool {
		return browsertest.Eval[bool](t, tctx2, `history.length > 0 && document.querySelector('#chart-rates polyline.pages').getAttribute('points') !== ""`)
	})
	shown := browsertest.Eval[[]int64](t, tctx2, `history.filter(p => p.t <= `+strconv.FormatInt(last, 10)+`).map(p => p.t)`)
	have := map[int64]bool{}
	for _, ts := range shown {
		have[ts] = true
	}
	missing, busy := 0, 0
	for _, p := range first {
		if !have[p.T] && p.T < last-2000 {
			missing++
		}
		if have[p.T] && p.PagesPerSec > 0 {
			busy++
		}
	}
	if missing > 0 || busy == 0 {
		t.Errorf("the restarted page shows %d of the first dashboard's %d points (%d missing before its last 2 s), %d of them with pages/s > 0; want all, with the crawl's",
			len(shown), len(first), missing, busy)
	}
}

// statsOf runs trawl stats --json on the deployment.
func statsOf(t *testing.T, deployment []string) map[string]int64 {
	t.Helper()
	code, out, stderr := runOut(t, append([]string{"stats", "--json"}, deployment...)...)
	if code != 0 {
		t.Fatalf("stats: exit %d: %s", code, stderr)
	}
	var stats map[string]int64
	if err := json.Unmarshal([]byte(out), &stats); err != nil {
		t.Fatalf("stats --json: %v: %s", err, out)
	}
	return stats
}

// queueKey is the key of stats that counts field (ready, delayed, ...) of
// the crawl's requests queue.
func queueKey(stats map[string]int64, field string) string {
	for k := range stats {
		if strings.HasSuffix(k, ":requests/"+field) {
			return k
		}
	}
	return ":requests/" + field
}

// getJSON decodes the JSON that url serves.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}
