package trawl_test

import (
	"context"
	"log"
	"os"
	"strings"

	"github.com/trawlhq/trawl"
	"github.com/trawlhq/trawl/deployment"
	"github.com/trawlhq/trawl/engine"
)

// Many workers: the shop scrape as a worker of a Redis crawl. Every
// machine runs this program against the same Redis, which holds the
// frontier, the duplicate filter, the start URLs, the per-host limits,
// the counters and the crawl's settings under the keys of the crawl
// "shop", exactly as trawl worker --broker=redis --name shop keeps them:
// trawl seed, trawl stats and trawl workers share the crawl. One machine
// gives the start URL (program https://shop.example/shop/page/1), the
// others none; each returns once the crawl is done. (No output: it needs
// a Redis server.)
func ExampleConfig_redis() {
	type product struct {
		Title  string `json:"title"`
		Price  string `json:"price"`
		Rating string `json:"rating"`
	}
	c := trawl.New(trawl.Config{
		Deployment: deployment.Config{Broker: "redis", RedisURL: "redis://127.0.0.1:6379/0"},
		Crawl:      engine.Config{Name: "shop"},
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
	if err := c.Run(context.Background(), os.Args[1:]...); err != nil {
		log.Fatal(err)
	}
}
