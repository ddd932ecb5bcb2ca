package crawl_test

import (
	"strings"
	"testing"
	"time"

	"github.com/trawlhq/trawl/internal/integration"
	"github.com/trawlhq/trawl/internal/testsite"
)

// TestRedisSitemapsTwoWorkers (issue 12): two workers on a real Redis with
// --sitemaps: the pages listed only in sitemaps (a gzip file behind an
// index named by robots.txt, a gzip-encoded sitemap, /sitemap.xml) are
// crawled once across both, each sitemap is fetched once by whichever
// worker took it, and the rest of the crawl is as correct as without.
func TestRedisSitemapsTwoWorkers(t *testing.T) {
	t.Parallel()
	site, url := serveSite(t, testsite.Config{Pages: 200, NoTraps: true})
	name := integration.Name(t)
	mustRun(t, append([]string{"seed"}, redisArgs(t, name, url)...)...)
	var ws []*proc
	for range 2 {
		ws = append(ws, start(t, append([]string{"worker"}, redisArgs(t, name, "--sitemaps")...)...))
	}
	for i, w := range ws {
		if code := w.wait(t, 2*time.Minute); code != 0 {
			t.Fatalf("worker %d exit %d:\n%s", i, code, w.stderr.String())
		}
	}
	if err := site.Verify(); err != nil {
		t.Errorf("site: %v", err)
	}
	distinct, dups := union(t, ws...)
	if want := site.Expected() + testsite.HiddenPages; distinct != want || dups != 0 {
		t.Errorf("items: %d distinct (want %d: the site's and the hidden pages), %d duplicates (want 0)", distinct, want, dups)
	}
	served := site.ExtrasServed()
	for _, p := range append(testsite.HiddenPaths(), "/sitemap.xml", "/sitemaps/index.xml", "/sitemaps/hidden.xml.gz", "/sitemaps/encoded.xml") {
		if served[p] != 1 {
			t.Errorf("%s fetched %d times, want once across the workers", p, served[p])
		}
	}
	hidden := 0
	for _, w := range ws {
		for _, u := range w.items(t) {
			if strings.Contains(u, "/hidden/") {
				hidden++
			}
		}
	}
	if hidden != testsite.HiddenPages {
		t.Errorf("%d hidden-page items, want %d", hidden, testsite.HiddenPages)
	}
}
