package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"time"

	"github.com/trawlhq/trawl/broker"
)

// Config configures a Crawler. The zero value is usable: every field
// documents its default.
type Config struct {
	// Name is the crawl's name; queues and keys derive from it
	// (NAME:requests, NAME:start_urls, NAME:items). "" = "trawl".
	Name string
	// Concurrency is how many pages are processed at once. 0 = 16. It
	// bounds the memory of responses too: Concurrency × (MaxHeaderSize +
	// MaxBodySize) of FetchConfig.
	Concurrency int
	// PerHost caps concurrent requests per host. 0 = 8.
	PerHost int
	// Delay is the minimum time between request starts to one host.
	Delay time.Duration
	// AutoThrottle, if not nil, adapts each host's delay to its latency,
	// never below Delay nor robots.txt's Crawl-delay (see AutoThrottle).
	// It configures the local limiter; a Limiter given here adapts if it
	// was configured for it (the Redis limiter's
	// LimiterConfig.AutoThrottle). nil = fixed delays.
	AutoThrottle *AutoThrottle
	// MaxDepth stops following links past this depth (start URLs have
	// depth 0). 0 = DefaultMaxDepth; negative = unlimited.
	MaxDepth int
	// MaxPages makes this worker stop after fetching that many pages.
	// 0 = unlimited.
	MaxPages int
	// AllowedDomains are the domains (and their subdomains) links may lead
	// to. Empty = each link stays on the domain of the start URL it
	// descends from (Request.Scope).
	AllowedDomains []string
	// Include, if not empty, keeps only discovered URLs matching one of these
	// regular expressions; Exclude drops URLs matching any. Start URLs are
	// not subject to them.
	Include, Exclude []string
	// IdleTimeout ends Run once the frontier and the start URLs have been
	// empty, with nothing in flight on any worker, for this long.
	// 0 = never: serve until the context ends.
	IdleTimeout time.Duration
	// Lease is how long a delivery stays with this worker before another may
	// take it; leases of pages in progress are extended every Lease/3. Set it
	// to the broker's lease. 0 = 30s.
	Lease time.Duration
	// MaxRetries is how often a failed request (timeout, connection error,
	// 5xx, 429, callback error) is retried before it is dead-lettered with
	// the reason. 0 = 3; negative = never retried. Retries are counted from
	// the delivery's Attempt, so a delivery that came back after a crash
	// uses one too. The broker's own limit (MaxDeliveries in its config)
	// must exceed MaxRetries+1, or the broker dead-letters a request before
	// the engine is done retrying it; trawl's command line sets it so.
	MaxRetries int
	// RetryBackoff is the first retry's delay, doubled for each later one,
	// at most one minute, with jitter of ±25%. A Retry-After header takes
	// precedence, up to one minute: it holds every request to the host that
	// long, and a longer one is capped to a minute with a warning naming
	// the host. The delivery is nacked with that delay:
	// the broker keeps the request, with its priority, until then.
	// 0 = 500ms.
	RetryBackoff time.Duration
	// FailureTimeout is how long the backends may keep failing before Run
	// gives up with ErrBackendFailing: every receive from the frontier, or
	// every page's writes (publishing its links, the duplicate filter, the
	// sink), failing with no success in between. Pages whose writes failed
	// are nacked, never acknowledged. It must outlast a broker restart.
	// 0 = 1 minute; negative = never give up.
	FailureTimeout time.Duration
	// Sitemaps also crawls the pages the sitemaps of each start URL's host
	// list: the sitemaps named by the Sitemap: lines of its robots.txt and
	// /sitemap.xml, following sitemap indexes, plain or gzip-compressed
	// (by Content-Encoding, or a .gz file served as application/gzip).
	// Listed URLs go through scope, the include and exclude patterns and
	// the duplicate filter like links, at depth 1, with the start URLs'
	// callback. A file is read up to the protocol's limits
	// (SitemapMaxURLs, SitemapMaxSize; the rest is ignored with a
	// warning), and may be that large whatever FetchConfig.MaxBodySize.
	// Sitemaps are fetched as requests of the crawl (callbacks
	// CallbackSitemap and CallbackRobotsSitemaps, handled by every
	// worker), so they are shared, retried and filtered like pages; they
	// count towards MaxPages and emit no item.
	Sitemaps bool
	// IgnoreRobots skips robots.txt.
	IgnoreRobots bool
	// MaxLinks is how many links of one page are followed: the first, in
	// document order; the others are counted (StatLinksDropped) and
	// logged. 0 = DefaultMaxLinks.
	MaxLinks int
	// MaxQueryValues is the URL-trap guard: the values a worker follows of
	// one query parameter, for one host and set of parameter names, along
	// links that change only that parameter from the page they are on (a
	// session id handed on, ?sid=…); a link to a further value is not
	// followed (counted as StatURLTrap, a warning once). Links that go
	// back to known values (a listing's pages) count once each. 0 =
	// DefaultMaxQueryValues; negative = no guard.
	MaxQueryValues int
	// MaxPagesPerHost is a per-host page budget: a worker publishes at
	// most that many links of one host (new to the filter); the others are
	// not followed (counted as StatHostBudget, a warning once per host).
	// It counts this worker's links only: n workers may publish up to n
	// times as many. 0 = unlimited.
	MaxPagesPerHost int
	// Partitions splits the crawl's queues into that many partitions, each
	// a queue of the broker's own (see broker.Partitioned), and
	// PartitionBy says what a request's partition key is (its host, by
	// default). They are stored with the crawl; the broker must have been
	// opened with the same count (package deployment does so). 0 = 1.
	Partitions  int
	PartitionBy broker.PartitionBy
	// StartBatch is how many start URLs a worker moves into the frontier
	// at once (one filter call, one publish), whenever the frontier holds
	// fewer requests than the worker has free slots. 0 = 256.
	StartBatch int
	// Starts holds the start URLs when they are not kept in the broker's
	// NAME:start_urls queue. nil = the broker's queue.
	Starts StartSource
	// Fetch configures the HTTP fetcher.
	Fetch FetchConfig
	// TrustedHosts are exempt from the private-address guard: the
	// addresses of start URLs an operator gives on the command line, as
	// "host:port" (that port only; see TrustedAddr), or bare hosts (every
	// port).
	TrustedHosts []string
	// Limiter paces requests per host. nil = a local limiter from PerHost
	// and Delay.
	Limiter HostLimiter
	// Sink receives items. nil = items are dropped.
	Sink Sink
	// Stats receives counters. nil = a fresh Stats, see Crawler.Stats.
	Stats *Stats
	// SharedStats, when set, receives the growth of this worker's counters
	// every second and once more when Run returns, so that it holds the
	// sum over the crawl's workers (redis.Stats). nil = counters stay local.
	SharedStats SharedStats
	// Callbacks handle responses by name (Request.Callback). The name ""
	// overrides the default callback, which follows links and emits a Page.
	Callbacks map[string]Callback
	// ErrorItems emits a Page item for every page that ends without a 2xx
	// response too: a 4xx (or other final) status, a 5xx or 429 past the
	// retry limit, a fetch that failed for good (Status 0). Links then
	// carry the page they were found on (Request.Referrer), which the item
	// names, so that a crawl can check a site for broken links.
	ErrorItems bool
	// BeforeFetch, if not nil, is called on the worker just before each
	// attempt to fetch a page (not robots.txt, not sitemaps), from
	// several goroutines at once, holding the host's slot: it should be
	// quick. req is a copy of the request made for this attempt, with its
	// own Header (never nil) and Meta: a header set there is sent with
	// this attempt only, and the callback sees req as Response.Request.
	// It must not change URL, Method or Body. A panic in it is not
	// recovered. nil = none.
	BeforeFetch func(ctx context.Context, req *Request)
	// OnFailure, if not nil, is called when a page (not robots.txt, not
	// sitemaps) fails for good, where ErrorItems would emit its item: a
	// final status other than 2xx and a redirect (4xx), a 5xx or 429 past
	// MaxRetries, a fetch error past MaxRetries (unreachable, refused,
	// timed out) or one that no retry can mend (an unknown host, a bad
	// certificate, a body too large); and also a callback's error past
	// MaxRetries, a robots.txt unreachable past them, and an address
	// the crawl's guard refuses. It is not called for each retry. resp is
	// nil when no response came; err is never nil: for a status, "404 Not
	// Found". It is called from several goroutines at once; a page that
	// comes back after a worker stopped before settling it may be
	// reported again. With ErrorItems it runs on the writer once the
	// page's error item is written, so a slow OnFailure holds up every
	// page's writes: it should be quick. A panic in it is not recovered.
	// nil = none.
	OnFailure func(ctx context.Context, req *Request, resp *Response, err error)
	// Extract adds fields to the default Page item (Page.Fields): name ->
	// CSS selector with an optional suffix saying what to take from each
	// match: "::text" (the default), "::attr(NAME)" (href and src made
	// absolute) or "::html". A field is always a list, one value per
	// match in document order; a selector group ("h1, h2") is one rule,
	// the suffix applying to the whole group, and a selector that matches
	// nothing gives no field.
	Extract map[string]string
	// Logger receives the crawl's log. nil = discard.
	Logger *slog.Logger
	// Adopt names the settings (SettingNames) this crawler takes from the
	// crawl's stored settings instead of its own fields above; it insists
	// on the others, and Seed and Run fail with ErrSettingsConflict if the
	// crawl has them with other values. nil = insist on every one. See
	// Settings.
	Adopt []string
	// OverrideSettings makes a crawler that insists on settings the crawl
	// has with other values replace them (a warning each) instead of
	// failing. Workers already running keep the settings they adopted.
	OverrideSettings bool
	// Metadata keeps the crawl's settings and its workers' presence.
	// nil = the broker, if it
	// implements broker.Metadata; a crawler with neither crawls by its own
	// settings, with a warning.
	Metadata broker.Metadata
}

