package engine

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/memory"
	"github.com/trawlhq/trawl/dedup"
	"github.com/trawlhq/trawl/dedup/local"
	"github.com/trawlhq/trawl/frontier"
	"github.com/trawlhq/trawl/frontier/frontiertest"
)

// opLog records, in order, what a crawl did to its broker and sink, across
// pages: "publish PATH" per message published to the frontier, "item
// PATH" per item written, "ack PATH", "nack PATH" and "reject PATH" per
// delivery settled ("start" for a start URL's delivery), "batch N" per
// AckBatch call of N deliveries.
type opLog struct {
	mu  sync.Mutex
	ops []string
}

func (l *opLog) add(op string) {
	l.mu.Lock()
	l.ops = append(l.ops, op)
	l.mu.Unlock()
}

func (l *opLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ops)
}

// pathOf names a message by the path of the request it carries; "start"
// for a start URL's payload.
func pathOf(queue string, body []byte) string {
	if queue != RequestsQueue("trawl") {
		return "start"
	}
	var r Request
	if err := r.UnmarshalBinary(body); err != nil {
		return "undecodable"
	}
	u, err := url.Parse(r.URL)
	if err != nil {
		return r.URL
	}
	return u.Path
}

// tracingBroker is a memory broker that logs publishes and settlements to
// an opLog. It is not a broker.BatchAcker; batchTracingBroker is.
type tracingBroker struct {
	*memory.Broker
	log *opLog
	// refuse, if set, fails every publish of a request with this path,
	// and the rest of that publish with it (a message over NATS's max
	// payload, say).
	refuse string
	// stall, while set, makes every lease extension a no-op that
	// reports success: the worker held up, its leases running out.
	stall atomic.Bool
}

// errRefused is the error of a publish that tracingBroker.refuse fails:
// the broker refuses the message for what it is (broker.ErrInvalid), as
// NATS refuses one over its max payload.
var errRefused = fmt.Errorf("%w: message refused", broker.ErrInvalid)

func (b *tracingBroker) Publish(ctx context.Context, queue string, msgs ...broker.Message) error {
	if b.refuse != "" && queue == RequestsQueue("trawl") {
		paths := make([]string, len(msgs))
		for i, m := range msgs {
			paths[i] = pathOf(queue, m.Body)
		}
		if slices.Contains(paths, b.refuse) {
			b.log.add("refused " + strings.Join(paths, ","))
			return fmt.Errorf("publish %s: %w", b.refuse, errRefused)
		}
	}
	err := b.Broker.Publish(ctx, queue, msgs...)
	if err == nil && queue == RequestsQueue("trawl") {
		b.log.add(fmt.Sprintf("publishes %d", len(msgs)))
		for _, m := range msgs {
			b.log.add("publish " + pathOf(queue, m.Body))
		}
	}
	return err
}

func (b *tracingBroker) Receive(ctx context.Context, queue string, max int) ([]broker.Delivery, error) {
	ds, err := b.Broker.Receive(ctx, queue, max)
	for i, d := range ds {
		ds[i] = &tracedDelivery{Delivery: d, log: b.log, stall: &b.stall}
	}
	return ds, err
}

func (b *tracingBroker) Consume(ctx context.Context, queue string, prefetch int) (broker.Consumer, error) {
	c, err := b.Broker.Consume(ctx, queue, prefetch)
	if err != nil {
		return nil, err
	}
	return &tracedConsumer{Consumer: c, log: b.log, stall: &b.stall}, nil
}

type tracedConsumer struct {
	broker.Consumer
	log   *opLog
	stall *atomic.Bool
}

func (c *tracedConsumer) Next(ctx context.Context) (broker.Delivery, error) {
	d, err := c.Consumer.Next(ctx)
	if err != nil {
		return nil, err
	}
	return &tracedDelivery{Delivery: d, log: c.log, stall: c.stall}, nil
}

type tracedDelivery struct {
	broker.Delivery
	log   *opLog
	stall *atomic.Bool // see tracingBroker.stall
}

func (d *tracedDelivery) Extend(ctx context.Context, lease time.Duration) error {
	if d.stall.Load() {
		return nil
	}
	return d.Delivery.Extend(ctx, lease)
}

func (d *tracedDelivery) path() string { return pathOf(d.Queue(), d.Message().Body) }

