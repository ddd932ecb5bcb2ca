package main

import (
	"encoding/csv"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trawlhq/trawl/internal/testsite"
	"github.com/trawlhq/trawl/internal/testsite/sitetest"
)

// TestExtractSuffixes (issue 12): --extract takes ::attr(href) as absolute
// URLs, ::attr(NAME) and ::text of a selector group, one value per match.
func TestExtractSuffixes(t *testing.T) {
	t.Parallel()
	_, base := sitetest.Serve(t, testsite.Config{Pages: 5, NoTraps: true})
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
	t.Parallel()
	_, base := sitetest.Serve(t, testsite.Config{Pages: 5, NoTraps: true})
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
	wantHead := []string{"url", "status", "price", "name", "title", "depth", "content_type", "length", "links", "fetched_at", "referrer", "error"}
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

	// --error-items in CSV: the broken link's row names its referrer and error.
	nb := numberSite(t)
	broken := filepath.Join(dir, "broken.csv")
	if r := trawl(t, time.Minute, "crawl", "--idle-timeout", "300ms", "--error-items", "--out", broken, nb+"/book"); r.code != 0 {
		t.Fatalf("--error-items: exit %d: %s", r.code, r.stderr)
	}
	f, _ = os.Open(broken)
	rows, err = csv.NewReader(f).ReadAll()
	f.Close()
	if err != nil || len(rows) != 3 {
		t.Fatalf("--error-items CSV: %q, %v; want a header and two rows", rows, err)
	}
	missing := rows[1]
	if !strings.HasSuffix(missing[0], "/missing") {
		missing = rows[2]
	}
	if missing[0] != nb+"/missing" || missing[1] != "404" || missing[8] != nb+"/book" || missing[9] == "" {
		t.Errorf("the broken link's row: %q; want status 404, referrer /book and an error", missing)
	}
}

// recorder serves h and records, for every request, its path and the
// headers named.
type recorder struct {
	h     http.Handler
	names []string
	mu    sync.Mutex
	seen  []map[string]string // per request: "path", "host" and the headers
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m := map[string]string{"path": r.URL.Path, "host": r.Host}
	for _, n := range rc.names {
		m[n] = r.Header.Get(n)
	}
	rc.mu.Lock()
	rc.seen = append(rc.seen, m)
	rc.mu.Unlock()
	rc.h.ServeHTTP(w, r)
}

func (rc *recorder) requests() []map[string]string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.seen)
}

// TestHeadersAndCookies (issue 12): every request, robots.txt included,
// carries the --header headers; a JSON start URL's headers go with that
// request only; a page that needs the cookie an earlier page set gets it
// (200), and with --no-cookies it does not (403, no item).
func TestHeadersAndCookies(t *testing.T) {
	t.Parallel()
	site := testsite.New(testsite.Config{Pages: 5, NoTraps: true})
	rc := &recorder{h: site, names: []string{"X-Trawl-Test", "Accept-Language", "X-Start"}}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	base := srv.URL
	start := fmt.Sprintf(`{"url": %q, "headers": {"X-Start": "only here"}}`, base+"/shop/")
	items, _ := crawlItems(t, "--header", "X-Trawl-Test: yes", "--header", "accept-language:  fr ",
		"--include", `/shop/page/1$|/session/`, base+"/session/login", start)
	got := paths(items, base)
	if want := []string{"/session/login", "/session/members", "/shop/", "/shop/page/1"}; !slices.Equal(got, want) {
		t.Errorf("pages with a 2xx item: %v, want %v (members needs the login's cookie)", got, want)
	}
	reqs := rc.requests()
	if len(reqs) < 5 {
		t.Fatalf("the site saw %d requests, want robots.txt and 4 pages at least", len(reqs))
	}
	for _, r := range reqs {
		if r["X-Trawl-Test"] != "yes" || r["Accept-Language"] != "fr" {
			t.Errorf("%s: X-Trawl-Test %q, Accept-Language %q; want yes and fr on every request", r["path"], r["X-Trawl-Test"], r["Accept-Language"])
		}
		if want := map[bool]string{true: "only here"}[r["path"] == "/shop/"]; r["X-Start"] != want {
			t.Errorf("%s: X-Start %q, want %q (the start URL's header goes with its request only)", r["path"], r["X-Start"], want)
		}
	}

	site.Reset()
	items, _ = crawlItems(t, "--no-cookies", "--allow-empty", base+"/session/login")
	if got := paths(items, base); !slices.Equal(got, []string{"/session/login"}) {
		t.Errorf("--no-cookies: pages with a 2xx item: %v, want /session/login alone (members answers 403)", got)
	}
	if n := site.ExtrasServed()["/session/members"]; n != 1 {
		t.Errorf("--no-cookies: /session/members requested %d times, want 1 (a 403 is not retried)", n)
	}

	r := trawl(t, 30*time.Second, "crawl", "--header", "Bad Name: x", base+"/")
	if r.code != 2 || !strings.Contains(r.stderr, "--header") {
		t.Errorf("--header 'Bad Name: x': exit %d, stderr %q; want 2 naming --header", r.code, r.stderr)
	}
}

