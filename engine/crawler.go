package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/dedup"
	"github.com/trawlhq/trawl/frontier"
	"github.com/trawlhq/trawl/internal/linkscan"
)

// Callback handles a response: it returns the requests to follow and the
// items to store. An error means the page is retried with back-off and, past
// the retry limit, dead-lettered; return ErrDrop to drop a request on purpose.
type Callback func(ctx context.Context, resp *Response) (Result, error)

// Result is what a callback produces.
type Result struct {
	Requests []*Request
	Items    []any

	// found are the links the default callback found, followed after
	// Requests (see foundLinks).
	found *foundLinks
}

// foundLinks are the links the default callback found on a page. They are
// followed as Requests{URL, Depth, Referrer, Scope} would be, but most are
// only scoped, looked up in the seen-link table and offered to the
// frontier as Known: request makes the Request of one that needs it (to
// be encoded, or to carry credentials), not every link a Request.
type foundLinks struct {
	links    []linkscan.Link
	depth    int    // of every link
	referrer string // every link's Referrer
	scope    string // every link's Scope: the page's (see follow)
}

// len is the number of links in f (nil: none).
func (f *foundLinks) len() int {
	if f == nil {
		return 0
	}
	return len(f.links)
}

// request returns the Request of lk, one of f.links.
func (f *foundLinks) request(lk *linkscan.Link) *Request {
	return &Request{URL: lk.URL, Depth: f.depth, Referrer: f.referrer, Scope: f.scope, parsed: lk}
}

// ErrDrop, returned by a callback, drops the request without retrying it.
var ErrDrop = errors.New("engine: drop request")

// ErrBackendFailing is returned by Run when the broker, the duplicate
// filter or the sink kept failing for Config.FailureTimeout with no success
// in between: every receive failed, or every page's publishing of its
// links, filter check or item write did (a Redis server out of memory, say,
// which refuses writes). The pages concerned were not acknowledged: they
// come back when the backend is repaired and a worker runs again.
var ErrBackendFailing = errors.New("engine: the broker, filter or sink keeps failing")

// ErrNoPages is returned by Run when the crawl ended without a single
// successful response but with errors: an unreachable site, say. It wraps
// the last error seen.
var ErrNoPages = errors.New("no page could be fetched")

// Crawler crawls a frontier (see package frontier). Any number of
// crawlers, in any number of processes, crawl together when they share
// the frontier.
type Crawler struct {
	cfg      *compiled
	frontier frontier.Frontier
	fp       dedup.Fingerprinter
	kit      pageKit // what pages are fetched and read with: fetcher, robots, scope, extraction
	limiter  HostLimiter
	pause    pauser                    // whether the crawl is paused (SetPaused)
	seen     atomic.Pointer[seenLinks] // links offered to the filter already; replaced when the crawl's state rolled back (see state.go)
	stats    *Stats
	log      *slog.Logger

	clocks failureClocks // the streaks of failed writes and receives, and the last page lost

	guards *pageGuards // this worker's own guards: MaxPages, URL traps, host budgets, refusals
	leases leaseKeeper // the deliveries this worker holds, their leases kept extended

	// settling is Run's writer and acker (see startSettlement); nil
	// outside Run: pages are then written and acknowledged one by one.
	settling *settlement

	state stateWatch // the crawl's mark (see state.go)

	member membership // this worker's joining of the crawl (see joinCrawl)

	waits hostWaits // says why pages wait long for their hosts' slots

	aff affinity // this worker's share of the queue's partitions (see affinity)
}

// New returns a crawler over b and f, composed into a frontier (see
// frontier.Compose). The crawler does not own them: the caller closes them
// after Run returns.
func New(b broker.Broker, f dedup.Filter, cfg Config) (*Crawler, error) {
	cc, err := cfg.compile()
	if err != nil {
		return nil, err
	}
	if b == nil || f == nil {
		return nil, errors.New("engine: a broker and a filter are required")
	}
	return newCrawler(frontier.Compose(b, f, ComposeConfig(cc.Config)), cc)
}

// ComposeConfig is the configuration of a composed frontier for a crawl
// of cfg: its claim wait derives from cfg.Lease, and it logs to
// cfg.Logger.
func ComposeConfig(cfg Config) frontier.ComposeConfig {
	wait := 15 * time.Second
	if cfg.Lease > 0 {
		wait = cfg.Lease / 2
	}
	return frontier.ComposeConfig{ClaimWait: wait, Logger: cfg.Logger}
}

// NewOn returns a crawler of the frontier fr. The crawler does not own
// it: the caller closes what it stands on after Run returns.
func NewOn(fr frontier.Frontier, cfg Config) (*Crawler, error) {
	cc, err := cfg.compile()
	if err != nil {
		return nil, err
	}
	if fr == nil {
		return nil, errors.New("engine: a frontier is required")
	}
	return newCrawler(fr, cc)
}

// newCrawler returns a crawler of fr with the compiled configuration cc.
func newCrawler(fr frontier.Frontier, cc *compiled) (*Crawler, error) {
	c := &Crawler{frontier: fr, stats: cc.Stats, log: cc.Logger, kit: pageKit{extractLinks: linkscan.ExtractLimited}, guards: newPageGuards()}
	c.seen.Store(newSeenLinks())
	if c.stats == nil {
		c.stats = NewStats()
	}
	if err := c.build(cc); err != nil {
		return nil, err
	}
	c.limiter = cc.Limiter
	if c.limiter == nil {
		c.limiter = newPoliteness(politenessConfig{PerHost: cc.PerHost, Delay: cc.Delay, AutoThrottle: cc.AutoThrottle})
	}
	c.waits = hostWaits{limiter: c.limiter, perHost: cc.PerHost, log: c.log}
	c.aff.log = c.log
	return c, nil
}

// build makes cc the crawler's configuration, with the parts that derive
// from its settings: its page kit (scope, extraction, fetcher and robots)
// and its guards.
func (c *Crawler) build(cc *compiled) error {
	if err := c.kit.build(cc, c.log); err != nil {
		return err
	}
	c.cfg = cc
	c.guards.configure(cc)
	return nil
}

// Stats returns the crawler's counters.
func (c *Crawler) Stats() *Stats { return c.stats }

// Seed publishes start URLs to the crawl's start queue; Run takes them when
// its frontier is idle. Unless Config.AllowedDomains is set, the links
// followed from a start URL stay on its host's domain (see Request.Scope).
func (c *Crawler) Seed(ctx context.Context, starts ...StartURL) error {
	if err := c.joinCrawl(ctx); err != nil {
		return err
	}
	if err := c.markCrawl(ctx, false); errors.Is(err, ErrStateLost) {
		return err
	} else if err != nil {
		c.log.Warn("cannot read or write the crawl's mark: a loss of the crawl's state may go unnoticed", "err", err)
	}
	if c.cfg.Starts != nil {
		return seedSource(ctx, c.cfg.Starts, starts...)
	}
	return seedBroker(ctx, c.frontier.Broker(), c.cfg.Name, starts...)
}

// pollInterval is how often the feeder looks at whether the crawl is done
// while this worker waits on the frontier.
const pollInterval = 200 * time.Millisecond

// startsPoll is how long the frontier may keep the receiver waiting
// before the feeder is asked for start URLs.
const startsPoll = 5 * time.Millisecond

// startsCooldown is how long a worker whose frontier has work waits
// before it looks at start URLs again after finding none.
const startsCooldown = time.Second

// settleTimeout bounds acks and give-backs made after Run's context ended.
const settleTimeout = 10 * time.Second

