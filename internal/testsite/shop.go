package testsite

import (
	"errors"
	"fmt"
	"html"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// The shop's shape: ShopProducts products, ShopPageSize to a listing page.
const (
	ShopProducts     = 300
	ShopPageSize     = 20
	ShopListingPages = ShopProducts / ShopPageSize
)

// Product is one product of the shop, as its page shows it.
type Product struct {
	Path   string `json:"path"`   // "/shop/product/N", N in [1, ShopProducts]
	Title  string `json:"title"`  // the <h1> text, entities decoded
	Price  string `json:"price"`  // the p.price_color text, like "£51.77"
	Rating string `json:"rating"` // One to Five: the second class of p.star-rating
}

var (
	shopAdjectives = []string{"Quiet", "Salt & Pepper", "Broken", "Golden", "Northern", "Hidden", "Last", "Paper",
		"Silent", "Wandering", "Crooked", "Lonely", "Electric", "Secret", "Little"}
	shopNouns = []string{"Lighthouse", "Orchard", "Cartographer", "Harbour", "Clockmaker", "River", "Garden",
		"Engine", "Library", "Mountain", "Fox", "Kingdom", "Winter", "Atlas", "Tide", "Bridge", "Letters",
		"Voyage", "Mirror", "Sparrow"}
	shopRatings = []string{"One", "Two", "Three", "Four", "Five"}
)

// shopProduct returns product n (1-based). The titles are distinct (15
// adjectives by 20 nouns); prices and ratings come from a fixed hash, so
// the shop is the same in every site, whatever its Config.
func shopProduct(n int) Product {
	i := n - 1
	h := mix(uint64(n) + 0x73686f70)
	return Product{
		Path:   "/shop/product/" + strconv.Itoa(n),
		Title:  "The " + shopAdjectives[i%len(shopAdjectives)] + " " + shopNouns[i/len(shopAdjectives)],
		Price:  fmt.Sprintf("£%d.%02d", 10+h%50, (h>>8)%100),
		Rating: shopRatings[(h>>16)%5],
	}
}

// Products returns the ShopProducts products of the shop, in order: what a
// correct scrape of the shop finds.
func Products() []Product {
	ps := make([]Product, ShopProducts)
	for i := range ps {
		ps[i] = shopProduct(i + 1)
	}
	return ps
}

// serveShop serves the shop under /shop/ and counts its requests apart
// from the rest of the site, so Verify of a crawl from / is unaffected.
func (s *Site) serveShop(w http.ResponseWriter, r *http.Request) {
	key := canonicalKey(r.URL)
	s.mu.Lock()
	s.shopHits[key]++
	s.mu.Unlock()
	if s.latency > 0 && !wait(r.Context(), s.latency) {
		return
	}
	var b strings.Builder
	switch rest := strings.TrimPrefix(key, "/shop/"); {
	case rest == "":
		shopHead(&b, "Shop")
		b.WriteString("<p>Welcome to the shop. <a href=\"page/1\">Browse the catalogue</a>.</p>\n")
	case strings.HasPrefix(rest, "page/"):
		n, ok := shopNumber(strings.TrimPrefix(rest, "page/"), ShopListingPages)
		if !ok {
			serveText(w, http.StatusNotFound, ctText, "404 not found\n")
			return
		}
		shopListing(&b, n)
	case strings.HasPrefix(rest, "product/"):
		n, ok := shopNumber(strings.TrimPrefix(rest, "product/"), ShopProducts)
		if !ok {
			serveText(w, http.StatusNotFound, ctText, "404 not found\n")
			return
		}
		shopProductPage(&b, n)
	default:
		serveText(w, http.StatusNotFound, ctText, "404 not found\n")
		return
	}
	b.WriteString("</body>\n</html>\n")
	serveText(w, http.StatusOK, ctHTML[0], b.String())
}

// shopNumber parses a canonical decimal in [1, max].
func shopNumber(s string, max int) (int, bool) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > max || strconv.Itoa(n) != s {
		return 0, false
	}
	return n, true
}

func shopHead(b *strings.Builder, title string) {
	b.WriteString("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>")
	b.WriteString(html.EscapeString(title))
	b.WriteString(" · trawl test shop</title>\n</head>\n<body>\n<header><a href=\"/shop/\">Shop</a></header>\n")
}

