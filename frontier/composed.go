package frontier

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/dedup"
)

// ComposeConfig configures a composed frontier.
type ComposeConfig struct {
	// ClaimWait is how long an Expand of start URLs waits for the
	// publication of those another worker claimed before it takes the
	// claimer for dead and publishes them itself. The engine sets half its
	// lease, so that the start URLs' own delivery is still the waiting
	// worker's when it publishes them. 0: 15s.
	ClaimWait time.Duration
	// Logger receives the frontier's warnings. nil: none.
	Logger *slog.Logger
}

// Composed is the frontier over any broker and any duplicate filter,
// which cannot change together: a link is claimed in the filter, then
// published to the broker, and a worker can die in between. It keeps two
// marks in the filter to make that good (see Expand).
type Composed struct {
	broker    broker.Broker
	filter    dedup.Filter
	claimWait time.Duration
	log       *slog.Logger
	noCheck   atomic.Bool // the filter's lack of dedup.Checker was logged
}

// Compose returns the frontier over b and f. It does not own them: the
// caller closes them.
func Compose(b broker.Broker, f dedup.Filter, cfg ComposeConfig) *Composed {
	if cfg.ClaimWait <= 0 {
		cfg.ClaimWait = 15 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Composed{broker: b, filter: f, claimWait: cfg.ClaimWait, log: cfg.Logger}
}

// Broker returns the broker beneath.
func (c *Composed) Broker() broker.Broker { return c.broker }

// Filter returns the duplicate filter beneath.
func (c *Composed) Filter() dedup.Filter { return c.filter }

// String names the filter when it says what it is (the local filter
// names its file), else "".
func (c *Composed) String() string {
	if s, ok := c.filter.(fmt.Stringer); ok {
		return s.String()
	}
	return ""
}

// Incarnation joins the incarnations of the broker and the filter that
// can tell (see broker.Incarnations); "" when neither can.
func (c *Composed) Incarnation(ctx context.Context) (string, error) {
	var parts []string
	for _, s := range []any{c.broker, c.filter} {
		in, ok := s.(broker.Incarnations)
		if !ok {
			continue
		}
		id, err := in.Incarnation(ctx)
		if err != nil {
			return "", err
		}
		parts = append(parts, id)
	}
	return strings.Join(parts, ","), nil
}

// Mark adds fps to the filter.
func (c *Composed) Mark(ctx context.Context, fps ...dedup.Fingerprint) error {
	if _, err := c.filter.Add(ctx, fps...); err != nil {
		return fmt.Errorf("frontier: filter: %w", err)
	}
	return nil
}

// Marked asks the filter, read-only (dedup.Checker).
func (c *Composed) Marked(ctx context.Context, fps ...dedup.Fingerprint) ([]bool, error) {
	checker, ok := c.filter.(dedup.Checker)
	if !ok {
		return nil, fmt.Errorf("%w (%T)", ErrCannotTell, c.filter)
	}
	if len(fps) == 0 {
		return nil, nil
	}
	in, err := checker.Contains(ctx, fps...)
	if err != nil {
		return nil, fmt.Errorf("frontier: filter: %w", err)
	}
	return in, nil
}

// Expand claims and publishes in as few calls as one page needs: one Add
// for the pages' dedup.ExpandedMark, one Add for the links, a Contains
// where a page's mark was there already, one Publish, one Add for the
// published links' dedup.PublishedMark.
//
// A page's mark goes first, in a call of its own, then its links are
// claimed. If the mark was new, no earlier expansion of the page got this
// far, and only the links new to the filter are published. If it was not
// (a redelivery after a crash, a requeued dead letter, a second message
// for one page), and always for start URLs, the links the filter already
// held are checked, read-only, for their publication mark, and those
// without one are published too (Republished): their claimer died, or is
// about to publish them (a harmless duplicate). The check must not set
// the mark: a crash between setting it and publishing would lose the
// link. Start URLs claimed by another worker are waited on first (see
// Page.Start).
//
// After publishing, the links' publication marks are added in one more
// call. If that fails, Expand succeeds all the same: a missing mark can
// cost a duplicate fetch on a later expansion, never a page.
func (c *Composed) Expand(ctx context.Context, queue string, pages []Page) ([][]Outcome, error) {
	out := make([][]Outcome, len(pages))
	for i, p := range pages {
		out[i] = make([]Outcome, len(p.Links))
	}
	waiting, err := c.expand(ctx, queue, pages, out, true)
	if err != nil || len(waiting) == 0 {
		return out, err
	}
	rest, err := c.awaitPublished(ctx, waiting, out)
	if err != nil || len(rest) == 0 {
		return out, err
	}
	// Their claimers are taken for dead: expand them again, without
	// waiting, as start URLs (rechecked, so republished unless published
	// meanwhile).
	again := Page{Start: true, Links: make([]Link, len(rest))}
	for k, w := range rest {
		again.Links[k] = pages[w.page].Links[w.link]
		again.Links[k].Known = false
		again.Links[k].Fingerprint = w.fp
		again.Links[k].Message = w.msg
	}
	sub := [][]Outcome{make([]Outcome, len(rest))}
	if _, err := c.expand(ctx, queue, []Page{again}, sub, false); err != nil {
		return out, err
	}
	for k, w := range rest {
		out[w.page][w.link] = sub[0][k]
	}
	return out, nil
}

// waiting is a start URL another worker claimed and has not published
// yet.
type waiting struct {
	page, link int
	fp         dedup.Fingerprint
	msg        broker.Message
}

// expand is one pass of Expand: it fills out, and returns the start URLs
// claimed elsewhere and not yet published when wait (their outcomes left
// zero).
func (c *Composed) expand(ctx context.Context, queue string, pages []Page, out [][]Outcome, wait bool) ([]waiting, error) {
	recheck, err := c.markPages(ctx, pages)
	if err != nil {
		return nil, err
	}
	ls, err := offered(pages, recheck, out)
	if err != nil {
		return nil, err
	}
	fresh, again, err := c.claim(ctx, ls, recheck)
	if err != nil {
		return nil, err
	}
	var (
		msgs      []broker.Message
		published []dedup.Fingerprint // of the claimed links published
		waits     []waiting
	)
	for k, l := range ls {
		switch {
		case l.unfiltered:
			out[l.page][l.link] = Published
			msgs = append(msgs, l.msg)
			continue
		case fresh[k]:
			out[l.page][l.link] = Published
		case again != nil && again[k] && wait && pages[l.page].Start:
			waits = append(waits, waiting{page: l.page, link: l.link, fp: l.fp, msg: l.msg})
			continue
		case again != nil && again[k]:
			out[l.page][l.link] = Republished
		default:
			out[l.page][l.link] = Filtered
			continue
		}
		published = append(published, l.fp)
		msgs = append(msgs, l.msg)
	}
	return waits, c.publish(ctx, queue, msgs, published)
}

// markPages adds the dedup.ExpandedMark of each page with a link to
// claim, and reports which pages are to be rechecked: those expanded
// before (their mark was there) and start URLs. The marks go in a call
// of their own: a filter's batch need not be all or nothing (a pipeline
// of SADDs under Redis's maxmemory, or across Cluster nodes, can fail in
// part), and a link claimed without its page's mark would never be
// published again by a later expansion: lost.
func (c *Composed) markPages(ctx context.Context, pages []Page) ([]bool, error) {
	var (
		marks   []dedup.Fingerprint
		markOf  = make([]int, len(pages)) // index in marks; -1: none
		recheck = make([]bool, len(pages))
	)
	for i, p := range pages {
		markOf[i], recheck[i] = -1, p.Start
		if !p.Start && slices.ContainsFunc(p.Links, func(l Link) bool { return !l.Unfiltered }) {
			markOf[i] = len(marks)
			marks = append(marks, dedup.ExpandedMark(p.Parent))
		}
	}
	if len(marks) == 0 {
		return recheck, nil
	}
	first, err := c.filter.Add(ctx, marks...)
	if err != nil {
		return nil, fmt.Errorf("frontier: filter: %w", err)
	}
	for i, m := range markOf {
		if m >= 0 {
			recheck[i] = !first[m]
		}
	}
	return recheck, nil
}

// offer is a link offered to the filter (or published past it), with its
// page and index, and its resolved fingerprint and message.
type offer struct {
	page, link int
	fp         dedup.Fingerprint
	msg        broker.Message
	unfiltered bool
}

// offered returns the pages' links to claim or publish, in their order. A
// Known link is Filtered in out without a word to the filter, unless its
// page is rechecked: it was offered before in a written expansion, and the
// filter holds it.
func offered(pages []Page, recheck []bool, out [][]Outcome) ([]offer, error) {
	var ls []offer
	for i, p := range pages {
		for j, l := range p.Links {
			if l.Known && !recheck[i] {
				out[i][j] = Filtered
				continue
			}
			if l.Known {
				if p.Resolve == nil {
					return nil, fmt.Errorf("frontier: a Known link on a page without Resolve")
				}
				var err error
				if l, err = p.Resolve(j); err != nil {
					return nil, err
				}
			}
			ls = append(ls, offer{page: i, link: j, fp: l.Fingerprint, msg: l.Message, unfiltered: l.Unfiltered})
		}
	}
	return ls, nil
}

// claim adds the filtered links of ls to the filter and reports, per link
// of ls, whether it was new (fresh) and, for a rechecked page's link
// claimed before, whether it is unpublished (again; nil when no page
// rechecks).
func (c *Composed) claim(ctx context.Context, ls []offer, recheck []bool) (fresh, again []bool, err error) {
	fresh = make([]bool, len(ls))
	var fps []dedup.Fingerprint
	var at []int // index in ls of fps[k]
	for k, l := range ls {
		if !l.unfiltered {
			fps = append(fps, l.fp)
			at = append(at, k)
		}
	}
	if len(fps) == 0 {
		return fresh, nil, nil
	}
	added, err := c.filter.Add(ctx, fps...)
	if err != nil {
		return nil, nil, fmt.Errorf("frontier: filter: %w", err)
	}
	check := make([]bool, len(fps)) // the claim's page rechecks
	rechecks := false
	for k, i := range at {
		fresh[i] = added[k]
		if recheck[ls[i].page] {
			check[k], rechecks = true, true
		}
	}
	if !rechecks {
		return fresh, nil, nil
	}
	unpub, err := c.unpublished(ctx, fps, added, check)
	if err != nil {
		return nil, nil, err
	}
	again = make([]bool, len(ls))
	for k, i := range at {
		again[i] = unpub[k]
	}
	return fresh, again, nil
}

// publish publishes msgs, then adds the dedup.PublishedMark of the claimed
// links among them. A mark that cannot be added is logged: it can cost a
// duplicate fetch on a later expansion, never a page.
func (c *Composed) publish(ctx context.Context, queue string, msgs []broker.Message, published []dedup.Fingerprint) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := c.broker.Publish(ctx, queue, msgs...); err != nil {
		return fmt.Errorf("frontier: publish: %w", err)
	}
	if len(published) == 0 {
		return nil
	}
	marks := make([]dedup.Fingerprint, len(published))
	for i, fp := range published {
		marks[i] = dedup.PublishedMark(fp)
	}
	if _, err := c.filter.Add(ctx, marks...); err != nil {
		c.log.Warn("publication marks not recorded; a redelivery of these pages may fetch their links twice",
			"links", len(published), "err", err)
	}
	return nil
}

