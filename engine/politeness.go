package engine

import (
	"context"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// HostLimiter paces requests per host. The engine holds one; a shared (e.g.
// Redis-backed) implementation can replace the local one, so the interface
// stays small.
type HostLimiter interface {
	// Acquire waits until a request to host may start (concurrency cap and
	// delay), or ctx ends. release gives the slot back; calling it more than
	// once is harmless.
	Acquire(ctx context.Context, host string) (release func(), err error)
	// Backoff holds all requests to host until t (429/503 with Retry-After,
	// or a computed back-off).
	Backoff(host string, until time.Time)
	// SetDelay sets host's minimum delay between request starts (robots.txt
	// Crawl-delay), if larger than the default.
	SetDelay(host string, d time.Duration)
	// Observe is called after each response with the time to its headers
	// and its status code; a limiter with AutoThrottle adapts host's delay
	// to it, one without does nothing.
	Observe(host string, latency time.Duration, status int)
	// Delay returns host's current delay between request starts
	// (AutoThrottle's included); a worker's record carries it for its
	// busiest hosts.
	Delay(ctx context.Context, host string) (time.Duration, error)
}

// HostLeaser is a HostLimiter shared by several workers that leases each
// host's slots (its per-host cap) to them, for a while, so that a worker
// paces what it holds alone, in memory. A worker's workbench asks it
// before it gives a slot to a page: a host whose slots other workers
// hold is parked, its pages held back, and the slot goes to another host
// meanwhile, rather than waiting in Acquire.
type HostLeaser interface {
	HostLimiter
	// Lease tells, without waiting, whether this worker may start one
	// more of host's pages now, having active of them in progress (handed
	// out, their fetch not ended) and waiting more held back: whether it
	// holds a slot of host beyond its active pages. If not, it asks for
	// more and calls ready once host is worth trying again: slots taken
	// or given back here, or the time to ask again come (other workers
	// held them). ready is called at most once per Lease that returned
	// false, never from within Lease, and maybe not at all once the
	// limiter is closed; a caller whose active pages of host end asks
	// again without waiting for it.
	Lease(host string, active, waiting int, ready func()) bool
}

// politenessConfig configures a politeness. The zero value gives the defaults.
type politenessConfig struct {
	PerHost int           // concurrent requests per host; 0 = 8
	Delay   time.Duration // minimum time between request starts to one host; 0 = none
	// AutoThrottle, if not nil, adapts each host's delay to its latency
	// (see AutoThrottle; Observe feeds it). nil = fixed delays.
	AutoThrottle *AutoThrottle
}

// hostIdleGrace is how long a host's entry is kept after it fell idle (nothing
// in flight or waiting, delay and back-off passed); then it may be forgotten,
// with any delay SetDelay gave it.
const hostIdleGrace = time.Minute

// politeness is the local HostLimiter: per host, a concurrency cap, a minimum
// delay between request starts and a back-off time. Waiting requests are
// served first come, first served. It runs no goroutine of its own: a waiting
// Acquire blocks on a channel, and a host whose next start lies in the future
// has one timer (time.AfterFunc), armed only while requests wait.
//
// Memory: a host's entry that holds nothing a new one would not (no
// request in flight or waiting, its next start and back-off passed, the
// default delay, no AutoThrottle) is forgotten as its last request ends:
// a crawl of many hosts at the default delay keeps entries for the hosts
// being fetched only (it kept 295 bytes for each host fetched within the
// last minute, most of them never asked about again). Any other
// entry is forgotten once it has been idle for a minute (nothing in
// flight or waiting, delay and back-off passed); idle entries are swept
// when the table has doubled since the last sweep, so the table holds at
// most about twice the hosts used within the last minute, plus 1024, in
// about 130 bytes each (key and map included). A forgotten host also forgets its
// SetDelay value, so callers set the delay before each Acquire (the
// engine passes robots.txt's cached Crawl-delay).
//
// With AutoThrottle, a host's adapted delay is kept in its entry, so a
// host idle for a minute starts again from the start delay.
//
// politeness is safe for concurrent use.
type politeness struct {
	perHost  int
	delay    time.Duration
	throttle *AutoThrottle // nil = off; with defaults
	now      func() time.Time
	epoch    time.Time // what a hostState's times count from

	mu      sync.Mutex
	hosts   map[string]*hostState
	sweepAt int // sweep idle entries when len(hosts) reaches this
}

var _ HostLimiter = (*politeness)(nil)

// hostState is a host's entry: 64 bytes, its times counted from the
// politeness's epoch (see stamp), and what only waiting requests need
// apart, in wait.
type hostState struct {
	wait      *hostQueue    // requests waiting and their timer; nil when none wait
	delay     time.Duration // minimum time between starts
	auto      time.Duration // AutoThrottle's adapted delay; 0 = not yet adapted
	lastStart stamp         // the last request start (if started)
	nextStart stamp         // earliest next start (last start + delay)
	backoff   stamp         // no start before this
	idleSince stamp         // when the entry last fell idle
	active    int32         // requests in flight
	started   bool          // lastStart is set
}

// stamp is a time as the nanoseconds since a politeness's epoch (its
// monotonic clock, where the time has one): a third of a time.Time.
type stamp int64

// hostQueue is what a host's waiting requests need: themselves, first
// come first served, and the timer that admits the first when its time
// comes.
type hostQueue struct {
	waiters []*hostWaiter
	timer   *time.Timer // fires dispatch at timerAt; nil when unarmed
	timerAt stamp
}

type hostWaiter struct {
	ready   chan struct{} // closed when granted
	granted bool
}

// waiting is how many requests wait for st's slot.
func (st *hostState) waiting() int {
	if st.wait == nil {
		return 0
	}
	return len(st.wait.waiters)
}

const minSweep = 1024

// newPoliteness returns a politeness configured by o.
func newPoliteness(o politenessConfig) *politeness {
	if o.PerHost <= 0 {
		o.PerHost = 8
	}
	if o.Delay < 0 {
		o.Delay = 0
	}
	p := &politeness{
		perHost: o.PerHost,
		delay:   o.Delay,
		now:     time.Now,
		hosts:   make(map[string]*hostState),
		sweepAt: minSweep,
	}
	p.epoch = p.now()
	if o.AutoThrottle != nil {
		a := o.AutoThrottle.WithDefaults()
		p.throttle = &a
	}
	return p
}

// hostDelay is st's delay between request starts: its minimum delay, or
// the adapted delay if larger.
func (p *politeness) hostDelay(st *hostState) time.Duration {
	if p.throttle == nil {
		return st.delay
	}
	if st.auto == 0 {
		return max(st.delay, p.throttle.StartDelay)
	}
	return max(st.delay, st.auto)
}

// Delay returns host's current delay (see currentDelay); it never fails.
func (p *politeness) Delay(_ context.Context, host string) (time.Duration, error) {
	return p.currentDelay(host), nil
}

// currentDelay returns host's current delay between request starts: the
// larger of its minimum delay (Delay, SetDelay) and, with AutoThrottle,
// its adapted delay.
func (p *politeness) currentDelay(host string) time.Duration {
	host = strings.ToLower(host)
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.hosts[host]
	if st == nil {
		st = &hostState{delay: p.delay}
	}
	return p.hostDelay(st)
}

// Observe adapts host's delay to a response's latency and status with
// AutoThrottle (see AutoThrottle.Next); without it, Observe does nothing.
// A lower delay applies to the next start at once.
func (p *politeness) Observe(host string, latency time.Duration, status int) {
	if p.throttle == nil {
		return
	}
	host = strings.ToLower(host)
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.state(host)
	st.auto = p.throttle.Next(p.hostDelay(st), st.delay, latency, status)
	if st.started {
		st.nextStart = st.lastStart + stamp(p.hostDelay(st))
	}
	now := p.stamp(p.now())
	p.dispatch(st, now)
	p.markIdle(host, st, now)
}

// stamp returns t as a stamp of p.
func (p *politeness) stamp(t time.Time) stamp { return stamp(t.Sub(p.epoch)) }

// state returns host's entry, creating it. p.mu must be held.
func (p *politeness) state(host string) *hostState {
	st := p.hosts[host]
	if st == nil {
		if len(p.hosts) >= p.sweepAt {
			p.sweep(p.stamp(p.now()))
		}
		st = &hostState{delay: p.delay}
		// A key of its own: host may be part of a page's URL, which
		// the entry would keep.
		p.hosts[strings.Clone(host)] = st
	}
	return st
}

// sweep forgets entries idle for longer than hostIdleGrace. p.mu must be held.
func (p *politeness) sweep(now stamp) {
	for h, st := range p.hosts {
		if p.idle(st, now) && now-st.idleSince >= stamp(hostIdleGrace) {
			delete(p.hosts, h)
		}
	}
	p.sweepAt = max(minSweep, 2*len(p.hosts))
}

// idle reports whether st holds nothing but a possible custom delay.
func (p *politeness) idle(st *hostState, now stamp) bool {
	return st.active == 0 && st.wait == nil && now >= st.nextStart && now >= st.backoff
}

// markIdle records when st fell idle, for the sweep, and forgets host's
// entry st at once if it holds nothing that a new entry would not: it is
// idle, at the default delay, and not adapted by AutoThrottle (whose
// delay lives in the entry). p.mu must be held.
func (p *politeness) markIdle(host string, st *hostState, now stamp) {
	if st.active != 0 || st.wait != nil {
		return
	}
	st.idleSince = max(now, st.nextStart, st.backoff)
	if p.throttle == nil && st.delay == p.delay && p.idle(st, now) && p.hosts[host] == st {
		delete(p.hosts, host)
	}
}

// Acquire waits until a request to host may start: fewer than PerHost
// requests to host are in flight, the delay since the previous start has
// passed and no back-off holds the host. It returns ctx's error if ctx ends
// first. Requests to one host are admitted in the order they arrived.
func (p *politeness) Acquire(ctx context.Context, host string) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	host = strings.ToLower(host)
	p.mu.Lock()
	st := p.state(host)
	now := p.stamp(p.now())
	if st.wait == nil && int(st.active) < p.perHost && p.gate(st) <= now {
		p.start(st, now)
		p.mu.Unlock()
		return p.releaser(host, st), nil
	}
	w := &hostWaiter{ready: make(chan struct{})}
	if st.wait == nil {
		st.wait = &hostQueue{}
	}
	st.wait.waiters = append(st.wait.waiters, w)
	p.dispatch(st, now)
	p.mu.Unlock()

	select {
	case <-w.ready:
		return p.releaser(host, st), nil
	case <-ctx.Done():
	}
	p.mu.Lock()
	if w.granted {
		// Granted while ctx ended: give the slot back.
		p.mu.Unlock()
		p.releaser(host, st)()
		return nil, ctx.Err()
	}
	q := st.wait
	q.waiters = slices.DeleteFunc(q.waiters, func(o *hostWaiter) bool { return o == w })
	p.unqueue(st)
	now = p.stamp(p.now())
	p.dispatch(st, now) // a later waiter may now be first
	p.markIdle(host, st, now)
	p.mu.Unlock()
	return nil, ctx.Err()
}

