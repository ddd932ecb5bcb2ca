// Package metrics exports a crawl's counters to Prometheus, one family per
// quantity with its unit, following the Prometheus naming conventions:
//
//	trawl_requests_total                 counter   fetches started
//	trawl_responses_total{status}        counter   responses by status code
//	trawl_response_bytes_total           counter   response body bytes
//	trawl_items_total                    counter   items written
//	trawl_errors_total{kind}             counter   pages lost to errors, by kind
//	trawl_retries_total                  counter   retries scheduled
//	trawl_dead_letters_total             counter   requests dead-lettered
//	trawl_filtered_total                 counter   duplicate links filtered
//	trawl_offsite_filtered_total         counter   links out of scope
//	trawl_robots_forbidden_total         counter   pages disallowed by robots.txt
//	trawl_redirects_total                counter   redirects followed
//	trawl_enqueued_total                 counter   requests published to the frontier
//	trawl_start_urls_total               counter   start URLs taken
//	trawl_fetch_duration_seconds         histogram fetch durations
//	trawl_in_flight_pages                gauge     pages this worker holds
//	trawl_queue_messages{queue,state}    gauge     the broker's queues (ready, in_flight, dead; delayed, of ready)
//	trawl_filter_entries                 gauge     fingerprints in the duplicate filter
//	trawl_filter_size_bytes              gauge     memory of the duplicate filter
//
// Every family carries the label crawl. The counters are this process's
// (one worker's); the queue gauges are the crawl's, read from the broker
// at scrape time. NewRegistry adds the Go and process collectors.
package metrics

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/engine"
)

// Config says what a Collector exports. Stats is required.
type Config struct {
	// Name is the crawl's name, the value of the label crawl.
	Name string
	// Stats are the counters exported.
	Stats *engine.Stats
	// Broker is asked for the counts of Queues at each scrape. nil: no
	// queue gauges.
	Broker broker.Broker
	// Queues are the queues counted. Empty: the crawl's requests and start
	// URL queues (engine.RequestsQueue, engine.StartQueue).
	Queues []string
	// Filter, if it has Len() uint or SizeBytes() uint64 (as the local
	// Bloom filter does), gives the filter gauges. nil: none.
	Filter any
	// Timeout bounds the broker counts of one scrape. 0 = 2s.
	Timeout time.Duration
	// Logger receives failures to count a queue (at Debug: a scrape
	// reports them as a missing gauge). nil = discarded.
	Logger *slog.Logger
}

// Collector is a prometheus.Collector of a crawl.
type Collector struct {
	cfg   Config
	descs descs
}

type descs struct {
	counters  map[string]*prometheus.Desc // by engine stat name
	responses *prometheus.Desc
	errors    *prometheus.Desc
	fetch     *prometheus.Desc
	inFlight  *prometheus.Desc
	queue     *prometheus.Desc
	entries   *prometheus.Desc
	sizeBytes *prometheus.Desc
}

// counters maps plain engine counters to their families.
var counters = []struct{ stat, name, help string }{
	{engine.StatRequests, "trawl_requests_total", "Fetches started."},
	{engine.StatBytes, "trawl_response_bytes_total", "Bytes of response bodies received."},
	{engine.StatItems, "trawl_items_total", "Items written."},
	{engine.StatRetries, "trawl_retries_total", "Retries scheduled (timeouts, connection errors, 5xx, 429, callback errors)."},
	{engine.StatDeadLetters, "trawl_dead_letters_total", "Requests dead-lettered."},
	{engine.StatFiltered, "trawl_filtered_total", "Links dropped by the duplicate filter."},
	{engine.StatOffsite, "trawl_offsite_filtered_total", "Links dropped as out of scope."},
	{engine.StatRobotsForbidden, "trawl_robots_forbidden_total", "Pages disallowed by robots.txt."},
	{engine.StatRedirects, "trawl_redirects_total", "Redirects followed."},
	{engine.StatEnqueued, "trawl_enqueued_total", "Requests published to the frontier."},
	{engine.StatStartURLs, "trawl_start_urls_total", "Start URLs taken."},
	{engine.StatLinksDropped, "trawl_links_dropped_total", "Links of pages past --max-links, not followed."},
	{engine.StatURLTrap, "trawl_url_trap_total", "Links not followed by the URL-trap guard (--max-query-values)."},
	{engine.StatHostBudget, "trawl_host_budget_total", "Links not followed: their host had its page budget (--max-pages-per-host)."},
	{engine.StatSitemapSkipped, "trawl_sitemaps_skipped_total", "Sitemaps listed but not fetched: nested too deep, or past the sitemaps per host."},
}

