// Command shopworker is ExampleConfig_redis as a program, for
// TestShopScrapeThreeProcessesOnRedis: the shop scrape as a worker of the
// Redis crawl NAME, with the per-host limit and idle timeout the test
// gives. Items go to stdout.
//
//	shopworker REDIS_URL NAME PER_HOST [START_URL]
package main

import (
	"context"
	"log"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/trawlhq/trawl"
	"github.com/trawlhq/trawl/deployment"
	"github.com/trawlhq/trawl/engine"
)

func main() {
	type product struct {
		Title  string `json:"title"`
		Price  string `json:"price"`
		Rating string `json:"rating"`
	}
	perHost, err := strconv.Atoi(os.Args[3])
	if err != nil {
		log.Fatal(err)
	}
	c := trawl.New(trawl.Config{
		Deployment: deployment.Config{Broker: "redis", RedisURL: os.Args[1]},
		Crawl:      engine.Config{Name: os.Args[2], PerHost: perHost, IdleTimeout: 2 * time.Second},
	})
	c.OnHTML("li.next a, article.product_pod h3 a", func(e *trawl.Element) {
		e.Follow(e.Attr("href"))
	})
	c.OnHTML("article.product_page", func(e *trawl.Element) {
		e.Item(product{
			Title:  e.ChildText("h1"),
			Price:  e.ChildText("p.price_color"),
			Rating: strings.TrimPrefix(e.ChildAttr("p.star-rating", "class"), "star-rating "),
		})
	})
	if err := c.Run(context.Background(), os.Args[4:]...); err != nil {
		log.Fatal(err)
	}
}