// unpublished reports, for each fingerprint the filter held already (not
// fresh) and to be checked (check: its page was expanded before), whether
// it lacks its publication mark: claimed by a worker that may have died
// before publishing it. A link whose own page was expanded (its
// dedup.ExpandedMark is there) was published whatever its marks say, so
// it is not reported: a worker killed between publishing a link and
// recording its mark costs no refetch of a page fetched since. A
// fingerprint repeated in fps is reported at most once, and not at all
// after a fresh copy (published by this call). Without a dedup.Checker
// every fingerprint to check is reported (the links are published again
// past the filter), and that is logged once.
func (c *Composed) unpublished(ctx context.Context, fps []dedup.Fingerprint, fresh, check []bool) ([]bool, error) {
	again := make([]bool, len(fps))
	seen := make(map[dedup.Fingerprint]bool, len(fps))
	var idx []int
	var marks []dedup.Fingerprint
	for i, fp := range fps {
		if !fresh[i] && !check[i] || seen[fp] {
			continue
		}
		seen[fp] = true
		if !fresh[i] {
			idx = append(idx, i)
			marks = append(marks, dedup.PublishedMark(fp), dedup.ExpandedMark(fp))
		}
	}
	if len(marks) == 0 {
		return again, nil
	}
	in, err := c.Marked(ctx, marks...)
	if errors.Is(err, ErrCannotTell) {
		if c.noCheck.CompareAndSwap(false, true) {
			c.log.Info("the duplicate filter cannot check publication marks (no dedup.Checker); "+
				"a page processed again republishes all its links", "filter", fmt.Sprintf("%T", c.filter))
		}
		for _, i := range idx {
			again[i] = true
		}
		return again, nil
	}
	if err != nil {
		return nil, fmt.Errorf("frontier: check publication marks: %w", err)
	}
	for k, i := range idx {
		again[i] = !in[2*k] && !in[2*k+1]
	}
	return again, nil
}