// DefaultMaxDepth is the maximum link depth of a crawl that sets none. It
// is the default guard against URL traps: an infinite calendar, session
// ids in paths, relative links that grow /a/a/a/…, each lead a crawler
// down an endless chain of new URLs. A depth limit ends every such chain
// after a fixed number of hops wherever it starts, and costs nothing to
// check (the depth travels with the request). Real sites put their pages
// within a few hops of the home page, so 32 cuts off only chains: "next"
// links through more than 32 pages of a listing need a higher
// --max-depth (or 0 there, -1 here: unlimited). A per-host page budget was
// not chosen as the default: its right size differs by orders of magnitude
// between sites, it would silently truncate large sites crawled on
// purpose, and a trap stops only once it has spent the whole budget.
const DefaultMaxDepth = 32

// compiled is a validated Config with defaults filled in.
type compiled struct {
	Config
	include, exclude []*regexp.Regexp
}

const maxBackoff = time.Minute

// Validate reports every problem with c at once.
func (c Config) Validate() error {
	_, err := c.compile()
	return err
}

func (c Config) compile() (*compiled, error) {
	errs := c.problems()
	cc := &compiled{Config: c}
	include, ierrs := compileEach("include", c.Include)
	exclude, eerrs := compileEach("exclude", c.Exclude)
	cc.include, cc.exclude = include, exclude
	if err := errors.Join(append(append(errs, ierrs...), eerrs...)...); err != nil {
		return nil, fmt.Errorf("engine config: %w", err)
	}
	cc.fillDefaults()
	return cc, nil
}

