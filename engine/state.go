package engine

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/dedup"
	"github.com/trawlhq/trawl/frontier"
)

// A crawl knows when its state was lost. Its stores carry a mark of its
// identity: a random crawl id in its metadata (markKey, created when the
// crawl is seeded or first joined), and in its duplicate filter two
// records derived from it (filterMarks). A worker reads the mark when it
// starts, when the server of a store restarted under it
// (broker.Incarnations), and before it finds the crawl done:
//   - metadata without the mark, while the filter holds the crawl's: the
//     frontier and metadata were lost (a Redis without persistence
//     restarted, a broker's store deleted);
//   - metadata with the mark, and a filter without it: the filter was lost
//     or replaced (a deleted filter file or key);
//   - a mark gone or changed under a running worker: the crawl was lost (or
//     purged) while it ran.
//
// Each is ErrStateLost, and Run returns it: a crawl whose frontier or
// filter disappeared is never found done.
//
// A server that restarted with the mark kept may have rolled back to its
// last snapshot, losing recent writes: links published, marks added,
// acknowledgements. The worker then drops what it remembers of the shared
// state (the table of links offered to the filter, which would skip links
// the filter no longer holds), publishes its trusted addresses again, and
// acknowledges no page written before it noticed: those are given back and
// processed again, their links claimed again (see stateGen).

// ErrStateLost is returned by Run (and Seed) when a store of the crawl lost
// its state: the frontier, the filter or the crawl's metadata disappeared
// or was replaced under it. The error says which and what to do.
var ErrStateLost = errors.New("the crawl's state was lost")

// markKey is the Metadata key of the crawl's id.
const markKey = "crawl_id"

// markDomain names the filter's records of the crawl's mark: hashed with
// a domain of their own, they never equal a request's fingerprint.
const markDomain = "trawl/crawl"

// filterMarks returns the records of the crawl's mark in its filter: one
// for the crawl's name (the filter belongs to a crawl that began) and one
// for its id ("" for none: the name's alone).
func filterMarks(name, id string) (named, identified dedup.Fingerprint) {
	h := func(parts ...string) dedup.Fingerprint {
		d := sha256.New()
		for _, p := range parts {
			fmt.Fprintf(d, "%d:%s", len(p), p)
		}
		var f dedup.Fingerprint
		copy(f[:], d.Sum(nil))
		return f
	}
	return h(markDomain, name), h(markDomain, name, id)
}

// FilterMarks returns the records of crawl name's mark in its duplicate
// filter (see frontier.Frontier.Mark), read from m: what a tool that
// rewrites the filter must keep (trawl repartition). A crawl not marked
// yet has its name's record alone.
func FilterMarks(ctx context.Context, m broker.Metadata, name string) ([]dedup.Fingerprint, error) {
	raw, err := m.GetMeta(ctx, name, markKey)
	switch {
	case errors.Is(err, broker.ErrNotFound):
		named, _ := filterMarks(name, "")
		return []dedup.Fingerprint{named}, nil
	case err != nil:
		return nil, fmt.Errorf("crawl %q: read the crawl's mark: %w", name, err)
	}
	named, identified := filterMarks(name, string(raw))
	return []dedup.Fingerprint{named, identified}, nil
}

// stateWatch is what a crawler keeps of its crawl's mark.
type stateWatch struct {
	mu          sync.Mutex
	id          string // the crawl's id; "" before markCrawl
	incarnation string // the stores' incarnations when last looked at
	// gen counts the restarts noticed, from 1: a page written under one
	// gen is not acknowledged under another.
	gen  atomic.Uint64
	lost atomic.Pointer[error] // the loss noticed, if any
}

// stateGen returns the generation of the crawl's state after looking at
// whether a store's server restarted: a page written under one generation
// is acknowledged only under the same (see ackAcks). 0: the crawler keeps
// no watch (outside Run).
func (c *Crawler) stateGen(ctx context.Context) uint64 {
	c.checkState(ctx)
	return c.state.gen.Load()
}

// stateLost returns the loss noticed, or nil.
func (c *Crawler) stateLost() error {
	if p := c.state.lost.Load(); p != nil {
		return *p
	}
	return nil
}

// lose records err as the crawl's loss, says it, and returns it.
func (c *Crawler) lose(err error) error {
	if c.state.lost.CompareAndSwap(nil, &err) {
		c.log.Error("the crawl's state was lost; stopping", "crawl", c.cfg.Name, "err", err)
	}
	return c.stateLost()
}

