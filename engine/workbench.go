package engine

import (
	"context"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/trawlhq/trawl/broker"
)

// readAheadFactor times Concurrency is how many deliveries a worker holds
// back in its workbench, read ahead of its slots, at most. A page's links
// to its own host reach the frontier together, so the frontier comes in
// runs of one host: to find hosts with room past them, a worker reads
// far. At 4 (1,024 for --concurrency 256) bench-web's 1,000 hosts got
// 0.61 of the fetch loop, at 16 1.04 (BENCHMARKS.md). Each held delivery
// costs its lease's extension every lease/3 and a few hundred bytes.
const readAheadFactor = 16

// workbench is a worker's deliveries by host, Mercator's back queues: the
// receiver (Crawler.receive) gives a free slot to a delivery whose host
// has fewer than perHost of this worker's pages in progress, and reads on
// past deliveries for hosts at their cap, holding them back (at most
// limit) until their host has room. A slot never waits on a capped host
// while another host has work in hand, and within a host deliveries start
// in the frontier's order. Across hosts, a host with fewer pages in
// progress goes first, then the frontier's order: a host with none in
// progress before a second slot of a host already fetching. Each request
// that runs beside another of its host needs a connection of its own (a
// TCP connect and a TLS handshake), so a host's second slot is used when
// no idle host has work in hand: at --per-host 2 bench-web's worker
// opened 2,900 connections to 1,000 hosts where the fetch loop, one
// request per host while others wait, opened 1,350 (BENCHMARKS.md).
//
// With a shared limiter that leases hosts' slots to workers
// (HostLeaser), a host is handed out only while this worker holds a slot
// of it beyond its pages in progress: a host whose slots other workers
// hold is parked, its deliveries held back, until the limiter says it is
// worth trying again or one of its pages here ends (a slot it holds
// freed: a held slot never stands idle while the host waits for another).
//
// A host's entry lives while the host has pages in progress or held back,
// and is deleted when it has neither. workbench is safe for concurrent
// use: the receiver adds and takes, page goroutines call done.
type workbench struct {
	perHost int
	limit   int
	gate    HostLeaser // nil: every host may start here

	mu    sync.Mutex
	hosts map[string]*benchHost
	ready indexHeap[*benchHost] // hosts with work held back and a free slot, by pages in progress, then their first delivery's arrival
	held  int                   // deliveries held back
	seq   uint64
	// wake, while the receiver waits for the frontier, ends that wait:
	// done calls it when a held-back delivery's host gets room.
	wake context.CancelFunc
}

// benchItem is one delivery on the workbench, decoded.
type benchItem struct {
	d    broker.Delivery
	req  *Request // nil: the payload does not decode (handle dead-letters it)
	host string   // lower-cased host:port; "" for a request with no host
	seq  uint64
	done bool // its host's slot given back (see workbench.done)
}

type benchHost struct {
	key    string
	active int          // pages taken whose fetch has not ended (see done)
	queue  []*benchItem // held back, first come first served
	index  int          // in ready; -1 when not
	parked bool         // no slot of it free here (see HostLeaser): not ready
}

// newWorkbench returns a workbench of at most perHost pages in progress
// per host and limit deliveries held back; if limiter is a HostLeaser,
// it hands out the hosts this worker holds only.
func newWorkbench(perHost, limit int, limiter HostLimiter) *workbench {
	gate, _ := limiter.(HostLeaser)
	return &workbench{perHost: max(1, perHost), limit: max(1, limit), gate: gate, hosts: map[string]*benchHost{}}
}

// newBenchItem decodes d for the workbench.
func newBenchItem(d broker.Delivery) *benchItem {
	it := &benchItem{d: d}
	var req Request
	if err := req.UnmarshalBinary(d.Message().Body); err != nil {
		return it
	}
	it.req = &req
	if u, err := url.Parse(req.URL); err == nil {
		it.host = strings.ToLower(u.Host)
	}
	return it
}

// add holds it back until take hands it out.
func (w *workbench) add(it *benchItem) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seq++
	it.seq = w.seq
	h := w.hosts[it.host]
	if h == nil {
		h = &benchHost{key: it.host, index: -1}
		w.hosts[it.host] = h
	}
	h.queue = append(h.queue, it)
	w.held++
	w.readyIf(h)
}

// readyIf puts h among the ready hosts if it has work held back and room,
// or moves it to its place there (its pages in progress changed). w.mu
// must be held.
func (w *workbench) readyIf(h *benchHost) {
	if h.index >= 0 {
		w.ready.fix(h.index)
		return
	}
	if !h.parked && len(h.queue) > 0 && (h.active < w.perHost || h.key == "") {
		w.ready.push(h)
	}
}

// take returns the first held-back delivery of the first ready host (see
// before), whose host has room (and a slot this worker holds free),
// counting it in progress; nil if there is none.
func (w *workbench) take() *benchItem {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.ready) > 0 && w.gate != nil && w.ready[0].key != "" {
		h := w.ready[0]
		if w.gate.Lease(h.key, h.active, len(h.queue), func() { w.unpark(h) }) {
			break
		}
		w.ready.remove(0)
		h.parked = true
	}
	if len(w.ready) == 0 {
		return nil
	}
	h := w.ready[0]
	it := h.queue[0]
	h.queue[0] = nil
	h.queue = h.queue[1:]
	h.active++
	w.held--
	if len(h.queue) > 0 && (h.active < w.perHost || h.key == "") {
		w.ready.fix(0)
	} else {
		w.ready.remove(0)
	}
	return it
}

