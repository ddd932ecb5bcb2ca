package crawl_test

import (
	"testing"
	"time"

	"github.com/trawlhq/trawl/internal/integration"
	"github.com/trawlhq/trawl/internal/redislayout"
	"github.com/trawlhq/trawl/internal/testsite"
)

// TestRedisFrontierNoMarks (issue 23): a crawl on Redis, broker and
// filter, runs on the Redis frontier, which claims and publishes in one
// script and keeps no marks: its filter holds about one fingerprint a
// page (the composed frontier's held three: each page's URL, its expanded
// mark and its publication mark).
func TestRedisFrontierNoMarks(t *testing.T) {
	t.Parallel()
	site, url := serveSite(t, testsite.Config{Pages: 200, Links: 10, Seed: 23, NoTraps: true})
	name := integration.Name(t)
	w := start(t, append([]string{"crawl", url}, redisArgs(t, name)...)...)
	if code := w.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("crawl exit %d:\n%s", code, w.stderr.String())
	}
	if err := site.Verify(); err != nil {
		t.Error(err)
	}
	client := integration.RedisClient(t)
	ctx := t.Context()
	keys, err := client.Keys(ctx, redislayout.Pattern(name)).Result()
	if err != nil {
		t.Fatal(err)
	}
	var fps int64
	for _, k := range keys {
		if e, ok := redislayout.Match(name, k); ok && e.Part == "dupefilter:*" {
			n, err := client.SCard(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			fps += n
		}
	}
	t.Logf("%d fingerprints in the filter for %d pages", fps, site.Expected())
	if fps < int64(site.Expected()) || fps > int64(site.Expected())*3/2 {
		t.Errorf("the filter holds %d fingerprints for %d pages, want about one a page (marks: three)", fps, site.Expected())
	}
}
