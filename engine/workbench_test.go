package engine

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/memory"
)

// TestWorkbenchSkipsCappedHosts crawls, with 4 slots and 1 request per
// host, eight pages of one host queued before the home pages of three
// others. The small hosts' pages start at once, beside the big host's
// first: a worker that took deliveries in queue order would fill its
// slots with the big host's pages, waiting for its cap, and reach the
// small hosts only once they were all taken (after 4 of its latencies).
// The big host still gets one request at a time, each a latency apart.
func TestWorkbenchSkipsCappedHosts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const latency = time.Second
		ls := &latencySites{latency: map[string]time.Duration{}, pages: map[string]int{}, arrivals: map[string][]time.Time{}}
		small := []string{"s1.test", "s2.test", "s3.test"}
		for _, h := range append([]string{"big.test"}, small...) {
			ls.latency[h] = latency
		}
		pn := newPipeNet()
		srv := &http.Server{Handler: ls}
		go srv.Serve(pn)
		defer srv.Close()

		b, f := newBackends(t, memory.Config{})
		c, err := New(b, f, Config{Concurrency: 4, PerHost: 1, IdleTimeout: 300 * time.Millisecond, IgnoreRobots: true})
		if err != nil {
			t.Fatal(err)
		}
		c.kit.fetcher.transport.DialContext = pn.dial
		defer c.kit.fetcher.transport.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		var starts []StartURL
		for i := range 8 {
			starts = append(starts, StartURL{URL: fmt.Sprintf("http://big.test/p%d", i)})
		}
		for _, h := range small {
			starts = append(starts, StartURL{URL: "http://" + h + "/"})
		}
		if err := c.Seed(ctx, starts...); err != nil {
			t.Fatal(err)
		}
		if err := c.Run(ctx); err != nil {
			t.Fatalf("run: %v", err)
		}

		ls.mu.Lock()
		first := ls.arrivals["big.test"][0]
		for _, h := range small {
			if a := ls.arrivals[h]; len(a) != 1 {
				t.Errorf("%s got %d requests, want 1", h, len(a))
			} else if wait := a[0].Sub(first); wait != 0 {
				t.Errorf("%s's page started %v after the big host's first, want at once (a free slot waited on a capped host)", h, wait)
			}
		}
		ls.mu.Unlock()
		gaps := ls.gaps("big.test")
		if len(gaps) != 7 {
			t.Fatalf("big.test got %d requests, want 8", len(gaps)+1)
		}
		for i, g := range gaps {
			if g < latency {
				t.Errorf("big.test: request %d came %v after the previous, want at least %v (--per-host 1)", i+1, g, latency)
			}
		}
	})
}

// TestWorkbenchFreesHostAtFetchEnd crawls four pages of one host at
// --per-host 1, each fetch taking a second and each page's callback a
// second after it: the host's next fetch starts as the previous fetch
// ends, while the previous page is still in its callback. A workbench
// that held the host's slot until the page was done would space the
// fetches two seconds apart: the host idle half the time, as bench-web's
// largest hosts were while a loaded worker scanned their pages.
func TestWorkbenchFreesHostAtFetchEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const latency = time.Second
		ls := &latencySites{latency: map[string]time.Duration{"one.test": latency}, pages: map[string]int{}, arrivals: map[string][]time.Time{}}
		pn := newPipeNet()
		srv := &http.Server{Handler: ls}
		go srv.Serve(pn)
		defer srv.Close()

		b, f := newBackends(t, memory.Config{})
		scan := func(context.Context, *Response) (Result, error) {
			time.Sleep(latency) // the page's scan, links and item
			return Result{}, nil
		}
		c, err := New(b, f, Config{Concurrency: 4, PerHost: 1, IdleTimeout: 300 * time.Millisecond, IgnoreRobots: true,
			Callbacks: map[string]Callback{"": scan}})
		if err != nil {
			t.Fatal(err)
		}
		c.kit.fetcher.transport.DialContext = pn.dial
		defer c.kit.fetcher.transport.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		var starts []StartURL
		for i := range 4 {
			starts = append(starts, StartURL{URL: fmt.Sprintf("http://one.test/p%d", i)})
		}
		if err := c.Seed(ctx, starts...); err != nil {
			t.Fatal(err)
		}
		if err := c.Run(ctx); err != nil {
			t.Fatalf("run: %v", err)
		}
		gaps := ls.gaps("one.test")
		if len(gaps) != 3 {
			t.Fatalf("one.test got %d requests, want 4", len(gaps)+1)
		}
		for i, g := range gaps {
			if g != latency {
				t.Errorf("request %d came %v after the previous, want %v: the previous fetch's end (--per-host 1), not its page's", i+1, g, latency)
			}
		}
	})
}