// unqueue drops st's wait, stopping its timer, once no request waits.
// p.mu must be held.
func (p *politeness) unqueue(st *hostState) {
	if q := st.wait; q != nil && len(q.waiters) == 0 {
		if q.timer != nil {
			q.timer.Stop()
		}
		st.wait = nil
	}
}

// gate is the earliest time the next request to st may start.
func (p *politeness) gate(st *hostState) stamp { return max(st.backoff, st.nextStart) }

// start records a request start. p.mu must be held.
func (p *politeness) start(st *hostState, now stamp) {
	st.active++
	st.lastStart, st.started = now, true
	st.nextStart = now + stamp(p.hostDelay(st))
}

// dispatch admits waiting requests that may start now and arms the host's
// timer for the next one that must wait for its time. Calling it when nothing
// can be done is harmless. p.mu must be held.
func (p *politeness) dispatch(st *hostState, now stamp) {
	for st.wait != nil && int(st.active) < p.perHost {
		gate := p.gate(st)
		if gate > now {
			p.arm(st, gate, now)
			return
		}
		q := st.wait
		w := q.waiters[0]
		q.waiters[0] = nil
		q.waiters = q.waiters[1:]
		p.unqueue(st)
		w.granted = true
		close(w.ready)
		p.start(st, now)
	}
}