func (d *tracedDelivery) Ack(ctx context.Context) error {
	err := d.Delivery.Ack(ctx)
	if err == nil {
		d.log.add("ack " + d.path())
	}
	return err
}

func (d *tracedDelivery) Nack(ctx context.Context, delay time.Duration) error {
	err := d.Delivery.Nack(ctx, delay)
	if err == nil {
		d.log.add("nack " + d.path())
	}
	return err
}

func (d *tracedDelivery) Release(ctx context.Context) error {
	err := d.Delivery.Release(ctx)
	if err == nil {
		d.log.add("release " + d.path())
	}
	return err
}

func (d *tracedDelivery) Reject(ctx context.Context, reason string) error {
	err := d.Delivery.Reject(ctx, reason)
	if err == nil {
		d.log.add("reject " + d.path())
	}
	return err
}

// batchTracingBroker is a tracingBroker with AckBatch.
type batchTracingBroker struct{ *tracingBroker }

func (b batchTracingBroker) AckBatch(ctx context.Context, ds ...broker.Delivery) error {
	b.log.add(fmt.Sprintf("batch %d", len(ds)))
	var errs []error
	for _, d := range ds {
		errs = append(errs, d.Ack(ctx))
	}
	return errors.Join(errs...)
}

// treeDepth and treeFanout shape the tree site: "/" links to /1 … /4,
// each of those to four pages below it, down to depth 3: 85 pages, each
// linked from exactly one page, so that a page's links are published by
// that page alone.
const treeDepth, treeFanout = 3, 4

// treeLinks returns the paths a page of the tree site links to.
func treeLinks(path string) []string {
	if path == "/" {
		path = ""
	}
	if strings.Count(path, "/") >= treeDepth {
		return nil
	}
	var out []string
	for i := 1; i <= treeFanout; i++ {
		out = append(out, fmt.Sprintf("%s/%d", path, i))
	}
	return out
}

// treePages returns every path of the tree site.
func treePages() []string {
	all := []string{"/"}
	for i := 0; i < len(all); i++ {
		all = append(all, treeLinks(all[i])...)
	}
	return all
}

// bubbleCrawl is a crawl of the tree site inside a synctest bubble.
type bubbleCrawl struct {
	c    *Crawler
	mb   *memory.Broker
	tb   *tracingBroker
	log  *opLog
	site *countingHandler
}

// countingHandler serves the tree site and counts the fetches of each path.
type countingHandler struct {
	mu      sync.Mutex
	fetches map[string]int
}

func (h *countingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.fetches[r.URL.Path]++
	h.mu.Unlock()
	if strings.HasPrefix(r.URL.Path, "/gone") {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/html")
	fmt.Fprint(w, "<html>")
	for _, l := range treeLinks(r.URL.Path) {
		fmt.Fprintf(w, `<a href="%s">x</a>`, l)
	}
	fmt.Fprint(w, "</html>")
}

func (h *countingHandler) count(path string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fetches[path]
}

// newBackends returns a memory broker of mc and a local filter of 10,000
// URLs, both closed when t ends.
func newBackends(t *testing.T, mc memory.Config) (*memory.Broker, *local.Filter) {
	t.Helper()
	mb, err := memory.New(mc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mb.Close() })
	lf, err := local.New(local.Config{Capacity: 10_000, FPRate: 1e-6})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lf.Close() })
	return mb, lf
}

// newBubbleCrawl builds a crawler of the tree site over a tracing memory
// broker (batchAcker: with AckBatch) and f (nil: a local filter), with a
// sink that logs "item PATH". It must run inside a synctest bubble.
func newBubbleCrawl(t *testing.T, batchAcker bool, f dedup.Filter, cfg Config) *bubbleCrawl {
	t.Helper()
	mb, lf := newBackends(t, memory.Config{MaxDeliveries: 10})
	if f == nil {
		f = lf
	}
	log := &opLog{}
	tb := &tracingBroker{Broker: mb, log: log}
	var b broker.Broker = tb
	if batchAcker {
		b = batchTracingBroker{tb}
	}
	site := &countingHandler{fetches: map[string]int{}}
	pn := newPipeNet()
	srv := &http.Server{Handler: site}
	go srv.Serve(pn)
	t.Cleanup(func() { srv.Close() })

	cfg.IgnoreRobots = true
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 8
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = time.Second
	}
	cfg.Sink = sinkFunc(func(_ context.Context, items []any) error {
		for _, it := range items {
			if p, ok := it.(*Page); ok {
				u, _ := url.Parse(p.URL)
				log.add("item " + u.Path)
			}
		}
		return nil
	})
	c, err := New(b, f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.kit.fetcher.transport.DialContext = pn.dial
	if err := c.Seed(t.Context(), StartURL{URL: "http://site.test/"}); err != nil {
		t.Fatal(err)
	}
	return &bubbleCrawl{c: c, mb: mb, tb: tb, log: log, site: site}
}