// claimWaitSays is how long awaitPublished waits in silence.
const claimWaitSays = 2 * time.Second

// awaitPublished waits, up to the claim wait, until each of ws has its
// publication mark (or its page was expanded), and returns those that
// still have none: their claimer is taken for dead. Those published
// meanwhile are Filtered in out. Without a dedup.Checker nothing is
// waited on.
func (c *Composed) awaitPublished(ctx context.Context, ws []waiting, out [][]Outcome) ([]waiting, error) {
	_, ok := c.filter.(dedup.Checker)
	start, pause, said := time.Now(), 5*time.Millisecond, false
	for ok && len(ws) > 0 && time.Since(start) < c.claimWait {
		if !sleep(ctx, min(pause, c.claimWait-time.Since(start))) {
			return nil, ctx.Err()
		}
		pause = min(2*pause, time.Second)
		marks := make([]dedup.Fingerprint, 0, 2*len(ws))
		for _, w := range ws {
			marks = append(marks, dedup.PublishedMark(w.fp), dedup.ExpandedMark(w.fp))
		}
		in, err := c.Marked(ctx, marks...)
		if err != nil {
			return nil, fmt.Errorf("frontier: check publication marks: %w", err)
		}
		left := ws[:0]
		for k, w := range ws {
			if in[2*k] || in[2*k+1] {
				out[w.page][w.link] = Filtered
				continue
			}
			left = append(left, w)
		}
		ws = left
		if len(ws) > 0 && !said && time.Since(start) >= claimWaitSays {
			said = true
			c.log.Warn("start urls claimed by another worker are not published yet; waiting for it to publish them, and publishing them here if it does not within the wait (it died)",
				"count", len(ws), "wait", c.claimWait)
		}
	}
	return ws, nil
}

// sleep waits d or until ctx ends, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
