package trawl

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/andybalholm/cascadia"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/dedup"
	"github.com/trawlhq/trawl/deployment"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/frontier"
)

// DefaultIdleTimeout is how long a crawl must have been idle (nothing
// queued, nothing in flight on any worker) before Run returns, unless
// Config.Crawl.IdleTimeout says otherwise. It is the CLI's default.
const DefaultIdleTimeout = 3 * time.Second

// inMemoryIdle replaces DefaultIdleTimeout when Run opened an in-memory
// broker itself: no other process can add work to it, and its counts are
// exact, so the crawl is done the moment it is idle.
const inMemoryIdle = 100 * time.Millisecond

// Config configures a Crawler. The zero value is the CLI's default: an
// embedded, persistent broker and a local duplicate filter in
// ./.trawl/trawl, items as JSON Lines on standard output, and an exit once
// the crawl has been idle for DefaultIdleTimeout.
type Config struct {
	// Crawl configures the engine: crawl name, concurrency, politeness,
	// scope, retries, logging (see engine.Config). Run changes four of its
	// defaults: IdleTimeout 0 means DefaultIdleTimeout (see Serve);
	// TrustedHosts also get the host and port of each start URL given to
	// Run, so a site on loopback or a private network can be crawled; Sink
	// nil means JSON Lines to Output (a Sink given is not closed by Run);
	// and Callbacks gains the handlers
	// registered with OnHTML and OnResponse, if any (under "" and a name
	// derived from them; Callbacks[""] must then be unset).
	Crawl engine.Config

	// Deployment names where the crawl's state lives, as the trawl
	// command's flags do (see package deployment): Run opens it exactly as
	// trawl crawl and trawl worker do, with their limits. The zero value
	// is the embedded broker in Dir. With Broker "redis" and a RedisURL,
	// this program is a worker of a Redis crawl: it shares the frontier,
	// the duplicate filter, the start URLs, the per-host limits, the
	// counters (trawl stats) and the crawl's stored settings with every
	// other worker, program or command, of the crawl of that Crawl.Name.
	Deployment deployment.Config
	// Broker is a frontier opened by the program, used instead of the
	// Deployment's. A broker given here is shared by every worker that
	// uses it (Redis, RabbitMQ, NATS) and is not closed by Run; its
	// delivery limit must be deployment.MaxDeliveries(Crawl), or it
	// dead-letters pages the engine would still retry.
	Broker broker.Broker
	// Filter is a duplicate filter opened by the program, used instead of
	// the Deployment's. A Broker given without a Filter is an error: a
	// local filter is for one worker only. A filter given here is not
	// closed by Run.
	Filter dedup.Filter
	// InMemory keeps the broker and filter Run opens in memory (the
	// Deployment's Broker "memory"): nothing persists, and the crawl ends
	// as soon as it is idle.
	InMemory bool
	// Dir holds the embedded broker, the local filter and the counters,
	// so that running the same program again resumes the crawl (the
	// Deployment's Dir). "" = ./.trawl/NAME, NAME being Crawl.Name or
	// "trawl".
	Dir string
	// Output receives items as JSON Lines when Crawl.Sink is nil.
	// nil = os.Stdout. It is not closed.
	Output io.Writer
	// Serve keeps Run working when the crawl is idle, until its context
	// ends: a worker waiting for start URLs. Crawl.IdleTimeout is ignored.
	Serve bool
	// Flush starts the crawl clean (trawl crawl --flush): Run deletes its
	// frontier, duplicate filter, counters and stored settings before it
	// seeds, so that a second run crawls the site again instead of finding
	// every start URL already crawled. It is refused while other workers
	// of the crawl run, and with a Broker given (Run does not own it).
	Flush bool
}

// Validate reports every problem with c at once.
func (c Config) Validate() error {
	var errs []error
	if err := c.Crawl.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Broker != nil && c.Filter == nil {
		errs = append(errs, errors.New("trawl config: a Broker needs a Filter shared by its workers (dedup/redis, say); a local filter is for one worker only"))
	}
	if c.InMemory && c.Dir != "" {
		errs = append(errs, errors.New("trawl config: InMemory and Dir exclude each other"))
	}
	if c.InMemory && c.Deployment.Broker != "" && c.Deployment.Broker != "memory" {
		errs = append(errs, fmt.Errorf("trawl config: InMemory and Deployment.Broker %q exclude each other", c.Deployment.Broker))
	}
	if c.Dir != "" && c.Deployment.Dir != "" && c.Dir != c.Deployment.Dir {
		errs = append(errs, errors.New("trawl config: Dir and Deployment.Dir differ; set one"))
	}
	if c.Deployment.Admin != "" {
		errs = append(errs, errors.New("trawl config: Deployment.Admin opens a crawl for an administration command, not for Run; leave it empty"))
	}
	if c.Flush && c.Broker != nil {
		errs = append(errs, errors.New("trawl config: Flush empties the crawl Run opens; with a Broker given, purge it yourself"))
	}
	if c.Broker != nil && c.Deployment.Broker != "" {
		errs = append(errs, errors.New("trawl config: Broker and Deployment.Broker both name the frontier; set one"))
	}
	return errors.Join(errs...)
}

