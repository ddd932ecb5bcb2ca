package deployment_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	dedupredis "github.com/trawlhq/trawl/dedup/redis"
	"github.com/trawlhq/trawl/deployment"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/integration"
)

// TestRedisStoredFilter: a deployment of a crawl whose filter is in Redis
// opens that filter as it was made, with no --dedup or Bloom size given
// (what trawl repartition and every command joining the crawl needs); a
// --dedup or Bloom size the crawl's filter does not match is ErrConfig,
// saying which; with the filter's own sizes it opens. On the Redis broker
// and on NATS with a Redis filter.
func TestRedisStoredFilter(t *testing.T) {
	for _, b := range []string{"redis", "nats"} {
		t.Run(b, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			base := deployment.Config{Broker: b, RedisURL: integration.Redis(t)}
			if b == "nats" {
				base.NATSURL = integration.NATS(t)
			}
			name := integration.Name(t)
			open := func(f func(*deployment.Config)) (*deployment.Deployment, error) {
				cfg := base
				f(&cfg)
				d, err := deployment.Open(ctx, cfg, engine.Config{Name: name})
				if err == nil {
					t.Cleanup(func() { d.Close() })
				}
				return d, err
			}
			made, err := open(func(c *deployment.Config) { c.Filter, c.FilterCapacity, c.FilterFPRate = "bloom", 50_000, 0.01 })
			if err != nil {
				t.Fatal(err)
			}
			wm, wk := made.Filter.(*dedupredis.Bloom).Params()

			for _, tc := range []struct {
				what string
				cfg  func(*deployment.Config)
				bad  string // in the error; "" for none
			}{
				{"no --dedup, no sizes", func(*deployment.Config) {}, ""},
				{"--dedup=bloom, no sizes", func(c *deployment.Config) { c.Filter = "bloom" }, ""},
				{"the crawl's sizes", func(c *deployment.Config) { c.Filter, c.FilterCapacity, c.FilterFPRate = "bloom", 50_000, 0.01 }, ""},
				{"--dedup=set", func(c *deployment.Config) { c.Filter = "set" }, "is a bloom filter"},
				{"another capacity", func(c *deployment.Config) { c.Filter, c.FilterCapacity, c.FilterFPRate = "bloom", 60_000, 0.01 }, "capacity 60000 at rate 0.01"},
				{"another rate", func(c *deployment.Config) { c.FilterFPRate = 0.001 }, "at rate 0.001 makes"},
			} {
				d, err := open(tc.cfg)
				if tc.bad != "" {
					if !errors.Is(err, deployment.ErrConfig) || !strings.Contains(err.Error(), tc.bad) {
						t.Errorf("%s: Open = %v; want ErrConfig saying %q", tc.what, err, tc.bad)
					}
					continue
				}
				if err != nil {
					t.Errorf("%s: Open = %v; want the crawl's Bloom filter", tc.what, err)
					continue
				}
				f, ok := d.Filter.(*dedupredis.Bloom)
				if !ok {
					t.Errorf("%s: opened a %T, want the crawl's Bloom filter", tc.what, d.Filter)
					continue
				}
				if m, k := f.Params(); m != wm || k != wk {
					t.Errorf("%s: a Bloom filter of m=%d k=%d, want the crawl's m=%d k=%d", tc.what, m, k, wm, wk)
				}
			}

			// A crawl without a filter gets the default, a set.
			name += "-new"
			d, err := open(func(*deployment.Config) {})
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := d.Filter.(*dedupredis.Set); !ok {
				t.Errorf("a new crawl's filter is a %T, want a set", d.Filter)
			}
		})
	}
}
