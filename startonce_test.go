package trawl_test

import (
	"context"
	"errors"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/trawlhq/trawl/dedup"
	"github.com/trawlhq/trawl/dedup/deduptest"
	"github.com/trawlhq/trawl/deployment"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/integration"
	"github.com/trawlhq/trawl/internal/testsite"
	"github.com/trawlhq/trawl/internal/testsite/sitetest"
)

// TestStartURLGivenToThreeWorkersOnRedis: three workers, each on its own
// connection to one real Redis as on three machines, are each given the
// same start URL at once (as trawl crawl URL on every machine is). The
// filter makes them claim it together and the winner record its
// publication mark only once the other two have looked for it
// (deduptest.ClaimRace), the worst order a scheduler can give. The site
// sees the start URL fetched once and every page once (issue 27.6: before,
// once per worker, three times here).
func TestStartURLGivenToThreeWorkersOnRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a Redis server")
	}
	const workers = 3
	redisURL := integration.Redis(t)
	name := integration.Name(t)
	site, base := sitetest.Serve(t, testsite.Config{Pages: 200, Links: 6, Seed: 27, NoTraps: true})
	start := base + "/"
	u, err := url.Parse(start)
	if err != nil {
		t.Fatal(err)
	}
	race := deduptest.NewClaimRace(workers, dedup.Fingerprinter{}.Fingerprint("GET", u, nil, nil))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	cs := make([]*engine.Crawler, workers)
	for i := range cs {
		cfg := engine.Config{
			Name: name, Concurrency: 4, IdleTimeout: 500 * time.Millisecond,
			TrustedHosts: []string{"127.0.0.1"}, StartBatch: 1,
		}
		d, err := deployment.Open(ctx, deployment.Config{Broker: "redis", RedisURL: redisURL}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		d.Configure(&cfg)
		if cs[i], err = engine.New(d.Broker, race.With(d.Filter), cfg); err != nil {
			t.Fatal(err)
		}
		if err := cs[i].Seed(ctx, engine.StartURL{URL: start}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for i, c := range cs {
		wg.Go(func() { errs[i] = c.Run(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("run: %v", err)
	}
	if n := site.Served()["/"]; n != 1 {
		t.Errorf("the start URL given to %d workers was fetched %d times, want once", workers, n)
	}
	if err := site.Verify(); err != nil {
		t.Errorf("site: %v", err)
	}
	var republished int64
	for _, c := range cs {
		republished += c.Stats().Get(engine.StatRepublished)
	}
	if republished != 0 {
		t.Errorf("%s = %d, want 0", engine.StatRepublished, republished)
	}
}