// checkOrder fails t unless, in ops, every page's links were published and
// its item written before its delivery was first acknowledged, and each of
// pages was acknowledged exactly once.
func checkOrder(t *testing.T, ops []string, pages ...string) {
	t.Helper()
	done := map[string]bool{} // published or written so far
	acked := map[string]int{}
	for _, op := range ops {
		kind, path, _ := strings.Cut(op, " ")
		switch kind {
		case "publish":
			done["publish "+path] = true
		case "item":
			done["item "+path] = true
		case "ack":
			acked[path]++
			if path == "start" || acked[path] > 1 {
				continue
			}
			if !done["item "+path] {
				t.Errorf("%s acknowledged before its item was written", path)
			}
			for _, l := range treeLinks(path) {
				if !done["publish "+l] {
					t.Errorf("%s acknowledged before its link %s was published", path, l)
				}
			}
		}
	}
	for _, p := range pages {
		if acked[p] != 1 {
			t.Errorf("%s acknowledged %d times, want once", p, acked[p])
		}
	}
}

// Every page's links are published, and its item written, before its
// delivery is acknowledged, with or without broker.BatchAcker; with it,
// every acknowledgement goes through AckBatch, in batches. The links of
// several pages are published together.
func TestBatchedSettlementOrder(t *testing.T) {
	for _, batchAcker := range []bool{true, false} {
		t.Run(fmt.Sprintf("batchAcker=%v", batchAcker), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				bc := newBubbleCrawl(t, batchAcker, nil, Config{})
				if err := bc.c.Run(t.Context()); err != nil {
					t.Fatalf("run: %v", err)
				}
				ops := bc.log.all()
				pages := treePages()
				checkOrder(t, ops, pages...)
				for _, p := range pages {
					if n := bc.site.count(p); n != 1 {
						t.Errorf("%s fetched %d times, want once", p, n)
					}
				}
				if n, want := bc.c.Stats().Get(StatEnqueued), int64(len(pages)); n != want {
					t.Errorf("%d requests published, want %d", n, want)
				}
				calls := 0
				for _, op := range ops {
					if strings.HasPrefix(op, "publishes ") {
						calls++
					}
				}
				// One publish for the start URL, one per batch of pages
				// with links: fewer than one per such page.
				if parents := (len(pages) - 1) / treeFanout; calls > parents {
					t.Errorf("%d publishes for %d pages with links: not batched", calls, parents)
				}

				var batches, batched, biggest int
				for _, op := range ops {
					if n, ok := strings.CutPrefix(op, "batch "); ok {
						var k int
						fmt.Sscan(n, &k)
						batches++
						batched += k
						biggest = max(biggest, k)
					}
				}
				acks := len(pages) + 1 // and the start URL's delivery
				switch {
				case !batchAcker && batches != 0:
					t.Errorf("%d AckBatch calls on a broker without it", batches)
				case batchAcker && batched != acks:
					t.Errorf("%d deliveries acknowledged through AckBatch, want all %d", batched, acks)
				case batchAcker && (biggest < 2 || batches >= acks/2):
					t.Errorf("%d acknowledgements in %d AckBatch calls (at most %d in one): not batched", acks, batches, biggest)
				}
			})
		})
	}
}

// failingClaims makes the first expansion of several pages die after it
// claimed their links (at the store call after the pages' marks, once it
// took effect), as a pipeline of SADDs refused in part under Redis's
// maxmemory does. It records the pages of that expansion.
type failingClaims struct {
	frontier.Frontier
	faults *frontiertest.Faults
	pages  map[dedup.Fingerprint]string // a page's fingerprint -> its path

	mu     sync.Mutex
	failed []string // the pages whose links' claim failed
}

