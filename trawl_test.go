package trawl_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/trawlhq/trawl"
	"github.com/trawlhq/trawl/broker/memory"
	"github.com/trawlhq/trawl/dedup/local"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/syncbuf"
	"github.com/trawlhq/trawl/internal/testsite"
	"github.com/trawlhq/trawl/internal/testsite/sitetest"
)

// products decodes JSON Lines of products.
func products(t *testing.T, jsonl string) []product {
	t.Helper()
	var out []product
	sc := bufio.NewScanner(strings.NewReader(jsonl))
	for sc.Scan() {
		var p product
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			t.Fatalf("item %q: %v", sc.Text(), err)
		}
		out = append(out, p)
	}
	return out
}

// checkProducts fails t unless got holds every product of the shop exactly
// once, as the shop shows it.
func checkProducts(t *testing.T, got []product) {
	t.Helper()
	want := map[product]int{}
	for _, p := range testsite.Products() {
		want[product{Title: p.Title, Price: p.Price, Rating: p.Rating}]++
	}
	seen := map[product]int{}
	for _, p := range got {
		seen[p]++
		if want[p] == 0 {
			t.Errorf("item %+v is not a product of the shop", p)
		} else if seen[p] == 2 {
			t.Errorf("item %+v emitted more than once", p)
		}
	}
	if len(got) != len(want) || len(seen) != len(want) {
		t.Errorf("%d items, %d distinct; want each of the %d products once", len(got), len(seen), len(want))
	}
}

// TestShopScrape: the Example's program finds every product of the shop
// exactly once, with its title (entities decoded), price and rating, and
// fetches every page exactly once.
func TestShopScrape(t *testing.T) {
	site, base := sitetest.Serve(t, testsite.Config{})
	var out syncbuf.Buffer
	c := trawl.New(trawl.Config{InMemory: true, Output: &out})
	scrape(c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.Run(ctx, base+"/shop/page/1"); err != nil {
		t.Fatal(err)
	}
	checkProducts(t, products(t, out.String()))
	if err := site.VerifyShop(); err != nil {
		t.Error(err)
	}
	if n := c.Stats().Get(engine.StatItems); n != testsite.ShopProducts {
		t.Errorf("items stat %d, want %d", n, testsite.ShopProducts)
	}
}

// TestDefaultResumes: the default (no broker, no InMemory) keeps the
// frontier and the filter in Dir: a run interrupted mid-crawl and run again
// finishes the crawl with every product emitted once and every page fetched
// once.
func TestDefaultResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("two crawls with the embedded broker")
	}
	site, base := sitetest.Serve(t, testsite.Config{Latency: 5 * time.Millisecond})
	dir := t.TempDir()
	start := base + "/shop/page/1"
	var first, second syncbuf.Buffer

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := trawl.New(trawl.Config{Dir: dir, Output: &first})
	scrape(c)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, start) }()
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(first.String(), "\n") < 50 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // polling an observable condition
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run: %v, want context.Canceled", err)
	}
	n1 := len(products(t, first.String()))
	if n1 == 0 || n1 >= testsite.ShopProducts {
		t.Fatalf("the interrupted run emitted %d products; want some, not all", n1)
	}

	ctx2, cancel2 := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel2()
	c2 := trawl.New(trawl.Config{Dir: dir, Output: &second})
	scrape(c2)
	if err := c2.Run(ctx2, start); err != nil {
		t.Fatal(err)
	}
	checkProducts(t, products(t, first.String()+second.String()))
	if err := site.VerifyShop(); err != nil {
		t.Error(err)
	}
}

// logBuffer captures a crawler's log.
func logBuffer(level slog.Level) (*syncbuf.Buffer, *slog.Logger) {
	var b syncbuf.Buffer
	return &b, slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: level}))
}

