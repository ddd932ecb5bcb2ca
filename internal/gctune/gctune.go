// Package gctune sets the garbage collector's target from the live heap:
// a large headroom for a process whose live heap is small, and Go's
// default as it grows.
//
// GOGC is a ratio: at 400 the heap may grow to five times what is live
// before the collector runs again. A crawler allocates each page's body
// and links and keeps little, so a large ratio saves it most of the
// collector's CPU (a third of a worker's CPU at 100, a tenth at 400). But
// a ratio multiplies everything live, the state a crawl keeps per host
// too: at 400 a million hosts' few hundred bytes each would hold five
// times as much memory. A Tuner keeps the headroom at Policy.Floor
// bytes while the live heap is small, and at Policy.Min percent (Go's
// 100: twice the live heap) once that is more: after each collection it
// sets the percent to 100·Floor/live, within [Min, Max]. This is the
// "GOGC tuner" Uber described: the saving of a large ratio for the
// fixed working set, not a multiple of what grows.
//
// The live heap counted is the runtime's own: the heap marked live by
// the last collection plus the goroutine stacks and globals it scanned
// (runtime/metrics /gc/heap/live:bytes, /gc/scan/stack:bytes,
// /gc/scan/globals:bytes), as in the runtime's heap goal
// (live + (live + roots)·GOGC/100).
package gctune

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// Policy is how a Tuner sets the collector's percent. Its zero value is
// not useful; start from Default.
type Policy struct {
	// Floor is the headroom, in bytes, that the collector is given at
	// least while the percent is above Min.
	Floor uint64
	// Min and Max bound the percent (Go's GOGC): Min once the live heap
	// is Floor·100/Min or more, Max while it is Floor·100/Max or less.
	Min, Max int
}

// Default is trawl's policy: a headroom of 128 MiB, within 100 and 400
// percent. A worker's live heap is some tens of MiB, most of it bounded
// connection buffers (about 35 MiB crawling 1,000 hosts at
// --concurrency 256), where 128 MiB is about the 400 percent that
// session 4 measured as a quarter of a worker's CPU less than 100; past
// 128 MiB live (a crawl that keeps state for hundreds of thousands of
// hosts) the heap is at most twice what is live.
var Default = Policy{Floor: 128 << 20, Min: 100, Max: 400}

// Percent returns the collector's percent for a live heap of live bytes
// (roots included): 100·Floor/live, within [Min, Max].
func (p Policy) Percent(live uint64) int {
	if live == 0 {
		return p.Max
	}
	pct := p.Floor / live * 100 // split so that 100·Floor cannot overflow
	pct += (p.Floor % live) * 100 / live
	if pct >= uint64(p.Max) {
		return p.Max
	}
	return max(int(pct), p.Min)
}

// A Tuner re-sets the collector's percent after each collection, from
// Start until Stop. It runs no goroutine of its own: a cleanup attached
// to an object that only the collector frees runs after each cycle that
// freed it, sets the percent, and attaches itself to a new object.
type Tuner struct {
	p      Policy
	cycled func(live uint64, percent int) // for tests: called after each setting

	mu      sync.Mutex
	stopped bool
	prev    int // the percent before Start, restored by Stop
	cur     int
	sample  []metrics.Sample
}

// Start sets the collector's percent to p.Max (a process starts small)
// and re-sets it from p after every collection until Stop.
func Start(p Policy) *Tuner { return start(p, nil) }

func start(p Policy, cycled func(live uint64, percent int)) *Tuner {
	t := &Tuner{p: p, cycled: cycled, cur: p.Max, sample: []metrics.Sample{
		{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"},
	}}
	t.prev = debug.SetGCPercent(p.Max)
	arm(t)
	return t
}

// sentinel is the object whose freeing marks a collection; it holds a
// pointer so that it is never one of the tiny allocations a cleanup may
// not run for.
type sentinel struct{ _ *byte }

// arm attaches the tuning to a new sentinel, freed by the next collection
// that finds it unreachable (it is, at once).
func arm(t *Tuner) { runtime.AddCleanup(&sentinel{}, cycle, t) }

// cycle runs after a collection freed a sentinel: it sets the percent and
// arms the next, unless t was stopped.
func cycle(t *Tuner) {
	if t.set() {
		arm(t)
	}
}

// set sets the percent from the live heap of the last collection; false
// once t was stopped.
func (t *Tuner) set() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return false
	}
	metrics.Read(t.sample)
	var live uint64
	for _, s := range t.sample {
		if s.Value.Kind() == metrics.KindUint64 {
			live += s.Value.Uint64()
		}
	}
	if pct := t.p.Percent(live); pct != t.cur {
		debug.SetGCPercent(pct)
		t.cur = pct
	}
	if t.cycled != nil {
		t.cycled(live, t.cur)
	}
	return true
}

// Stop ends the tuning and restores the percent in force before Start.
// It is safe to call more than once, and on a nil Tuner (none started).
func (t *Tuner) Stop() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.stopped {
		t.stopped = true
		debug.SetGCPercent(t.prev)
	}
}
