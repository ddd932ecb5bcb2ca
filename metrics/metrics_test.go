package metrics_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/memory"
	"github.com/trawlhq/trawl/dedup/local"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/testsite"
	"github.com/trawlhq/trawl/metrics"
)

type countSink struct {
	mu sync.Mutex
	n  int
}

func (s *countSink) Write(_ context.Context, items []any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n += len(items)
	return nil
}
func (s *countSink) Close() error { return nil }

// scrape serves reg's handler and parses what a Prometheus server reads.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse the exposition: %v", err)
	}
	return fams
}

// value is the value of the family's series with the labels (besides
// crawl), which must be there.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, typ dto.MetricType, labels ...string) float64 {
	t.Helper()
	f := fams[name]
	if f == nil {
		t.Errorf("family %s missing", name)
		return 0
	}
	if f.GetType() != typ {
		t.Errorf("%s is a %v, want a %v", name, f.GetType(), typ)
	}
next:
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if got["crawl"] != "books" {
			t.Errorf("%s: crawl label %q, want books", name, got["crawl"])
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if got[labels[i]] != labels[i+1] {
				continue next
			}
		}
		switch typ {
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue()
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue()
		case dto.MetricType_HISTOGRAM:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	t.Errorf("%s%v: no such series", name, labels)
	return 0
}