func (f *failingClaims) Expand(ctx context.Context, queue string, pages []frontier.Page) ([][]frontier.Outcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failed != nil || len(pages) < 2 {
		return f.Frontier.Expand(ctx, queue, pages)
	}
	for _, p := range pages {
		f.failed = append(f.failed, f.pages[p.Parent])
	}
	f.faults.Arm(1, frontiertest.After, nil)
	defer f.faults.Heal()
	return f.Frontier.Expand(ctx, queue, pages)
}

// A batch whose write fails once is written again in halves: none of its
// pages is nacked or fetched again, and the links the failed write
// claimed are published all the same (nothing lost).
func TestBatchWriteFailureRetriesHalves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lf, err := local.New(local.Config{Capacity: 10_000, FPRate: 1e-6})
		if err != nil {
			t.Fatal(err)
		}
		defer lf.Close()
		faults := &frontiertest.Faults{}
		bc := newBubbleCrawl(t, true, faults.Filter(lf), Config{RetryBackoff: 100 * time.Millisecond})
		f := &failingClaims{Frontier: bc.c.frontier, faults: faults, pages: map[dedup.Fingerprint]string{}}
		for _, p := range treePages() {
			u, _ := url.Parse("http://site.test" + p)
			f.pages[dedup.Fingerprinter{}.Fingerprint("GET", u, nil, nil)] = p
		}
		bc.c.frontier = f
		if err := bc.c.Run(t.Context()); err != nil {
			t.Fatalf("run: %v", err)
		}
		f.mu.Lock()
		failed := f.failed
		f.mu.Unlock()
		if len(failed) < 2 {
			t.Fatalf("no write of several pages failed (%v): the test tests nothing", failed)
		}
		ops := bc.log.all()
		checkOrder(t, ops, treePages()...)
		for _, op := range ops {
			if strings.HasPrefix(op, "nack ") {
				t.Errorf("%s after a failure of one write of the batch %v: its halves should have been written", op, failed)
			}
		}
		for _, p := range treePages() {
			if n := bc.site.count(p); n != 1 {
				t.Errorf("%s fetched %d times, want once", p, n)
			}
		}
		n, err := bc.mb.Counts(t.Context(), RequestsQueue("trawl"))
		if err != nil {
			t.Fatal(err)
		}
		if n != (broker.Counts{}) {
			t.Errorf("frontier after the crawl: %+v, want empty", n)
		}
	})
}

// A batch with one page at fault (one of its links is refused by the
// broker, every time) is split down to that page: its batch-mates are
// acknowledged and never nacked or fetched again; only the page at
// fault is nacked, until the broker dead-letters it.
func TestBatchWithPoisonedPage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const poisoned, refused = "/2", "/2/3"
		// The page at fault is nacked with the retry back-off until the
		// broker's tenth delivery: 0.1s doubled eight times, ±25% each,
		// 51s in all and up to 64s, past the default FailureTimeout (a
		// minute of writes failing with no success, once its batch-mates
		// are written). That is not what this test is about.
		bc := newBubbleCrawl(t, true, nil, Config{RetryBackoff: 100 * time.Millisecond, FailureTimeout: 10 * time.Minute})
		bc.tb.refuse = refused
		if err := bc.c.Run(t.Context()); err != nil {
			t.Fatalf("run: %v", err)
		}
		ops := bc.log.all()
		batchMates := refusedBatchMates(ops, poisoned)
		if len(batchMates) == 0 {
			t.Fatalf("the page at fault was written alone: the test tests nothing (%v)", ops)
		}
		nacks, acks := settledAs(ops, "nack"), settledAs(ops, "ack")
		if len(nacks) == 0 || slices.ContainsFunc(nacks, func(p string) bool { return p != poisoned }) {
			t.Errorf("nacked %v, want %s alone (its batch-mates: %v)", nacks, poisoned, batchMates)
		}
		if slices.Contains(acks, poisoned) {
			t.Errorf("%s acknowledged though its link %s was never published", poisoned, refused)
		}
		// Everything but the page at fault and what only it links to is
		// crawled once and acknowledged once.
		var want []string
		for _, p := range treePages() {
			if p != poisoned && !strings.HasPrefix(p, poisoned+"/") {
				want = append(want, p)
			}
		}
		checkOrder(t, ops, want...)
		for _, p := range want {
			if n := bc.site.count(p); n != 1 {
				t.Errorf("%s fetched %d times, want once", p, n)
			}
		}
		if n := bc.site.count(poisoned); n < 2 {
			t.Errorf("%s fetched %d times, want a retry at least", poisoned, n)
		}
		n, err := bc.mb.Counts(t.Context(), RequestsQueue("trawl"))
		if err != nil {
			t.Fatal(err)
		}
		if n != (broker.Counts{Dead: 1}) {
			t.Errorf("frontier after the crawl: %+v, want %s dead-lettered and nothing else", n, poisoned)
		}
	})
}