// TestProxyAndTimeout (issue 12): with --proxy every request, robots.txt
// included, goes through the proxy (the crawled host does not even
// resolve); --timeout bounds each request.
func TestProxyAndTimeout(t *testing.T) {
	t.Parallel()
	site := testsite.New(testsite.Config{Pages: 5, SlowDelay: 20 * time.Second})
	rc := &recorder{h: site}
	proxy := httptest.NewServer(rc) // a forward proxy for plain http: absolute request URLs
	t.Cleanup(proxy.Close)
	items, _ := crawlItems(t, "--proxy", proxy.URL, "http://site.invalid/session/login")
	if got := paths(items, "http://site.invalid"); !slices.Equal(got, []string{"/session/login", "/session/members"}) {
		t.Errorf("through the proxy: pages %v, want the login and members pages", got)
	}
	for _, r := range rc.requests() {
		if r["host"] != "site.invalid" {
			t.Errorf("the proxy got a request for host %q, path %s", r["host"], r["path"])
		}
	}
	if n := len(rc.requests()); n < 3 {
		t.Errorf("the proxy saw %d requests, want robots.txt and the two pages", n)
	}

	// /slow answers after 20s; the run is given 15s: only --timeout ends it.
	srv := httptest.NewServer(site)
	t.Cleanup(srv.Close)
	r := trawl(t, 15*time.Second, "crawl", "--timeout", "300ms", "--retry-times", "0", "--idle-timeout", "300ms", srv.URL+"/slow")
	if r.code == 0 || !strings.Contains(r.stderr, "timeout") {
		t.Errorf("--timeout 300ms on a page that takes 20s: exit %d, stderr %q; want a failure naming the timeout", r.code, r.stderr)
	}
}

// TestSitemaps (issue 12): with --sitemaps, the pages nothing links to,
// listed only in sitemaps (a gzip file behind an index named by robots.txt,
// a sitemap served with Content-Encoding: gzip, /sitemap.xml), are crawled
// once each, and the rest of the crawl is as correct as without; what the
// sitemaps list off the site or under a disallowed path is not fetched.
// Without --sitemaps none of them is.
func TestSitemaps(t *testing.T) {
	t.Parallel()
	site, base := sitetest.Serve(t, testsite.Config{Pages: 20, NoTraps: true})
	items, r := crawlItems(t, "--sitemaps", base+"/")
	if err := site.Verify(); err != nil {
		t.Errorf("the site's own crawl is wrong with --sitemaps: %v", err)
	}
	got := map[string]int{}
	for _, it := range items {
		got[strings.TrimPrefix(it.URL, base)]++
	}
	served := site.ExtrasServed()
	for _, p := range testsite.HiddenPaths() {
		if got[p] != 1 || served[p] != 1 {
			t.Errorf("%s: %d items, fetched %d times; want 1 and 1 (listed in a sitemap only)", p, got[p], served[p])
		}
	}
	for _, p := range []string{"/sitemap.xml", "/sitemaps/index.xml", "/sitemaps/hidden.xml.gz", "/sitemaps/encoded.xml"} {
		if served[p] != 1 {
			t.Errorf("%s fetched %d times, want 1", p, served[p])
		}
		if got[p] != 0 {
			t.Errorf("%s: a sitemap became an item", p)
		}
	}
	if want := site.Expected() + testsite.HiddenPages; len(items) != want {
		t.Errorf("%d items, want %d (the site's %d and the %d hidden pages)", len(items), want, site.Expected(), testsite.HiddenPages)
	}
	if !strings.Contains(r.stderr, "done") {
		t.Errorf("stderr: %s", r.stderr)
	}

	site.Reset()
	items, _ = crawlItems(t, base+"/")
	for _, it := range items {
		if strings.Contains(it.URL, "/hidden/") {
			t.Errorf("without --sitemaps: %s crawled", it.URL)
		}
	}
	if s := site.ExtrasServed(); len(s) != 0 {
		t.Errorf("without --sitemaps the crawl asked for %v", s)
	}
}
