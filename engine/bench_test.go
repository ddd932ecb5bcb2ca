package engine_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker/memory"
	"github.com/trawlhq/trawl/dedup/local"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/testsite"
)

// BenchmarkCrawlVsFetchLimit crawls the test site (no traps, no latency)
// with concurrency 64 on the in-memory broker and the local filter, and
// measures in the same run the fetch limit: a bare loop of 64 goroutines
// GETting the same pages with a plain http.Client. The site and the
// crawler share the machine, so the ratio is the figure to watch.
func BenchmarkCrawlVsFetchLimit(b *testing.B) {
	const pages, conc = 3000, 64
	var crawlRate, fetchRate float64
	for range b.N {
		site := testsite.New(testsite.Config{Pages: pages, Links: 10, NoTraps: true, Seed: 3})
		ctx, cancel := context.WithCancel(context.Background())
		base, wait, err := site.Serve(ctx, "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		fetchRate = fetchLimit(b, base, pages, conc)
		site.Reset()

		mb, _ := memory.New(memory.Config{})
		f, _ := local.New(local.Config{}) // the defaults of trawl crawl
		sink := &timedSink{Sink: engine.NewJSONLines(io.Discard)}
		c, err := engine.New(mb, f, engine.Config{
			Concurrency: conc, PerHost: conc, IdleTimeout: 50 * time.Millisecond,
			TrustedHosts: []string{"127.0.0.1"}, Sink: sink,
		})
		if err != nil {
			b.Fatal(err)
		}
		c.Seed(ctx, engine.StartURL{URL: base + "/"})
		start := time.Now()
		if err := c.Run(ctx); err != nil {
			b.Fatal(err)
		}
		// Crawl time ends with the last item; what follows is the idle timeout.
		el := sink.last.Sub(start)
		got := c.Stats().Get(engine.StatResponses)
		crawlRate = float64(got) / el.Seconds()
		if err := site.Verify(); err != nil {
			b.Fatalf("crawl incorrect: %v", err)
		}
		mb.Close()
		f.Close()
		cancel()
		wait()
	}
	b.ReportMetric(crawlRate, "crawl-pages/s")
	b.ReportMetric(fetchRate, "fetch-pages/s")
	b.ReportMetric(crawlRate/fetchRate, "crawl/fetch")
}

// fetchLimit GETs /, /page/0 … /page/n-1 with conc goroutines and returns pages/s.
func fetchLimit(b *testing.B, base string, n, conc int) float64 {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc}}
	defer client.CloseIdleConnections()
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Go(func() {
			for {
				i := next.Add(1) - 2
				if i >= int64(n) {
					return
				}
				u := base + "/"
				if i >= 0 {
					u = fmt.Sprintf("%s/page/%d", base, i)
				}
				resp, err := client.Get(u)
				if err != nil {
					b.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	return float64(n+1) / time.Since(start).Seconds()
}

// timedSink remembers when it was last written to.
type timedSink struct {
	engine.Sink
	mu   sync.Mutex
	last time.Time
}

func (s *timedSink) Write(ctx context.Context, items []any) error {
	err := s.Sink.Write(ctx, items)
	s.mu.Lock()
	s.last = time.Now()
	s.mu.Unlock()
	return err
}

// BenchmarkCrawlLinkScanner measures what the link scanner (ExtractLinks)
// buys end to end: the crawl of BenchmarkCrawlVsFetchLimit (3,000 pages
// of 10 links, concurrency 64, in-memory broker, local filter), once with
// the scanner and once with the same extraction by x/net/html's tokenizer
// (the reference of FuzzExtractLinksDifferential), alternating which goes
// first. scanner/tokenizer is the figure: the scanner is kept only if it
// is at least 1.10.
func BenchmarkCrawlLinkScanner(b *testing.B) {
	const pages, conc = 3000, 64
	var scanner, tokenizer time.Duration
	var n int64
	for i := range b.N {
		for j := range 2 {
			tok := (i+j)%2 == 1
			got, el := crawlOnce(b, pages, conc, tok)
			n = got
			if tok {
				tokenizer += el
			} else {
				scanner += el
			}
		}
	}
	sRate := float64(n) * float64(b.N) / scanner.Seconds()
	tRate := float64(n) * float64(b.N) / tokenizer.Seconds()
	b.ReportMetric(sRate, "scanner-pages/s")
	b.ReportMetric(tRate, "tokenizer-pages/s")
	b.ReportMetric(sRate/tRate, "scanner/tokenizer")
}

// crawlOnce crawls a fresh test site as BenchmarkCrawlVsFetchLimit does,
// with the tokenizer's link extraction if tok, and returns the responses
// and the time to the last item.
func crawlOnce(b *testing.B, pages, conc int, tok bool) (int64, time.Duration) {
	site := testsite.New(testsite.Config{Pages: pages, Links: 10, NoTraps: true, Seed: 3})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base, wait, err := site.Serve(ctx, "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer func() { cancel(); wait() }()
	mb, _ := memory.New(memory.Config{})
	defer mb.Close()
	f, _ := local.New(local.Config{})
	defer f.Close()
	sink := &timedSink{Sink: engine.NewJSONLines(io.Discard)}
	c, err := engine.New(mb, f, engine.Config{
		Concurrency: conc, PerHost: conc, IdleTimeout: 50 * time.Millisecond,
		TrustedHosts: []string{"127.0.0.1"}, Sink: sink,
	})
	if err != nil {
		b.Fatal(err)
	}
	if tok {
		engine.UseTokenizerLinks(c)
	}
	if err := c.Seed(ctx, engine.StartURL{URL: base + "/"}); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if err := c.Run(ctx); err != nil {
		b.Fatal(err)
	}
	if err := site.Verify(); err != nil {
		b.Fatalf("crawl incorrect (tokenizer %v): %v", tok, err)
	}
	return c.Stats().Get(engine.StatResponses), sink.last.Sub(start)
}