// Run crawls until the crawl is done (see Config.IdleTimeout), this worker
// reached Config.MaxPages, or ctx ends. When ctx ends, pages being fetched
// are finished (their fetches are bounded by the fetch timeout) and
// deliveries not yet started are given back; Run then returns ctx.Err().
func (c *Crawler) Run(ctx context.Context) error {
	if err := c.joinCrawl(ctx); err != nil {
		c.kit.fetcher.Close()
		return err
	}
	if err := c.markCrawl(ctx, true); errors.Is(err, ErrStateLost) {
		c.kit.fetcher.Close()
		return err
	} else if err != nil {
		c.log.Warn("cannot read or write the crawl's mark: a loss of the crawl's state may go unnoticed", "err", err)
	}
	defer c.kit.fetcher.Close()
	if c.cfg.SharedStats != nil {
		// Its last flush runs after Run has waited for the work, so it
		// carries the final counters.
		share, stopShare := context.WithCancel(context.WithoutCancel(ctx))
		shared := make(chan struct{})
		go func() { defer close(shared); c.shareStats(share) }()
		defer func() { stopShare(); <-shared }()
	}
	c.log.Info("crawl started", "crawl", c.cfg.Name, "concurrency", c.cfg.Concurrency)

	// Work runs on its own context so that in-flight pages finish after
	// ctx ends; stop cancels it once they are done.
	work, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()

	var wg sync.WaitGroup
	keeperDone := make(chan struct{})
	batch, _ := c.frontier.Broker().(broker.BatchExtender)
	bench := newWorkbench(c.cfg.PerHost, readAheadFactor*c.cfg.Concurrency, c.limiter)
	c.leases.lost = func(ds []broker.Delivery) { c.dropLost(bench, ds) }
	wg.Go(func() { c.leases.keep(work, c.cfg.Lease, batch, keeperDone, c.log) })
	if p := c.presence(); p != nil {
		wg.Go(func() { p.run(work, keeperDone) })
	}

	c.settling = c.startSettlement(work, ctx)
	// A page goroutine per slot, for the whole run: a goroutine per page
	// would grow a fresh stack (fetching and scanning need some) each time.
	sem := make(chan struct{}, c.cfg.Concurrency)
	pages := make(chan *benchItem)
	for range c.cfg.Concurrency {
		wg.Go(func() {
			for it := range pages {
				c.handle(ctx, work, it.d, it.req, func() { bench.done(it) }, func() bool { return bench.spare(it) })
				c.leases.done(it.d)
				c.stats.AddInFlight(-1)
				bench.done(it)
				<-sem
			}
		})
	}
	err := c.receive(ctx, sem, bench, func(it *benchItem) {
		c.stats.AddInFlight(1)
		pages <- it // a goroutine is free: it took a free slot
	})
	// Wait for the pages in hand (each releases its slot), then the keeper.
	for range c.cfg.Concurrency {
		sem <- struct{}{}
	}
	close(pages)
	// Then write and acknowledge what they left with the writer and the
	// acker, before the keeper stops extending leases.
	c.settling.stop()
	c.settling = nil
	close(keeperDone)
	wg.Wait()
	// The counters are the one source of truth for what the crawl did.
	c.log.Info("crawl stopped", "crawl", c.cfg.Name, "pages", c.stats.Get(StatResponses),
		"items", c.stats.Get(StatItems), "errors", c.stats.Get(StatErrors), "err", err)
	if err == nil && c.stats.Get(StatResponses) == 0 && c.stats.Get(StatErrors) > 0 {
		if last := c.clocks.lastLost(); last != nil {
			err = fmt.Errorf("%w: %w", ErrNoPages, last)
		} else {
			err = ErrNoPages
		}
	}
	return err
}

// stateEvery is how many pollIntervals apart the feeder looks at whether
// a store's server restarted (see checkState).
const stateEvery = 5

// errCrawlDone ends the receiver when the feeder found the crawl done.
var errCrawlDone = errors.New("crawl done")

// receive takes deliveries from one consumer of the frontier onto the
// workbench and hands them to dispatch, one each time a slot is free: the
// first, in the frontier's order, whose host has room (see workbench),
// reading on past deliveries for hosts at their cap while the workbench
// has room for them. Meanwhile a feeder (see feeder) moves start URLs into the
// frontier and watches for the crawl's end on its own schedule. It
// returns nil when the crawl is done or MaxPages is reached, ctx.Err()
// when ctx ends, and a broker error that is not transient. On return the
// deliveries held back are given back, and closing the consumer gives its
// read-ahead back.
func (c *Crawler) receive(ctx context.Context, sem chan struct{}, bench *workbench, dispatch func(*benchItem)) error {
	queue := RequestsQueue(c.cfg.Name)
	// A crawl paused before this worker started takes nothing from it:
	// the feeder's ticks would read the pause too late.
	c.pollPause(ctx)
	// Start URLs first: a fresh crawl has nothing else.
	took, err := c.feedStarts(ctx)
	if err != nil {
		return err
	}
	startsLeft := took > 0
	cons, err := c.consume(ctx, queue)
	if err != nil {
		return err
	}
	defer func() {
		if cons == nil {
			return // closed for a pause, and not opened again
		}
		if err := cons.Close(); err != nil {
			c.log.Warn("closing the frontier's consumer failed", "queue", queue, "err", err)
		}
	}()
	defer func() {
		held := bench.drain()
		ds := make([]broker.Delivery, len(held))
		for i, it := range held {
			ds[i] = it.d
		}
		c.giveBack(ctx, ds...)
		for _, d := range ds {
			c.leases.done(d)
		}
	}()

	run, finish := context.WithCancelCause(ctx)
	hungry := make(chan struct{}, 1)
	feeder := make(chan struct{})
	f := c.newFeeder(startsLeft)
	go func() {
		defer close(feeder)
		f.run(run, hungry, finish)
	}()
	defer func() { <-feeder }()
	defer finish(nil) // runs before the wait above

	signal := func() {
		select {
		case hungry <- struct{}{}:
		default:
		}
	}
	hunger := time.AfterFunc(time.Hour, signal) // one timer, reset per Next
	hunger.Stop()
	defer hunger.Stop()
	shares := c.aff.changed.Load() // the share the workbench holds deliveries for
	for {
		if stop, err := c.gate(ctx, run, &cons, queue); stop {
			return err
		}
		if n := c.aff.changed.Load(); n != shares {
			shares = n
			c.shed(ctx, bench)
		}
		select {
		case sem <- struct{}{}:
		case <-run.Done():
			return c.ended(ctx, run)
		}
		it, err := c.nextItem(ctx, run, cons, bench, hunger)
		if it == nil {
			<-sem
			if err != nil {
				return err
			}
			if run.Err() != nil {
				return c.ended(ctx, run)
			}
			continue
		}
		dispatch(it)
	}
}

// gate holds the receiver before it takes a slot, and says whether it is
// to stop, with what receive returns: at the page limit (nil), when the
// writes keep failing, or when run ended while this worker backed off
// after refusals or was paused. A pause closes the consumer *cons (its
// read-ahead goes back to the queue at once; what the workbench holds
// stays, its leases kept), and gate opens another on resume; *cons is
// nil if that failed.
func (c *Crawler) gate(ctx, run context.Context, cons *broker.Consumer, queue string) (stop bool, err error) {
	if c.guards.reached(c.cfg.MaxPages) {
		c.log.Info("page limit reached", "pages", c.cfg.MaxPages)
		return true, nil
	}
	if err := c.clocks.writes.check(c.cfg.FailureTimeout); err != nil {
		c.log.Error("writes keep failing; stopping", "err", err)
		return true, fmt.Errorf("%w: publishing links, checking the filter or writing items %w; "+
			"no page was acknowledged or dead-lettered for it", ErrBackendFailing, err)
	}
	if !c.refusalPause(run) {
		return true, c.ended(ctx, run)
	}
	if !c.pause.isPaused() {
		return false, nil
	}
	closed := false
	if !c.pause.wait(run, func() { (*cons).Close(); closed = true }) {
		return true, c.ended(ctx, run)
	}
	if closed {
		if *cons, err = c.consume(ctx, queue); err != nil {
			return true, err
		}
	}
	return false, nil
}

