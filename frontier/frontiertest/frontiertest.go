// Package frontiertest is the conformance suite of frontier.Frontier: the
// promises every implementation keeps, in code. Run it from a backend's
// tests with the backend's harness:
//
//	frontiertest.Run(t, frontiertest.Harness{New: func(t *testing.T, crawl string, f *frontiertest.Faults) frontier.Frontier {
//		b, fl := … // a broker and a filter of their own for crawl
//		return frontier.Compose(f.Broker(b), f.Filter(fl), frontier.ComposeConfig{ClaimWait: 2 * time.Second})
//	}})
package frontiertest

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/dedup"
	"github.com/trawlhq/trawl/frontier"
)

// Harness describes the frontier under test.
type Harness struct {
	// New returns the frontier of crawl, a crawl of its own: its
	// requests queue is crawl+":requests" and starts empty, and its
	// filter holds nothing. Where the harness can, the frontier's stores
	// go through faults (Faults.Broker, Faults.Filter); the tests of
	// workers killed part-way need it (they are skipped otherwise). New
	// registers the cleanup with t.Cleanup; it is called from parallel
	// subtests. A composed
	// frontier should wait for claimed start URLs a short while (a
	// ClaimWait of 2s: the suite kills their claimers, and a live
	// claimer on a loaded machine publishes within it).
	New func(t *testing.T, crawl string, faults *Faults) frontier.Frontier
	// Faulty says that New wraps the stores with faults.
	Faulty bool
	// SamePageRaces says that the frontier may publish a link more than
	// once when several workers expand the same page at the same moment
	// (frontier.Compose: a worker that finds the page expanded before
	// cannot tell its claimer at work from a dead one, and republishes
	// what is not marked published yet). Only that such a race loses
	// nothing is checked then; start URLs and links shared by different
	// pages are still published once.
	SamePageRaces bool
}

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		run  func(t *testing.T, s *suite)
	}{
		{"Outcomes", testOutcomes},
		{"KnownLinks", testKnown},
		{"ExpandedAgain", testExpandedAgain},
		{"DuplicateDeliveries", testDuplicateDeliveries},
		{"SharedLinks", testSharedLinks},
		{"StartURLsTogether", testStartsTogether},
		{"CancelledContext", testCancelled},
		{"KilledExpander", testKilled},
		{"Completion", testCompletion},
	}
	var n atomic.Int64
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, &suite{h: h, t: t, seq: &n})
		})
	}
}

// suite opens the frontiers of one subtest.
type suite struct {
	h   Harness
	t   *testing.T
	seq *atomic.Int64
}

// crawl is a frontier of a crawl of its own, with its faults.
type crawl struct {
	frontier.Frontier
	queue   string
	faults  *Faults
	markers atomic.Int64 // drain's markers so far
}

func (s *suite) open(t *testing.T) *crawl {
	name := fmt.Sprintf("ft%d-%d", time.Now().UnixNano()%1_000_000, s.seq.Add(1))
	f := &Faults{}
	return &crawl{Frontier: s.h.New(t, name, f), queue: name + ":requests", faults: f}
}

// fp is the fingerprint of link name.
func fp(name string) dedup.Fingerprint {
	sum := sha256.Sum256([]byte("frontiertest link " + name))
	var f dedup.Fingerprint
	copy(f[:], sum[:])
	return f
}

// link is a filtered link whose message body is its name.
func link(name string) frontier.Link {
	return frontier.Link{Fingerprint: fp(name), Message: broker.Message{Body: []byte(name)}}
}

// page is the page parent with links named names.
func page(parent string, names ...string) frontier.Page {
	p := frontier.Page{Parent: fp("page " + parent)}
	for _, n := range names {
		p.Links = append(p.Links, link(n))
	}
	return p
}

// starts is a batch of start URLs named names.
func starts(names ...string) frontier.Page {
	p := page("", names...)
	p.Start, p.Parent = true, dedup.Fingerprint{}
	return p
}

// names returns n link names with prefix.
func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// expand expands pages and fails t on an error.
func (c *crawl) expand(t *testing.T, pages ...frontier.Page) [][]frontier.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := c.Expand(ctx, c.queue, pages)
	if err != nil {
		t.Fatalf("Expand: %v", err)
	}
	if len(out) != len(pages) {
		t.Fatalf("Expand returned outcomes of %d pages, want %d", len(out), len(pages))
	}
	for i, p := range pages {
		if len(out[i]) != len(p.Links) {
			t.Fatalf("Expand returned %d outcomes for page %d, want %d", len(out[i]), i, len(p.Links))
		}
	}
	return out
}