// problems lists what is wrong with c's numbers, its AutoThrottle and
// its extraction rules.
func (c Config) problems() []error {
	var errs []error
	if c.Concurrency < 0 {
		errs = append(errs, fmt.Errorf("concurrency %d is negative", c.Concurrency))
	}
	if c.PerHost < 0 {
		errs = append(errs, fmt.Errorf("per-host %d is negative", c.PerHost))
	}
	if c.Delay < 0 || c.IdleTimeout < 0 || c.RetryBackoff < 0 {
		errs = append(errs, errors.New("durations must not be negative"))
	}
	if c.Partitions < 0 || c.Partitions > broker.MaxPartitions {
		errs = append(errs, fmt.Errorf("partitions %d: want 1 to %d", c.Partitions, broker.MaxPartitions))
	}
	if c.MaxPages < 0 || c.StartBatch < 0 || c.MaxLinks < 0 || c.MaxPagesPerHost < 0 {
		errs = append(errs, errors.New("limits must not be negative"))
	}
	if c.AutoThrottle != nil {
		if err := c.AutoThrottle.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := compileExtract(c.Extract); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// compileEach compiles the patterns ps, what ("include", "exclude") they
// are, and returns those that compile and an error for each that does not.
func compileEach(what string, ps []string) ([]*regexp.Regexp, []error) {
	var out []*regexp.Regexp
	var errs []error
	for _, p := range ps {
		re, err := regexp.Compile(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s pattern: %w", what, err))
			continue
		}
		out = append(out, re)
	}
	return out, errs
}

// fillDefaults gives what cc leaves unset its default.
func (cc *compiled) fillDefaults() {
	if cc.Name == "" {
		cc.Name = "trawl"
	}
	if cc.Concurrency == 0 {
		cc.Concurrency = 16
	}
	if cc.PerHost == 0 {
		cc.PerHost = 8
	}
	switch {
	case cc.MaxDepth == 0:
		cc.MaxDepth = DefaultMaxDepth
	case cc.MaxDepth < 0:
		cc.MaxDepth = -1 // unlimited: scope checks MaxDepth > 0
	}
	switch {
	case cc.MaxRetries == 0:
		cc.MaxRetries = 3
	case cc.MaxRetries < 0:
		cc.MaxRetries = 0
	}
	if cc.RetryBackoff == 0 {
		cc.RetryBackoff = 500 * time.Millisecond
	}
	if cc.FailureTimeout == 0 {
		cc.FailureTimeout = time.Minute
	}
	if cc.StartBatch == 0 {
		cc.StartBatch = 256
	}
	if cc.MaxLinks == 0 {
		cc.MaxLinks = DefaultMaxLinks
	}
	switch {
	case cc.MaxQueryValues == 0:
		cc.MaxQueryValues = DefaultMaxQueryValues
	case cc.MaxQueryValues < 0:
		cc.MaxQueryValues = -1
	}
	if cc.Logger == nil {
		cc.Logger = slog.New(slog.DiscardHandler)
	}
}

// retryDelay is backoff(retry) with jitter: uniform in [3/4, 5/4] of it,
// so that pages that failed together are not retried together.
func (c *compiled) retryDelay(retry int) time.Duration {
	d := c.backoff(retry)
	return d*3/4 + rand.N(d/2+1)
}

// backoff is the delay before retry number attempt (1-based).
func (c *compiled) backoff(attempt int) time.Duration {
	d := c.RetryBackoff
	for i := 1; i < attempt && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}

// RequestsQueue names the frontier queue of crawl name.
func RequestsQueue(name string) string { return name + ":requests" }

// StartQueue names the start-URL queue of crawl name.
func StartQueue(name string) string { return name + ":start_urls" }

// ItemsQueue names the items list or queue of crawl name.
func ItemsQueue(name string) string { return name + ":items" }