// refusedBatchMates returns the pages, other than poisoned, of the first
// refused publish in ops: the parents of its links.
func refusedBatchMates(ops []string, poisoned string) []string {
	var mates []string
	for _, op := range ops {
		if list, ok := strings.CutPrefix(op, "refused "); ok {
			for _, l := range strings.Split(list, ",") {
				if p := path.Dir(l); p != poisoned && !slices.Contains(mates, p) {
					mates = append(mates, p)
				}
			}
			break
		}
	}
	return mates
}

// settledAs returns the paths of the deliveries settled with kind ("ack",
// "nack") in ops.
func settledAs(ops []string, kind string) []string {
	var paths []string
	for _, op := range ops {
		if k, p, _ := strings.Cut(op, " "); k == kind {
			paths = append(paths, p)
		}
	}
	return paths
}

// A batch whose write fails for the backend's fault (the sink refuses
// three writes in a row, then accepts) is held and written again: no
// page is nacked, released or fetched again, and the crawl completes.
// Before, the batch was nacked whole: each of its pages spent an attempt
// and was fetched twice.
func TestBackendFailureHoldsBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bc := newBubbleCrawl(t, true, nil, Config{RetryBackoff: 100 * time.Millisecond})
		var mu sync.Mutex
		var failedWrites [][]string // the pages of each failed write
		next := bc.c.cfg.Sink
		bc.c.cfg.Sink = sinkFunc(func(ctx context.Context, items []any) error {
			mu.Lock()
			defer mu.Unlock()
			if (len(failedWrites) > 0 || len(items) > 1) && len(failedWrites) < 3 {
				var pages []string
				for _, it := range items {
					u, _ := url.Parse(it.(*Page).URL)
					pages = append(pages, u.Path)
				}
				failedWrites = append(failedWrites, pages)
				return errors.New("sink down")
			}
			return next.Write(ctx, items)
		})
		if err := bc.c.Run(t.Context()); err != nil {
			t.Fatalf("run: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(failedWrites) != 3 {
			t.Fatalf("%d writes failed, want 3: the test tests nothing", len(failedWrites))
		}
		for _, w := range failedWrites[1:] {
			if !slices.Equal(w, failedWrites[0]) {
				t.Errorf("failed writes %v: want the held batch written again whole", failedWrites)
			}
		}
		ops := bc.log.all()
		for _, op := range ops {
			if strings.HasPrefix(op, "nack ") || strings.HasPrefix(op, "release ") {
				t.Errorf("%s: a page whose batch the sink refused was settled other than by an ack", op)
			}
		}
		checkOrder(t, ops, treePages()...)
		for _, p := range treePages() {
			if n := bc.site.count(p); n != 1 {
				t.Errorf("%s fetched %d times, want once", p, n)
			}
		}
	})
}