// counts returns the queue's counts.
func (c *crawl) counts(t *testing.T) broker.Counts {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	n, err := c.Broker().Counts(ctx, c.queue)
	if err != nil {
		t.Fatalf("Counts: %v", err)
	}
	return n
}

// drain takes and acknowledges every message in the queue, and returns
// how many times each body was there. It publishes a marker and takes
// messages until the marker comes: messages of one priority come in the
// order they were published, so every message published before is taken,
// whatever the broker's counts say at that moment (a JetStream
// consumer's count of pending messages lags a publish).
func (c *crawl) drain(t *testing.T) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	marker := fmt.Sprintf("marker %d", c.markers.Add(1))
	if err := c.Broker().Publish(ctx, c.queue, broker.Message{Body: []byte(marker)}); err != nil {
		t.Fatalf("Publish the drain's marker: %v", err)
	}
	got := map[string]int{}
	for got[marker] == 0 {
		ds, err := c.Broker().Receive(ctx, c.queue, 100)
		if err != nil {
			t.Fatalf("Receive, waiting for the drain's marker: %v", err)
		}
		for _, d := range ds {
			got[string(d.Message().Body)]++
			if err := d.Ack(ctx); err != nil {
				t.Fatalf("Ack: %v", err)
			}
		}
	}
	delete(got, marker)
	return got
}

