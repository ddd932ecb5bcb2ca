package engine_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/trawlhq/trawl/broker/memory"
	"github.com/trawlhq/trawl/dedup/local"
	"github.com/trawlhq/trawl/engine"
)

// A crawl on one machine: the in-memory broker, the local filter, and the
// default callback, which follows links and emits one Page per page.
func Example() {
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		switch r.URL.Path {
		case "/":
			fmt.Fprint(w, `<title>Home</title><a href="/a">a</a> <a href="/b#x">b</a> <a href="https://elsewhere.example/">out</a>`)
		default:
			fmt.Fprintf(w, `<title>Page %s</title><a href="/">home</a>`, r.URL.Path)
		}
	}))
	defer site.Close()

	b, _ := memory.New(memory.Config{})
	defer b.Close()
	f, _ := local.New(local.Config{Capacity: 1000})
	defer f.Close()
	items := &memSink{}
	c, err := engine.New(b, f, engine.Config{
		IdleTimeout:  100 * time.Millisecond,
		IgnoreRobots: true,
		Concurrency:  1,                     // one at a time, so the output order is fixed
		TrustedHosts: []string{"127.0.0.1"}, // the test server is on loopback
		Sink:         items,
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	c.Seed(ctx, engine.StartURL{URL: site.URL + "/"})
	if err := c.Run(ctx); err != nil {
		panic(err)
	}
	for _, it := range items.items {
		p := it.(*engine.Page)
		fmt.Println(strings.TrimPrefix(p.URL, site.URL), p.Status, p.Title)
	}
	fmt.Println("offsite links dropped:", c.Stats().Get(engine.StatOffsite))
	// Output:
	// / 200 Home
	// /a 200 Page /a
	// /b 200 Page /b
	// offsite links dropped: 1
}

// Named callbacks: the start page's callback follows product links with the
// "product" callback, which emits one item per product.
func ExampleCallback() {
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		if r.URL.Path == "/" {
			fmt.Fprint(w, `<a href="/p/1">1</a><a href="/p/2">2</a>`)
			return
		}
		fmt.Fprintf(w, `<h1>Product %s</h1>`, strings.TrimPrefix(r.URL.Path, "/p/"))
	}))
	defer site.Close()

	b, _ := memory.New(memory.Config{})
	defer b.Close()
	f, _ := local.New(local.Config{Capacity: 1000})
	defer f.Close()
	items := &memSink{}
	c, _ := engine.New(b, f, engine.Config{
		IdleTimeout: 100 * time.Millisecond, IgnoreRobots: true, Concurrency: 1,
		TrustedHosts: []string{"127.0.0.1"}, Sink: items,
		Callbacks: map[string]engine.Callback{
			"": func(_ context.Context, r *engine.Response) (engine.Result, error) {
				_, links := engine.ExtractLinks(r.URL, r.Body)
				var res engine.Result
				for _, l := range links {
					res.Requests = append(res.Requests, &engine.Request{URL: l.String(), Callback: "product"})
				}
				return res, nil
			},
			"product": func(_ context.Context, r *engine.Response) (engine.Result, error) {
				name := strings.TrimSuffix(strings.TrimPrefix(string(r.Body), "<h1>"), "</h1>")
				return engine.Result{Items: []any{name}}, nil
			},
		},
	})
	ctx := context.Background()
	c.Seed(ctx, engine.StartURL{URL: site.URL + "/"})
	c.Run(ctx)
	fmt.Println(items.items...)
	// Output: Product 1 Product 2
}