// With ErrorItems, a page that fails for good (a 404) whose error item
// the sink refuses for no page's fault (three writes in a row) is held
// with its batch and written again, as any page: it is fetched once, not
// released and fetched again until the failures' clock runs out, and the
// crawl completes with its item.
func TestErrorItemHeldWhileSinkFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const gone = "/gone/at/depth"    // a 404, linking nowhere (see treeLinks)
		var told, toldOther atomic.Int32 // OnFailure calls for gone, for any other page
		onFailure := func(_ context.Context, req *Request, _ *Response, _ error) {
			if u, _ := url.Parse(req.URL); u.Path == gone {
				told.Add(1)
			} else {
				toldOther.Add(1)
			}
		}
		bc := newBubbleCrawl(t, true, nil, Config{RetryBackoff: 100 * time.Millisecond, ErrorItems: true, FailureTimeout: time.Minute, OnFailure: onFailure})
		if err := bc.c.Seed(t.Context(), StartURL{URL: "http://site.test" + gone}); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		failed := 0
		next := bc.c.cfg.Sink
		bc.c.cfg.Sink = sinkFunc(func(ctx context.Context, items []any) error {
			mu.Lock()
			defer mu.Unlock()
			for _, it := range items {
				if p := it.(*Page); p.Status == http.StatusNotFound && failed < 3 {
					failed++
					return errors.New("sink down")
				}
			}
			return next.Write(ctx, items)
		})
		if err := bc.c.Run(t.Context()); err != nil {
			t.Fatalf("run: %v", err)
		}
		if failed != 3 {
			t.Fatalf("%d writes failed, want 3: the test tests nothing", failed)
		}
		if n := bc.site.count(gone); n != 1 {
			t.Errorf("%s fetched %d times, want once: its error item's failed write gave it back", gone, n)
		}
		if told.Load() != 1 || toldOther.Load() != 0 {
			t.Errorf("OnFailure told of %s %d times and of other pages %d, want once and never", gone, told.Load(), toldOther.Load())
		}
		ops := bc.log.all()
		for _, op := range ops {
			if strings.HasPrefix(op, "nack ") || strings.HasPrefix(op, "release ") {
				t.Errorf("%s: a page whose batch the sink refused was settled other than by an ack", op)
			}
		}
		checkOrder(t, ops, append(treePages(), gone)...) // its error item too
		if n, _ := bc.mb.Counts(t.Context(), RequestsQueue("trawl")); n != (broker.Counts{}) {
			t.Errorf("frontier after the crawl: %+v, want empty", n)
		}
	})
}

// A sink that keeps failing for FailureTimeout stops Run with
// ErrBackendFailing, dead-letters nothing and spends no attempt: the
// pages held are released, and a run with the sink repaired completes
// the crawl, each page fetched once but for those held (at most twice
// Concurrency). Before, the pages were nacked and dead-lettered after
// their last delivery.
func TestFailingSinkSpendsNoAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 30 * time.Second
		bc := newBubbleCrawl(t, true, nil, Config{RetryBackoff: 100 * time.Millisecond, FailureTimeout: timeout, Concurrency: 4})
		var mu sync.Mutex
		written, down := 0, false
		next := bc.c.cfg.Sink
		sink := sinkFunc(func(ctx context.Context, items []any) error {
			mu.Lock()
			defer mu.Unlock()
			if written >= 5 && down {
				return errors.New("no space left on device")
			}
			written += len(items)
			return next.Write(ctx, items)
		})
		bc.c.cfg.Sink = sink
		mu.Lock()
		down = true
		mu.Unlock()
		began := time.Now()
		err := bc.c.Run(t.Context())
		if !errors.Is(err, ErrBackendFailing) {
			t.Fatalf("run with a sink that keeps failing: %v, want ErrBackendFailing", err)
		}
		if took := time.Since(began); took > timeout+holdRetryMax+time.Second {
			t.Errorf("run gave up after %v, want within FailureTimeout %v", took, timeout)
		}
		n, err := bc.mb.Counts(t.Context(), RequestsQueue("trawl"))
		if err != nil {
			t.Fatal(err)
		}
		if n.Dead != 0 || n.InFlight != 0 {
			t.Fatalf("frontier after the failed run: %+v, want nothing dead or in flight", n)
		}
		ds, err := bc.mb.Receive(t.Context(), RequestsQueue("trawl"), 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.Attempt() != 1 {
				t.Errorf("%s: delivery %d after the failed run, want 1 (no attempt spent)", pathOf(d.Queue(), d.Message().Body), d.Attempt())
			}
			d.Release(t.Context())
		}

		mu.Lock()
		down = false
		mu.Unlock()
		c, err := NewOn(bc.c.frontier, Config{IgnoreRobots: true, Concurrency: 4, IdleTimeout: time.Second, Sink: sink})
		if err != nil {
			t.Fatal(err)
		}
		c.kit.fetcher.transport.DialContext = bc.c.kit.fetcher.transport.DialContext
		if err := c.Run(t.Context()); err != nil {
			t.Fatalf("run with the sink repaired: %v", err)
		}
		twice := 0
		for _, p := range treePages() {
			switch n := bc.site.count(p); {
			case n == 2:
				twice++
			case n != 1:
				t.Errorf("%s fetched %d times", p, n)
			}
		}
		if twice > 2*4 {
			t.Errorf("%d pages fetched twice, want at most 2 × Concurrency", twice)
		}
		if n, _ := bc.mb.Counts(t.Context(), RequestsQueue("trawl")); n != (broker.Counts{}) {
			t.Errorf("frontier after the crawl: %+v, want empty", n)
		}
		t.Logf("%d pages fetched twice", twice)
	})
}