// settled waits until the queue's counts satisfy ok, for up to 20s (a
// broker's counts may lag what it did), and fails t if they never do.
func (c *crawl) settled(t *testing.T, what string, ok func(broker.Counts) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		n := c.counts(t)
		if ok(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: counts %+v", what, n)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// want fails t unless got holds each of names once, and nothing else.
func want(t *testing.T, what string, got map[string]int, names ...string) {
	t.Helper()
	w := map[string]int{}
	for _, n := range names {
		w[n]++
	}
	var bad []string
	for n, k := range got {
		if k != w[n] {
			bad = append(bad, fmt.Sprintf("%s %d times (want %d)", n, k, w[n]))
		}
	}
	for n, k := range w {
		if got[n] == 0 {
			bad = append(bad, fmt.Sprintf("%s 0 times (want %d)", n, k))
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		t.Errorf("%s: published %s", what, strings.Join(bad, ", "))
	}
}

// outcomes fails t unless got is want, written as one letter per link:
// P published, F filtered, R republished.
func outcomes(t *testing.T, what string, got []frontier.Outcome, want string) {
	t.Helper()
	var b strings.Builder
	for _, o := range got {
		switch o {
		case frontier.Published:
			b.WriteByte('P')
		case frontier.Filtered:
			b.WriteByte('F')
		case frontier.Republished:
			b.WriteByte('R')
		default:
			b.WriteByte('?')
		}
	}
	if s := b.String(); s != want {
		t.Errorf("%s: outcomes %s, want %s", what, s, want)
	}
}

// A page's new links are published once, those claimed before are
// filtered, an unfiltered link is published every time, and a link found
// twice in one call is published once.
func testOutcomes(t *testing.T, s *suite) {
	c := s.open(t)
	a := page("a", "l1", "l2", "l3", "l1")
	u := frontier.Link{Unfiltered: true, Message: broker.Message{Body: []byte("u")}}
	a.Links = append(a.Links, u)
	out := c.expand(t, a)
	outcomes(t, "a page's first expansion", out[0], "PPPFP")
	c.settled(t, "after publishing 4, want 4 ready", func(n broker.Counts) bool { return n.Ready == 4 })
	want(t, "a page's first expansion", c.drain(t), "l1", "l2", "l3", "u")

	out = c.expand(t, a)
	outcomes(t, "the same page again", out[0], "FFFFP")
	want(t, "the same page again", c.drain(t), "u")

	out = c.expand(t, page("b", "l2", "l4"), page("c", "l4", "l5"))
	outcomes(t, "page b with page c", out[0], "FP")
	outcomes(t, "page c with page b", out[1], "FP")
	want(t, "two pages sharing a link", c.drain(t), "l4", "l5")

	out = c.expand(t, page("d"), starts("s1", "l5"))
	if len(out[0]) != 0 {
		t.Errorf("a page of no links: %d outcomes", len(out[0]))
	}
	outcomes(t, "start urls", out[1], "PF")
	want(t, "start urls", c.drain(t), "s1")
}

// A Known link on a page expanded for the first time is filtered without
// being resolved.
func testKnown(t *testing.T, s *suite) {
	c := s.open(t)
	c.expand(t, page("a", "k"))
	c.drain(t)
	p := page("b", "k", "n")
	p.Links[0] = frontier.Link{Known: true}
	var resolved atomic.Int64
	p.Resolve = func(i int) (frontier.Link, error) {
		resolved.Add(1)
		return link([]string{"k", "n"}[i]), nil
	}
	out := c.expand(t, p)
	outcomes(t, "a Known link and a new one", out[0], "FP")
	want(t, "a Known link and a new one", c.drain(t), "n")
	if n := resolved.Load(); n != 0 {
		t.Errorf("a page expanded the first time resolved %d Known links, want 0", n)
	}
	out = c.expand(t, p)
	outcomes(t, "the page again", out[0], "FF")
	want(t, "the page again", c.drain(t))
}

// A page expanded again and again after its expansion succeeded (a
// redelivery) publishes nothing more.
func testExpandedAgain(t *testing.T, s *suite) {
	c := s.open(t)
	p := page("p", names("x", 20)...)
	c.expand(t, p)
	want(t, "the first expansion", c.drain(t), names("x", 20)...)
	for range 3 {
		out := c.expand(t, p)
		outcomes(t, "an expansion again", out[0], strings.Repeat("F", 20))
	}
	st := starts("x1", "s")
	c.expand(t, st)
	c.expand(t, st)
	want(t, "the page expanded three times more, and start urls twice", c.drain(t), "s")
}

// Concurrent expansions of one page (duplicate deliveries to several
// workers) publish each link once.
func testDuplicateDeliveries(t *testing.T, s *suite) {
	c := s.open(t)
	p := page("p", names("y", 30)...)
	if s.h.SamePageRaces {
		together(t, 6, func(int) []frontier.Page { return []frontier.Page{p} }, c, false)
		got := c.drain(t)
		for _, l := range names("y", 30) {
			if got[l] == 0 {
				t.Errorf("one page expanded by 6 workers at once: %s lost", l)
			}
		}
	} else {
		together(t, 6, func(int) []frontier.Page { return []frontier.Page{p} }, c, true)
		want(t, "one page expanded by 6 workers at once", c.drain(t), names("y", 30)...)
	}
	c.expand(t, p)
	want(t, "the page once more", c.drain(t))
}

// together has n workers expand their pages at once and, if strict,
// checks that their outcomes say each link was published once.
func together(t *testing.T, n int, pages func(w int) []frontier.Page, c *crawl, strict bool) {
	t.Helper()
	c.faults.Gather(n, 2*time.Second)
	var wg sync.WaitGroup
	start := make(chan struct{})
	published := make([]map[string]int, n)
	errs := make([]error, n)
	for w := range n {
		wg.Go(func() {
			<-start
			ps := pages(w)
			out, err := c.Expand(t.Context(), c.queue, ps)
			errs[w] = err
			published[w] = map[string]int{}
			for i, p := range ps {
				for j, o := range out[i] {
					if o == frontier.Published || o == frontier.Republished {
						published[w][string(p.Links[j].Message.Body)]++
					}
				}
			}
		})
	}
	close(start)
	wg.Wait()
	told := map[string]int{}
	for w := range n {
		if errs[w] != nil {
			t.Fatalf("worker %d: Expand: %v", w, errs[w])
		}
		for l, k := range published[w] {
			told[l] += k
		}
	}
	for l, k := range told {
		if k != 1 && strict {
			t.Errorf("link %s: %d expansions said they published it, want 1", l, k)
		}
	}
}

// Workers expanding different pages with the same links at once publish
// each link once.
func testSharedLinks(t *testing.T, s *suite) {
	c := s.open(t)
	shared := names("z", 40)
	var all []string
	all = append(all, shared...)
	for w := range 8 {
		all = append(all, names(fmt.Sprintf("own%d-", w), 5)...)
	}
	together(t, 8, func(w int) []frontier.Page {
		ls := append(append([]string(nil), shared...), names(fmt.Sprintf("own%d-", w), 5)...)
		// Each worker offers the shared links in another order.
		for i := range ls {
			j := (i*7 + w*13) % len(ls)
			ls[i], ls[j] = ls[j], ls[i]
		}
		return []frontier.Page{page(fmt.Sprintf("w%d", w), ls...)}
	}, c, true)
	want(t, "8 pages sharing 40 links, expanded at once", c.drain(t), all...)
}

// Workers given the same start URLs at once publish each once.
func testStartsTogether(t *testing.T, s *suite) {
	c := s.open(t)
	st := starts(names("s", 10)...)
	together(t, 4, func(int) []frontier.Page { return []frontier.Page{st} }, c, true)
	want(t, "start urls given to 4 workers at once", c.drain(t), names("s", 10)...)
}

// An expansion whose context was cancelled before it began, then the
// page expanded again, loses nothing and publishes nothing twice.
func testCancelled(t *testing.T, s *suite) {
	c := s.open(t)
	c.expand(t, page("other", "c0"))
	c.drain(t)
	p := page("p", names("c", 10)...)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := c.Expand(ctx, c.queue, []frontier.Page{p})
	first := c.drain(t)
	c.expand(t, p)
	recovered(t, "an expansion under a cancelled context (err "+fmt.Sprint(err)+"), then again", first, c.drain(t), names("c", 10)[1:], "c0")
	c.expand(t, p)
	want(t, "the page once more", c.drain(t))
}

// recovered checks what a failed expansion published (first) and what the
// next, successful, expansion of the same page published (then): no link
// lost; a link published again only if the failed expansion got as far
// as publishing something (a worker that died after publishing, before
// it recorded so, costs a duplicate, never a page).
func recovered(t *testing.T, what string, first, then map[string]int, links []string, filtered ...string) {
	t.Helper()
	for _, l := range filtered {
		if k := first[l] + then[l]; k > 0 {
			t.Errorf("%s: %s, claimed and published before, published %d times", what, l, k)
		}
	}
	sum := map[string]int{}
	for l, k := range first {
		sum[l] += k
	}
	for l, k := range then {
		sum[l] += k
	}
	var bad []string
	for _, l := range links {
		switch k := sum[l]; {
		case k == 0:
			bad = append(bad, l+" lost")
		case k > 1 && len(first) == 0:
			bad = append(bad, fmt.Sprintf("%s published %d times though the failed expansion published nothing", l, k))
		case k > 2:
			bad = append(bad, fmt.Sprintf("%s published %d times", l, k))
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		t.Errorf("%s: %s", what, strings.Join(bad, "; "))
	}
}

// A worker killed at any store call of an expansion, in any way, then the
// page expanded again: no link is lost, and none published twice unless
// the dead worker had published it; once an expansion succeeded, the
// next publishes nothing.
func testKilled(t *testing.T, s *suite) {
	if !s.h.Faulty {
		t.Skip("the harness does not wrap its stores with Faults")
	}
	links := names("k", 6)
	for _, kind := range []string{"page", "starts"} {
		for _, m := range []Mode{Before, After, Partial, Cancel} {
			for k := 0; ; k++ {
				c := s.open(t)
				p := page("p", links...)
				if kind == "starts" {
					p = starts(links...)
				}
				// Another page claimed and published one link before.
				c.expand(t, page("other", links[0]))
				c.drain(t)
				ctx, cancel := context.WithCancel(t.Context())
				c.faults.Arm(k, m, cancel)
				_, err := c.Expand(ctx, c.queue, []frontier.Page{p})
				cancel()
				fired := c.faults.Heal()
				what := fmt.Sprintf("%s killed at store call %d (%s; err %v), then expanded again", kind, k, m, err)
				first := c.drain(t)
				if err == nil {
					// Expand said it was done: every new link is published.
					recovered(t, what+" (Expand returned nil)", first, nil, links[1:], links[0])
				}
				c.expand(t, p)
				recovered(t, what, first, c.drain(t), links[1:], links[0])
				if out := c.expand(t, p); !t.Failed() {
					outcomes(t, what+", and once more", out[0], strings.Repeat("F", len(links)))
				}
				want(t, what+", and once more", c.drain(t))
				if !fired || t.Failed() {
					break
				}
			}
		}
	}
}

// The queue's counts tell what is pending: ready until taken, in flight
// until settled, nothing once acknowledged.
func testCompletion(t *testing.T, s *suite) {
	c := s.open(t)
	if n := c.counts(t); n.Ready != 0 || n.InFlight != 0 {
		t.Fatalf("a new crawl's counts: %+v, want nothing", n)
	}
	c.expand(t, page("p", names("q", 5)...))
	c.settled(t, "after 5 published, want 5 ready", func(n broker.Counts) bool { return n.Ready == 5 && n.InFlight == 0 })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var ds []broker.Delivery
	for len(ds) < 5 {
		got, err := c.Broker().Receive(ctx, c.queue, 5-len(ds))
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		ds = append(ds, got...)
	}
	c.settled(t, "after 5 taken, want 5 in flight", func(n broker.Counts) bool { return n.Ready == 0 && n.InFlight == 5 })
	for _, d := range ds {
		if err := d.Ack(ctx); err != nil {
			t.Fatalf("Ack: %v", err)
		}
	}
	c.settled(t, "after 5 acknowledged, want nothing pending", func(n broker.Counts) bool { return n.Ready == 0 && n.InFlight == 0 })
}