// nextItem returns the delivery for the slot the receiver holds: the
// first on the workbench whose host has room, else the next from the
// frontier, waiting until either comes (a page that ends may give a
// held-back delivery room while the frontier keeps the receiver
// waiting). It returns nil and nil when the receiver is to look again
// (after a failed receive, or when run ended), and nil and an error for
// one that ends the crawl.
func (c *Crawler) nextItem(ctx, run context.Context, cons broker.Consumer, bench *workbench, hunger *time.Timer) (*benchItem, error) {
	queue := RequestsQueue(c.cfg.Name)
	for {
		if it := bench.take(); it != nil {
			return it, nil
		}
		wait, woken := context.WithCancel(run)
		if !bench.waitWith(woken) {
			woken()
			continue // a held-back delivery got room meanwhile
		}
		c.pause.wakeOnPause(woken)
		if bench.full() {
			// A host got room, the crawl was paused, run ended, or the
			// writes' streak reached FailureTimeout (the hosts held back
			// may never come: a Redis out of memory refuses their leases).
			held, stopHeld := c.clocks.writes.bound(wait, c.cfg.FailureTimeout)
			<-held.Done()
			streak := wait.Err() == nil // held ended, wait did not
			stopHeld()
			c.pause.wakeOnPause(nil)
			bench.waitWith(nil)
			woken()
			if run.Err() != nil || c.pause.isPaused() || streak {
				return nil, nil // the receiver checks the writes' streak
			}
			continue
		}
		// A frontier that keeps this worker waiting asks for start URLs.
		hunger.Reset(startsPoll)
		next, stopNext := c.clocks.writes.bound(wait, c.cfg.FailureTimeout)
		d, err := cons.Next(next)
		c.pause.wakeOnPause(nil)
		stopNext()
		hunger.Stop()
		woke := wait.Err() != nil && run.Err() == nil
		bench.waitWith(nil)
		woken()
		if err != nil {
			switch {
			case run.Err() != nil:
				return nil, nil
			case woke && c.pause.isPaused():
				return nil, nil // the receiver parks; Next lost nothing
			case woke:
				continue // a held-back delivery got room; Next lost nothing
			case next.Err() != nil:
				return nil, nil // the writes' streak reached FailureTimeout: the receiver checks it
			case errors.Is(err, broker.ErrClosed) || errors.Is(err, broker.ErrInvalid):
				return nil, fmt.Errorf("engine: receive: %w", err)
			}
			c.clocks.receives.fail(err)
			if err := c.clocks.receives.check(c.cfg.FailureTimeout); err != nil {
				c.log.Error("receiving keeps failing; stopping", "queue", queue, "err", err)
				return nil, fmt.Errorf("%w: receiving from %s %w", ErrBackendFailing, queue, err)
			}
			c.log.Warn("receive failed; retrying", "queue", queue, "err", err)
			sleep(run, time.Second)
			return nil, nil
		}
		c.clocks.receives.ok()
		if ctx.Err() != nil {
			c.giveBack(ctx, d)
			return nil, ctx.Err()
		}
		c.leases.take(d)
		bench.add(newBenchItem(d))
	}
}

// ended is what receive returns once run (its context, derived from ctx)
// ended: nil when the feeder found the crawl done, the feeder's error when
// the start source is of the wrong type, else ctx.Err().
func (c *Crawler) ended(ctx, run context.Context) error {
	if ctx.Err() == nil {
		cause := context.Cause(run)
		if errors.Is(cause, errCrawlDone) {
			return nil
		}
		if errors.Is(cause, ErrStartsType) {
			return cause
		}
	}
	if err := c.stateLost(); err != nil {
		return err
	}
	return ctx.Err()
}

// consume opens this worker's consumer of queue, reading ahead at most
// Concurrency deliveries (one per slot), retrying while the broker fails
// for less than FailureTimeout.
func (c *Crawler) consume(ctx context.Context, queue string) (broker.Consumer, error) {
	prefetch := consumePrefetch(c.frontier.Broker(), c.cfg.Concurrency)
	for {
		cons, err := c.frontier.Broker().Consume(ctx, queue, prefetch)
		if err == nil {
			c.clocks.receives.ok()
			c.aff.attach(cons, partitions(c.frontier.Broker()))
			return cons, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, broker.ErrClosed) || errors.Is(err, broker.ErrInvalid) {
			return nil, fmt.Errorf("engine: consume: %w", err)
		}
		c.clocks.receives.fail(err)
		if err := c.clocks.receives.check(c.cfg.FailureTimeout); err != nil {
			c.log.Error("receiving keeps failing; stopping", "queue", queue, "err", err)
			return nil, fmt.Errorf("%w: consuming %s %w", ErrBackendFailing, queue, err)
		}
		c.log.Warn("opening a consumer failed; retrying", "queue", queue, "err", err)
		if !sleep(ctx, time.Second) {
			return nil, ctx.Err()
		}
	}
}

// consumePrefetch is the prefetch of a consumer of b for a crawler of the
// given concurrency: one delivery read ahead per slot. A broker whose
// consumers count unsettled deliveries against their prefetch
// (broker.UnsettledCounter: RabbitMQ) gets room on top for those the
// workbench holds back (see workbench) and those the writer and the acker
// hold (see settle.go), else they would take slots' room while they wait
// and fewer than concurrency pages would be in flight.
func consumePrefetch(b broker.Broker, concurrency int) int {
	if uc, ok := b.(broker.UnsettledCounter); ok && uc.CountsUnsettled() {
		return concurrency + readAheadFactor*concurrency + 2*batchSize(concurrency)
	}
	return concurrency
}

// feedStarts takes a batch of start URLs into the frontier, logging a
// failure, and says how many it took. It returns an error only for a
// failure no retry mends, a start source of the wrong type
// (ErrStartsType), which ends the crawl.
func (c *Crawler) feedStarts(ctx context.Context) (int, error) {
	took, err := c.takeStarts(ctx)
	if err != nil && ctx.Err() == nil {
		if errors.Is(err, ErrStartsType) {
			return took, fmt.Errorf("taking start urls: %w", err)
		}
		c.log.Warn("taking start urls failed", "err", err)
	}
	return took, nil
}

// newFeeder returns the feeder of a Run (see feeder); startsLeft: its
// first take of start URLs took some.
func (c *Crawler) newFeeder(startsLeft bool) *feeder {
	f := &feeder{
		takeStarts: c.feedStarts,
		busy:       func() bool { return c.leases.inFlight() > 0 },
		idle:       c.idle,
		watch:      c.watchState,
		verify:     c.verifyState,
		pollPause:  c.pollPause,
		timeout:    c.cfg.IdleTimeout,
		lease:      c.cfg.Lease,
		log:        c.log,
		startsLeft: startsLeft,
	}
	if !startsLeft {
		f.startsEmpty = time.Now()
	}
	return f
}