// TestWorkbenchOrder checks the workbench's own promises: a host at its
// cap is skipped, deliveries start in arrival order within a host and
// across hosts that have room and as many pages in progress, done gives a held-back delivery room and
// wakes a waiting receiver, a host's entry goes once it has nothing, and
// drain returns what is held back.
func TestWorkbenchOrder(t *testing.T) {
	w := newWorkbench(2, 100, nil)
	item := func(host string) *benchItem { return &benchItem{host: host} }
	var its []*benchItem
	for _, h := range []string{"a", "a", "a", "b", "a", "c"} {
		it := item(h)
		its = append(its, it)
		w.add(it)
	}
	var got []*benchItem
	for it := w.take(); it != nil; it = w.take() {
		got = append(got, it)
	}
	// a's first, b and c (hosts with nothing in progress first), a's
	// second, then nothing: a at its cap.
	want := []*benchItem{its[0], its[3], its[5], its[1]}
	if len(got) != len(want) {
		t.Fatalf("took %d, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("take %d: got item %v, want %v", i, got[i].seq, want[i].seq)
		}
	}
	woken := false
	if !w.waitWith(func() { woken = true }) {
		t.Fatal("waitWith: a delivery is ready, want none")
	}
	w.done(its[3])
	if woken {
		t.Error("done(b) woke the receiver, though nothing waits for b")
	}
	if _, ok := w.hosts["b"]; ok {
		t.Error("b's entry stays after its last page")
	}
	w.done(its[0])
	if !woken {
		t.Error("done(a) did not wake the receiver, though a's third delivery got room")
	}
	w.done(its[0]) // the page ends after its fetch did: nothing more
	if got := w.hosts["a"].active; got != 1 {
		t.Errorf("a has %d in progress after its first page's done twice, want 1 (its second)", got)
	}
	w.waitWith(nil)
	if it := w.take(); it != its[2] {
		t.Errorf("after done(a): took %v, want a's third", it)
	}
	if it := w.take(); it != nil {
		t.Errorf("took %v, want nothing (a at its cap again)", it.seq)
	}
	if held := w.drain(); len(held) != 1 || held[0] != its[4] {
		t.Errorf("drain returned %d, want a's fourth alone", len(held))
	}
	if w.full() || w.take() != nil {
		t.Error("after drain: the workbench still holds work")
	}
}

// TestWorkbenchIdleHostsFirst: a host with no page in progress is handed
// out before a second slot of a host already fetching (which would need a
// second connection to it), whatever the arrival order, and a host whose
// page ends goes back before hosts still fetching; among hosts with as
// many pages in progress, arrival order holds. (The old order, arrival
// alone, gave a's second delivery second and c's after b's.)
func TestWorkbenchIdleHostsFirst(t *testing.T) {
	w := newWorkbench(2, 100, nil)
	add := func(host string) *benchItem {
		it := &benchItem{host: host}
		w.add(it)
		return it
	}
	a1, a2, a3, b1, b2, c1, c2 := add("a"), add("a"), add("a"), add("b"), add("b"), add("c"), add("c")
	for i, want := range []*benchItem{a1, b1, c1, a2, b2, c2} {
		if got := w.take(); got != want {
			t.Fatalf("take %d: got %s's delivery %v, want %s's %v", i, got.host, got.seq, want.host, want.seq)
		}
	}
	if it := w.take(); it != nil {
		t.Fatalf("took %s's %v, want nothing: every host at its cap", it.host, it.seq)
	}
	// c's pages end: c has none in progress, and goes before a, which
	// arrived first but still fetches one.
	c3, a4 := add("c"), add("a")
	w.done(a1)
	w.done(c1)
	w.done(c2)
	if got := w.take(); got != c3 {
		t.Fatalf("after c's pages ended: took %s's %v, want c's third (no page in progress)", got.host, got.seq)
	}
	if got := w.take(); got != a3 {
		t.Fatalf("took %s's %v, want a's third", got.host, got.seq)
	}
	if got := w.take(); got != nil {
		t.Fatalf("took %s's %v, want nothing", got.host, got.seq)
	}
	w.done(a2)
	if got := w.take(); got != a4 {
		t.Fatalf("took %v, want a's fourth", got)
	}
}

