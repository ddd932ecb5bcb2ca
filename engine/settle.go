package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/trawlhq/trawl/broker"
)

// Settlement in batches. A page that yields links or items does not write
// them itself: it hands them, with its delivery, to the writer, which
// collects the pages that finish close together and writes them at once
// (one filter call for their parents' marks, one for their links, one
// publish, one more filter call for the publication marks, one sink
// write: see enqueueAll). Only once that returned without error are the
// deliveries acknowledged, through the acker, which collects the
// acknowledgements of every page and sends them in batches (one
// broker.BatchAcker call where the broker has it). A failed write is
// written again in halves, so that only the page at fault is nacked, with
// the retry back-off (see writeAll); nacks and rejects are never batched.
//
// A batch is written, or acknowledged, when it is full or when its first
// element has waited for the interval, whichever comes first. The writer
// and the acker each hold at most half Config.Concurrency deliveries (at
// most maxBatch), a page waiting for room: a worker holds at most twice
// its concurrency deliveries unsettled, and a worker killed with kill -9
// has at most that many pages fetched again. A consumer whose prefetch
// counts deliveries not yet settled (broker.UnsettledCounter: RabbitMQ's
// basic.qos) is opened with room for them (consumePrefetch), so that
// every slot stays busy while batches wait.
//
// Both run in goroutines owned by Run, which stops them once no page is
// left in progress: the writer first (its acknowledgements go to the
// acker), then the acker, each flushing what it holds before it returns.
const (
	// maxBatch bounds the pages written, and the deliveries acknowledged,
	// in one batch.
	maxBatch = 64
	// writeInterval is the longest a page waits for others to be written
	// with it. A batch costs a round trip to the frontier and a write
	// to the sink whatever its size: at 5ms a worker of 1,000 pages/s
	// wrote about 5 pages a batch (a Redis worker of four, 1 or 2), at
	// 20ms about 20. Its links reach the frontier that much later, within
	// a page's own fetch (bench-web's median latency is 50-100ms).
	writeInterval = 20 * time.Millisecond
	// ackInterval is the longest an acknowledgement waits for others. An
	// acknowledgement batch costs a round trip whatever its size (a Redis
	// pipeline, NATS's requests sent together): at 5ms a worker of 900
	// pages/s acknowledged about 4 pages a batch, at 20ms about 18, but
	// each of four Redis workers (200-250 pages/s each) about 4 again, at
	// 100ms about 20. A worker fast enough to fill a batch sooner sends it
	// full (batchSize). A page's slot does not wait for it, and the acker
	// holds at most batchSize deliveries whatever the interval; the
	// deliveries it holds stay leased (the lease keeper extends them)
	// until acknowledged.
	ackInterval = 100 * time.Millisecond
	// ackWorkers bounds the acknowledgements sent at once to a broker that
	// acknowledges one delivery per call.
	ackWorkers = 8
)

// batchSize is how many deliveries the writer, and the acker, hold at
// most for a crawler of the given concurrency.
func batchSize(concurrency int) int {
	return min(maxBatch, max(1, concurrency/2))
}

// batcher hands the values given to add to flush in batches of at most
// max: a batch is flushed when it is full, or interval after its first
// value was added. It holds at most max values, counting those being
// flushed. Its goroutine is started by newBatcher and ended by close,
// which flushes what is left.
//
// add appends to the batch under a mutex and wakes the goroutine only
// when the batch is full: a batch's first value starts a timer, whose
// firing wakes it otherwise. A value sent on a channel woke it for every
// value (a page, written and then acknowledged: two wakes of a parked
// goroutine, each a futex call when the other P sleeps), where a batch
// of a worker at 1,000 pages/s holds 5 to 20 of them.
type batcher[T any] struct {
	max      int
	interval time.Duration
	room     chan struct{} // a token per value held
	full     chan struct{} // a full batch waits; sent and drained under mu
	quit     chan struct{} // closed by close
	done     chan struct{}
	timer    *time.Timer // started by a batch's first value; stopped under mu

	closing sync.RWMutex // guards closed; held for reading while adding
	closed  bool

	mu    sync.Mutex // guards batch
	batch []T
}

// newBatcher starts a batcher. flush is called from its goroutine only,
// one batch at a time; it must not keep the slice.
func newBatcher[T any](max int, interval time.Duration, flush func([]T)) *batcher[T] {
	b := &batcher[T]{
		max: max, interval: interval,
		room: make(chan struct{}, max), full: make(chan struct{}, 1),
		quit: make(chan struct{}), done: make(chan struct{}),
		timer: time.NewTimer(interval),
		batch: make([]T, 0, max),
	}
	b.timer.Stop()
	go b.run(flush)
	return b
}

