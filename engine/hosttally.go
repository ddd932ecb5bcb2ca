package engine

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"
)

// HostStatus is a host's figures in a worker's record (WorkerStatus.Hosts),
// for a dashboard's hosts panel: this worker's own, since it started.
type HostStatus struct {
	Host   string `json:"host"`
	Pages  int64  `json:"pages"`  // responses, whatever their status
	Errors int64  `json:"errors"` // fetches with no response or a status of 400 or more
	// Untallied bounds the fetches of the host the tally may have missed:
	// it took the host in after forgetting another (space-saving), so
	// Pages and Errors are exact since then and Untallied at most
	// were before. 0 for a host tallied from its first fetch.
	Untallied int64 `json:"untallied,omitempty"`
	// DelayMs is the host's current delay between request starts in
	// milliseconds, as the worker's limiter has it (AutoThrottle's
	// adapted delay included); -1 where the limiter failed to tell (a
	// shared limiter's server out of reach).
	DelayMs float64 `json:"delay_ms"`
}

// Bounds of a worker's per-host tally.
const (
	// hostTallyCap is how many hosts a worker tallies: past it, a new
	// host takes the place of the one with the fewest fetches
	// (space-saving), so the busiest hosts stay and the memory stays at
	// about 1,000 × (100 bytes + the host's name): under 400 KB with
	// the longest names.
	hostTallyCap = 1000
	// hostsInRecord is how many of the tallied hosts, those with the most
	// pages, a worker's record carries each heartbeat (about 80 bytes
	// each in JSON).
	hostsInRecord = 100
	// hostDelayBudget bounds the time a heartbeat spends asking the
	// limiter for the delays (a shared limiter asks its server).
	hostDelayBudget = time.Second
)

// hostTally counts the fetches of the busiest hosts of a worker, in at
// most hostTallyCap entries: the space-saving algorithm (Metwally et al.)
// over fetches. A host seen again is counted in place; a new one takes a
// free entry or, once the tally is full, the entry with the fewest
// fetches, inheriting its count as Untallied. Any host with more fetches
// than the tally's total fetches / hostTallyCap is in it. Counting is
// under a lock, once per fetch; nothing goes to the broker per page: the
// worker's record carries the top of the tally each heartbeat. The zero
// value is empty and ready; it is safe for concurrent use.
type hostTally struct {
	mu    sync.Mutex
	byKey map[string]*hostCount
	heap  indexHeap[*hostCount] // min-heap by estimated fetches
}

// hostCount is one host's entry.
type hostCount struct {
	host                   string
	pages, errors, fetches int64
	untallied              int64
	index                  int // in the heap
}

// estimate is the entry's fetches, counting those it may have missed.
func (c *hostCount) estimate() int64 { return c.fetches + c.untallied }

func (c *hostCount) before(o *hostCount) bool { return c.estimate() < o.estimate() }
func (c *hostCount) setHeapIndex(i int)       { c.index = i }

// fetched counts one fetch of host: a page when it got a response (status
// is its status code), an error when it got none (status 0) or a status
// of 400 or more.
func (t *hostTally) fetched(host string, status int) {
	host = strings.ToLower(host)
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.byKey[host]
	switch {
	case c != nil:
	case len(t.heap) < hostTallyCap:
		if t.byKey == nil {
			t.byKey = make(map[string]*hostCount)
		}
		c = &hostCount{host: host}
		t.byKey[host] = c
		t.heap.push(c)
	default:
		c = t.heap[0] // the fewest fetches: its place goes to host
		delete(t.byKey, c.host)
		*c = hostCount{host: host, untallied: c.estimate(), index: c.index}
		t.byKey[host] = c
	}
	c.fetches++
	if status > 0 {
		c.pages++
	}
	if status == 0 || status >= 400 {
		c.errors++
	}
	t.heap.fix(c.index)
}

// top returns the n hosts with the most pages (then errors), their delays
// not yet set.
func (t *hostTally) top(n int) []HostStatus {
	t.mu.Lock()
	out := make([]HostStatus, 0, len(t.heap))
	for _, c := range t.heap {
		out = append(out, HostStatus{Host: c.host, Pages: c.pages, Errors: c.errors, Untallied: c.untallied, DelayMs: -1})
	}
	t.mu.Unlock()
	slices.SortFunc(out, func(a, b HostStatus) int {
		switch {
		case a.Pages != b.Pages:
			return cmp.Compare(b.Pages, a.Pages)
		case a.Errors != b.Errors:
			return cmp.Compare(b.Errors, a.Errors)
		}
		return strings.Compare(a.Host, b.Host)
	})
	return out[:min(n, len(out))]
}

// tallyHost counts a fetch of host in the worker's tally: resp, or err
// (a local refusal is not the host's doing, and not counted).
func (c *Crawler) tallyHost(host string, resp *Response, err error) {
	switch {
	case errors.Is(err, ErrLocalRefusal):
	case err != nil || resp == nil:
		c.stats.hosts.fetched(host, 0)
	default:
		c.stats.hosts.fetched(host, resp.StatusCode)
	}
}

// hostsForRecord returns this worker's busiest hosts with their current
// delays, as its limiter tells them within hostDelayBudget.
func (c *Crawler) hostsForRecord(ctx context.Context) []HostStatus {
	hs := c.stats.hosts.top(hostsInRecord)
	ctx, cancel := context.WithTimeout(ctx, hostDelayBudget)
	defer cancel()
	for i := range hs {
		d, err := c.limiter.Delay(ctx, hs[i].Host)
		if err != nil {
			c.log.Debug("reading the hosts' delays for this worker's record failed", "err", err)
			return hs // the rest unknown (-1)
		}
		hs[i].DelayMs = ms(d)
	}
	return hs
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