// Run, stopped while pages are with the writer and the acker, writes and
// acknowledges them before it returns.
func TestShutdownFlushesBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		// The root's callback stops the crawl before it returns: its links
		// and item reach the writer after Run's context ended. Inside the
		// bubble no batch interval passes before Run stops the writer.
		var c *Crawler
		bc := newBubbleCrawl(t, true, nil, Config{Callbacks: map[string]Callback{
			"": func(cctx context.Context, resp *Response) (Result, error) {
				if resp.URL.Path == "/" {
					cancel()
				}
				return c.defaultCallback(cctx, resp)
			},
		}})
		c = bc.c
		if err := c.Run(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("run: %v, want context.Canceled", err)
		}
		ops := bc.log.all()
		checkOrder(t, ops, "/")
		n, err := bc.mb.Counts(t.Context(), RequestsQueue("trawl"))
		if err != nil {
			t.Fatal(err)
		}
		if n.InFlight != 0 || n.Ready != treeFanout {
			t.Errorf("frontier after Run: %+v, want the root's %d links ready and nothing in flight (%v)", n, treeFanout, ops)
		}
	})
}

// qosBroker is a memory broker whose consumers count, as RabbitMQ's
// basic.qos does, the deliveries returned by Next and not yet settled
// against their prefetch (a broker.UnsettledCounter): Next waits while
// prefetch of them are unsettled. The acknowledgements of its consumers'
// deliveries wait until ackGate is closed.
type qosBroker struct {
	*memory.Broker
	ackGate chan struct{}
}

func (b *qosBroker) CountsUnsettled() bool { return true }

func (b *qosBroker) Consume(ctx context.Context, queue string, prefetch int) (broker.Consumer, error) {
	c, err := b.Broker.Consume(ctx, queue, prefetch)
	if err != nil {
		return nil, err
	}
	return &qosConsumer{Consumer: c, window: make(chan struct{}, prefetch), gate: b.ackGate}, nil
}

type qosConsumer struct {
	broker.Consumer
	window chan struct{} // a token per delivery returned and not settled
	gate   chan struct{}
}