// add queues v for the next batch; it waits while the batcher holds max
// values. It returns false, and does nothing, once close was called.
func (b *batcher[T]) add(v T) bool {
	b.closing.RLock()
	defer b.closing.RUnlock()
	if b.closed {
		return false
	}
	b.room <- struct{}{}
	b.mu.Lock()
	b.batch = append(b.batch, v)
	switch len(b.batch) {
	case b.max:
		b.full <- struct{}{} // never blocks: drained with the batch it fills
	case 1:
		b.timer.Reset(b.interval)
	}
	b.mu.Unlock()
	return true
}

// close flushes what was added and stops the batcher. It is idempotent.
func (b *batcher[T]) close() {
	b.closing.Lock()
	if !b.closed {
		b.closed = true
		close(b.quit)
	}
	b.closing.Unlock()
	<-b.done
}

func (b *batcher[T]) run(flush func([]T)) {
	defer close(b.done)
	spare := make([]T, 0, b.max)
	for {
		quit := false
		select {
		case <-b.timer.C:
		case <-b.full:
		case <-b.quit:
			quit = true
		}
		b.mu.Lock()
		batch := b.batch
		b.batch = spare
		b.timer.Stop() // no stale firing after Stop (Go 1.23's timers)
		select {
		case <-b.full:
		default:
		}
		b.mu.Unlock()
		if len(batch) > 0 {
			flush(batch)
		}
		for range batch {
			<-b.room
		}
		clear(batch)
		spare = batch[:0]
		if quit {
			return
		}
	}
}

// settlement is the writer and the acker of one Run.
type settlement struct {
	writes *batcher[pageWrite]
	acks   *batcher[toAck]
	quit   context.Context // Run's ctx: its end stops holding failed writes
}

// startSettlement starts the writer and the acker; ctx is Run's work
// context, alive until they are stopped, quit is Run's own.
func (c *Crawler) startSettlement(ctx, quit context.Context) *settlement {
	n := batchSize(c.cfg.Concurrency)
	s := &settlement{
		quit:   quit,
		acks:   newBatcher(n, ackInterval, func(as []toAck) { c.ackAcks(ctx, as) }),
		writes: newBatcher(n, writeInterval, func(ps []pageWrite) { c.writeAll(ctx, ps) }),
	}
	return s
}

// stop flushes and stops the writer, then the acker (the writer's
// flush acknowledges through it).
func (s *settlement) stop() {
	s.writes.close()
	s.acks.close()
}

// write hands p to the writer, and reports whether it took it: not
// outside Run (s nil), nor once stopped.
func (s *settlement) write(p pageWrite) bool { return s != nil && s.writes.add(p) }

// ack hands a to the acker, and reports whether it took it: not outside
// Run (s nil), nor once stopped.
func (s *settlement) ack(a toAck) bool { return s != nil && s.acks.add(a) }

// quitting is what ends the holding of failed writes: Run's own context
// while Run runs, else ctx.
func (s *settlement) quitting(ctx context.Context) context.Context {
	if s == nil {
		return ctx
	}
	return s.quit
}

// write is what a page hands to the writer: the links it yields (found
// on parent's page) and its items, how its delivery is settled once they
// are written (done: an ack, or nil, or the reject of a page
// whose error item it is, once Config.OnFailure was told of failure), and
// how if they cannot be written (failed).
type write struct {
	parent  *Request
	links   []*Request
	found   *foundLinks // links found by the default callback, after links
	items   []any
	done    action
	failure *failure // with an error item: the page's failure
	failed  action
}

// pageWrite is a write with the delivery it settles.
type pageWrite struct {
	d broker.Delivery
	w *write
}

// submit hands w to the writer, which settles d once w is written (or
// has failed). d stays held (in flight, its lease extended) until then.
func (c *Crawler) submit(ctx context.Context, d broker.Delivery, w *write) {
	c.hold(d)
	if c.settling.write(pageWrite{d, w}) {
		return
	}
	c.writeAll(ctx, []pageWrite{{d, w}})
}

// hold counts d as in flight, its lease extended, until release.
func (c *Crawler) hold(d broker.Delivery) {
	c.leases.hold(d)
	c.stats.AddInFlight(1)
}

// release ends hold.
func (c *Crawler) release(d broker.Delivery) {
	c.leases.release(d)
	c.stats.AddInFlight(-1)
}