// slowExtender is a delivery that takes a second, on the bubble's clock,
// to extend.
type slowExtender struct {
	broker.Delivery
	extended *atomic.Int32
}

func (s slowExtender) Extend(context.Context, time.Duration) error {
	time.Sleep(time.Second)
	s.extended.Add(1)
	return nil
}

// TestExtendAllInParallel extends 64 leases whose extensions take a
// second each: all are extended within 2 seconds, not one after the other
// (64 seconds, past a 30s lease: a worker holding thousands of deliveries
// on a loaded machine lost leases so, and fetched their pages twice).
func TestExtendAllInParallel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int32
		ds := make([]broker.Delivery, 64)
		for i := range ds {
			ds[i] = slowExtender{extended: &n}
		}
		start := time.Now()
		extendAll(t.Context(), ds, time.Minute, func(_ broker.Delivery, err error) { t.Error(err) })
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("64 extensions of 1s each took %v, want at most 2s", took)
		}
		if n.Load() != 64 {
			t.Errorf("%d extended, want 64", n.Load())
		}
	})
}

// leaseGate is a HostLeaser that holds the hosts it is told to and
// records the ready callbacks of the hosts it refuses.
type leaseGate struct {
	HostLimiter
	held  map[string]bool
	ready map[string][]func()
}

func (g *leaseGate) Lease(host string, active, waiting int, ready func()) bool {
	if g.held[host] {
		return true
	}
	g.ready[host] = append(g.ready[host], ready)
	return false
}

// TestWorkbenchParksHostsHeldElsewhere: with a limiter that leases hosts,
// a host another worker holds is not handed out (its slot would wait in
// Acquire): take skips it for the hosts this worker holds, and once the
// limiter says it is worth trying again (ready), the receiver is woken
// and the host handed out if its lease is held by then.
func TestWorkbenchParksHostsHeldElsewhere(t *testing.T) {
	g := &leaseGate{held: map[string]bool{"b": true}, ready: map[string][]func(){}}
	w := newWorkbench(2, 100, g)
	a1, b1, a2 := &benchItem{host: "a"}, &benchItem{host: "b"}, &benchItem{host: "a"}
	w.add(a1)
	w.add(b1)
	w.add(a2)
	if it := w.take(); it != b1 {
		t.Fatalf("took %v, want b's delivery (a is held by another worker)", it)
	}
	if it := w.take(); it != nil {
		t.Fatalf("took %v, want nothing: a is parked", it.seq)
	}
	if len(g.ready["a"]) != 1 {
		t.Fatalf("a asked for %d times, want once (then parked)", len(g.ready["a"]))
	}
	woken := false
	if !w.waitWith(func() { woken = true }) {
		t.Fatal("waitWith: a delivery is ready, want none")
	}
	g.ready["a"][0]() // asked again: still held elsewhere
	if !woken {
		t.Fatal("a's ready did not wake the receiver")
	}
	w.waitWith(nil)
	if it := w.take(); it != nil {
		t.Fatalf("took %v while a is still held elsewhere", it.seq)
	}
	g.held["a"] = true
	g.ready["a"][1]()
	if it := w.take(); it != a1 {
		t.Fatalf("took %v, want a's first once its lease is held", it)
	}
	if it := w.take(); it != a2 {
		t.Fatalf("took %v, want a's second", it)
	}
}

// slotGate is a HostLeaser that holds slots[host] slots of each host and
// records the Lease calls.
type slotGate struct {
	HostLimiter
	slots map[string]int
	asked []string // "host active waiting" per Lease call
}

func (g *slotGate) Lease(host string, active, waiting int, ready func()) bool {
	g.asked = append(g.asked, fmt.Sprintf("%s %d %d", host, active, waiting))
	return active < g.slots[host]
}