// TestCrawlMetrics crawls the test site (404s, flaky pages, robots.txt)
// and scrapes the metrics: each quantity is its own family of the right
// type, and the values agree with the crawl's summary and its sink.
func TestCrawlMetrics(t *testing.T) {
	site := testsite.New(testsite.Config{Pages: 120, Links: 6, Seed: 5})
	sctx, stop := context.WithCancel(context.Background())
	url, wait, err := site.Serve(sctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(); wait() })

	b, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := local.New(local.Config{FPRate: 1e-6})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(); f.Close() })
	stats := engine.NewStats()
	sink := &countSink{}
	c, err := engine.New(b, f, engine.Config{
		Name: "books", Concurrency: 8, PerHost: 8, IdleTimeout: 300 * time.Millisecond,
		RetryBackoff: 10 * time.Millisecond, TrustedHosts: []string{"127.0.0.1"},
		Fetch: engine.FetchConfig{MaxBodySize: 1 << 20, Timeout: 3 * time.Second},
		Sink:  sink, Stats: stats,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.Seed(ctx, engine.StartURL{URL: url + "/"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	sum := engine.Summarize(stats.Snapshot(), time.Second)
	if sum.Pages < 100 || sum.Statuses[404] == 0 {
		t.Fatalf("the crawl should fetch the site, 404s included: %+v", sum)
	}

	coll := metrics.New(metrics.Config{Name: "books", Stats: stats, Broker: b, Filter: f})
	fams := scrape(t, metrics.Handler(metrics.NewRegistry(coll)))

	const counter, gauge, histogram = dto.MetricType_COUNTER, dto.MetricType_GAUGE, dto.MetricType_HISTOGRAM
	eq := func(what string, got float64, want int64) {
		t.Helper()
		if got != float64(want) {
			t.Errorf("%s = %v, want %d", what, got, want)
		}
	}
	eq("trawl_requests_total", value(t, fams, "trawl_requests_total", counter), sum.Requests)
	eq("trawl_items_total", value(t, fams, "trawl_items_total", counter), sum.Items)
	eq("trawl_items_total (sink)", value(t, fams, "trawl_items_total", counter), int64(sink.n))
	eq("trawl_dead_letters_total", value(t, fams, "trawl_dead_letters_total", counter), sum.DeadLetters)
	eq("trawl_filtered_total", value(t, fams, "trawl_filtered_total", counter), sum.Filtered)
	eq("trawl_retries_total", value(t, fams, "trawl_retries_total", counter), stats.Get(engine.StatRetries))
	eq("trawl_response_bytes_total", value(t, fams, "trawl_response_bytes_total", counter), stats.Get(engine.StatBytes))
	if stats.Get(engine.StatBytes) == 0 || stats.Get(engine.StatRetries) == 0 {
		t.Errorf("the site has bodies and flaky pages: bytes %d, retries %d", stats.Get(engine.StatBytes), stats.Get(engine.StatRetries))
	}
	var responses int64
	for code, n := range sum.Statuses {
		eq("trawl_responses_total{status="+strconv.Itoa(code)+"}", value(t, fams, "trawl_responses_total", counter, "status", strconv.Itoa(code)), n)
		responses += n
	}
	var all float64
	for _, m := range fams["trawl_responses_total"].GetMetric() {
		all += m.GetCounter().GetValue()
	}
	eq("sum of trawl_responses_total", all, sum.Pages)
	eq("summary pages by status", float64(responses), sum.Pages)
	for kind, n := range sum.ErrorKinds {
		eq("trawl_errors_total{kind="+kind+"}", value(t, fams, "trawl_errors_total", counter, "kind", kind), n)
	}
	// Every fetch is timed: those that answered and those that failed.
	eq("trawl_fetch_duration_seconds count", value(t, fams, "trawl_fetch_duration_seconds", histogram), sum.Requests)
	h := fams["trawl_fetch_duration_seconds"].GetMetric()[0].GetHistogram()
	if bs := h.GetBucket(); h.GetSampleSum() <= 0 || len(bs) != len(engine.FetchBuckets)+1 || bs[len(bs)-2].GetUpperBound() != 60 || bs[len(bs)-1].GetCumulativeCount() != uint64(sum.Requests) {
		t.Errorf("fetch histogram: sum %v, %d buckets %v", h.GetSampleSum(), len(h.GetBucket()), h.GetBucket())
	}
	eq("trawl_in_flight_pages after the crawl", value(t, fams, "trawl_in_flight_pages", gauge), 0)
	eq("trawl_filter_entries", value(t, fams, "trawl_filter_entries", gauge), int64(f.Len()))
	if f.Len() == 0 || value(t, fams, "trawl_filter_size_bytes", gauge) <= 0 {
		t.Errorf("the filter holds the crawl's URLs: %d entries", f.Len())
	}
	for _, state := range []string{"ready", "in_flight", "dead", "delayed"} {
		n, _ := b.Counts(ctx, engine.RequestsQueue("books"))
		want := map[string]int64{"ready": n.Ready, "in_flight": n.InFlight, "dead": n.Dead, "delayed": n.Delayed}[state]
		eq("trawl_queue_messages{state="+state+"}", value(t, fams, "trawl_queue_messages", gauge, "queue", "books:requests", "state", state), want)
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total", "process_resident_memory_bytes"} {
		if fams[name] == nil {
			t.Errorf("%s missing: the Go and process collectors are registered", name)
		}
	}
	if fams["trawl_stat_total"] != nil {
		t.Error("the old catch-all family trawl_stat_total is still exported")
	}
}

// slowCounter counts nothing until its context ends.
type slowCounter struct {
	broker.Broker
	calls chan struct{}
}

func (s slowCounter) Counts(ctx context.Context, _ string) (broker.Counts, error) {
	s.calls <- struct{}{}
	<-ctx.Done()
	return broker.Counts{}, ctx.Err()
}

// TestScrapeTimeout: a broker that does not answer costs a scrape the
// timeout and the queue gauges, never the scrape.
func TestScrapeTimeout(t *testing.T) {
	calls := make(chan struct{}, 4)
	coll := metrics.New(metrics.Config{Name: "books", Stats: engine.NewStats(), Broker: slowCounter{calls: calls}, Timeout: 50 * time.Millisecond})
	done := make(chan map[string]*dto.MetricFamily)
	go func() { done <- scrape(t, metrics.Handler(metrics.NewRegistry(coll))) }()
	select {
	case fams := <-done:
		if fams["trawl_queue_messages"] != nil {
			t.Error("queue gauges exported though counting failed")
		}
		if fams["trawl_requests_total"] == nil {
			t.Error("the counters are lost when the broker does not answer")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the scrape did not end at the timeout")
	}
	if len(calls) != 1 {
		t.Errorf("%d queues counted after the first timed out; want the scrape to stop at its deadline", len(calls))
	}
}

func TestStatusLabel(t *testing.T) {
	for in, want := range map[string]string{"200": "200", "404": "404", "599": "5xx", "299": "2xx", "x": "other", "1000": "other"} {
		if got := metrics.StatusLabel(in); got != want {
			t.Errorf("StatusLabel(%q) = %q, want %q", in, got, want)
		}
	}
}