// watchState returns the crawl's loss, if its state was lost, looking at
// whether a store's server restarted first when deep (see checkState).
func (c *Crawler) watchState(ctx context.Context, deep bool) error {
	if deep {
		if err := c.checkState(ctx); err != nil {
			return err
		}
	}
	return c.stateLost()
}

// idle reports whether nothing is in flight here and nothing is queued or
// in flight anywhere, and, when nothing is in flight here and nothing is
// queued, how many requests are in flight (at other workers; 0 while the
// crawl is paused); when counting a queue fails, it reports the queue and
// the error.
func (c *Crawler) idle(ctx context.Context) (bool, int64, string, error) {
	if c.leases.inFlight() > 0 {
		return false, 0, "", nil
	}
	queues := []string{RequestsQueue(c.cfg.Name), StartQueue(c.cfg.Name)}
	if c.cfg.Starts != nil {
		queues = queues[:1]
		n, err := c.cfg.Starts.PendingStarts(ctx)
		if err != nil {
			return false, 0, StartQueue(c.cfg.Name), err
		}
		if n > 0 {
			return false, 0, "", nil
		}
	}
	var inFlight int64
	for _, q := range queues {
		n, err := c.frontier.Broker().Counts(ctx, q)
		if err != nil {
			return false, 0, q, err
		}
		if n.Ready > 0 {
			return false, 0, "", nil
		}
		inFlight += n.InFlight
	}
	if c.pause.isPaused() {
		return inFlight == 0, 0, "", nil // paused workers hold them, as said
	}
	return inFlight == 0, inFlight, "", nil
}

// takeStarts moves a batch of start URLs into the frontier.
func (c *Crawler) takeStarts(ctx context.Context) (int, error) {
	if c.cfg.Starts != nil {
		return c.takeExternalStarts(ctx)
	}
	pctx, cancel := context.WithTimeout(ctx, pollInterval/4)
	ds, err := c.frontier.Broker().Receive(pctx, StartQueue(c.cfg.Name), c.cfg.StartBatch)
	cancel()
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return 0, err
	}
	// One enqueue for the batch: one filter call, one publish.
	good := make([]broker.Delivery, 0, len(ds))
	reqs := make([]*Request, 0, len(ds))
	for _, d := range ds {
		c.stats.Inc(StatStartURLs)
		req, err := startRequest(d.Message().Body)
		if err != nil {
			c.stats.Inc(StatStartURLsRejected)
			c.deadLetter(ctx, d, err)
			continue
		}
		good = append(good, d)
		reqs = append(reqs, c.withSitemaps(req)...)
	}
	if err := c.enqueueStarts(ctx, reqs); err != nil {
		if pageFault(err) {
			for _, d := range good {
				c.settle(ctx, d, nack(c.cfg.retryDelay(d.Attempt())))
			}
			return len(ds), err
		}
		// The backend's failure, not the start URLs': they go back with
		// their attempts unspent, taken again at the feeder's next tick.
		c.clocks.writes.fail(err)
		for _, d := range good {
			c.unspent(ctx, d)
		}
		return len(ds), err
	}
	for _, d := range good {
		c.settle(ctx, d, ack())
	}
	return len(ds), nil
}

// takeExternalStarts takes start URLs from Config.Starts. A payload that is
// not a start URL is counted, logged at Warn and dead-lettered with the
// reason. The batch is dropped from the source once its requests are in
// the frontier; when they could not be moved there, only the rejected
// payloads are, and the others stay, taken again at the feeder's next
// tick.
func (c *Crawler) takeExternalStarts(ctx context.Context) (int, error) {
	ps, err := c.cfg.Starts.TakeStarts(ctx, c.cfg.StartBatch)
	if err != nil || len(ps) == 0 {
		return 0, err
	}
	reqs := make([]*Request, 0, len(ps))
	good := make([][]byte, 0, len(ps)) // the payloads of reqs, kept on failure
	for _, p := range ps {
		c.stats.Inc(StatStartURLs)
		req, err := startRequest(p)
		if err != nil {
			c.rejectStart(ctx, p, err)
			continue
		}
		good = append(good, p)
		reqs = append(reqs, c.withSitemaps(req)...)
	}
	err = c.enqueueStarts(ctx, reqs)
	var keep [][]byte
	if err != nil {
		if !pageFault(err) {
			c.clocks.writes.fail(err)
		}
		keep = good
	}
	if len(keep) == len(ps) {
		return len(ps), err // nothing to drop
	}
	// The drop only shrinks the source, so the writes that just failed
	// (a Redis server out of memory) do not fail it too.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	if e := c.cfg.Starts.DropStarts(pctx, ps, keep); e != nil {
		c.log.Warn("start url batch not dropped from its source: it is taken again, and what is in the frontier is not published twice",
			"count", len(ps), "err", e)
	}
	return len(ps), err
}

// startRequest turns a start-URL payload into a request scoped to its host.
func startRequest(p []byte) (*Request, error) {
	s, err := ParseStartURL(p)
	if err != nil {
		return nil, err
	}
	u, _ := url.Parse(s.URL) // ParseStartURL returned a canonical URL
	req := &Request{URL: s.URL, Meta: s.Meta, Priority: s.Priority, Scope: u.Hostname()}
	for k, v := range s.Headers {
		if req.Header == nil {
			req.Header = make(http.Header, len(s.Headers))
		}
		req.Header.Set(k, v)
	}
	return req, nil
}

// handle processes one delivery and settles it. ctx is Run's context (its
// end means: start nothing new); work stays alive until the page is done.
// fetchEnded is called once the page's fetch ended, if it was fetched,
// and spare as its body was read (see visit).
func (c *Crawler) handle(ctx, work context.Context, d broker.Delivery, req *Request, fetchEnded func(), spare func() bool) {
	c.stats.Inc(StatDequeued)
	if req == nil {
		req = new(Request)
		if err := req.UnmarshalBinary(d.Message().Body); err != nil {
			c.deadLetter(work, d, err)
			return
		}
	}
	if ctx.Err() != nil {
		c.giveBack(work, d)
		return
	}
	prior := earlier(req, d)
	switch a := c.process(ctx, work, req, prior, fetchEnded, spare).(type) {
	case giveBackAction:
		c.republish(work, d, req, prior)
	case writeAction:
		c.submit(work, d, a.w)
	default:
		c.settle(work, d, a)
	}
}

// earlier returns how many times req was delivered before this delivery:
// the deliveries of this message (Attempt - 1) plus those of the messages
// it was given back from (Request.Retries, see republish). It is the
// number of retries used so far.
func earlier(req *Request, d broker.Delivery) int {
	return max(0, req.Retries) + max(0, d.Attempt()-1)
}

// process fetches req and hands the response to its callback; it returns
// how the delivery is to be settled. prior is the number of earlier
// deliveries (see earlier). Each step returns the page's action when it
// settles the page, nil when the page goes on to the next.
func (c *Crawler) process(ctx, work context.Context, req *Request, prior int, fetchEnded func(), spare func() bool) action {
	v := &visit{req: req, prior: prior, asked: time.Now(), fetchEnded: fetchEnded, spare: spare} // asked: before the address guard is asked (see refuse)
	if a := c.route(ctx, v); a != nil {
		return a
	}
	if a := c.checkRobots(ctx, work, v); a != nil {
		return a
	}
	if a := c.fetchPage(ctx, work, v); a != nil {
		return a
	}
	if a := c.judge(work, v); a != nil {
		return a
	}
	return c.follow(work, v)
}

