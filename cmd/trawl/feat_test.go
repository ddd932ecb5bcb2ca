package main

import (
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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

// TestCSVOut (issue 12): --out pages.csv writes CSV that encoding/csv
// reads back: a header row of url, status, the --extract fields in flag
// order, then the page's other columns; one row per page with the
// product's title and price; a second run appends rows, not a header.
func TestCSVOut(t *testing.T) {
	_, base := serveSite(t, testsite.Options{Pages: 5, NoTraps: true})
	dir := t.TempDir()
	out := filepath.Join(dir, "pages.csv")
	args := []string{"crawl", "--idle-timeout", "300ms", "--out", out,
		"--extract", "price=article.product_page .price_color", "--extract", "name=article.product_page h1"}
	r := trawlIn(t, dir, time.Minute, append(args, base+"/shop/")...)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(f).ReadAll()
	f.Close()
	if err != nil {
		t.Fatalf("encoding/csv cannot read %s: %v", out, err)
	}
	wantHead := []string{"url", "status", "price", "name", "title", "depth", "content_type", "length", "links", "fetched_at"}
	if !slices.Equal(rows[0], wantHead) {
		t.Fatalf("header %q, want %q", rows[0], wantHead)
	}
	byURL := map[string][]string{}
	for _, row := range rows[1:] {
		if len(row) != len(wantHead) {
			t.Fatalf("row of %d cells: %q", len(row), row)
		}
		if _, dup := byURL[row[0]]; dup {
			t.Errorf("%s: two rows", row[0])
		}
		byURL[row[0]] = row
	}
	if want := 1 + testsite.ShopListingPages + testsite.ShopProducts; len(byURL) != want {
		t.Errorf("%d rows, want %d (the shop, its listing pages and products)", len(byURL), want)
	}
	for _, p := range testsite.Products() {
		row := byURL[base+p.Path]
		if row == nil {
			t.Errorf("%s: no row", p.Path)
			continue
		}
		if row[1] != "200" || row[2] != p.Price || row[3] != p.Title {
			t.Errorf("%s: status, price, name = %q, want 200, %q, %q", p.Path, row[1:4], p.Price, p.Title)
		}
	}
	// Run again on the same file, now finished: no second header.
	trawlIn(t, dir, time.Minute, append(args, "--allow-empty", base+"/shop/page/1")...)
	if got := lines(out); got < len(rows) {
		t.Errorf("the file shrank to %d lines", got)
	}
	f, _ = os.Open(out)
	again, err := csv.NewReader(f).ReadAll()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	for i, row := range again[1:] {
		if slices.Equal(row, wantHead) {
			t.Errorf("row %d is a second header row", i+1)
		}
	}
	r = trawlIn(t, dir, time.Minute, "crawl", "--out", out, "--extract", "other=h1", base+"/shop/")
	if r.code != 2 || !strings.Contains(r.stderr, "columns") {
		t.Errorf("other columns on the same file: exit %d, stderr %q; want 2 and the columns named", r.code, r.stderr)
	}
}
