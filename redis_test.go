package trawl_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl"
	redisbroker "github.com/trawlhq/trawl/broker/redis"
	dedupredis "github.com/trawlhq/trawl/dedup/redis"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/integration"
	"github.com/trawlhq/trawl/internal/syncbuf"
	"github.com/trawlhq/trawl/internal/testsite"
	"github.com/trawlhq/trawl/internal/testsite/sitetest"
)

func TestMain(m *testing.M) { integration.Main(m) }

// TestShopScrapeThreeWorkersOnRedis runs the Example's program (scrape)
// on three workers sharing a real Redis broker and filter, all seeding the
// same start URL at once: every product is emitted exactly once, every
// page is fetched exactly once, and every worker did part of the work.
func TestShopScrapeThreeWorkersOnRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a Redis server")
	}
	url := integration.Redis(t)
	name := integration.Name(t)
	site, base := sitetest.Serve(t, testsite.Config{Latency: 2 * time.Millisecond}) // long enough for three to share
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const workers = 3
	outs := make([]syncbuf.Buffer, workers)
	crawlers := make([]*trawl.Crawler, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for i := range workers {
		// Each worker connects on its own, as separate processes would.
		opt, err := goredis.ParseURL(url)
		if err != nil {
			t.Fatal(err)
		}
		client := goredis.NewClient(opt)
		defer client.Close()
		b, err := redisbroker.New(ctx, redisbroker.Config{Client: client})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		f, err := dedupredis.NewSet(ctx, dedupredis.SetConfig{Client: client, Key: name + ":dupefilter", Capacity: 10_000})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		c := trawl.New(trawl.Config{Broker: b, Filter: f, Output: &outs[i], Crawl: engine.Config{Name: name}})
		scrape(c)
		crawlers[i] = c
		// One worker seeds, as a deployment seeds once: start URLs given to
		// several workers at once may each be published (a start URL found
		// claimed but not yet marked published is published again, so that
		// one whose claimer died is not lost), a duplicate fetch by design.
		var starts []string
		if i == 0 {
			starts = []string{base + "/shop/page/1"}
		}
		wg.Go(func() { errs[i] = c.Run(ctx, starts...) })
	}
	wg.Wait()
	var all strings.Builder
	for i := range workers {
		if errs[i] != nil {
			t.Errorf("worker %d: %v", i, errs[i])
		}
		all.WriteString(outs[i].String())
		if n := crawlers[i].Stats().Get(engine.StatResponses); n == 0 {
			t.Errorf("worker %d fetched no page; the three should share the work", i)
		} else {
			t.Logf("worker %d: %d pages, %d items", i, n, crawlers[i].Stats().Get(engine.StatItems))
		}
	}
	checkProducts(t, products(t, all.String()))
	if err := site.VerifyShop(); err != nil {
		t.Error(err)
	}
}