// incarnation returns the incarnations of the crawl's stores that can
// tell (broker.Incarnations), joined; "" when none can.
func (c *Crawler) incarnation(ctx context.Context) (string, error) {
	var parts []string
	for _, s := range []any{c.frontier, c.cfg.Metadata} {
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

// markCrawl reads the crawl's mark, creating it for a crawl that has none,
// and starts watching the stores' incarnations. With checkFilter (a
// worker about to crawl), a crawl whose filter does not hold its mark is
// lost. It returns an error wrapping ErrStateLost for a crawl whose state
// was lost.
func (c *Crawler) markCrawl(ctx context.Context, checkFilter bool) error {
	c.state.mu.Lock()
	defer c.state.mu.Unlock()
	if c.state.gen.Load() == 0 {
		in, err := c.incarnation(ctx)
		if err != nil {
			return fmt.Errorf("crawl %q: %w", c.cfg.Name, err)
		}
		c.state.incarnation = in
		c.state.gen.Store(1)
	}
	m := c.metadata()
	if m == nil {
		return nil
	}
	for range 3 {
		raw, err := m.GetMeta(ctx, c.cfg.Name, markKey)
		if errors.Is(err, broker.ErrNotFound) {
			if c.state.id != "" {
				return fmt.Errorf("crawl %q: %w: the crawl's mark is gone from the broker: its frontier, filter and settings were lost while it ran "+
					"(a server restarted without its data, or the crawl was purged); pages are missing: start again with --flush (library: purge the crawl), "+
					"on a store that persists (docs/deploy.md)", c.cfg.Name, ErrStateLost)
			}
			named, _ := filterMarks(c.cfg.Name, "")
			if has, err := c.marked(ctx, named, false); err != nil {
				return err
			} else if has {
				if c.awaitMark(ctx, m) {
					continue // marked by a worker that began the crawl at once
				}
				return fmt.Errorf("crawl %q: %w: its duplicate filter holds a crawl that began, but the broker no longer has the crawl's mark: "+
					"its frontier and settings were lost (a server restarted without its data, or its store was deleted); "+
					"start again with --flush (library: purge the crawl), or restore the broker's data", c.cfg.Name, ErrStateLost)
			}
			var r [16]byte
			rand.Read(r[:])
			id := hex.EncodeToString(r[:])
			named, identified := filterMarks(c.cfg.Name, id)
			// The filter first: a worker that reads the mark finds the
			// filter's records already there.
			if err := c.frontier.Mark(ctx, named, identified); err != nil {
				return fmt.Errorf("crawl %q: mark the filter: %w", c.cfg.Name, err)
			}
			err := m.CreateMeta(ctx, c.cfg.Name, markKey, []byte(id))
			if errors.Is(err, broker.ErrExists) {
				continue // another worker marked it first
			}
			if err != nil {
				return fmt.Errorf("crawl %q: store the crawl's mark: %w", c.cfg.Name, err)
			}
			c.state.id = id
			return nil
		}
		if err != nil {
			return fmt.Errorf("crawl %q: read the crawl's mark: %w", c.cfg.Name, err)
		}
		id := string(raw)
		if c.state.id != "" && id != c.state.id {
			return fmt.Errorf("crawl %q: %w: the crawl's mark changed under this worker (it was purged and begun again)", c.cfg.Name, ErrStateLost)
		}
		if checkFilter {
			_, identified := filterMarks(c.cfg.Name, id)
			has, err := c.marked(ctx, identified, true)
			if err != nil {
				return err
			}
			if !has {
				return fmt.Errorf("crawl %q: %w: its duplicate filter%s does not hold the crawl's mark: the filter was deleted, damaged or replaced since the crawl began, "+
					"and every page would be fetched again; start again with --flush (library: purge the crawl), or restore the filter", c.cfg.Name, ErrStateLost, named(c.frontier))
			}
		}
		c.state.id = id
		return nil
	}
	return fmt.Errorf("crawl %q: the crawl's mark keeps changing under this worker", c.cfg.Name)
}

// marked reports whether the frontier holds the crawl's mark fp, or
// unknown when it cannot tell (frontier.ErrCannotTell): a loss of the
// filter then goes unnoticed.
func (c *Crawler) marked(ctx context.Context, fp dedup.Fingerprint, unknown bool) (bool, error) {
	has, err := c.frontier.Marked(ctx, fp)
	switch {
	case errors.Is(err, frontier.ErrCannotTell):
		return unknown, nil
	case err != nil:
		return false, fmt.Errorf("crawl %q: read the filter's mark: %w", c.cfg.Name, err)
	}
	return has[0], nil
}

// markWait is how long a worker that finds the filter's record of a begun
// crawl, but no mark in the metadata, waits for the mark before it takes
// the crawl for lost: another worker marking the crawl adds the filter's
// records first and the mark a round trip later (markCrawl), so workers
// started together see that state for a moment.
const markWait = 5 * time.Second

// markWaitSays is how long awaitMark waits before it says why.
const markWaitSays = 2 * time.Second

// awaitMark reports whether the crawl's mark appears in m within
// markWait: the filter's records were added by a worker that is marking
// the crawl, not left by a crawl whose metadata was lost. A wait past
// markWaitSays is logged once.
func (c *Crawler) awaitMark(ctx context.Context, m broker.Metadata) bool {
	ctx, cancel := context.WithTimeout(ctx, markWait)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	say := time.NewTimer(markWaitSays)
	defer say.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-say.C:
			c.log.Warn("the duplicate filter holds a crawl that began, but the broker has no mark of it yet; "+
				"waiting for the worker marking it to store the mark, else the crawl's state was lost",
				"crawl", c.cfg.Name, "wait", markWait)
			continue
		case <-t.C:
		}
		if _, err := m.GetMeta(ctx, c.cfg.Name, markKey); err == nil {
			return true
		}
	}
}

