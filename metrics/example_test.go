package metrics_test

import (
	"context"
	"log"
	"net/http"

	"github.com/trawlhq/trawl"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/metrics"
)

// A library crawl exports its metrics: give it the Stats the collector
// reads (the queue and filter gauges need the broker and filter, given in
// metrics.Config when the program opens them itself).
func Example() {
	stats := engine.NewStats()
	c := trawl.New(trawl.Config{Crawl: engine.Config{Name: "books", Stats: stats}})
	reg := metrics.NewRegistry(metrics.New(metrics.Config{Name: "books", Stats: stats}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.Handler(reg))
	srv := &http.Server{Addr: "127.0.0.1:9090", Handler: mux}
	served := make(chan error, 1)
	go func() { served <- srv.ListenAndServe() }()
	err := c.Run(context.Background(), "https://books.toscrape.com/")
	srv.Shutdown(context.Background())
	<-served
	if err != nil {
		log.Fatal(err)
	}
}