// TestUnknownCallback: requests followed by one program and taken by a
// worker that registered other handlers are dead-lettered unfetched, with a
// reason naming the callback, and a Warn log.
func TestUnknownCallback(t *testing.T) {
	site, base := sitetest.Serve(t, testsite.Config{})
	b, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	f, err := local.New(local.Config{Capacity: 10_000})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The first worker takes the first listing page only, and follows its
	// 20 products and its next page.
	logA, la := logBuffer(slog.LevelInfo)
	a := trawl.New(trawl.Config{Broker: b, Filter: f, Output: &syncbuf.Buffer{}, Crawl: engine.Config{MaxPages: 1, Logger: la}})
	scrape(a)
	if err := a.Run(ctx, base+"/shop/page/1"); err != nil {
		t.Fatal(err)
	}
	_, name, ok := strings.Cut(logA.String(), "callback=")
	name, _, _ = strings.Cut(name, " ")
	if !ok || !strings.HasPrefix(name, "trawl:") {
		t.Fatalf("no callback name in the first worker's log: %s", logA.String())
	}

	// The second runs other code.
	logB, lb := logBuffer(slog.LevelWarn)
	other := trawl.New(trawl.Config{Broker: b, Filter: f, Output: &syncbuf.Buffer{}, Crawl: engine.Config{IdleTimeout: 100 * time.Millisecond, Logger: lb}})
	other.OnHTML("h1", func(e *trawl.Element) { e.Item(e.Text()) })
	err = other.Run(ctx)
	if !errors.Is(err, engine.ErrNoPages) || !strings.Contains(err.Error(), name) {
		t.Errorf("run: %v; want ErrNoPages naming %s", err, name)
	}
	dl, err := b.DeadLetters(ctx, engine.RequestsQueue("trawl"), 100)
	if err != nil || len(dl) != 21 {
		t.Fatalf("%d dead letters (%v), want 21 (20 products, 1 listing page)", len(dl), err)
	}
	for _, d := range dl {
		if !strings.Contains(d.Reason, fmt.Sprintf("unknown callback %q", name)) {
			t.Errorf("dead-letter reason %q does not name %s", d.Reason, name)
			break
		}
	}
	if got := strings.Count(logB.String(), "level=WARN"); got != 1 || !strings.Contains(logB.String(), "callback="+name) {
		t.Errorf("second worker's log: %s; want one Warn naming callback=%s", logB.String(), name)
	}
	served := site.ShopServed()
	if len(served) != 1 || served["/shop/page/1"] != 1 {
		t.Errorf("shop served %v; want /shop/page/1 only: unknown callbacks are not fetched", served)
	}
}

