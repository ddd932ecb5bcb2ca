package trawl_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trawlhq/trawl"
	"github.com/trawlhq/trawl/deployment"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/integration"
	"github.com/trawlhq/trawl/internal/syncbuf"
	"github.com/trawlhq/trawl/internal/testsite"
)

func TestMain(m *testing.M) { integration.Main(m) }

// peakServer serves h and records the most requests it had in progress at
// once, robots.txt aside.
type peakServer struct {
	h            http.Handler
	mu           sync.Mutex
	active, peak int
}

func (p *peakServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/robots.txt" {
		p.mu.Lock()
		p.active++
		p.peak = max(p.peak, p.active)
		p.mu.Unlock()
		defer func() { p.mu.Lock(); p.active--; p.mu.Unlock() }()
	}
	p.h.ServeHTTP(w, r)
}

// TestShopScrapeThreeWorkersOnRedis runs the Example's program (scrape)
// on three workers of a Redis deployment, named by its URL alone
// (Config.Deployment), as separate processes would: every product is
// emitted exactly once, every page is fetched exactly once, every worker
// did part of the work, PerHost 1 holds across the three (each limiting
// on its own, the site saw up to three requests at once), and the
// crawl's shared counters, which trawl stats prints, hold all three
// workers' pages and items (with no SharedStats, none).
func TestShopScrapeThreeWorkersOnRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a Redis server")
	}
	url := integration.Redis(t)
	name := integration.Name(t)
	site := testsite.New(testsite.Config{Latency: 5 * time.Millisecond}) // long enough for three to overlap
	peak := &peakServer{h: site}
	srv := httptest.NewServer(peak)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dep := deployment.Config{Broker: "redis", RedisURL: url}

	const workers = 3
	outs := make([]syncbuf.Buffer, workers)
	crawlers := make([]*trawl.Crawler, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for i := range workers {
		c := trawl.New(trawl.Config{Deployment: dep, Output: &outs[i], Crawl: engine.Config{Name: name, PerHost: 1}})
		scrape(c)
		crawlers[i] = c
		// One worker seeds, as a deployment seeds once: start URLs given to
		// several workers at once may each be published (a start URL found
		// claimed but not yet marked published is published again, so that
		// one whose claimer died is not lost), a duplicate fetch by design.
		var starts []string
		if i == 0 {
			starts = []string{srv.URL + "/shop/page/1"}
		}
		wg.Go(func() { errs[i] = c.Run(ctx, starts...) })
	}
	wg.Wait()
	var all strings.Builder
	var pages, items int64
	for i := range workers {
		if errs[i] != nil {
			t.Errorf("worker %d: %v", i, errs[i])
		}
		all.WriteString(outs[i].String())
		n := crawlers[i].Stats().Get(engine.StatResponses)
		if n == 0 {
			t.Errorf("worker %d fetched no page; the three should share the work", i)
		}
		pages += n
		items += crawlers[i].Stats().Get(engine.StatItems)
		t.Logf("worker %d: %d pages, %d items", i, n, crawlers[i].Stats().Get(engine.StatItems))
	}
	checkProducts(t, products(t, all.String()))
	if err := site.VerifyShop(); err != nil {
		t.Error(err)
	}
	if peak.peak > 1 {
		t.Errorf("the site saw %d requests at once from three workers with PerHost 1; want 1 (the Redis limiter shared)", peak.peak)
	}

	// What trawl stats --broker=redis --name NAME prints: the shared counters.
	d, err := deployment.Open(ctx, deployment.Config{Broker: "redis", RedisURL: url, Admin: "stats"}, engine.Config{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	shared, err := d.Stats.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if shared[engine.StatResponses] != pages || shared[engine.StatItems] != items {
		t.Errorf("shared counters: %d pages, %d items; want the workers' %d pages, %d items", shared[engine.StatResponses], shared[engine.StatItems], pages, items)
	}
}
