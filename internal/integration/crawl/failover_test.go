package crawl_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/trawlhq/trawl/internal/integration"
	"github.com/trawlhq/trawl/internal/testsite"
)

// TestRedisClusterFailoverSaysWhy (issue 27, point 7): a Redis Cluster
// primary killed under two workers: each says why it waits within 5s of
// the kill, and items are written again within the cluster's node timeout
// plus 5s of it; the crawl then completes. Every key of the crawl is in
// the dead primary's slot, so no item is written between the writes under
// way at the kill and the failover (a page's items are written after its
// links are published).
// Before: go-redis read the cluster's slots again only every 60s, dialling
// the dead primary five times per try meanwhile: items again 61s after the
// kill (the replica took over after 4s).
func TestRedisClusterFailoverSaysWhy(t *testing.T) {
	c := integration.StartRedisFailoverCluster(t)
	site, url := serveSite(t, testsite.Config{Pages: 4000, Links: 10, Seed: 37, NoTraps: true, Latency: 5 * time.Millisecond})
	name := integration.Name(t)
	args := func(more ...string) []string {
		return flags([]string{"--broker=redis", "--redis-url", c.URL(), "--name", name,
			"--allow-private", "--idle-timeout=3s", "--concurrency=8", "--per-host=8", "--lease=5s"}, more...)
	}
	mustRun(t, append([]string{"seed"}, args(url)...)...)
	ws := []*proc{start(t, append([]string{"worker"}, args()...)...), start(t, append([]string{"worker"}, args()...)...)}
	waitItemsOf(t, site.Expected()/8, 2*time.Minute, ws...) // together: one worker at a time may hold the site's one host
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	key := "{" + name + "}:requests"
	i, err := c.Primary(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	items := func() int {
		n := 0
		for _, w := range ws {
			n += len(w.items(t))
		}
		return n
	}
	before := make([]int, len(ws))
	for k, w := range ws {
		before[k] = len(w.stderr.String())
	}
	killed := time.Now()
	if err := c.Stop(ctx, i); err != nil {
		t.Fatal(err)
	}
	tookOver := make(chan time.Duration, 1)
	go func() {
		if _, err := c.WaitPrimaryServing(ctx, key, i); err != nil {
			t.Error(err)
		}
		tookOver <- time.Since(killed)
	}()
	said := make([]time.Duration, len(ws))
	var resumed time.Duration
	atOutage := -1
	for time.Since(killed) < time.Minute && (resumed == 0 || slicesHasZero(said)) {
		for k, w := range ws {
			if said[k] == 0 && strings.Contains(w.stderr.String()[before[k]:], "level=WARN") {
				said[k] = time.Since(killed)
			}
		}
		// Writes under way at the kill end within a second (the
		// failover takes the node timeout, 2s, at least): the items
		// counted then are the outage's.
		if atOutage < 0 && time.Since(killed) > time.Second {
			atOutage = items()
		}
		if atOutage >= 0 && resumed == 0 && items() > atOutage+10 {
			resumed = time.Since(killed)
		}
		time.Sleep(50 * time.Millisecond) // polling observable conditions
	}
	failover := <-tookOver
	t.Logf("warned after %v; the replica took over after %v; items again after %v; node timeout %v",
		said, failover, resumed, integration.RedisClusterNodeTimeout)
	for k, d := range said {
		if d == 0 || d > 5*time.Second {
			t.Errorf("worker %d said nothing within 5s of the kill (%v)", k, d)
		}
	}
	if resumed == 0 || resumed > integration.RedisClusterNodeTimeout+5*time.Second {
		t.Errorf("items again %v after the kill, want within the node timeout %v + 5s", resumed, integration.RedisClusterNodeTimeout)
	}
	for k, w := range ws {
		if code := w.wait(t, 5*time.Minute); code != 0 {
			t.Fatalf("worker %d exit %d:\n%s", k, code, w.stderr.String())
		}
	}
	if lost := missed(site); lost > 0 {
		t.Errorf("%d of %d pages never fetched", lost, site.Expected())
	}
}

func slicesHasZero(ds []time.Duration) bool {
	for _, d := range ds {
		if d == 0 {
			return true
		}
	}
	return false
}