// writeAll writes the links and items of ps together and settles their
// deliveries: each acknowledged once what it yields is written.
//
// A write that failed for a page's own fault (an item that does not
// encode, a link the broker refuses as invalid: see pageFault) is written
// again in halves, so that the page at fault costs its batch-mates
// nothing: a half that is written is acknowledged, a half that fails
// again is split again, down to the page at fault, which is nacked with
// its failure action (a retry, dead-lettered past the retry limit).
//
// Any other failure is the backend's (a Redis server out of memory, a
// broker refusing publishes, a filter that cannot be reached, a full
// disk under the sink), and no page's: the pages are held, their leases
// extended, and written again with a back-off until the write succeeds,
// or until the writes have failed for Config.FailureTimeout or Run was
// stopped; then they are released, their delivery not counted (see
// holdFailed). A failing backend spends no page's attempts and
// dead-letters nothing; while the writer holds a batch, the pages
// finishing behind it wait for room, so a worker whose backend refuses
// writes stops fetching (at most twice Concurrency pages fetched and not
// written, see batchSize) instead of fetching pages it cannot record.
func (c *Crawler) writeAll(ctx context.Context, ps []pageWrite) {
	err := c.write(ctx, ps)
	if err == nil {
		return
	}
	if !pageFault(err) {
		c.holdFailed(ctx, ps, err)
		return
	}
	if len(ps) > 1 {
		c.log.Debug("writing a batch failed; writing its halves", "pages", len(ps), "err", err)
	}
	c.splitFailed(ctx, ps, err)
}

// pageFault tells whether a failed write is the fault of what a page
// yields, not of the backend: an item a sink cannot encode
// (ErrBadItem), a link or item the broker refuses as invalid (a message
// over NATS's max payload).
func pageFault(err error) bool {
	return errors.Is(err, ErrBadItem) || errors.Is(err, broker.ErrInvalid)
}

// splitFailed settles ps, whose write together failed with err for a
// page's fault, writing each half again (see writeAll).
func (c *Crawler) splitFailed(ctx context.Context, ps []pageWrite, err error) {
	if len(ps) == 1 {
		c.nackAll(ctx, ps, err)
		return
	}
	for _, half := range [][]pageWrite{ps[:len(ps)/2], ps[len(ps)/2:]} {
		switch err := c.write(ctx, half); {
		case err == nil:
		case pageFault(err):
			c.splitFailed(ctx, half, err)
		default:
			c.holdFailed(ctx, half, err)
		}
	}
}

const (
	// holdRetryMin and holdRetryMax bound the back-off between writes of
	// a batch held while the backend fails.
	holdRetryMin = 100 * time.Millisecond
	holdRetryMax = 2 * time.Second
)

// holdFailed holds ps, whose write failed with err for no page's fault,
// and writes them again with a back-off until that succeeds. It gives up
// when the writes have failed for Config.FailureTimeout with no success
// in between (Run then stops with ErrBackendFailing), or when Run was
// stopped: it releases the deliveries then, uncounted (see release). The
// clock of the failures is not reset by other writes succeeding meanwhile
// (none runs: the writer is here), only by this batch being written.
func (c *Crawler) holdFailed(ctx context.Context, ps []pageWrite, err error) {
	c.log.Warn("writing links or items failed; holding the pages and writing them again",
		"pages", len(ps), "failure_timeout", c.cfg.FailureTimeout, "err", err)
	quit := c.settling.quitting(ctx)
	wait := holdRetryMin
	for {
		if c.clocks.writes.check(c.cfg.FailureTimeout) != nil || quit.Err() != nil {
			c.releaseAll(ctx, ps, err)
			return
		}
		bounded, cancel := c.clocks.writes.bound(quit, c.cfg.FailureTimeout)
		sleep(bounded, wait)
		cancel()
		if c.clocks.writes.check(c.cfg.FailureTimeout) != nil || quit.Err() != nil {
			continue
		}
		err = c.write(ctx, ps)
		switch {
		case err == nil:
			c.log.Info("writes succeed again; the held pages were written", "pages", len(ps))
			return
		case pageFault(err):
			c.splitFailed(ctx, ps, err)
			return
		}
		wait = min(2*wait, holdRetryMax)
	}
}

// releaseAll gives back each of ps, whose links or items could not be
// written because the backend failed (err), without counting the
// delivery: nothing of them is acknowledged, and no attempt is spent.
func (c *Crawler) releaseAll(ctx context.Context, ps []pageWrite, err error) {
	c.log.Warn("the backend keeps refusing writes; giving the pages back, their attempts unspent",
		"pages", len(ps), "err", err)
	for _, p := range ps {
		c.unspent(ctx, p.d)
		c.release(p.d)
	}
}

// unspent gives d back at once without counting its delivery
// (broker.Delivery.Release), even after ctx ended.
func (c *Crawler) unspent(ctx context.Context, d broker.Delivery) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	if err := d.Release(sctx); err != nil {
		// The message comes back when its lease ends, that delivery counted.
		c.log.Warn("settling a delivery failed", "queue", d.Queue(), "outcome", "release", "err", err)
	}
}

