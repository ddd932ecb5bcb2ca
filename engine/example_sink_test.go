package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/trawlhq/trawl/broker/memory"
	"github.com/trawlhq/trawl/dedup/local"
	"github.com/trawlhq/trawl/engine"
)

// titleIndex is a Sink of one's own: it keeps the title of every page by
// URL. Write is called concurrently by the pages in progress, so it locks;
// it returns once the items are stored (here, in memory), and only then
// is the page acknowledged.
type titleIndex struct {
	mu     sync.Mutex
	titles map[string]string
}

func (s *titleIndex) Write(_ context.Context, items []any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, it := range items {
		p, ok := it.(*engine.Page) // what the default callback emits
		if !ok {
			return fmt.Errorf("titleIndex: unexpected item %T", it)
		}
		s.titles[p.URL] = p.Title
	}
	return nil
}

func (s *titleIndex) Close() error { return nil }

// A sink of one's own, and the CSV sink, with extraction suffixes:
// ::attr(href) gives absolute URLs.
func ExampleSink() {
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<title>Home</title><h1>Welcome</h1><a class="next" href="/b">next</a>`)
	}))
	defer site.Close()

	b, _ := memory.New(memory.Config{})
	defer b.Close()
	f, _ := local.New(local.Config{Capacity: 1000})
	defer f.Close()
	index := &titleIndex{titles: map[string]string{}}
	c, err := engine.New(b, f, engine.Config{
		IdleTimeout: 100 * time.Millisecond, IgnoreRobots: true, MaxDepth: 1,
		TrustedHosts: []string{"127.0.0.1"},
		Include:      []string{`^$`}, // follow nothing: the start URL alone
		Sink:         index,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	c.Seed(context.Background(), engine.StartURL{URL: site.URL + "/"})
	if err := c.Run(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(index.titles[site.URL+"/"])

	// The same page as CSV, with two extracted fields, in a fresh crawl.
	var out bytes.Buffer
	csv := engine.NewCSV(&out, engine.PageColumns("heading", "next")[:4])
	f2, _ := local.New(local.Config{Capacity: 1000})
	defer f2.Close()
	c, _ = engine.New(b, f2, engine.Config{
		Name: "csv", IdleTimeout: 100 * time.Millisecond, IgnoreRobots: true,
		TrustedHosts: []string{"127.0.0.1"}, Include: []string{`^$`}, Sink: csv,
		Extract: map[string]string{"heading": "h1", "next": "a.next::attr(href)"},
	})
	c.Seed(context.Background(), engine.StartURL{URL: site.URL + "/"})
	c.Run(context.Background())
	csv.Close()
	fmt.Print(strings.ReplaceAll(out.String(), site.URL, "http://site"))
	// Output:
	// Home
	// url,status,heading,next
	// http://site/,200,Welcome,http://site/b
}