// done gives back the host slot of it, which take handed out, and wakes
// the receiver if a delivery held back for its host may now start (a
// parked host too: the slot it held here is free). The
// page goroutine calls it once the fetch ended (the host limiter's slot
// given back), not once the page is done: the host's next fetch need not
// wait for this page's links and item (at --per-host 2, bench-web's
// largest hosts had about one request in flight, not two, while a loaded
// worker scanned and published their pages), and again when the page is
// done, for a page that never fetched; the second call does nothing.
func (w *workbench) done(it *benchItem) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if it.done {
		return
	}
	it.done = true
	h := w.hosts[it.host]
	h.active--
	if h.active == 0 && len(h.queue) == 0 {
		delete(w.hosts, it.host)
		return
	}
	h.parked = false // a slot of its own freed: ask the leaser again
	w.readyIf(h)
	if h.index >= 0 && w.wake != nil {
		w.wake()
		w.wake = nil
	}
}

// spare tells whether the connection of it's fetch, whose body was read,
// is one its host has no use for: another page of the host is in
// progress here, whose connection will do for what comes next, and none
// is held back. Kept, it would sit idle beside the other until its
// server closed it: at bench-web's 1,000 hosts at --per-host 2 the idle
// connections of hosts done filled the transport's pool, which dropped
// the least recently used, connections of hosts still being crawled
// (BENCHMARKS.md, issue 26).
func (w *workbench) spare(it *benchItem) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	h := w.hosts[it.host]
	return h != nil && !it.done && it.host != "" && h.active >= 2 && len(h.queue) == 0
}

// unpark makes h ready again, if it still has work held back, and wakes
// the receiver for it.
func (w *workbench) unpark(h *benchHost) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.hosts[h.key] != h || !h.parked {
		return
	}
	h.parked = false
	w.readyIf(h)
	if h.index >= 0 && w.wake != nil {
		w.wake()
		w.wake = nil
	}
}

// waitWith records wake as what ends the receiver's coming wait, and
// tells whether to wait at all: false when a held-back delivery may start
// already. waitWith(nil) ends the record.
func (w *workbench) waitWith(wake context.CancelFunc) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.wake = wake
	return wake == nil || len(w.ready) == 0
}

// full tells whether the workbench holds back as many deliveries as it may.
func (w *workbench) full() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.held >= w.limit
}

// drain removes and returns every held-back delivery.
func (w *workbench) drain() []*benchItem {
	w.mu.Lock()
	defer w.mu.Unlock()
	var its []*benchItem
	for k, h := range w.hosts {
		its = append(its, h.queue...)
		h.queue = nil
		if h.active == 0 {
			delete(w.hosts, k)
		}
	}
	w.ready.reset()
	for _, h := range w.hosts {
		h.index = -1
		h.parked = false
	}
	w.held = 0
	return its
}

// shed removes and returns the held-back deliveries of the hosts keep
// says no to (hosts now another worker's, see affinity); their pages in
// progress stay.
func (w *workbench) shed(keep func(host string) bool) []*benchItem {
	w.mu.Lock()
	defer w.mu.Unlock()
	var its []*benchItem
	for k, h := range w.hosts {
		if len(h.queue) == 0 || k == "" || keep(k) {
			continue
		}
		its = append(its, h.queue...)
		w.held -= len(h.queue)
		h.queue = nil
		if h.index >= 0 {
			w.ready.remove(h.index)
		}
		h.parked = false
		if h.active == 0 {
			delete(w.hosts, k)
		}
	}
	return its
}

// drop removes and returns the held-back deliveries that lost says are
// lost (their lease ran out: the broker gives them to another worker,
// and fetching them here would fetch their pages twice); pages in
// progress stay. A drop wakes the receiver: one waiting for room on a
// full workbench has it now, and no page ending may come to wake it
// (after a Redis rollback every held-back delivery's lease was lost at
// once, with no page in progress, and the receiver waited for good).
func (w *workbench) drop(lost func(broker.Delivery) bool) []*benchItem {
	w.mu.Lock()
	defer w.mu.Unlock()
	var its []*benchItem
	for k, h := range w.hosts {
		n := len(h.queue)
		h.queue = slices.DeleteFunc(h.queue, func(it *benchItem) bool {
			if lost(it.d) {
				its = append(its, it)
				return true
			}
			return false
		})
		if len(h.queue) == n {
			continue
		}
		w.held -= n - len(h.queue)
		switch {
		case len(h.queue) > 0:
			if h.index >= 0 {
				w.ready.fix(h.index) // its first delivery may have changed
			}
		default:
			if h.index >= 0 {
				w.ready.remove(h.index)
			}
			h.parked = false
			if h.active == 0 {
				delete(w.hosts, k)
			}
		}
	}
	if len(its) > 0 && w.wake != nil {
		w.wake()
		w.wake = nil
	}
	return its
}

// before orders ready hosts by their pages in progress, fewest first, and
// then by the arrival of their first held-back delivery: the frontier's
// order, as far as the caps and the hosts' connections allow.
func (h *benchHost) before(o *benchHost) bool {
	if a, b := h.load(), o.load(); a != b {
		return a < b
	}
	return h.queue[0].seq < o.queue[0].seq
}

// load is h's pages in progress, as before orders hosts: none for the
// deliveries with no host (uncapped, and dead-lettered as they start).
func (h *benchHost) load() int {
	if h.key == "" {
		return 0
	}
	return h.active
}
func (h *benchHost) setHeapIndex(i int) { h.index = i }