// TestWorkbenchParkedHostResumesOnItsOwnSlot: a host parked because
// every slot this worker holds of it is busy (the leaser found no other
// free) is handed out again as soon as one of its pages here ends: the
// slot it frees is this worker's, and must not stand idle until the
// leaser's retry. The leaser is told the host's pages in progress and
// held back.
func TestWorkbenchParkedHostResumesOnItsOwnSlot(t *testing.T) {
	g := &slotGate{slots: map[string]int{"a": 1}}
	w := newWorkbench(2, 100, g)
	a1, a2, a3 := &benchItem{host: "a"}, &benchItem{host: "a"}, &benchItem{host: "a"}
	w.add(a1)
	w.add(a2)
	w.add(a3)
	if it := w.take(); it != a1 {
		t.Fatalf("took %v, want a's first", it)
	}
	if it := w.take(); it != nil {
		t.Fatalf("took %v, want nothing: a's one slot here is busy", it.seq)
	}
	if want := []string{"a 0 3", "a 1 2"}; !slices.Equal(g.asked, want) {
		t.Errorf("Lease calls %q, want %q", g.asked, want)
	}
	woken := false
	if !w.waitWith(func() { woken = true }) {
		t.Fatal("waitWith: a delivery is ready, want none")
	}
	w.done(a1) // its fetch ended: the slot is free here
	if !woken {
		t.Fatal("a's page ending did not wake the receiver")
	}
	w.waitWith(nil)
	if it := w.take(); it != a2 {
		t.Fatalf("took %v, want a's second on the slot a's first freed", it)
	}
}

// TestWorkbenchSpare: a page's connection is spare when another page of
// its host is in progress and none is held back, and not when its host
// has work held back or no other page in progress.
func TestWorkbenchSpare(t *testing.T) {
	w := newWorkbench(2, 100, nil)
	a1, a2 := &benchItem{host: "a"}, &benchItem{host: "a"}
	w.add(a1)
	w.add(a2)
	w.take()
	if w.spare(a1) {
		t.Error("a1 spare with a2 held back")
	}
	w.take()
	if !w.spare(a2) || !w.spare(a1) {
		t.Error("a1 or a2 not spare: both in progress, nothing held back")
	}
	a3 := &benchItem{host: "a"}
	w.add(a3)
	if w.spare(a1) {
		t.Error("a1 spare with a3 held back")
	}
	w.done(a1)
	w.take()
	w.done(a2)
	if w.spare(a3) {
		t.Error("a3 spare: the only page of its host in progress")
	}
}

// TestWorkbenchShed: shed returns the held-back deliveries of the hosts
// it is told not to keep, and only those; their pages in progress stay
// counted, and what is kept is handed out as before.
func TestWorkbenchShed(t *testing.T) {
	w := newWorkbench(1, 100, nil)
	item := func(host string) *benchItem { return &benchItem{host: host} }
	a1, a2, b1, b2, c1 := item("a"), item("a"), item("b"), item("b"), item("c")
	for _, it := range []*benchItem{a1, a2, b1, b2, c1} {
		w.add(it)
	}
	if it := w.take(); it != a1 {
		t.Fatalf("took %v first, want a's first", it)
	}
	shed := w.shed(func(host string) bool { return host == "b" })
	if len(shed) != 2 || !slices.Contains(shed, a2) || !slices.Contains(shed, c1) {
		t.Fatalf("shed %d, want a's second and c's", len(shed))
	}
	if w.hosts["a"] == nil || w.hosts["a"].active != 1 {
		t.Error("a's page in progress is no longer counted")
	}
	if _, ok := w.hosts["c"]; ok {
		t.Error("c's entry stays with nothing held or in progress")
	}
	var got []*benchItem
	for it := w.take(); it != nil; it = w.take() {
		got = append(got, it)
	}
	if len(got) != 1 || got[0] != b1 {
		t.Errorf("took %d after the shed, want b's first alone (b at its cap of 1 then)", len(got))
	}
	w.done(a1)
	w.done(b1)
	if it := w.take(); it != b2 {
		t.Errorf("took %v, want b's second", it)
	}
	if held := w.drain(); len(held) != 0 {
		t.Errorf("drain returned %d, want none", len(held))
	}
}