// visit is one delivery's page on its way through process.
type visit struct {
	req   *Request
	prior int       // earlier deliveries (see earlier)
	asked time.Time // before the address guard was asked (see refuse)
	u     *url.URL  // req's URL, parsed
	cb    Callback
	// recyclable: the callback is the default one, which keeps nothing
	// of the body
	recyclable bool
	fetched    *Request // the copy of req fetched (see beforeFetch)
	resp       *Response
	// fetchEnded is called once the fetch ended and the host's slot was
	// given back: the workbench gives the host's next page room then.
	fetchEnded func()
	// spare tells, once the fetch's body was read, whether its host has
	// no use for the fetch's connection (see workbench.spare).
	spare func() bool
}

// route checks v's URL and looks up its callback: before the fetch, so
// that a request for a callback this worker does not have is not fetched
// for nothing.
func (c *Crawler) route(ctx context.Context, v *visit) action {
	req := v.req
	if len(req.URL) > MaxURLLength {
		c.fail(ErrorBadURL, nil)
		return reject(fmt.Sprintf("%v: %d bytes, the limit is %d", ErrURLTooLong, len(req.URL), MaxURLLength))
	}
	u, err := url.Parse(req.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		c.fail(ErrorBadURL, nil)
		return reject(fmt.Sprintf("bad url %q", Redact(req.URL)))
	}
	v.u = u
	cb, ok := c.cfg.Callbacks[req.Callback]
	if !ok {
		cb, ok = c.builtinCallback(req.Callback)
	}
	if !ok {
		if req.Callback != "" {
			reason := c.unknownCallback(ctx, req)
			c.fail(ErrorCallback, errors.New(reason))
			return reject(reason)
		}
		cb, v.recyclable = c.defaultCallback, true
	}
	v.cb = cb
	return nil
}

// checkRobots asks robots.txt about v, unless robots are ignored.
func (c *Crawler) checkRobots(ctx, work context.Context, v *visit) action {
	if c.kit.robots == nil {
		return nil
	}
	req, u := v.req, v.u
	ok, delay, sitemaps, err := c.kit.robots.check(ctx, u)
	if ctx.Err() != nil {
		return giveBack()
	}
	switch {
	case errors.Is(err, ErrLocalRefusal):
		return c.failed(work, req, nil, redactErr(err), c.refuse(ctx, req, u, v.asked, err))
	case errors.Is(err, ErrRobotsUnavailable):
		return c.failed(work, req, nil, redactErr(err), c.robotsDown(req, v.prior, u, err))
	case err != nil:
		c.logPage(ctx, slog.LevelDebug, req, "robots.txt check failed; allowing", "err", err)
	case req.Callback == CallbackRobotsSitemaps:
		return c.robotsSitemaps(req, u, sitemaps) // the cache holds the file: not fetched again
	}
	if delay > 0 {
		c.limiter.SetDelay(u.Host, delay)
	}
	if !ok {
		c.stats.Inc(StatRobotsForbidden)
		c.logPage(ctx, slog.LevelDebug, req, "forbidden by robots.txt")
		return ack()
	}
	return nil
}

// fetchPage fetches v once its host has a slot and this worker is under
// MaxPages, and settles a fetch that failed.
func (c *Crawler) fetchPage(ctx, work context.Context, v *visit) action {
	req, u := v.req, v.u
	release, err := c.waits.acquire(ctx, u.Host)
	if err != nil {
		return giveBack()
	}
	if !c.guards.startPage(c.cfg.MaxPages) {
		release()
		return giveBack()
	}
	c.stats.Inc(StatRequests)
	v.fetched = req
	if c.cfg.BeforeFetch != nil && !isSitemap(req) {
		v.fetched = c.beforeFetch(work, req)
	}
	began := time.Now()
	v.resp, err = c.fetchRequest(withSpareConn(work, v.spare), v.fetched)
	c.stats.ObserveFetch(time.Since(began))
	release()
	v.fetchEnded()
	c.tallyHost(u.Host, v.resp, err)
	switch {
	case errors.Is(err, ErrLocalRefusal):
		c.guards.unstartPage()
		return c.failed(work, v.fetched, nil, redactErr(err), c.refuse(ctx, req, u, v.asked, err))
	case err == nil:
		c.guards.refused.streak.Store(0)
		return nil
	case isRetryable(err):
		c.limiter.Backoff(u.Host, time.Now().Add(c.cfg.backoff(v.prior+1)))
		return c.errorItem(work, v.fetched, nil, redactErr(err), c.retry(req, v.prior, err, 0))
	}
	err = redactErr(err)
	c.fail(fetchErrorKind(err), err)
	c.logPage(work, slog.LevelInfo, req, "fetch failed", "err", err)
	return c.errorItem(work, v.fetched, nil, err, ack())
}

// judge counts v's response and settles it unless it is a 2xx, which
// callbacks see: a 429 or 503 or a 5xx is retried, a redirect followed.
func (c *Crawler) judge(work context.Context, v *visit) action {
	req, u, resp := v.req, v.u, v.resp
	c.limiter.Observe(u.Host, resp.Latency, resp.StatusCode)
	c.stats.Inc(StatResponses)
	c.stats.Inc(statusStat(resp.StatusCode))
	c.stats.Add(StatBytes, int64(len(resp.Body)))
	c.logPage(work, slog.LevelDebug, req, "fetched", "status", resp.StatusCode, "bytes", len(resp.Body))

	switch code := resp.StatusCode; {
	case code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable:
		wait, ok := retryAfter(resp.Header, time.Now())
		if !ok {
			wait = c.cfg.backoff(v.prior + 1)
		}
		if wait > maxBackoff {
			c.log.Warn("Retry-After over the one-minute cap: holding the host for a minute", "host", u.Host,
				"retry_after", resp.Header.Get("Retry-After"), "hold", maxBackoff)
			wait = maxBackoff
		}
		c.limiter.Backoff(u.Host, time.Now().Add(wait))
		why := errors.New(http.StatusText(resp.StatusCode))
		return c.errorItem(work, v.fetched, resp, why, c.retry(req, v.prior, why, wait))
	case code >= 500:
		c.limiter.Backoff(u.Host, time.Now().Add(c.cfg.backoff(v.prior+1)))
		why := errors.New(http.StatusText(resp.StatusCode))
		return c.errorItem(work, v.fetched, resp, why, c.retry(req, v.prior, why, 0))
	case code >= 300 && code < 400 && resp.Header.Get("Location") != "":
		return c.redirect(work, req, resp)
	case code < 200 || code >= 300:
		// Counted above; callbacks see 2xx only.
		return c.errorItem(work, v.fetched, resp, nil, ack())
	}
	return nil
}

// follow hands v's 2xx response to its callback: what it returns is
// written, then the delivery acknowledged.
func (c *Crawler) follow(work context.Context, v *visit) action {
	req, resp := v.req, v.resp
	res, err := v.cb(work, resp)
	if v.recyclable {
		c.kit.fetcher.recycle(resp.Body)
		resp.Body = nil
	}
	switch {
	case errors.Is(err, ErrDrop):
		c.stats.Inc(StatDropped)
		return ack()
	case err != nil:
		err = fmt.Errorf("callback: %w", err)
		return c.failed(work, v.fetched, resp, err, c.retry(req, v.prior, err, 0))
	}
	for _, r := range res.Requests {
		if r.Depth == 0 {
			r.Depth = req.Depth + 1
		}
		if r.Scope == "" {
			r.Scope = req.Scope
		}
	}
	if res.found != nil {
		res.found.scope = req.Scope
	}
	// A failed write is never acknowledged: the page is nacked (the
	// broker's delivery limit applies, not MaxRetries), its links stay
	// claimed without marks, and its next attempt publishes them.
	return written(&write{parent: req, links: res.Requests, found: res.found, items: res.Items, failed: nack(c.cfg.retryDelay(v.prior + 1))})
}

