package engine

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trawlhq/trawl/broker"
)

// earlyLooks are when, from its start, a worker of a partitioned crawl
// reads the crawl's live workers before its first renewal
// (PresenceTTL/3 less a jitter): the workers of a fleet start together,
// and for their first seconds each sees only those that announced
// themselves before it, itself first; without these looks each would
// take from every partition for 4–5 s, and the hosts it started would
// stay open in several workers (connections, robots.txt, slots).
var earlyLooks = []time.Duration{500 * time.Millisecond, 1500 * time.Millisecond, 3 * time.Second}

// affinity shares out the partitions of a crawl's queue among its live
// workers, so that each host (its partition's) is fetched by one worker:
// one worker dials and handshakes it, keeps its robots.txt and holds its
// politeness slots, as distributed crawlers assign each host to one agent
// (Mercator, IRLbot, UbiCrawler). It is on where the queue has two
// partitions or more, the consumer is a broker.PartitionPreferrer and the
// crawl's presence a broker.Roster. Partition p goes to the (p mod W)-th
// of the W live workers in the roster's sorted order: a balanced share
// (8 partitions over 4 workers, 2 each), where hashing workers onto
// partitions would leave one with none one time in ten. A worker not yet
// in the roster has no preference (nil), so takes from all; one beyond
// the partitions' count (more workers than partitions) has none of its
// own (empty), so takes only what it steals. The consumer steals from
// the others' partitions once its own are empty, so that a worker's share
// is a preference, not a fence: no worker idles while a partition has
// work, and a dead worker's partitions are taken at once, before its
// announcement expires and the shares are dealt again.
//
// Its methods are safe for concurrent use: the receiver attaches each
// consumer it opens (again after a pause), presence updates the share.
type affinity struct {
	mu      sync.Mutex
	cons    broker.PartitionPreferrer // the open consumer, if one that can prefer
	parts   int                       // the queue's partitions (from attach)
	own     []int                     // the partitions this worker prefers, maybe none; nil: no preference
	workers int                       // live workers at the last update
	warned  bool                      // fewer partitions than workers, said once
	log     *slog.Logger

	// changed counts the changes to a share of one partition or more:
	// the receiver, seeing it move, gives back the deliveries it holds
	// of the partitions no longer its own (see Crawler.shed).
	changed atomic.Uint64
}

// attach makes cons, a consumer of a queue of parts partitions just
// opened, prefer this worker's share; a consumer that cannot prefer, or a
// queue of one partition, turns the affinity off until the next attach.
func (a *affinity) attach(cons broker.Consumer, parts int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	pp, ok := cons.(broker.PartitionPreferrer)
	if !ok || parts < 2 {
		a.cons = nil
		return
	}
	if parts != a.parts {
		a.own, a.workers = nil, 0
	}
	a.cons, a.parts = pp, parts
	if a.own != nil {
		pp.Prefer(a.own)
	}
}

// on says whether a look at the roster may change what the consumer
// prefers.
func (a *affinity) on() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cons != nil
}

// update deals the partitions over members, the crawl's live workers
// (sorted), and makes the consumer prefer self's share if it changed,
// saying so once per change.
func (a *affinity) update(members []string, self string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cons == nil {
		return
	}
	own := share(a.parts, members, self)
	w := len(members)
	if w > a.parts && !a.warned && own != nil {
		a.warned = true
		a.log.Warn(fmt.Sprintf("%d workers share %d partitions: use --partitions ≥ workers to keep each host with one worker", w, a.parts),
			"workers", w, "partitions", a.parts)
	}
	if slices.Equal(own, a.own) && (own == nil) == (a.own == nil) {
		a.workers = w
		return
	}
	a.own, a.workers = own, w
	a.cons.Prefer(own)
	if own != nil {
		a.changed.Add(1)
	}
	switch {
	case own == nil:
		a.log.Info(fmt.Sprintf("this worker now takes from all %d partitions alike: it is not among the crawl's %d live workers", a.parts, w),
			"partitions", a.parts, "workers", w)
	case len(own) == 0:
		a.log.Info(fmt.Sprintf("this worker now prefers none of the %d partitions: %d workers; it takes what the others leave", a.parts, w),
			"partitions", a.parts, "workers", w)
	default:
		a.log.Info(fmt.Sprintf("this worker now prefers partitions %s of %d: %d workers", joinInts(own), a.parts, w),
			"own", own, "partitions", a.parts, "workers", w)
	}
}

// owned returns the partitions this worker prefers, by partition (all
// false if it has none of its own), and their count; nil if it has no
// preference, or the share is off.
func (a *affinity) owned() ([]bool, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cons == nil || a.own == nil {
		return nil, a.parts
	}
	mask := make([]bool, a.parts)
	for _, p := range a.own {
		mask[p] = true
	}
	return mask, a.parts
}

// shed gives back the deliveries the workbench holds back whose hosts are
// in partitions this worker no longer prefers (Release: their attempt is
// not counted), so that the partitions' owners fetch them: a worker that
// started a crawl alone leased the home pages of every host, and would
// otherwise fetch them all, each host then by two workers. Pages in
// progress stay.
func (c *Crawler) shed(ctx context.Context, bench *workbench) {
	own, parts := c.aff.owned()
	if own == nil {
		return
	}
	its := bench.shed(func(host string) bool {
		return own[broker.PartitionOf(broker.PartitionKey(host, c.cfg.PartitionBy), parts)]
	})
	if len(its) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	failed := 0
	for _, it := range its {
		if err := it.d.Release(rctx); err != nil {
			failed++ // it comes back when its lease runs out
		}
		c.leases.done(it.d)
	}
	c.log.Info(fmt.Sprintf("gave back %d pages held for hosts of the partitions now other workers'", len(its)),
		"pages", len(its), "failed", failed)
}

// look reads the crawl's live workers from r and updates the share; a
// failure is logged at debug level and the share kept (the next
// announcement looks again).
func (a *affinity) look(ctx context.Context, r broker.Roster, crawl, self string) {
	if !a.on() {
		return
	}
	members, err := r.Members(ctx, crawl)
	if err != nil {
		a.log.Debug("reading the crawl's live workers failed; the partitions' share is kept", "crawl", crawl, "err", err)
		return
	}
	a.update(members, self)
}

// share returns the partitions of parts that self, one of members (the
// crawl's live workers, sorted), prefers: p such that p mod len(members)
// is self's index. It returns nil (none preferred: take from all) when
// self is not among members, and an empty, non-nil slice when self's
// index is parts or more (more workers than partitions: it steals only).
func share(parts int, members []string, self string) []int {
	i, ok := slices.BinarySearch(members, self)
	if !ok {
		return nil
	}
	own := []int{}
	for p := i; p < parts; p += len(members) {
		own = append(own, p)
	}
	return own
}

// joinInts writes ps as "1,5".
func joinInts(ps []int) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}
