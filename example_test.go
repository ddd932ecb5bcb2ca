package trawl_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"

	"github.com/trawlhq/trawl"
	"github.com/trawlhq/trawl/internal/testsite"
)

// product is one row of the scrape.
type product struct {
	Title  string `json:"title"`
	Price  string `json:"price"`
	Rating string `json:"rating"`
}

// scrape registers the callbacks: follow the pager and the product links,
// and emit a product from each product page. Every worker of a crawl
// registers the same ones.
func scrape(c *trawl.Crawler) {
	c.OnHTML("li.next a, article.product_pod h3 a", func(e *trawl.Element) {
		e.Follow(e.Attr("href")) // relative links are resolved against the page
	})
	c.OnHTML("article.product_page", func(e *trawl.Element) {
		e.Item(product{
			Title:  e.ChildText("h1"),
			Price:  e.ChildText("p.price_color"),
			Rating: strings.TrimPrefix(e.ChildAttr("p.star-rating", "class"), "star-rating "),
		})
	})
}

// Scrape the 300 products of a shop, following its pagination: title,
// price, and a rating taken from a class attribute, as JSON Lines. The
// crawl ends by itself once it is idle.
func Example() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	shop, _, _ := testsite.New(testsite.Config{}).Serve(ctx, "") // a shop on loopback

	var out bytes.Buffer // without Output, items go to os.Stdout
	c := trawl.New(trawl.Config{InMemory: true, Output: &out})
	scrape(c)
	err := c.Run(ctx, shop+"/shop/page/1")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	slices.Sort(lines) // pages are fetched concurrently, in any order
	fmt.Println(len(lines), "products, error:", err)
	fmt.Println(lines[0])
	// Output:
	// 300 products, error: <nil>
	// {"title":"The Broken Atlas","price":"£39.04","rating":"Three"}
}

// Report the pages that fail for good: here a broken link, answered 404.
// A 5xx or an unreachable page is reported once, after its retries.
func ExampleCrawler_OnError() {
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, `<html><body><a href="/gone">an old page</a></body></html>`)
	}))
	defer site.Close()

	c := trawl.New(trawl.Config{InMemory: true, Output: io.Discard})
	c.OnHTML("a[href]", func(e *trawl.Element) { e.Follow(e.Attr("href")) })
	c.OnError(func(r *trawl.Response, err error) {
		fmt.Println(r.URL.Path, r.StatusCode, err)
	})
	err := c.Run(context.Background(), site.URL+"/")
	fmt.Println("error:", err)
	// Output:
	// /gone 404 404 Not Found
	// error: <nil>
}