// logPage logs msg about req, with its URL, if level is enabled: a
// logger made With the URL would format it for every page.
func (c *Crawler) logPage(ctx context.Context, level slog.Level, req *Request, msg string, args ...any) {
	if !c.log.Enabled(ctx, level) {
		return
	}
	c.log.Log(ctx, level, msg, append([]any{"url", Redact(req.URL)}, args...)...)
}

// beforeFetch returns the copy of req that this attempt fetches, with its
// own Header and Meta, once Config.BeforeFetch has seen it.
func (c *Crawler) beforeFetch(ctx context.Context, req *Request) *Request {
	cp := *req
	cp.Header = req.Header.Clone()
	if cp.Header == nil {
		cp.Header = make(http.Header)
	}
	cp.Meta = maps.Clone(req.Meta)
	c.cfg.BeforeFetch(ctx, &cp)
	return &cp
}

// failed tells Config.OnFailure of a page that failed with why (nil: its
// response's status), when then (how the delivery is settled) is final:
// an ack or a reject, not a retry nor a give-back. It returns then.
func (c *Crawler) failed(ctx context.Context, req *Request, resp *Response, why error, then action) action {
	if c.cfg.OnFailure == nil || isSitemap(req) || !isFinal(then) {
		return then
	}
	r, rejected := then.(rejectAction)
	switch {
	case rejected && why != nil:
		why = &givenUp{reason: r.reason, err: why}
	case why == nil && resp != nil:
		why = fmt.Errorf("%d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	case why == nil:
		why = errors.New(r.reason)
	}
	c.cfg.OnFailure(ctx, req, resp, why)
	return then
}

// givenUp is the error of a page dead-lettered for err: it says the
// dead letter's reason (retries exhausted…) and wraps err.
type givenUp struct {
	reason string
	err    error
}

func (g *givenUp) Error() string { return g.reason }
func (g *givenUp) Unwrap() error { return g.err }

// errorItem has the writer write, with Config.ErrorItems, the item of a
// page that failed for good, when then (how the delivery is settled) is
// final: an ack or a reject, not a retry; once the item is written, the
// writer tells Config.OnFailure (see failed) and settles the delivery
// with then. The write fails as any page's does (see writeAll): an item
// the sink refuses for what it is nacks the page, a sink that cannot
// write holds it with its batch; either tells nothing yet.
func (c *Crawler) errorItem(ctx context.Context, req *Request, resp *Response, why error, then action) action {
	if !c.cfg.ErrorItems || c.cfg.Sink == nil || isSitemap(req) || !isFinal(then) {
		return c.failed(ctx, req, resp, why, then)
	}
	p := &Page{Depth: req.Depth, Referrer: req.Referrer, FetchedAt: time.Now().UTC(), Meta: req.Meta}
	if u, err := url.Parse(req.URL); err == nil {
		p.URL = StripCredentials(u)
	} else {
		p.URL = Redact(req.URL)
	}
	if resp != nil {
		p.Status, p.ContentType, p.Length = resp.StatusCode, resp.Header.Get("Content-Type"), len(resp.Body)
	}
	if why != nil {
		p.Error = why.Error()
	} else if resp != nil {
		p.Error = http.StatusText(resp.StatusCode)
	}
	return writeAction{w: &write{parent: req, items: []any{p}, failed: nack(c.cfg.retryDelay(1)),
		done: then, failure: &failure{req: req, resp: resp, why: why}}}
}

// failure is a page's failure, told to Config.OnFailure once its error
// item is written.
type failure struct {
	req  *Request
	resp *Response
	why  error
}

// maxRedirects bounds a redirect chain.
const maxRedirects = 10

// redirect turns a 3xx response into a request for its target, through
// scope and filter: a redirect loop ends at the filter.
func (c *Crawler) redirect(ctx context.Context, req *Request, resp *Response) action {
	c.stats.Inc(StatRedirects)
	n := 0
	fmt.Sscan(req.Meta["redirect_times"], &n)
	if n >= maxRedirects {
		c.fail(ErrorRedirect, nil)
		return ack()
	}
	target, err := resp.URL.Parse(strings.TrimSpace(resp.Header.Get("Location")))
	if err != nil {
		c.fail(ErrorRedirect, nil)
		return ack()
	}
	next := *req
	next.URL = target.String()
	if next.Header.Get("Authorization") != "" && !sameOrigin(resp.URL, target) {
		next.Header = next.Header.Clone() // credentials stay with their host
		next.Header.Del("Authorization")
	}
	next.Retries = 0
	next.Meta = map[string]string{"redirect_times": fmt.Sprint(n + 1)}
	for k, v := range req.Meta {
		if k != "redirect_times" {
			next.Meta[k] = v
		}
	}
	if resp.StatusCode == http.StatusSeeOther || ((resp.StatusCode == 301 || resp.StatusCode == 302) && req.Method == http.MethodPost) {
		next.Method, next.Body = "", nil
	}
	return written(&write{parent: req, links: []*Request{&next}, failed: nack(c.cfg.backoff(1))})
}

// retry gives req another try, through the broker: the delivery is nacked
// with a delay, exponential in the retries used so far (prior) with
// jitter, or wait when the server said how long to wait (Retry-After).
// The message keeps its priority. Past MaxRetries it is dead-lettered with
// the reason.
func (c *Crawler) retry(req *Request, prior int, why error, wait time.Duration) action {
	why = redactErr(why) // it goes to logs and dead-letter reasons
	if prior >= c.cfg.MaxRetries {
		c.stats.Inc(StatRetriesExceeded)
		c.fail(ErrorRetries, fmt.Errorf("%s: %w", Redact(req.URL), why))
		c.log.Info("giving up", "url", Redact(req.URL), "attempt", prior+1, "reason", why)
		return reject(fmt.Sprintf("retries exhausted after %d %s: %v", prior+1, plural(int64(prior+1), "attempt"), why))
	}
	c.stats.Inc(StatRetries)
	delay := c.cfg.retryDelay(prior + 1)
	if wait > 0 {
		delay = min(wait, maxBackoff)
	}
	c.log.Debug("retrying", "url", Redact(req.URL), "attempt", prior+1, "delay", delay, "reason", why)
	return nack(delay)
}

// republish gives back a delivery that was not started (the worker is
// stopping, or reached MaxPages): it publishes a fresh copy of req and
// acknowledges the delivery; if the copy cannot be published, the delivery
// is nacked instead.
//
// A give-back is not an attempt: a nack would raise the message's Attempt,
// which counts against the retry limit and the broker's MaxDeliveries, so
// a page given back by a few stopping workers would be dead-lettered
// without ever failing. The copy carries the retries already used (prior)
// in Request.Retries, so the retry budget is kept, not reset. Whether the
// page's links were claimed before is told by the frontier (see enqueueAll),
// not by the attempt, so a fresh copy is as safe as the delivery.
func (c *Crawler) republish(ctx context.Context, d broker.Delivery, req *Request, prior int) {
	cp := *req
	cp.Retries = prior
	body, err := cp.MarshalBinary()
	if err == nil {
		err = c.frontier.Broker().Publish(ctx, d.Queue(), broker.Message{Body: body, Priority: d.Message().Priority, Key: c.partitionKey(req.URL)})
	}
	if err != nil {
		c.log.Warn("give back failed; nacking", "url", Redact(req.URL), "err", err)
		c.settle(ctx, d, nack(0))
		return
	}
	c.settle(ctx, d, ack())
}

// giveBack returns deliveries that were not started to the queue, as fresh
// copies (see republish). A payload that does not decode is copied as it
// is; its next worker dead-letters it.
func (c *Crawler) giveBack(ctx context.Context, ds ...broker.Delivery) {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	for _, d := range ds {
		var req Request
		if err := req.UnmarshalBinary(d.Message().Body); err == nil {
			c.republish(pctx, d, &req, earlier(&req, d))
			continue
		}
		m := d.Message()
		if err := c.frontier.Broker().Publish(pctx, d.Queue(), broker.Message{Body: m.Body, Priority: m.Priority}); err != nil {
			c.log.Warn("give back failed; nacking", "queue", d.Queue(), "err", err)
			c.settle(ctx, d, nack(0))
			continue
		}
		c.settle(ctx, d, ack())
	}
}

// settle acknowledges, nacks or rejects d, even after ctx ended.
func (c *Crawler) settle(ctx context.Context, d broker.Delivery, a action) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	var err error
	switch a := a.(type) {
	case ackAction:
		c.ack(ctx, d)
		return
	case rejectAction:
		c.stats.Inc(StatDeadLetters)
		err = d.Reject(sctx, a.reason)
	case nackAction:
		err = d.Nack(sctx, a.delay)
	default: // a give-back or a write, settled here: nacked at once
		err = d.Nack(sctx, 0)
	}
	if err != nil {
		// The lease was lost or the broker is gone: the message comes back
		// by itself and is processed again.
		c.log.Warn("settling a delivery failed", "queue", d.Queue(), "outcome", a.String(), "err", err)
	}
}