// Crawler is the front door: it crawls from start URLs with callbacks in
// the manner of Colly, on any broker and filter. Register callbacks with
// OnHTML, OnResponse, OnRequest and OnError before Run; a Crawler runs one
// crawl at a time.
type Crawler struct {
	cfg Config

	mu       sync.Mutex
	handlers []handler                // in registration order; fixed once Run starts
	requests []func(*Request)         // OnRequest, in registration order
	failures []func(*Response, error) // OnError, in registration order
	errs     []error                  // registration errors, reported by Run
	running  bool
	stats    *engine.Stats

	matchers sync.Map // selector -> cascadia.Selector (or error), for Element's Child methods
}

// handler is one registered callback.
type handler struct {
	kind     string // "html" or "response"
	selector string
	match    cascadia.Selector
	html     func(*Element)
	response func(*Response)
}

// New returns a crawler with cfg. It does not open anything: Run does, and
// reports a bad configuration.
func New(cfg Config) *Crawler {
	return &Crawler{cfg: cfg}
}

// OnHTML registers fn to run for every element that matches the CSS
// selector, on every HTML page, in document order. Handlers run in the
// order they were registered; the page is parsed once for all of them. A
// selector that does not compile makes Run fail.
//
// Every worker of a crawl must register the same handlers, in the same
// order: a request followed from a page names the handlers by a digest of
// their kinds and selectors, and a worker with other handlers dead-letters
// it (see engine.Config.Callbacks).
func (c *Crawler) OnHTML(selector string, fn func(e *Element)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running {
		c.errs = append(c.errs, fmt.Errorf("trawl: OnHTML(%q) while Run is running", selector))
		return
	}
	m, err := cascadia.Compile(selector)
	if err != nil {
		c.errs = append(c.errs, fmt.Errorf("trawl: OnHTML(%q): %w", selector, err))
		return
	}
	if fn == nil {
		c.errs = append(c.errs, fmt.Errorf("trawl: OnHTML(%q): nil function", selector))
		return
	}
	c.handlers = append(c.handlers, handler{kind: "html", selector: selector, match: m, html: fn})
}

// OnResponse registers fn to run for every successful (2xx) response, HTML
// or not, before the OnHTML handlers.
func (c *Crawler) OnResponse(fn func(r *Response)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running {
		c.errs = append(c.errs, errors.New("trawl: OnResponse while Run is running"))
		return
	}
	if fn == nil {
		c.errs = append(c.errs, errors.New("trawl: OnResponse: nil function"))
		return
	}
	c.handlers = append(c.handlers, handler{kind: "response", response: fn})
}

// OnRequest registers fn to run on the worker just before each attempt to
// fetch a page (Colly's OnRequest; not robots.txt, not sitemaps), a retry
// included. r is the request of this attempt: its URL, Method, Depth and
// Meta, and its Header, where a header set is sent with this attempt (not
// carried to the page's links). Meta set here reaches the page's handlers
// as r.Request.Meta. fn must not change URL, Method or Body, and runs on
// several goroutines at once (Config.Crawl.Concurrency).
func (c *Crawler) OnRequest(fn func(r *Request)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.running:
		c.errs = append(c.errs, errors.New("trawl: OnRequest while Run is running"))
	case fn == nil:
		c.errs = append(c.errs, errors.New("trawl: OnRequest: nil function"))
	default:
		c.requests = append(c.requests, fn)
	}
}