// TestElement: what a handler sees of a page, and what Follow and AbsURL
// make of links: <base href>, relative paths, fragments, other schemes.
func TestElement(t *testing.T) {
	var mu sync.Mutex
	hits := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits[r.URL.Path]++
		mu.Unlock()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		switch r.URL.Path {
		case "/dir/page":
			fmt.Fprint(w, `<html><head><base href="/base/"></head><body>
<div class="card" data-id="7"><h2> Fish &amp; Chips </h2><a href="x">one</a><a href="#top">top</a>
<a href="mailto:a@b.c">mail</a><a href="/abs#frag">abs</a><a href="../up">up</a></div>
<div class="card" data-id="8"><h2>Second</h2></div></body></html>`)
		default:
			fmt.Fprintf(w, `<p>%s</p>`, r.URL.Path)
		}
	}))
	defer srv.Close()

	type row struct {
		Index int
		ID    string
		Title string
		Links []string
	}
	var rows []row
	var follows []string
	docs := map[*trawl.Response]map[*goquery.Document]bool{} // the documents each page's handlers saw
	saw := func(r *trawl.Response) {
		mu.Lock()
		defer mu.Unlock()
		if docs[r] == nil {
			docs[r] = map[*goquery.Document]bool{}
		}
		docs[r][r.Document()] = true
	}
	c := trawl.New(trawl.Config{InMemory: true, Output: &syncbuf.Buffer{}, Crawl: engine.Config{IgnoreRobots: true}})
	c.OnHTML("html", func(e *trawl.Element) { saw(e.Response) })
	c.OnHTML("div.card", func(e *trawl.Element) {
		saw(e.Response)
		if e.Request.Depth != 0 {
			return
		}
		var abs []string
		for _, h := range e.ChildAttrs("a", "href") {
			abs = append(abs, e.AbsURL(h))
			e.Follow(h)
		}
		rows = append(rows, row{e.Index, e.Attr("data-id"), e.ChildText("h2"), abs})
	})
	c.OnResponse(func(r *trawl.Response) { // handlers run concurrently, on many pages
		saw(r)
		mu.Lock()
		defer mu.Unlock()
		if r.Request.Depth > 0 {
			follows = append(follows, r.URL.Path)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Run(ctx, srv.URL+"/dir/page"); err != nil {
		t.Fatal(err)
	}
	want := []row{
		{0, "7", "Fish & Chips", []string{srv.URL + "/base/x", "", "", srv.URL + "/abs", srv.URL + "/up"}},
		{1, "8", "Second", nil},
	}
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Errorf("rows\n got %v\nwant %v", rows, want)
	}
	slices.Sort(follows)
	if fmt.Sprint(follows) != "[/abs /base/x /up]" {
		t.Errorf("followed %v, want [/abs /base/x /up]", follows)
	}
	for p, n := range hits {
		if n != 1 {
			t.Errorf("%s fetched %d times", p, n)
		}
	}
	// Each page was parsed once: all its handlers saw one document.
	if len(docs) != 4 {
		t.Errorf("handlers saw %d pages, want 4", len(docs))
	}
	for r, ds := range docs {
		if len(ds) != 1 || ds[nil] {
			t.Errorf("%s: handlers saw %d documents (nil among them: %v), want one", r.URL, len(ds), ds[nil])
		}
	}
}

// TestBadInput: mistakes are reported by Run, all at once, before
// anything is opened or fetched.
func TestBadInput(t *testing.T) {
	ctx := context.Background()
	mb, _ := memory.New(memory.Config{})
	defer mb.Close()
	c := trawl.New(trawl.Config{Broker: mb, Crawl: engine.Config{Concurrency: -1}})
	c.OnHTML("a[", func(*trawl.Element) {})
	err := c.Run(ctx, "not a url")
	for _, want := range []string{`OnHTML("a[")`, "needs a Filter", "concurrency -1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("run: %v; want it to mention %s", err, want)
		}
	}
	c = trawl.New(trawl.Config{InMemory: true})
	c.OnHTML("a", func(*trawl.Element) {})
	if err := c.Run(ctx, "ftp://example.com/"); err == nil || !strings.Contains(err.Error(), "ftp://example.com/") {
		t.Errorf("run: %v; want the bad start URL named", err)
	}
	c = trawl.New(trawl.Config{InMemory: true, Crawl: engine.Config{Callbacks: map[string]engine.Callback{
		"": func(context.Context, *engine.Response) (engine.Result, error) { return engine.Result{}, nil },
	}}})
	c.OnHTML("a", func(*trawl.Element) {})
	if err := c.Run(ctx, "http://example.com/"); err == nil || !strings.Contains(err.Error(), `Callbacks[""]`) {
		t.Errorf("run: %v; want the clash over the start URLs named", err)
	}
}

// TestHandlerFailures: a bad selector in a Child method, or a panic, fails
// the page: retried, then dead-lettered with the reason; the crawl goes on.
func TestHandlerFailures(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<a href="/panic">p</a><a href="/selector">s</a><a href="/fine">f</a><h1>t</h1>`)
	}))
	defer srv.Close()
	b, _ := memory.New(memory.Config{})
	defer b.Close()
	f, _ := local.New(local.Config{Capacity: 1000})
	defer f.Close()
	var out syncbuf.Buffer
	c := trawl.New(trawl.Config{Broker: b, Filter: f, Output: &out, Crawl: engine.Config{
		IgnoreRobots: true, RetryBackoff: time.Millisecond, IdleTimeout: 100 * time.Millisecond,
	}})
	c.OnHTML("a", func(e *trawl.Element) {
		if e.Request.Depth == 0 {
			e.Follow(e.Attr("href"))
		}
	})
	c.OnHTML("h1", func(e *trawl.Element) {
		switch e.Response.URL.Path {
		case "/panic":
			panic("boom")
		case "/selector":
			e.Item(e.ChildText("p[")) // fails the page, however often it is called
			e.Item(e.ChildText("p["))
		default:
			e.Item(e.Response.URL.Path)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Run(ctx, srv.URL+"/"); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "\"/\"\n\"/fine\"\n" && got != "\"/fine\"\n\"/\"\n" {
		t.Errorf("items %q, want / and /fine only", got)
	}
	dl, _ := b.DeadLetters(ctx, engine.RequestsQueue("trawl"), 10)
	reasons := make([]string, len(dl))
	for i, d := range dl {
		reasons[i] = d.Reason
	}
	all := strings.Join(reasons, "\n")
	if len(dl) != 2 || !strings.Contains(all, "panicked") || !strings.Contains(all, "boom") ||
		strings.Count(all, `selector "p["`) != 1 {
		t.Errorf("dead letters:\n%s\nwant one for the panic and one naming the bad selector once", all)
	}
}
