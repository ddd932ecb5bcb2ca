package trawl_test

import (
	"context"
	"log"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl"
	redisbroker "github.com/trawlhq/trawl/broker/redis"
	dedupredis "github.com/trawlhq/trawl/dedup/redis"
	"github.com/trawlhq/trawl/engine"
)

// Many workers: every machine runs this program against the same Redis,
// which holds the frontier and the duplicate filter, under the keys the
// CLI uses for --name books, so that trawl seed, trawl stats and trawl
// workers can share the crawl. Run(ctx) takes start URLs from the crawl
// (trawl seed --broker=redis --name books URL); Run(ctx, URL) seeds too.
// (No output: it needs a Redis server.)
func ExampleConfig_workers() {
	ctx := context.Background()
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()

	b, err := redisbroker.New(ctx, redisbroker.Config{Client: client})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	f, err := dedupredis.NewSet(ctx, dedupredis.SetConfig{Client: client, Key: "books:dupefilter"})
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()

	c := trawl.New(trawl.Config{
		Broker: b,
		Filter: f,
		Crawl:  engine.Config{Name: "books", Concurrency: 32},
	})
	scrape(c) // the same handlers on every worker
	if err := c.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