// OnError registers fn to run once for every page that fails for good
// (Colly's OnError): a 4xx (or other final status that is neither 2xx nor
// a redirect), a 5xx or 429 after the retries, a fetch that failed after
// the retries (unreachable, connection refused, timed out) or that no retry
// can mend (an unknown host, a bad certificate), a handler's error after
// the retries. It is not called for each retry. r.StatusCode is the
// status, 0 when no response came (r.Body is then empty); err says why
// ("404 Not Found", "retries exhausted after 4 attempts: Internal Server
// Error", the fetch's error) and wraps the cause. r.Follow and r.Item are
// dropped there, with a warning: the page is done. fn runs on several goroutines at once.
// A page may be reported again if its worker stops before it records the
// page as done.
func (c *Crawler) OnError(fn func(r *Response, err error)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.running:
		c.errs = append(c.errs, errors.New("trawl: OnError while Run is running"))
	case fn == nil:
		c.errs = append(c.errs, errors.New("trawl: OnError: nil function"))
	default:
		c.failures = append(c.failures, fn)
	}
}

// Request is a page about to be fetched, handed to the OnRequest
// handlers: the engine's request for this attempt (URL, Method, Header,
// Depth, Meta…). It is valid only while the handlers run.
type Request struct {
	*engine.Request

	ctx context.Context
}

// Context returns the context of the page's processing; it ends when the
// crawl stops for good.
func (r *Request) Context() context.Context { return r.ctx }

// hooks sets on cfg the engine hooks that run the OnRequest and OnError
// handlers, after those cfg has.
func hooks(cfg *engine.Config, requests []func(*Request), failures []func(*Response, error), name string, c *Crawler) {
	if len(requests) > 0 {
		prev := cfg.BeforeFetch
		cfg.BeforeFetch = func(ctx context.Context, req *engine.Request) {
			if prev != nil {
				prev(ctx, req)
			}
			r := &Request{Request: req, ctx: ctx}
			for _, fn := range requests {
				fn(r)
			}
		}
	}
	if len(failures) > 0 {
		var warned atomic.Bool
		prev := cfg.OnFailure
		cfg.OnFailure = func(ctx context.Context, req *engine.Request, resp *engine.Response, err error) {
			if prev != nil {
				prev(ctx, req, resp, err)
			}
			if resp == nil {
				u, _ := url.Parse(req.URL) // the engine fetches only URLs that parse
				resp = &engine.Response{Request: req, URL: u, Header: http.Header{}}
			}
			r := &Response{Response: resp, ctx: ctx, crawler: c, callback: name, base: resp.URL}
			for _, fn := range failures {
				fn(r, err)
			}
			if len(r.res.Requests)+len(r.res.Items) > 0 && !warned.Swap(true) {
				cfg.Logger.Warn("OnError followed links or emitted items; they are dropped, the page having failed (said once)",
					"url", engine.Redact(req.URL))
			}
		}
	}
}

// Stats returns the counters of the last or current Run (nil before the
// first), see engine.Stats.
func (c *Crawler) Stats() *engine.Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// callbackName names the registered handlers: a digest of their kinds and
// selectors in registration order, so that workers running the same
// program agree on it and workers registering other handlers do not.
func callbackName(hs []handler) string {
	h := sha256.New()
	for i, hd := range hs {
		fmt.Fprintf(h, "%d\x00%s\x00%s\x00", i, hd.kind, hd.selector)
	}
	return "trawl:" + hex.EncodeToString(h.Sum(nil)[:6])
}

// describe lists the handlers for a log line.
func describe(hs []handler) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		if h.kind == "html" {
			out[i] = "OnHTML(" + strconv.Quote(h.selector) + ")"
		} else {
			out[i] = "OnResponse"
		}
	}
	return out
}

// ErrNothingDone is the error of a Run given start URLs that wrote no
// item and fetched no page with a 2xx answer: the crawl was already
// crawled (its state persists in Dir: see Config.Flush), every start URL
// answered 404 or was disallowed by robots.txt. It wraps the reason.
var ErrNothingDone = errors.New("nothing done")

