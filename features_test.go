package trawl_test

import (
	"context"
	"encoding/csv"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"github.com/trawlhq/trawl"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/syncbuf"
	"github.com/trawlhq/trawl/internal/testsite"
)

// TestLibrarySitemapsHeadersCookies (issue 12) uses the front door as a
// library user would: Crawl.Sitemaps hands the pages listed only in
// sitemaps to the OnHTML handlers; Crawl.Fetch.Header goes with every
// request; the cookie jar lets the members page in; an engine.CSV sink
// receives the items.
func TestLibrarySitemapsHeadersCookies(t *testing.T) {
	site := testsite.New(testsite.Config{Pages: 5, NoTraps: true})
	var mu sync.Mutex
	missing := 0 // requests without the header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Library") != "yes" {
			mu.Lock()
			missing++
			mu.Unlock()
		}
		site.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	var out syncbuf.Buffer
	sink := engine.NewCSV(&out, []string{"url", "h1"})
	c := trawl.New(trawl.Config{InMemory: true, Crawl: engine.Config{
		Sitemaps: true,
		Include:  []string{`/hidden/|/session/`},
		Fetch:    engine.FetchConfig{Header: http.Header{"X-Library": {"yes"}}},
		Sink:     sink,
	}})
	c.OnHTML("html", func(e *trawl.Element) {
		e.Item(map[string]string{"url": e.Response.URL.String(), "h1": e.ChildText("h1")})
		e.DOM.Find("a[href]").Each(func(_ int, a *goquery.Selection) { e.Follow(a.AttrOr("href", "")) })
	})
	if err := c.Run(context.Background(), srv.URL+"/", srv.URL+"/session/login"); err != nil {
		t.Fatal(err)
	}
	sink.Close()
	rows, err := csv.NewReader(strings.NewReader(out.String())).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	h1 := map[string]string{}
	for _, row := range rows[1:] {
		h1[strings.TrimPrefix(row[0], srv.URL)] = row[1]
	}
	for i, p := range testsite.HiddenPaths() {
		if want := "Hidden page " + strconv.Itoa(i); h1[p] != want {
			t.Errorf("%s: h1 %q, want %q (listed in a sitemap only)", p, h1[p], want)
		}
	}
	if h1["/session/members"] != "Members only" {
		t.Errorf("/session/members: h1 %q, want \"Members only\" (the login's cookie)", h1["/session/members"])
	}
	if !slices.Equal(rows[0], []string{"url", "h1"}) {
		t.Errorf("header row %q", rows[0])
	}
	if missing != 0 {
		t.Errorf("%d requests without Fetch.Header's header", missing)
	}
}