func (c *qosConsumer) Next(ctx context.Context) (broker.Delivery, error) {
	select {
	case c.window <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	d, err := c.Consumer.Next(ctx)
	if err != nil {
		<-c.window
		return nil, err
	}
	return &qosDelivery{Delivery: d, c: c}, nil
}

type qosDelivery struct {
	broker.Delivery
	c    *qosConsumer
	once sync.Once
}

func (d *qosDelivery) settled() { d.once.Do(func() { <-d.c.window }) }

func (d *qosDelivery) Ack(ctx context.Context) error {
	select {
	case <-d.c.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	err := d.Delivery.Ack(ctx)
	d.settled()
	return err
}

func (d *qosDelivery) Nack(ctx context.Context, delay time.Duration) error {
	err := d.Delivery.Nack(ctx, delay)
	d.settled()
	return err
}

func (d *qosDelivery) Reject(ctx context.Context, reason string) error {
	err := d.Delivery.Reject(ctx, reason)
	d.settled()
	return err
}

// On a broker whose consumers count unsettled deliveries against their
// prefetch (RabbitMQ), a crawler still fetches Concurrency pages at once
// while the acknowledgements of earlier pages are pending: its consumer's
// prefetch leaves room for what the writer and the acker hold.
func TestConcurrencyWhileAcksPending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const concurrency, leaves = 4, 20
		mb, lf := newBackends(t, memory.Config{})
		qb := &qosBroker{Broker: mb, ackGate: make(chan struct{})}

		// "/" links to /leaf/1 … /leaf/20. A fetch waits until concurrency
		// fetches run at once (then every fetch goes on) or a second passed.
		var mu sync.Mutex
		running, most := 0, 0
		full := make(chan struct{})
		fetches := map[string]int{}
		site := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			fetches[r.URL.Path]++
			running++
			if running > most {
				most = running
				if most == concurrency {
					close(full)
				}
			}
			mu.Unlock()
			select {
			case <-full:
			case <-time.After(time.Second):
			}
			mu.Lock()
			running--
			mu.Unlock()
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, "<html>")
			if r.URL.Path == "/" {
				for i := 1; i <= leaves; i++ {
					fmt.Fprintf(w, `<a href="/leaf/%d">x</a>`, i)
				}
			}
			fmt.Fprint(w, "</html>")
		})
		pn := newPipeNet()
		srv := &http.Server{Handler: site}
		go srv.Serve(pn)
		defer srv.Close()

		c, err := New(qb, lf, Config{Concurrency: concurrency, PerHost: concurrency, IgnoreRobots: true, IdleTimeout: time.Second,
			Sink: sinkFunc(func(context.Context, []any) error { return nil })})
		if err != nil {
			t.Fatal(err)
		}
		c.kit.fetcher.transport.DialContext = pn.dial
		if err := c.Seed(t.Context(), StartURL{URL: "http://site.test/"}); err != nil {
			t.Fatal(err)
		}
		// The acknowledgements wait until concurrency fetches ran at
		// once, or 5s (the acker's calls give up after settleTimeout).
		pending := make(chan int, 1) // the most fetches at once while acks were pending
		go func() {
			select {
			case <-full:
			case <-time.After(5 * time.Second):
			}
			mu.Lock()
			pending <- most
			mu.Unlock()
			close(qb.ackGate)
		}()
		if err := c.Run(t.Context()); err != nil {
			t.Fatalf("run: %v", err)
		}
		if n := <-pending; n != concurrency {
			t.Errorf("at most %d fetches ran at once while acknowledgements were pending, want %d (the consumer's prefetch: %d)",
				n, concurrency, consumePrefetch(qb, concurrency))
		}
		mu.Lock()
		defer mu.Unlock()
		if len(fetches) != leaves+1 {
			t.Errorf("%d pages fetched, want %d", len(fetches), leaves+1)
		}
		for p, n := range fetches {
			if n != 1 {
				t.Errorf("%s fetched %d times, want once", p, n)
			}
		}
	})
}

// A sink that fails every write of several items but takes a write of
// one (a full disk with a little room freed now and then) stops Run
// within FailureTimeout: the held batch keeps failing, and small writes
// succeeding in between do not reset the failure clock, for none runs
// while the writer holds a batch (issue 28: a full data disk gave up
// after 3m41s against a 1m --failure-timeout). Before, the failed batch
// was split down to pages written one by one, each success resetting the
// clock.
func TestSmallSuccessesKeepFailureClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 20 * time.Second
		bc := newBubbleCrawl(t, true, nil, Config{RetryBackoff: 100 * time.Millisecond, FailureTimeout: timeout, Concurrency: 8})
		var mu sync.Mutex
		small := 0
		next := bc.c.cfg.Sink
		bc.c.cfg.Sink = sinkFunc(func(ctx context.Context, items []any) error {
			mu.Lock()
			defer mu.Unlock()
			if len(items) > 1 {
				return errors.New("no space left on device")
			}
			small++
			return next.Write(ctx, items)
		})
		began := time.Now()
		err := bc.c.Run(t.Context())
		if !errors.Is(err, ErrBackendFailing) {
			t.Fatalf("run with a sink that takes only small writes: %v, want ErrBackendFailing", err)
		}
		if took := time.Since(began); took > timeout+holdRetryMax+time.Second {
			t.Errorf("run gave up after %v, want within FailureTimeout %v", took, timeout)
		}
		if n, _ := bc.mb.Counts(t.Context(), RequestsQueue("trawl")); n.Dead != 0 {
			t.Errorf("frontier after the failed run: %+v, want nothing dead", n)
		}
		t.Logf("%d small writes succeeded", small)
	})
}