// Run seeds startURLs (absolute http or https URLs; none for a worker
// joining a crawl that was seeded elsewhere), crawls until the crawl is
// done or ctx ends, and closes what it opened. It returns nil when the
// crawl finished, ctx.Err() when ctx ended first (the crawl resumes from a
// persistent broker), engine.ErrNoPages when not a single page could be
// fetched, ErrNothingDone when start URLs were given but no page answered
// 2xx and no item was written (the reason said), an error wrapping
// deployment.ErrNoCrawl when, given none, it found no crawl of
// Crawl.Name on a shared broker within Crawl.IdleTimeout (as trawl worker,
// it begins none: Config.Serve does), or the configuration or
// start URL that is wrong. Without Crawl.Logger, warnings go to
// slog.Default()'s handler (standard error unless the program set one).
func (c *Crawler) Run(ctx context.Context, startURLs ...string) (err error) {
	c.mu.Lock()
	if c.running {
		c.mu.Unlock()
		return errors.New("trawl: Run is already running")
	}
	if err := errors.Join(append(c.errs, c.cfg.Validate())...); err != nil {
		c.mu.Unlock()
		return err
	}
	c.running = true
	hs, requests, failures := c.handlers, c.requests, c.failures
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.running = false
		c.mu.Unlock()
	}()

	cfg := c.cfg.Crawl
	var errs []error
	starts := make([]engine.StartURL, 0, len(startURLs))
	for _, s := range startURLs {
		st, err := engine.ParseStartURL([]byte(s))
		if err != nil {
			errs = append(errs, fmt.Errorf("trawl: start URL %q: want an absolute http or https URL", s))
			continue
		}
		starts = append(starts, st)
		u, _ := url.Parse(st.URL)
		cfg.TrustedHosts = append(cfg.TrustedHosts[:len(cfg.TrustedHosts):len(cfg.TrustedHosts)], engine.TrustedAddr(u))
	}
	if len(hs) > 0 {
		if _, ok := cfg.Callbacks[""]; ok {
			errs = append(errs, errors.New(`trawl: Crawl.Callbacks[""] and OnHTML or OnResponse both claim the start URLs; use one or the other`))
		}
		name := callbackName(hs)
		cbs := make(map[string]engine.Callback, len(cfg.Callbacks)+2)
		for k, v := range cfg.Callbacks {
			cbs[k] = v
		}
		cb := c.callback(name, hs)
		cbs[""], cbs[name] = cb, cb
		cfg.Callbacks = cbs
		if cfg.Logger != nil {
			cfg.Logger.Info("callbacks registered", "callback", name, "handlers", describe(hs))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if c.cfg.Serve {
		cfg.IdleTimeout = 0
	} else if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
		if c.inMemory() {
			cfg.IdleTimeout = inMemoryIdle
		}
	}
	if cfg.Stats == nil {
		cfg.Stats = engine.NewStats()
	}
	if cfg.Logger == nil {
		// Nothing silent: the crawl's warnings reach the program's log.
		cfg.Logger = slog.New(warnings{slog.Default().Handler()})
	}
	hooks(&cfg, requests, failures, callbackName(hs), c)
	c.mu.Lock()
	c.stats = cfg.Stats
	c.mu.Unlock()

	fr, purge, closeAll, err := c.open(ctx, &cfg, len(starts) == 0 && !c.cfg.Flush)
	if err != nil {
		return err
	}
	defer func() { err = join(err, closeAll()) }()
	if cfg.Sink == nil {
		out := c.cfg.Output
		if out == nil {
			out = os.Stdout
		}
		sink := engine.NewJSONLines(out)
		defer func() { err = join(err, sink.Close()) }()
		cfg.Sink = sink
	}
	if c.cfg.Flush {
		if err := purge(ctx); err != nil {
			return fmt.Errorf("trawl: flush: %w", err)
		}
	}
	ec, err := engine.NewOn(fr, cfg)
	if err != nil {
		return err
	}
	if err := ec.Seed(ctx, starts...); err != nil {
		return err
	}
	start := time.Now()
	// A persisted local filter journals what it adds and saves itself.
	if err := ec.Run(ctx); err != nil {
		return err
	}
	return nothingDone(engine.Summarize(cfg.Stats.Snapshot(), time.Since(start)), len(starts) > 0, cfg.Logger)
}

// nothingDone returns the error of a run that did nothing, ErrNothingDone
// with the reason, where start URLs were given (seeded); a worker that
// joined a crawl and found it done only logs why.
func nothingDone(s engine.Summary, seeded bool, log *slog.Logger) error {
	if s.Items > 0 {
		return nil
	}
	for code, n := range s.Statuses {
		if code >= 200 && code < 300 && n > 0 {
			return nil // pages were fetched; the callbacks chose to emit nothing
		}
	}
	why := strings.Replace(s.Empty(), "use --flush", "set Config.Flush", 1)
	if !seeded {
		log.Warn("the crawl wrote no item", "reason", why)
		return nil
	}
	return fmt.Errorf("trawl: %w: %s", ErrNothingDone, why)
}

// warnings passes on the records of Warn level and above.
type warnings struct{ slog.Handler }

func (w warnings) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && w.Handler.Enabled(ctx, l)
}
func (w warnings) WithAttrs(as []slog.Attr) slog.Handler { return warnings{w.Handler.WithAttrs(as)} }
func (w warnings) WithGroup(name string) slog.Handler    { return warnings{w.Handler.WithGroup(name)} }

