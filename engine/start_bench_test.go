package engine_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/memory"
	"github.com/trawlhq/trawl/dedup/local"
	"github.com/trawlhq/trawl/engine"
)

// BenchmarkStartURLs seeds 20,000 start URLs, each a page without links,
// and crawls them with concurrency 64 on the in-memory broker: how fast
// start URLs flow into the frontier. Reported as start-urls/s, from the
// start of Run to the last response. The sub-benchmark "frontier" puts the
// same requests straight into the frontier instead: the crawl's own pace,
// which start URLs should reach.
func BenchmarkStartURLs(b *testing.B) {
	b.Run("starts", func(b *testing.B) { benchStarts(b, false) })
	b.Run("frontier", func(b *testing.B) { benchStarts(b, true) })
}

func benchStarts(b *testing.B, frontier bool) {
	const n, conc = 20_000, 64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	starts := make([]engine.StartURL, n)
	for i := range starts {
		starts[i] = engine.StartURL{URL: srv.URL + "/s/" + strconv.Itoa(i)}
	}
	var rate float64
	for range b.N {
		mb, _ := memory.New(memory.Config{})
		f, _ := local.New(local.Config{})
		sink := &timedSink{Sink: nopSink{}}
		c, err := engine.New(mb, f, engine.Config{
			Concurrency: conc, PerHost: conc, IdleTimeout: 50 * time.Millisecond, IgnoreRobots: true,
			TrustedHosts: []string{srv.Listener.Addr().String()}, Sink: sink,
		})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		if frontier {
			msgs := make([]broker.Message, len(starts))
			for i, s := range starts {
				body, _ := (&engine.Request{URL: s.URL, Scope: "127.0.0.1"}).MarshalBinary()
				msgs[i] = broker.Message{Body: body}
			}
			if err := mb.Publish(ctx, engine.RequestsQueue("trawl"), msgs...); err != nil {
				b.Fatal(err)
			}
		} else if err := c.Seed(ctx, starts...); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := c.Run(ctx); err != nil {
			b.Fatal(err)
		}
		if got := c.Stats().Get(engine.StatResponses); got != n {
			b.Fatalf("%d responses, want %d", got, n)
		}
		rate = float64(n) / sink.last.Sub(start).Seconds()
		mb.Close()
		f.Close()
	}
	b.ReportMetric(rate, "start-urls/s")
}

type nopSink struct{}

func (nopSink) Write(context.Context, []any) error { return nil }
func (nopSink) Close() error                       { return nil }