// unknownCallback logs a request naming a callback this worker does not
// have (at Warn the first time for each name, at Debug after) and returns
// the dead-letter reason. It happens when workers of one crawl run
// different code: each worker must register the same callbacks.
func (c *Crawler) unknownCallback(ctx context.Context, req *Request) string {
	known := make([]string, 0, len(c.cfg.Callbacks))
	for name := range c.cfg.Callbacks {
		known = append(known, strconv.Quote(name))
	}
	slices.Sort(known)
	reason := fmt.Sprintf("unknown callback %q: this worker has %s", req.Callback, strings.Join(known, ", "))
	if len(known) == 0 {
		reason = fmt.Sprintf("unknown callback %q: this worker has only the default callback", req.Callback)
	}
	lvl := slog.LevelDebug
	if c.guards.firstUnknown(req.Callback) {
		lvl = slog.LevelWarn
	}
	c.log.Log(ctx, lvl, "request for an unknown callback dead-lettered; do all workers run the same code?",
		"callback", req.Callback, "url", Redact(req.URL), "known", known)
	return reason
}

// deadLetter rejects an undecodable payload; the first is logged at Warn.
func (c *Crawler) deadLetter(ctx context.Context, d broker.Delivery, err error) {
	lvl := slog.LevelDebug
	if c.guards.firstUndecodable() {
		lvl = slog.LevelWarn
	}
	c.log.Log(ctx, lvl, "undecodable payload dead-lettered", "queue", d.Queue(), "err", err, "bytes", len(d.Message().Body))
	c.settle(ctx, d, reject(err.Error()))
}

// enqueueStarts is enqueueAll for a batch of start URLs, which workers
// given the same start URL at once take at once: the frontier publishes
// each once, and waits a while for one another worker claimed before it
// takes that worker for dead and publishes it itself (see
// frontier.Page.Start).
func (c *Crawler) enqueueStarts(ctx context.Context, reqs []*Request) error {
	return c.enqueueAll(ctx, []links{{reqs: reqs}})
}

// links are the requests found on the page of parent (reqs, then
// found), or a batch of start URLs (parent nil), for enqueueAll.
type links struct {
	parent *Request
	reqs   []*Request
	found  *foundLinks
}

// releaseBudget gives back the place of a link to host in its page
// budget (see guard) if it took one: it was not published.
func (c *Crawler) releaseBudget(budgeted bool, host string) {
	if budgeted {
		c.guards.hosts.release(host)
	}
}

// guard applies the URL-trap guard and the per-host page budget to link lk
// found on parent (*pu: parent's URL, parsed on first use); ok false: not
// followed, counted and, the first time, logged. reserved: lk took a place
// in its host's budget, to give back (hostBudget.release) unless it is
// published.
func (c *Crawler) guard(parent *Request, pu **url.URL, lk *linkscan.Link) (ok, reserved bool) {
	if c.guards.traps != nil && lk.RawQuery() != "" {
		if *pu == nil {
			if p, err := url.Parse(parent.URL); err == nil {
				*pu = p
			}
		}
		if *pu != nil {
			ok, key, warn := c.guards.traps.allow(*pu, lk.Parsed())
			if !ok {
				c.stats.Inc(StatURLTrap)
				if warn {
					c.log.Warn("URL trap: a query parameter keeps taking new values; links to further ones are not followed (url/trap counts them; raise --max-query-values if this is no trap)",
						"trap", Redact(key), "values", c.cfg.MaxQueryValues, "example", Redact(lk.URL))
				}
				return false, false
			}
		}
	}
	if c.guards.hosts == nil {
		return true, false
	}
	if ok, warn := c.guards.hosts.reserve(lk.Host()); !ok {
		c.stats.Inc(StatHostBudget)
		if warn {
			c.log.Warn("host has had its page budget; its other links are not followed (scheduler/host_budget counts them)",
				"host", lk.Host(), "max_pages_per_host", c.cfg.MaxPagesPerHost)
		}
		return false, false
	}
	return true, true
}

// link is a request kept for the frontier: r, or if r is nil found's
// link lk (see foundLinks).
type link struct {
	r     *Request
	found *foundLinks
	lk    *linkscan.Link // r's URL
	// seen is its key in the crawler's seenLinks; 0: not to be
	// remembered.
	seen uint64
	// budgeted: counted in its host's page budget, given back unless it
	// is published
	budgeted bool
}

// enqueueAll hands the frontier the links found on several pages that are
// in scope, in one frontier.Expand, to be claimed and published unless the
// crawl claimed them before (a page expanded again publishes exactly the
// links an earlier expansion claimed and never published). A page's parent
// nil means its links are start URLs, which skip the domain and pattern
// checks. A link this crawler offered before, in an expansion
// that succeeded, is one the crawl holds: it goes to the frontier Known,
// without its fingerprint or encoding, which the frontier asks for only
// when it expands the page again (see seenLinks). An error fails every
// page.
func (c *Crawler) enqueueAll(ctx context.Context, pages []links) error {
	seen := c.seen.Load() // one table for the batch: a rollback replaces it (see state.go)
	kept := make([][]link, 0, len(pages))
	expand := make([]frontier.Page, 0, len(pages))
	for _, p := range pages {
		ls := c.followed(p)
		if len(ls) == 0 {
			continue
		}
		fp, err := c.expansion(p.parent, ls, seen)
		if err != nil {
			return err
		}
		kept, expand = append(kept, ls), append(expand, fp)
	}
	if len(expand) == 0 {
		return nil
	}
	outs, err := c.frontier.Expand(ctx, RequestsQueue(c.cfg.Name), expand)
	if err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	var enqueued, republished, filtered int64 // counted once a batch, not once a link
	for i, ls := range kept {
		for j, l := range ls {
			switch outs[i][j] {
			case frontier.Published:
				enqueued++
			case frontier.Republished:
				republished++
				enqueued++
			default:
				filtered++
				c.releaseBudget(l.budgeted, l.lk.Host())
			}
			if l.seen != 0 && !expand[i].Links[j].Known {
				seen.add(l.seen)
			}
		}
	}
	c.stats.addSome(StatEnqueued, enqueued)
	c.stats.addSome(StatRepublished, republished)
	c.stats.addSome(StatFiltered, filtered)
	return nil
}