// join returns err, or err and e joined when e is not nil: a close error
// is reported without hiding Run's own.
func join(err, e error) error {
	if e == nil {
		return err
	}
	return errors.Join(err, e)
}

// inMemory reports whether Run opens an in-memory broker.
func (c *Crawler) inMemory() bool {
	return c.cfg.Broker == nil && (c.cfg.InMemory || c.cfg.Deployment.Broker == "memory")
}

// open returns the frontier of the crawl, opening the deployment for
// what the configuration does not give, sets on cfg what the deployment
// provides (start URLs, shared limits and counters, stored settings), and
// returns functions that purge the crawl (nil with a Broker given) and
// close what it opened. A run that joins a crawl (no start URL) on a
// shared broker waits for the crawl to exist up to cfg.IdleTimeout, as
// trawl worker does (deployment.AwaitCrawl): a mistyped Crawl.Name begins
// no crawl.
func (c *Crawler) open(ctx context.Context, cfg *engine.Config, join bool) (frontier.Frontier, func(context.Context) error, func() error, error) {
	if c.cfg.Broker != nil {
		return frontier.Compose(c.cfg.Broker, c.cfg.Filter, engine.ComposeConfig(*cfg)), nil, func() error { return nil }, nil
	}
	dc := c.cfg.Deployment
	if c.cfg.InMemory {
		dc.Broker = "memory"
	}
	dc.Dir = cmp.Or(dc.Dir, c.cfg.Dir)
	dc.Flush = dc.Flush || c.cfg.Flush
	d, err := deployment.Open(ctx, dc, *cfg)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("trawl: %w", err)
	}
	if join && cfg.IdleTimeout > 0 && dc.Broker != "" && dc.Broker != "memory" {
		if err := d.AwaitCrawl(ctx, cfg.IdleTimeout); err != nil {
			return nil, nil, nil, fmt.Errorf("trawl: %w", errors.Join(err, d.Close()))
		}
	}
	d.Configure(cfg)
	fr := d.Frontier
	if c.cfg.Filter != nil {
		fr = frontier.Compose(d.Broker, c.cfg.Filter, engine.ComposeConfig(*cfg))
	}
	purge := func(ctx context.Context) error { return d.PurgeAll(ctx, false) }
	return fr, purge, d.Close, nil
}

// callback returns the engine callback that runs hs on a response.
func (c *Crawler) callback(name string, hs []handler) engine.Callback {
	parse := false
	for _, h := range hs {
		parse = parse || h.kind == "html"
	}
	return func(ctx context.Context, resp *engine.Response) (res engine.Result, err error) {
		r := &Response{Response: resp, ctx: ctx, crawler: c, callback: name, base: resp.URL}
		defer func() {
			if p := recover(); p != nil {
				res, err = engine.Result{}, fmt.Errorf("trawl: a callback panicked on %s: %v", resp.URL, p)
			}
		}()
		if parse && resp.IsHTML() {
			doc, err := goquery.NewDocumentFromReader(bytes.NewReader(resp.Body))
			if err != nil {
				return engine.Result{}, fmt.Errorf("trawl: parse %s: %w", resp.URL, err)
			}
			r.doc = doc
			if href, ok := doc.Find("base[href]").First().Attr("href"); ok {
				if u, err := resp.URL.Parse(strings.TrimSpace(href)); err == nil {
					r.base = u
				}
			}
		}
		for _, h := range hs {
			if h.kind == "response" {
				h.response(r)
			}
		}
		if r.doc != nil {
			for _, h := range hs {
				if h.kind != "html" {
					continue
				}
				r.doc.FindMatcher(h.match).Each(func(i int, s *goquery.Selection) {
					h.html(&Element{Request: resp.Request, Response: r, DOM: s, Index: i})
				})
			}
		}
		return r.res, errors.Join(r.errs...)
	}
}

// matcher compiles a selector used by an Element method, once per crawler.
func (c *Crawler) matcher(sel string) (cascadia.Selector, error) {
	if v, ok := c.matchers.Load(sel); ok {
		if m, ok := v.(cascadia.Selector); ok {
			return m, nil
		}
		return nil, v.(error)
	}
	m, err := cascadia.Compile(sel)
	if err != nil {
		err = fmt.Errorf("trawl: selector %q: %w", sel, err)
		c.matchers.Store(sel, err)
		return nil, err
	}
	c.matchers.Store(sel, m)
	return m, nil
}