// TestWorkbenchDropsLostLeases: the deliveries held back whose lease the
// keeper found lost leave the workbench (another worker gets them), in
// whichever place of their host's queue; a page in progress stays, and
// the host order holds for what is left. Each lost delivery is done with
// the keeper once, and the keeper's round hands dropLost exactly the
// deliveries whose lease is lost (not those settled meanwhile).
func TestWorkbenchDropsLostLeases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorkbench(1, 100, nil)
		ds := make([]*leasedDelivery, 6)
		its := make([]*benchItem, len(ds))
		for i, host := range []string{"a", "a", "a", "b", "b", "c"} {
			ds[i] = &leasedDelivery{}
			its[i] = &benchItem{d: ds[i], host: host}
		}
		a1, a2, a3, b1, b2, c1 := its[0], its[1], its[2], its[3], its[4], its[5]
		var logs bytes.Buffer
		c := &Crawler{log: slog.New(slog.NewTextHandler(&logs, nil))}
		k := &c.leases
		for _, it := range its {
			k.take(it.d)
			w.add(it)
		}
		if it := w.take(); it != a1 {
			t.Fatalf("took %v first, want a's first", it)
		}
		// a1 is in progress; a2 (a's next), b1 (b's first) and c1 (c's
		// only) lose their leases, and a1 too; settled is reported settled.
		b := &batchExtender{errs: map[broker.Delivery]error{
			a1.d: fmt.Errorf("a1: %w", broker.ErrLeaseLost),
			a2.d: fmt.Errorf("a2: %w", broker.ErrLeaseLost),
			b1.d: fmt.Errorf("b1: %w", broker.ErrLeaseLost),
			c1.d: fmt.Errorf("c1: %w", broker.ErrLeaseLost),
			b2.d: fmt.Errorf("b2: %w", broker.ErrSettled),
		}}
		k.lost = func(lost []broker.Delivery) { c.dropLost(w, lost) }
		done, stopped := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(stopped)
			k.keep(context.Background(), 3*time.Second, b, done, slog.New(slog.DiscardHandler))
		}()
		time.Sleep(time.Second + time.Millisecond)
		synctest.Wait()
		close(done)
		<-stopped
		if n := k.inFlight(); n != 3 {
			t.Errorf("the keeper holds %d after the drop, want 3 (a1 in progress, a3, b2)", n)
		}
		if !strings.Contains(logs.String(), "3 pages held back lost their lease") {
			t.Errorf("no warning of the 3 pages dropped: %q", logs.String())
		}
		if _, ok := w.hosts["c"]; ok {
			t.Error("c's entry stays with nothing held or in progress")
		}
		if w.hosts["a"] == nil || w.hosts["a"].active != 1 {
			t.Fatal("a's page in progress is no longer counted")
		}
		var got []*benchItem
		for it := w.take(); it != nil; it = w.take() {
			got = append(got, it)
		}
		if len(got) != 1 || got[0] != b2 {
			t.Fatalf("took %d after the drop, want b's second alone (a at its cap)", len(got))
		}
		w.done(a1)
		if it := w.take(); it != a3 {
			t.Errorf("took %v, want a's third", it)
		}
		if held := w.drain(); len(held) != 0 {
			t.Errorf("drain returned %d, want none", len(held))
		}
	})
}

// TestWorkbenchDropWakesReceiver: a receiver waiting for room on a full
// workbench is woken when the keeper drops lost deliveries from it. Its
// wait ended only when a page ended or a parked host came back: after a
// Redis rollback every held-back lease was lost at once, with no page in
// progress, and the worker waited for good with its consumer's
// read-ahead leased (TestRedisRolledBack hung with 582610d's drop,
// "16 queued (0 ready)" for five minutes).
func TestWorkbenchDropWakesReceiver(t *testing.T) {
	w := newWorkbench(1, 2, nil)
	a1 := &benchItem{d: &leasedDelivery{}, host: "a"}
	w.add(a1)
	w.add(&benchItem{d: &leasedDelivery{}, host: "a"})
	w.add(&benchItem{d: &leasedDelivery{}, host: "a"})
	if it := w.take(); it != a1 {
		t.Fatalf("took %v, want a's first", it)
	}
	if !w.full() {
		t.Fatal("the workbench is not full: nothing to test")
	}
	wait, wake := context.WithCancel(t.Context())
	defer wake()
	if !w.waitWith(wake) {
		t.Fatal("waitWith says a held-back delivery may start (a is at its cap)")
	}
	if its := w.drop(func(d broker.Delivery) bool { return d != a1.d }); len(its) != 2 {
		t.Fatalf("dropped %d, want the 2 held back", len(its))
	}
	if wait.Err() == nil {
		t.Error("a drop that emptied a full workbench did not wake the receiver waiting for room: it waits for good")
	}
	if w.full() {
		t.Error("the workbench is still full after the drop")
	}
}