// followed returns the links of p to follow: those that parse, are in
// scope and pass the guards (start URLs skip scope and guards).
func (c *Crawler) followed(p links) []link {
	start := p.parent == nil
	var parentURL *url.URL // parsed when a guard needs it
	ls := make([]link, 0, len(p.reqs)+p.found.len())
	if f := p.found; f != nil {
		// Made a Request only if credentials go with it (see
		// withCredentials), which a found link has none of.
		credentials := p.parent.Header.Get("Authorization") != ""
		for i := range f.links {
			lk := &f.links[i]
			if lk.Host() == "" {
				continue
			}
			var r *Request
			if credentials || lk.HasUser() {
				r = f.request(lk)
				lk = withCredentials(p.parent, r, lk)
			}
			if !c.inScope(lk, lk.URL, f.depth, f.scope, false) {
				continue
			}
			ok, budgeted := c.guard(p.parent, &parentURL, lk)
			if !ok {
				continue
			}
			ls = append(ls, link{r: r, found: f, lk: lk, budgeted: budgeted})
		}
	}
	for _, r := range p.reqs {
		lk := r.parsed
		if lk == nil {
			u, err := url.Parse(r.URL)
			if err != nil {
				continue
			}
			u.Fragment, u.RawFragment = "", ""
			r.URL = u.String()
			l := linkscan.FromURL(u, r.URL)
			lk = &l
		}
		if lk.Host() == "" {
			continue
		}
		lk = withCredentials(p.parent, r, lk)
		budgeted := false
		if !start {
			if !c.inScope(lk, r.URL, r.Depth, r.Scope, isSitemap(r)) {
				continue
			}
			if !isSitemap(r) {
				ok, reserved := c.guard(p.parent, &parentURL, lk)
				if !ok {
					continue
				}
				budgeted = reserved
			}
		}
		ls = append(ls, link{r: r, lk: lk, budgeted: budgeted})
	}
	return ls
}

// inScope applies the crawl's scope to link lk, whose String() is str,
// of a request at depth of scope, counting and logging what it drops.
// Sitemaps are not pages: depth and patterns are for what they list.
func (c *Crawler) inScope(lk *linkscan.Link, str string, depth int, scope string, sitemap bool) bool {
	switch c.kit.scope.check(lk, str, depth, scope) {
	case offsite:
		c.stats.Inc(StatOffsite)
		return false
	case tooLong:
		c.stats.Inc(StatURLTooLong)
		c.log.Debug("url too long; not followed", "bytes", len(str), "limit", MaxURLLength)
		return false
	case tooDeep, excluded:
		return sitemap
	}
	return true
}

// expansion returns the frontier's page of links ls found on parent's
// page (nil: start URLs). A link in seen goes Known, and its key is kept
// in ls to remember it once the expansion succeeded.
func (c *Crawler) expansion(parent *Request, ls []link, seen *seenLinks) (frontier.Page, error) {
	p := frontier.Page{Start: parent == nil, Links: make([]frontier.Link, len(ls))}
	if _, markless := c.frontier.(frontier.Markless); parent != nil && !markless {
		u, _ := url.Parse(parent.URL)
		p.Parent = c.fp.Fingerprint(parent.Method, u, parent.Body, parent.Header)
	}
	p.Resolve = func(i int) (frontier.Link, error) { return c.frontierLink(ls[i]) }
	for i := range ls {
		l := &ls[i]
		if k, ok := l.seenKey(seen); ok {
			l.seen = k
			if seen.has(k) {
				p.Links[i] = frontier.Link{Known: true}
				continue
			}
		}
		fl, err := c.frontierLink(*l)
		if err != nil {
			return p, err
		}
		p.Links[i] = fl
	}
	return p, nil
}

// seenKey is l's key in s, and whether l may be remembered there (see
// seenLinks.seenKey; a found link is a plain GET).
func (l *link) seenKey(s *seenLinks) (uint64, bool) {
	if l.r != nil {
		return s.seenKey(l.r)
	}
	if s == nil {
		return 0, false
	}
	return s.key(l.lk.URL), true
}

// frontierLink fingerprints and encodes l.
func (c *Crawler) frontierLink(l link) (frontier.Link, error) {
	r := l.r
	if r == nil {
		r = l.found.request(l.lk)
	}
	body, err := r.MarshalBinary()
	if err != nil {
		return frontier.Link{}, fmt.Errorf("engine: encode %s: %w", Redact(r.URL), err)
	}
	fl := frontier.Link{Message: broker.Message{Body: body, Priority: r.Priority, Key: broker.PartitionKey(l.lk.Host(), c.cfg.PartitionBy)}, Unfiltered: r.DontFilter}
	if !r.DontFilter {
		u := l.lk.Value()
		fl.Fingerprint = c.fp.Fingerprint(r.Method, &u, r.Body, r.Header)
	}
	return fl, nil
}

// defaultCallback emits a Page item and follows the page's links.
func (c *Crawler) defaultCallback(_ context.Context, resp *Response) (Result, error) {
	ct := resp.Header.Get("Content-Type")
	p := &Page{
		URL: StripCredentials(resp.URL), Status: resp.StatusCode, Depth: resp.Request.Depth,
		ContentType: ct, Length: len(resp.Body), FetchedAt: time.Now().UTC(), Meta: resp.Request.Meta,
		Referrer: resp.Request.Referrer,
	}
	var res Result
	if isHTML(ct, resp.Body) {
		title, links, dropped := c.kit.extractLinks(resp.URL, resp.Body, c.cfg.MaxLinks)
		if dropped > 0 {
			c.stats.Add(StatLinksDropped, int64(dropped))
			level := slog.LevelInfo
			if c.guards.firstLinksDropped() {
				level = slog.LevelWarn
			}
			c.log.Log(context.Background(), level, "page has more links than --max-links; the rest are not followed (links/dropped counts them)",
				"url", Redact(resp.Request.URL), "max_links", c.cfg.MaxLinks, "dropped", dropped)
		}
		var referrer string // carried only when error items report it
		if c.cfg.ErrorItems {
			referrer = p.URL
		}
		p.Title, p.Links = title, len(links)
		if len(links) > 0 {
			res.found = &foundLinks{links: links, depth: resp.Request.Depth + 1, referrer: referrer}
		}
		if len(c.kit.extract) > 0 {
			p.Fields = extractFields(c.kit.extract, resp.URL, resp.Body)
		}
	}
	res.Items = []any{p}
	return res, nil
}

// fail counts an error of kind; err, if not nil, is remembered for
// ErrNoPages.
func (c *Crawler) fail(kind string, err error) {
	c.stats.Inc(StatErrors)
	c.stats.Inc(StatErrorKindPrefix + kind)
	if err != nil {
		c.clocks.lost(err)
	}
}

// fetchErrorKind classifies a fetch error that is not retried.
func fetchErrorKind(err error) string {
	switch {
	case errors.Is(err, ErrForbiddenAddress):
		return ErrorForbiddenAddress
	case errors.Is(err, ErrBodyTooLarge):
		return ErrorBodyTooLarge
	}
	return ErrorFetch
}

// sleep waits for d or ctx; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