// shopListing writes listing page n: its products, linked relatively
// ("../product/N"), with short titles (the full one in the title
// attribute), and a pager with relative previous and next links.
func shopListing(b *strings.Builder, n int) {
	shopHead(b, "All products · page "+strconv.Itoa(n))
	b.WriteString("<ol class=\"row\">\n")
	for i := (n-1)*ShopPageSize + 1; i <= n*ShopPageSize; i++ {
		p := shopProduct(i)
		short := p.Title
		if len(short) > 18 {
			short = short[:15] + "..."
		}
		fmt.Fprintf(b, "<li><article class=\"product_pod\"><h3><a href=\"../product/%d\" title=\"%s\">%s</a></h3>"+
			"<p class=\"star-rating %s\"></p><p class=\"price_color\">%s</p></article></li>\n",
			i, html.EscapeString(p.Title), html.EscapeString(short), p.Rating, p.Price)
	}
	b.WriteString("</ol>\n<ul class=\"pager\">\n")
	if n > 1 {
		fmt.Fprintf(b, "<li class=\"previous\"><a href=\"%d\">previous</a></li>\n", n-1)
	}
	fmt.Fprintf(b, "<li class=\"current\">Page %d of %d</li>\n", n, ShopListingPages)
	if n < ShopListingPages {
		fmt.Fprintf(b, "<li class=\"next\"><a href=\"%d\">next</a></li>\n", n+1)
	}
	b.WriteString("</ul>\n")
}

// shopProductPage writes product n's page: title, price, rating and links
// back to its listing and to three other products.
func shopProductPage(b *strings.Builder, n int) {
	p := shopProduct(n)
	shopHead(b, p.Title)
	fmt.Fprintf(b, "<ul class=\"breadcrumb\"><li><a href=\"../\">Shop</a></li><li><a href=\"../page/%d\">Page %d</a></li></ul>\n",
		(n-1)/ShopPageSize+1, (n-1)/ShopPageSize+1)
	fmt.Fprintf(b, "<article class=\"product_page\">\n<h1>%s</h1>\n<p class=\"price_color\">%s</p>\n"+
		"<p class=\"instock availability\">In stock</p>\n<p class=\"star-rating %s\">\n"+
		"<i class=\"icon-star\"></i><i class=\"icon-star\"></i><i class=\"icon-star\"></i><i class=\"icon-star\"></i><i class=\"icon-star\"></i>\n</p>\n</article>\n",
		html.EscapeString(p.Title), p.Price, p.Rating)
	b.WriteString("<section class=\"related\"><h2>You might also like</h2><ul>\n")
	for k := 1; k <= 3; k++ {
		o := (n-1+k*37)%ShopProducts + 1
		fmt.Fprintf(b, "<li><a href=\"%d\">%s</a></li>\n", o, html.EscapeString(shopProduct(o).Title))
	}
	b.WriteString("</ul></section>\n")
}

// ShopServed returns how often each shop path was requested since New or
// Reset ("/shop/", "/shop/page/N", "/shop/product/N", and any other path
// under /shop/ asked for). Shop requests are not counted by Served.
func (s *Site) ShopServed() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]int, len(s.shopHits))
	for k, n := range s.shopHits {
		m[k] = n
	}
	return m
}

// VerifyShop reports whether the shop was scraped completely and without a
// duplicate fetch: every product page and every listing page requested
// exactly once, and no path the shop does not serve. /shop/ may be
// requested at most once. It returns nil if so, else an errors.Join of
// every problem, wrapping ErrMissed, ErrDuplicate or ErrNotLinked.
func (s *Site) VerifyShop() error {
	served := s.ShopServed()
	var errs []error
	want := []string{}
	for n := 1; n <= ShopListingPages; n++ {
		want = append(want, "/shop/page/"+strconv.Itoa(n))
	}
	for n := 1; n <= ShopProducts; n++ {
		want = append(want, "/shop/product/"+strconv.Itoa(n))
	}
	for _, k := range want {
		switch n := served[k]; {
		case n == 0:
			errs = append(errs, fmt.Errorf("%s: %w", k, ErrMissed))
		case n > 1:
			errs = append(errs, fmt.Errorf("%s: fetched %d times, want once: %w", k, n, ErrDuplicate))
		}
		delete(served, k)
	}
	if n := served["/shop/"]; n > 1 {
		errs = append(errs, fmt.Errorf("/shop/: fetched %d times, want at most once: %w", n, ErrDuplicate))
	}
	delete(served, "/shop/")
	other := make([]string, 0, len(served))
	for k := range served {
		other = append(other, k)
	}
	slices.Sort(other)
	for _, k := range other {
		errs = append(errs, fmt.Errorf("%s: fetched %d times, but the shop does not link to it: %w", k, served[k], ErrNotLinked))
	}
	return errors.Join(errs...)
}