// New returns a collector of cfg.
func New(cfg Config) *Collector {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if len(cfg.Queues) == 0 {
		cfg.Queues = []string{engine.RequestsQueue(cfg.Name), engine.StartQueue(cfg.Name)}
	}
	l := prometheus.Labels{"crawl": cfg.Name}
	d := descs{
		counters:  make(map[string]*prometheus.Desc, len(counters)),
		responses: prometheus.NewDesc("trawl_responses_total", "Responses received, by status code (registered codes; others by class, such as 5xx).", []string{"status"}, l),
		errors:    prometheus.NewDesc("trawl_errors_total", "Pages lost to errors, by kind.", []string{"kind"}, l),
		fetch:     prometheus.NewDesc("trawl_fetch_duration_seconds", "Duration of fetches, request sent to body read or failure.", nil, l),
		inFlight:  prometheus.NewDesc("trawl_in_flight_pages", "Pages this worker holds now.", nil, l),
		queue:     prometheus.NewDesc("trawl_queue_messages", "Messages in the crawl's queues, by state (ready, in_flight, dead; delayed: those of ready not yet due), counted by the broker at scrape time.", []string{"queue", "state"}, l),
		entries:   prometheus.NewDesc("trawl_filter_entries", "Fingerprints in the duplicate filter.", nil, l),
		sizeBytes: prometheus.NewDesc("trawl_filter_size_bytes", "Memory the duplicate filter's bits take.", nil, l),
	}
	for _, c := range counters {
		d.counters[c.stat] = prometheus.NewDesc(c.name, c.help, nil, l)
	}
	return &Collector{cfg: cfg, descs: d}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs.counters {
		ch <- d
	}
	for _, d := range []*prometheus.Desc{c.descs.responses, c.descs.errors, c.descs.fetch, c.descs.inFlight, c.descs.queue, c.descs.entries, c.descs.sizeBytes} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	snap := c.cfg.Stats.Snapshot()
	for _, k := range counters {
		ch <- prometheus.MustNewConstMetric(c.descs.counters[k.stat], prometheus.CounterValue, float64(snap[k.stat]))
	}
	statuses := map[string]int64{}
	for k, v := range snap {
		if kind, ok := strings.CutPrefix(k, engine.StatErrorKindPrefix); ok {
			ch <- prometheus.MustNewConstMetric(c.descs.errors, prometheus.CounterValue, float64(v), kind)
		}
		if code, ok := strings.CutPrefix(k, engine.StatStatusPrefix); ok {
			statuses[StatusLabel(code)] += v
		}
	}
	for s, v := range statuses {
		ch <- prometheus.MustNewConstMetric(c.descs.responses, prometheus.CounterValue, float64(v), s)
	}
	h := c.cfg.Stats.FetchDurations()
	ch <- prometheus.MustNewConstHistogram(c.descs.fetch, h.Count, h.Sum.Seconds(), h.Buckets)
	ch <- prometheus.MustNewConstMetric(c.descs.inFlight, prometheus.GaugeValue, float64(c.cfg.Stats.InFlight()))
	if f, ok := c.cfg.Filter.(interface{ Len() uint }); ok {
		ch <- prometheus.MustNewConstMetric(c.descs.entries, prometheus.GaugeValue, float64(f.Len()))
	}
	if f, ok := c.cfg.Filter.(interface{ SizeBytes() uint64 }); ok {
		ch <- prometheus.MustNewConstMetric(c.descs.sizeBytes, prometheus.GaugeValue, float64(f.SizeBytes()))
	}
	if c.cfg.Broker != nil {
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
		defer cancel()
		for _, q := range c.cfg.Queues {
			n, err := c.cfg.Broker.Counts(ctx, q)
			if err != nil {
				c.cfg.Logger.Debug("metrics: counting a queue failed", "queue", q, "err", err)
				if ctx.Err() != nil {
					return // past the timeout: the other queues would fail too
				}
				continue
			}
			ch <- prometheus.MustNewConstMetric(c.descs.queue, prometheus.GaugeValue, float64(n.Ready), q, "ready")
			ch <- prometheus.MustNewConstMetric(c.descs.queue, prometheus.GaugeValue, float64(n.InFlight), q, "in_flight")
			ch <- prometheus.MustNewConstMetric(c.descs.queue, prometheus.GaugeValue, float64(n.Dead), q, "dead")
			ch <- prometheus.MustNewConstMetric(c.descs.queue, prometheus.GaugeValue, float64(n.Delayed), q, "delayed")
		}
	}
}

// StatusLabel is the status label of a response's code: the code itself
// when it is registered (http.StatusText knows it), else its class, such
// as "5xx", so that a server answering odd codes cannot grow the series
// without bound.
func StatusLabel(code string) string {
	n, err := strconv.Atoi(code)
	switch {
	case err != nil || n < 100 || n > 999:
		return "other"
	case http.StatusText(n) != "":
		return strconv.Itoa(n)
	}
	return strconv.Itoa(n/100) + "xx"
}

// NewRegistry returns a registry of c and the Go and process collectors.
func NewRegistry(c *Collector) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Handler serves the metrics of reg in the Prometheus exposition formats.
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}
