package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/trawlhq/trawl/internal/testsite"
)

// TestExtractSuffixes (issue 12): --extract takes ::attr(href) as absolute
// URLs, ::attr(NAME) and ::text of a selector group, one value per match.
func TestExtractSuffixes(t *testing.T) {
	_, base := serveSite(t, testsite.Options{Pages: 5, NoTraps: true})
	items, _ := crawlItems(t, "--include", `/shop/page/2$`,
		"--extract", "product=article.product_pod h3 a::attr(href)",
		"--extract", "full=article.product_pod h3 a::attr(title)",
		"--extract", "pager=li.previous a, li.next a::attr(href)",
		"--extract", "price=.price_color",
		base+"/shop/page/2")
	if len(items) != 1 {
		t.Fatalf("%d items, want 1", len(items))
	}
	f := items[0].Fields
	if n := len(f["product"]); n != testsite.ShopPageSize {
		t.Fatalf("product: %d values, want %d: %q", n, testsite.ShopPageSize, f["product"])
	}
	for i, v := range f["product"] {
		want := fmt.Sprintf("%s/shop/product/%d", base, testsite.ShopPageSize+i+1)
		if v != want {
			t.Errorf("product[%d] = %q, want %q (absolute)", i, v, want)
		}
	}
	products := testsite.Products()
	if got, want := f["full"][0], products[testsite.ShopPageSize].Title; got != want {
		t.Errorf("full[0] = %q, want %q", got, want)
	}
	if got, want := strings.Join(f["pager"], " "), base+"/shop/page/1 "+base+"/shop/page/3"; got != want {
		t.Errorf("pager = %q, want %q", got, want)
	}
	if got, want := f["price"][0], products[testsite.ShopPageSize].Price; got != want {
		t.Errorf("price[0] = %q, want %q", got, want)
	}
	r := trawl(t, 30*time.Second, "crawl", "--extract", "x=h1::attr", base+"/")
	if r.code != 2 || !strings.Contains(r.stderr, "unknown suffix") {
		t.Errorf("--extract x=h1::attr: exit %d, stderr %q; want 2 and the unknown suffix named", r.code, r.stderr)
	}
}