// write writes the links and items of ps together and, if that
// succeeded, hands their deliveries to the acker. On failure it settles
// nothing: its links stay claimed without publication marks, and the
// next write of the same pages publishes them (see enqueueAll). A sink that
// failed half-way through the items may have stored some of them: they
// are written again (a sink sees every item at least once; JSONLines
// and CSV cut a failed write back to their last whole record).
func (c *Crawler) write(ctx context.Context, ps []pageWrite) error {
	pages := make([]links, 0, len(ps))
	var items []any
	for _, p := range ps {
		if len(p.w.links) > 0 || p.w.found.len() > 0 {
			pages = append(pages, links{parent: p.w.parent, reqs: p.w.links, found: p.w.found})
		}
		items = append(items, p.w.items...)
	}
	gen := c.stateGen(ctx) // before the links are looked up in c.seen
	err := c.enqueueAll(ctx, pages)
	if err == nil && len(items) > 0 && c.cfg.Sink != nil {
		if err = c.cfg.Sink.Write(ctx, items); err != nil {
			err = fmt.Errorf("engine: sink: %w", err)
		}
	}
	if err != nil {
		if !pageFault(err) {
			c.clocks.writes.fail(err)
		}
		return err
	}
	if len(pages) > 0 || len(items) > 0 {
		c.clocks.writes.ok()
	}
	c.stats.Add(StatItems, int64(len(items)))
	for _, p := range ps {
		if f := p.w.failure; f != nil {
			c.failed(ctx, f.req, f.resp, f.why, p.w.done)
		}
		if _, ok := p.w.done.(rejectAction); ok {
			c.settle(ctx, p.d, p.w.done)
			c.release(p.d)
			continue
		}
		c.ackHeld(ctx, p.d, gen)
	}
	return nil
}

// nackAll settles each of ps, whose links or items could not be written
// for their own fault (err), with its failure action: nothing of them is
// acknowledged.
func (c *Crawler) nackAll(ctx context.Context, ps []pageWrite, err error) {
	c.log.Warn("the links or items of a page cannot be written; the page will be retried", "pages", len(ps), "err", err)
	for _, p := range ps {
		c.log.Debug("page to be retried", "url", Redact(p.w.parent.URL))
		c.settle(ctx, p.d, p.w.failed)
		c.release(p.d)
	}
}

// toAck is a delivery for the acker; held: it is held (see hold) until
// acknowledged.
type toAck struct {
	d    broker.Delivery
	held bool
	gen  uint64 // the state's generation it was written under; 0: none
}

// ackHeld acknowledges d, held by submit, as ack does, and releases it
// once acknowledged: its lease is extended until then.
func (c *Crawler) ackHeld(ctx context.Context, d broker.Delivery, gen uint64) {
	if c.settling.ack(toAck{d: d, held: true, gen: gen}) {
		return
	}
	c.ackAll(ctx, []broker.Delivery{d})
	c.release(d)
}

// ackAcks acknowledges a batch of the acker, then releases those held.
func (c *Crawler) ackAcks(ctx context.Context, as []toAck) {
	ds := make([]broker.Delivery, 0, len(as))
	gen := c.stateGen(ctx)
	for _, a := range as {
		if a.gen != 0 && a.gen != gen {
			// Written before a server's restart (see state.go): it may
			// have been rolled back, so the page is processed again.
			c.settle(ctx, a.d, nack(0))
			continue
		}
		ds = append(ds, a.d)
	}
	if len(ds) > 0 {
		c.ackAll(ctx, ds)
	}
	for _, a := range as {
		if a.held {
			c.release(a.d)
		}
	}
}

// ack acknowledges d: through the acker while Run runs, else at once.
func (c *Crawler) ack(ctx context.Context, d broker.Delivery) {
	if c.settling.ack(toAck{d: d}) {
		return
	}
	c.ackAll(ctx, []broker.Delivery{d})
}

// ackAll acknowledges ds: in one call where the broker is a
// broker.BatchAcker, else one call each, a few at once. A failure is
// logged: the deliveries concerned come back by themselves (a lost lease,
// a broker gone) and are processed again.
func (c *Crawler) ackAll(ctx context.Context, ds []broker.Delivery) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	if ba, ok := c.frontier.Broker().(broker.BatchAcker); ok {
		if err := ba.AckBatch(sctx, ds...); err != nil {
			c.log.Warn("acknowledging deliveries failed", "count", len(ds), "outcome", "ack", "err", err)
		}
		return
	}
	if len(ds) == 1 {
		c.ackOne(sctx, ds[0])
		return
	}
	var wg sync.WaitGroup
	for w := range min(ackWorkers, len(ds)) {
		wg.Go(func() {
			for i := w; i < len(ds); i += ackWorkers {
				c.ackOne(sctx, ds[i])
			}
		})
	}
	wg.Wait()
}

// ackOne acknowledges d alone.
func (c *Crawler) ackOne(ctx context.Context, d broker.Delivery) {
	if err := d.Ack(ctx); err != nil {
		c.log.Warn("settling a delivery failed", "queue", d.Queue(), "outcome", "ack", "err", err)
	}
}