// arm makes st's timer call dispatch at t (now is now). st.wait must be
// set and p.mu held.
func (p *politeness) arm(st *hostState, t, now stamp) {
	q := st.wait
	if q.timer != nil && q.timerAt == t {
		return
	}
	if q.timer != nil {
		q.timer.Stop()
	}
	q.timerAt = t
	var tm *time.Timer
	tm = time.AfterFunc(time.Duration(t-now), func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if q.timer == tm {
			q.timer = nil
		}
		p.dispatch(st, p.stamp(p.now()))
	})
	q.timer = tm
}

// releaser returns the release function of one granted slot on st.
func (p *politeness) releaser(host string, st *hostState) func() {
	var done atomic.Bool
	return func() {
		if done.Swap(true) {
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		st.active--
		now := p.stamp(p.now())
		p.dispatch(st, now)
		p.markIdle(host, st, now)
	}
}

// Backoff holds all requests to host until until (an earlier time than a
// back-off already in force is ignored). Requests already started are not
// affected.
func (p *politeness) Backoff(host string, until time.Time) {
	host = strings.ToLower(host)
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.state(host)
	st.backoff = max(st.backoff, p.stamp(until))
	now := p.stamp(p.now())
	p.dispatch(st, now) // re-arms a waiting host's timer for the later time
	p.markIdle(host, st, now)
}

// SetDelay sets host's minimum delay between request starts to d, or to the
// default Delay if that is larger. The delay is kept while the host is in
// use and forgotten a minute after it fell idle (see politeness).
func (p *politeness) SetDelay(host string, d time.Duration) {
	host = strings.ToLower(host)
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.state(host)
	st.delay = max(d, p.delay)
	p.markIdle(host, st, p.stamp(p.now()))
}

// retryAfter parses a Retry-After header, given in seconds or as an HTTP
// date, into the time to wait from now. A date in the past gives 0. ok is
// false when the header is absent or malformed.
func retryAfter(h http.Header, now time.Time) (d time.Duration, ok bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseUint(v, 10, 64); err == nil {
		if secs > math.MaxInt64/uint64(time.Second) {
			return time.Duration(math.MaxInt64), true
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}
