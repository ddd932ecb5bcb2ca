package testsite

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"
)

// TestShopScrape walks the shop as a scraper would (pager links, product
// links, both relative) and finds exactly Products(); VerifyShop accepts
// that walk, and the main site's counters saw none of it.
func TestShopScrape(t *testing.T) {
	site := New(Config{Pages: 10})
	base := serve(t, site)
	doc := func(u string) (*goquery.Document, *url.URL) {
		t.Helper()
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			t.Fatalf("%s: %d %s", u, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		d, err := goquery.NewDocumentFromReader(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		pu, _ := url.Parse(u)
		return d, pu
	}
	abs := func(page *url.URL, s *goquery.Selection) string {
		href, _ := s.Attr("href")
		u, err := page.Parse(href)
		if err != nil {
			t.Fatal(err)
		}
		return u.String()
	}
	home, hu := doc(base + "/shop/")
	next := abs(hu, home.Find("p a"))
	var got []Product
	listings := 0
	for next != "" {
		d, pu := doc(next)
		listings++
		next = ""
		if a := d.Find("ul.pager li.next a"); a.Length() > 0 {
			next = abs(pu, a)
		}
		d.Find("article.product_pod h3 a").Each(func(_ int, a *goquery.Selection) {
			pd, ppu := doc(abs(pu, a))
			class, _ := pd.Find("article.product_page p.star-rating").Attr("class")
			got = append(got, Product{
				Path:   ppu.Path,
				Title:  pd.Find("h1").Text(),
				Price:  pd.Find("article.product_page p.price_color").Text(),
				Rating: strings.TrimPrefix(class, "star-rating "),
			})
		})
	}
	want := Products()
	if listings != ShopListingPages || len(got) != len(want) {
		t.Fatalf("walked %d listing pages and %d products, want %d and %d", listings, len(got), ShopListingPages, len(want))
	}
	titles := map[string]bool{}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("product %d: scraped %+v, want %+v", i+1, got[i], want[i])
		}
		titles[want[i].Title] = true
	}
	if len(titles) != ShopProducts {
		t.Errorf("%d distinct titles, want %d", len(titles), ShopProducts)
	}
	if want[1].Title != "The Salt & Pepper Lighthouse" || !strings.HasPrefix(want[0].Price, "£") {
		t.Errorf("product 2 = %+v, product 1 = %+v; want an entity in a title and a price in pounds", want[1], want[0])
	}
	if err := site.VerifyShop(); err != nil {
		t.Errorf("VerifyShop after a correct walk: %v", err)
	}
	if n := len(site.Served()); n != 0 {
		t.Errorf("the main site counted %d keys for shop requests; want none", n)
	}
	if err := site.VerifyPartial(); err != nil {
		t.Errorf("the shop disturbed the main site's verdict: %v", err)
	}

	// A second fetch of a product, and a path the shop does not link.
	get(t, base+"/shop/product/7")
	if resp, _ := get(t, base+"/shop/product/301"); resp.StatusCode != 404 {
		t.Errorf("/shop/product/301: %d, want 404", resp.StatusCode)
	}
	err := site.VerifyShop()
	if !errors.Is(err, ErrDuplicate) || !strings.Contains(err.Error(), "/shop/product/7") ||
		!errors.Is(err, ErrNotLinked) || !strings.Contains(err.Error(), "/shop/product/301") {
		t.Errorf("VerifyShop = %v; want a duplicate /shop/product/7 and an unlinked /shop/product/301", err)
	}
	site.Reset()
	if err := site.VerifyShop(); !errors.Is(err, ErrMissed) || errors.Is(err, ErrDuplicate) {
		t.Errorf("VerifyShop after Reset = %v; want only missed pages", err)
	}
}

// TestShopDeterministic: the shop does not depend on the site's options.
func TestShopDeterministic(t *testing.T) {
	a, b := New(Config{Seed: 1}), New(Config{Seed: 2, Pages: 5})
	ba, bb := serve(t, a), serve(t, b)
	for _, p := range []string{"/shop/page/3", "/shop/product/42"} {
		_, x := get(t, ba+p)
		_, y := get(t, bb+p)
		if x != y || x == "" {
			t.Errorf("%s differs between two sites", p)
		}
	}
}