// checkState looks at whether a store's server restarted since it last
// did. One that did lost the crawl's state (its mark is gone) or may have
// rolled back to a snapshot: the crawler then forgets the links it
// offered the filter, publishes its trusted addresses again and starts a
// new generation, so that the pages written before are given back, not
// acknowledged. It returns the loss, if the state was lost.
func (c *Crawler) checkState(ctx context.Context) error {
	if err := c.stateLost(); err != nil {
		return err
	}
	if c.state.gen.Load() == 0 {
		return nil // not watching (outside Run)
	}
	in, err := c.incarnation(ctx)
	if err != nil || in == "" {
		return nil // a store that does not answer says so elsewhere
	}
	c.state.mu.Lock()
	was := c.state.incarnation
	changed := in != was
	if changed {
		c.state.incarnation = in
		c.seen.Store(newSeenLinks())
		c.state.gen.Add(1)
	}
	c.state.mu.Unlock()
	if !changed {
		return nil
	}
	c.log.Warn("a server of the crawl restarted; checking the crawl's state", "crawl", c.cfg.Name, "was", was, "now", in)
	if err := c.markCrawl(ctx, false); err != nil {
		if errors.Is(err, ErrStateLost) {
			return c.lose(err)
		}
		c.log.Warn("cannot read the crawl's mark after a restart", "crawl", c.cfg.Name, "err", err)
		return nil
	}
	if m := c.metadata(); m != nil {
		if err := publishTrust(ctx, m, c.cfg.Name, SettingsOf(c.cfg.Config).TrustedHosts); err != nil {
			c.log.Warn("publishing this worker's trusted addresses again failed", "err", err)
		}
	}
	c.log.Warn("the server restarted with the crawl's mark: it may have rolled back to its last snapshot, losing recent writes; "+
		"this worker forgot the links it offered the filter and gives back the pages it wrote before, to be processed again", "crawl", c.cfg.Name)
	return nil
}

// verifyState is checkState followed by a read of the crawl's mark, for a
// crawl about to be found done: a mark that is gone means the frontier
// looks empty because it was lost.
func (c *Crawler) verifyState(ctx context.Context) error {
	if err := c.checkState(ctx); err != nil {
		return err
	}
	c.state.mu.Lock()
	id := c.state.id
	c.state.mu.Unlock()
	m := c.metadata()
	if m == nil || id == "" {
		return nil // no mark to look for: it could not be written
	}
	raw, err := m.GetMeta(ctx, c.cfg.Name, markKey)
	switch {
	case errors.Is(err, broker.ErrNotFound):
		return c.lose(fmt.Errorf("crawl %q: %w: the crawl's mark is gone from the broker: its frontier, filter and settings were lost while it ran "+
			"(a server restarted without its data, or the crawl was purged); pages are missing: start again with --flush (library: purge the crawl), "+
			"on a store that persists (docs/deploy.md)", c.cfg.Name, ErrStateLost))
	case err != nil:
		return nil // cannot tell: the idle check fails too, and says so
	case string(raw) != id:
		return c.lose(fmt.Errorf("crawl %q: %w: the crawl's mark changed while it ran (it was purged and begun again)", c.cfg.Name, ErrStateLost))
	}
	return nil
}

// named is " (what)" for a store that says what it is (fmt.Stringer: the
// local filter names its file), else "".
func named(store any) string {
	if s, ok := store.(fmt.Stringer); ok && s.String() != "" {
		return " (" + s.String() + ")"
	}
	return ""
}
