package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/redislayout"
)

// leaseScript takes the leases of one or more hosts for this worker, or
// says how long another worker's lease has left (see HostLimiter).
//
// ARGV[1] the worker's lease token, ARGV[2] lease TTL (ms), ARGV[3]
// AutoThrottle's start delay (ms; 0 = off: the throttle key is not
// read), ARGV[4] the want key's TTL (ms). For each host i (from 1),
// KEYS[4i-3] lease: the token of the worker holding it; KEYS[4i-2] next:
// a key whose TTL is the time until the host's next request may start;
// KEYS[4i-1] throttle: AutoThrottle's adapted delay (ms); KEYS[4i] want:
// set when a worker found the host held by another (the holder yields it
// at its next renewal). Returns three numbers per host: 1, the ms until
// the next start, the adapted delay (0 = none) when the lease is taken;
// 0, the ms the other worker's lease has left, 0 when it is not.
var leaseScript = goredis.NewScript(`
local me, ttl, start, wantttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local out = {}
for i = 1, #KEYS / 4 do
  local lease, next_, throttle, want = KEYS[4*i-3], KEYS[4*i-2], KEYS[4*i-1], KEYS[4*i]
  local cur = redis.call('GET', lease)
  if cur == false or cur == me then
    redis.call('SET', lease, me, 'PX', ttl)
    local thr = 0
    if start > 0 then thr = tonumber(redis.call('GET', throttle) or '0') end
    out[3*i-2], out[3*i-1], out[3*i] = 1, math.max(0, redis.call('PTTL', next_)), thr
  else
    redis.call('SET', want, 1, 'PX', wantttl)
    out[3*i-2], out[3*i-1], out[3*i] = 0, math.max(1, redis.call('PTTL', lease)), 0
  end
end
return out
`)

// releaseScript gives the leases of one or more hosts back, leaving the
// time until each one's next start (and AutoThrottle's delay) for the
// worker that takes it next.
//
// ARGV[1] the worker's lease token, ARGV[2] the throttle key's TTL (ms).
// For each host i (from 1), KEYS[3i-2..3i] as in leaseScript, ARGV[2i+1]
// the ms until its next start (0 = none), ARGV[2i+2] its adapted delay
// (ms; 0 = unchanged). A later next start already set (another worker's
// back-off) is kept. Returns nothing.
var releaseScript = goredis.NewScript(`
local me, thrttl = ARGV[1], tonumber(ARGV[2])
for i = 1, #KEYS / 3 do
  local lease, next_, throttle = KEYS[3*i-2], KEYS[3*i-1], KEYS[3*i]
  if redis.call('GET', lease) == me then
    redis.call('DEL', lease)
  end
  local wait, thr = tonumber(ARGV[2*i+1]), tonumber(ARGV[2*i+2])
  if wait > 0 and wait > redis.call('PTTL', next_) then
    redis.call('SET', next_, 1, 'PX', wait)
  end
  if thr > 0 then
    redis.call('SET', throttle, thr, 'PX', thrttl)
  end
end
return 0
`)

// renewScript extends the leases this worker still holds, and says which
// of them another worker wants.
//
// ARGV[1] the worker's lease token, ARGV[2] lease TTL (ms); per host i,
// KEYS[2i-1] its lease key, KEYS[2i] its want key. Returns per host 1
// when extended, 2 when extended and wanted by another worker (the want
// key is removed), 0 when the lease is no longer this worker's (it
// expired, and maybe another took it).
var renewScript = goredis.NewScript(`
local out = {}
for i = 1, #KEYS / 2 do
  if redis.call('GET', KEYS[2*i-1]) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[2*i-1], ARGV[2])
    out[i] = 1
    if redis.call('DEL', KEYS[2*i]) == 1 then out[i] = 2 end
  else
    out[i] = 0
  end
end
return out
`)

// observeScript applies AutoThrottle's rule (engine.AutoThrottle.Next) to
// a host's shared delay, for a response that came to a worker not
// holding the host's lease (the holder keeps it in memory). A lowered
// delay moves the next start time earlier by as much.
//
// KEYS[1] throttle, KEYS[2] next. ARGV[1] latency (ms, fractional),
// ARGV[2] target concurrency, ARGV[3] minimum delay (ms), ARGV[4] max
// delay (ms), ARGV[5] start delay (ms), ARGV[6] "1" for a 2xx response,
// ARGV[7] the throttle key's TTL (ms). Returns the delay (ms).
var observeScript = goredis.NewScript(`
local lat, conc = tonumber(ARGV[1]), tonumber(ARGV[2])
local floor, cap, start = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local old = math.max(floor, tonumber(redis.call('GET', KEYS[1]) or start))
local target = math.min(lat / conc, cap)
local new = math.max(target, (old + target) / 2)
new = math.floor(math.max(floor, math.min(new, cap)) + 0.5)
if ARGV[6] ~= '1' and new <= old then
  return old
end
redis.call('SET', KEYS[1], new, 'PX', ARGV[7])
if new < old then
  local left = redis.call('PTTL', KEYS[2])
  if left > 0 then
    local moved = left - (old - new)
    if moved > 0 then
      redis.call('SET', KEYS[2], 1, 'PX', moved)
    else
      redis.call('DEL', KEYS[2])
    end
  end
end
return new
`)

// backoffScript pushes a host's next start time to at least ARGV[1] ms
// from now.
//
// KEYS[1] next. ARGV[1] milliseconds. Returns nothing.
var backoffScript = goredis.NewScript(`
local ms = tonumber(ARGV[1])
if ms > redis.call('PTTL', KEYS[1]) then
  redis.call('SET', KEYS[1], 1, 'PX', ms)
end
return 0
`)

// pxAtLeast is the PX, in ms, of a key whose PTTL another worker reads
// as a wait that must not end before d has passed: d rounded up, and one
// more, since PTTL counts whole ms of the server's clock and can read up
// to 1 ms short of what is left.
func pxAtLeast(d time.Duration) int64 {
	return int64((d+time.Millisecond-1)/time.Millisecond) + 1
}

// maxGroup bounds the hosts of one script call.
const maxGroup = 128

// throttleTTL is how long a host's adapted delay outlives its last update.
const throttleTTL = time.Hour

// DefaultSlotTTL is LimiterConfig.SlotTTL's default: trawl's default lease.
const DefaultSlotTTL = 30 * time.Second

// LimiterConfig configures a HostLimiter.
type LimiterConfig struct {
	// Client is the Redis connection, shared with the broker; never closed by us.
	Client goredis.UniversalClient
	// Crawl is the crawl's name; its workers share the limits.
	Crawl string
	// PerHost caps requests in progress to one host across all workers (0 = 8).
	PerHost int
	// Delay is the least time between request starts to one host across
	// all workers (robots.txt Crawl-delay raises it per host).
	Delay time.Duration
	// SlotTTL is how long a host's lease outlives the last sign of life
	// of the worker holding it (0 = DefaultSlotTTL; trawl passes
	// --lease). A live worker renews its leases every SlotTTL/3, so it
	// may hold a host longer; the hosts of a worker that died, or lost
	// Redis, free themselves within SlotTTL. At least 300ms.
	SlotTTL time.Duration
	// Poll is how long a worker first waits before it asks again for a
	// host another worker holds (0 = 20ms); it doubles at each refusal,
	// up to 400ms, and is cut short by the holder's lease running out.
	Poll time.Duration
	// AutoThrottle, if not nil, adapts each host's delay to its latency
	// (see engine.AutoThrottle), never below Delay or the host's
	// Crawl-delay. The adapted delay is kept by the worker holding the
	// host and left in Redis when it gives the host back, one key per host
	// (redislayout.HostKeys(Crawl, HOST).Throttle, expiring an hour after
	// its last change), so every worker paces a host by the same value
	// and every worker's responses move it. nil = fixed delays.
	AutoThrottle *engine.AutoThrottle
	// Logger receives warnings (default: discarded).
	Logger *slog.Logger
}

// HostLimiter paces requests per host across every worker of a crawl:
// scrapy-redis applies its per-host limits per process, so N workers hit a
// site N times harder; here the cap and the delay hold for the whole crawl.
// It implements engine.HostLimiter and engine.HostLeaser.
//
// A host is leased to one worker at a time: the lease is a key holding
// the worker's token, with a TTL. While a worker holds a host's lease its
// requests to the host take slots and keep the delay in memory, asking
// Redis nothing; so a worker's pages of a host cost Redis nothing but the
// lease's taking and giving back. A worker gives a host back once it has
// had no request to it in progress for leaseLinger, leaving in Redis the
// time until the host's next start (its delay, a back-off) and
// AutoThrottle's delay for the worker that takes it next. Leases are
// taken and given back in one script call for every host that waits
// (a round trip per burst, not per host). A worker that finds a host held
// by another asks again after Poll, doubling up to 400ms, or when the
// other's lease runs out; the engine parks the host's pages meanwhile
// (engine.HostLeaser), so its slots go to other hosts. A refused ask
// leaves a mark (the host's want key); the holder, which finds it when it
// next renews its leases, gives the host back as soon as it has nothing
// in progress there and leaves it alone for yieldPause, so that workers
// that all hold deliveries of a busy host take turns (within SlotTTL/3
// each), rather than one holding it while the others' deliveries wait.
//
// A keeper goroutine renews the leases held every SlotTTL/3, in one script
// call per 128 hosts, and retries (every second) the releases that failed
// because Redis was unreachable; it stops when nothing is held or
// pending, and Close stops it. So a host comes back within SlotTTL when
// its worker dies (kill -9), and within a second after Redis comes back
// from an outage during which its release failed. A worker that could not
// renew its leases for SlotTTL (a Redis outage that long) loses them to
// others while its requests still run: the cap may be exceeded once, for
// those requests.
//
// A back-off (Backoff) is kept by the holder and also set in Redis at once;
// a worker that does not hold the host applies another's back-off when it
// next takes the lease.
type HostLimiter struct {
	cfg   LimiterConfig
	log   *slog.Logger
	token string // this worker's lease token

	mu       sync.Mutex
	delays   map[string]time.Duration // per-host delays above cfg.Delay
	hosts    map[string]*leaseHost
	sweepAt  int           // sweep idle hosts when len(hosts) reaches this
	asks     []*leaseHost  // hosts whose lease is to be asked for
	releases []*leaseHost  // hosts whose lease is to be given back
	failed   []releaseCall // releases that failed, retried by the keeper
	sending  bool          // the sender runs
	running  bool          // the keeper runs
	closed   bool
	stop     chan struct{} // closed by Close
	wg       sync.WaitGroup
}

// leaseHost is a host's state in one worker.
type leaseHost struct {
	name string
	keys []string // lease, next, throttle

	held      bool        // this worker holds the lease
	ask       *leaseAsk   // the lease asked for and not yet answered; nil when none
	releasing bool        // a release is queued or being sent
	retry     time.Time   // held elsewhere (or an ask failed): no ask before this
	backoffN  int         // refusals in a row, for the retry's doubling
	retryT    *time.Timer // wakes the waiters at retry
	ready     []func()    // engine.HostLeaser callers to call when worth trying again
	yield     bool        // held, and wanted by another worker: start nothing, give it back once idle
	changed   chan struct{}
	waiters   int       // Acquire calls waiting on changed
	active    int       // requests in progress here
	next      time.Time // earliest next start here, while held
	backoff   time.Time
	auto      time.Duration // AutoThrottle's adapted delay while held; 0 = the start delay
	autoDirty bool          // auto changed here since the lease was taken
	used      time.Time     // the last start, release or lease (for leaseLinger)
	idleT     *time.Timer   // gives the lease back once idle for leaseLinger
}

// leaseAsk is an ask for a host's lease, answered by the sender.
type leaseAsk struct {
	done chan struct{} // closed when answered
	err  error
}

// releaseCall is a release as the release script takes it.
type releaseCall struct {
	h     *leaseHost
	next  int64 // ms until the next start
	throt int64 // ms; 0 = unchanged
}

// leaseLinger is how long a worker keeps a host's lease with no request
// to it in progress: its next page of the host usually comes sooner (a
// page's links go through the filter and the frontier first), and a host
// given back and taken again costs two script calls, about 8 commands.
// Other workers wait for it as long. bench-web's 1,000 hosts were leased
// 10,500 times at 200ms and 2,700 at 500ms (1.9 and 0.5 commands per
// page); 200ms keeps hand-overs between workers short.
const leaseLinger = 200 * time.Millisecond

// maxRetry bounds the wait before asking again for a host another worker
// holds: the host may stand idle that long after a hand-over. With 4
// workers on bench-web, at 1s the crawl reached 0.76–0.79 of the loop in
// two runs, at 400ms 0.91, for 0.3 more commands per page.
const maxRetry = 400 * time.Millisecond

// wantTTL is how long a worker's ask for a host held by another stays
// known to the holder (it asks again within maxRetry while it wants the
// host), and yieldPause how long a worker that gave a wanted host back
// waits before it asks for it again, so that the worker wanting it
// gets it.
const (
	wantTTL    = 3 * time.Second
	yieldPause = maxRetry + maxRetry/2
)

// NewHostLimiter returns a limiter shared by the workers of cfg.Crawl.
// Close it when done.
func NewHostLimiter(cfg LimiterConfig) (*HostLimiter, error) {
	if cfg.Client == nil || cfg.Crawl == "" || cfg.PerHost < 0 || cfg.Delay < 0 {
		return nil, fmt.Errorf("redis host limiter: need a client, a crawl name and non-negative limits")
	}
	if cfg.SlotTTL != 0 && cfg.SlotTTL < 300*time.Millisecond {
		return nil, fmt.Errorf("redis host limiter: SlotTTL %v: want 0 (default %v) or at least 300ms", cfg.SlotTTL, DefaultSlotTTL)
	}
	if cfg.AutoThrottle != nil {
		if err := cfg.AutoThrottle.Validate(); err != nil {
			return nil, fmt.Errorf("redis host limiter: %w", err)
		}
		a := cfg.AutoThrottle.WithDefaults()
		cfg.AutoThrottle = &a
	}
	if cfg.PerHost == 0 {
		cfg.PerHost = 8
	}
	if cfg.SlotTTL == 0 {
		cfg.SlotTTL = DefaultSlotTTL
	}
	if cfg.Poll == 0 {
		cfg.Poll = 20 * time.Millisecond
	}
	var b [12]byte
	rand.Read(b[:])
	l := &HostLimiter{
		cfg: cfg, log: cfg.Logger, token: hex.EncodeToString(b[:]),
		delays: make(map[string]time.Duration), hosts: make(map[string]*leaseHost), sweepAt: minSweep,
		stop: make(chan struct{}),
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	return l, nil
}

// minSweep is the least size of the hosts table at which idle entries
// are swept.
const minSweep = 1024

// Close stops the keeper and gives back the leases held with nothing in
// progress. Leases of hosts still in use are not given back: they free
// themselves within SlotTTL. Close is idempotent.
func (l *HostLimiter) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		l.wg.Wait()
		return nil
	}
	l.closed = true
	close(l.stop)
	var give []releaseCall
	for _, h := range l.hosts {
		if h.idleT != nil {
			h.idleT.Stop()
			h.idleT = nil
		}
		if h.retryT != nil {
			h.retryT.Stop()
			h.retryT = nil
		}
		h.ready = nil
		if h.held && h.active == 0 && !h.releasing {
			give = append(give, l.releaseOf(h))
		}
	}
	l.mu.Unlock()
	l.wg.Wait() // the keeper and the sender
	if len(give) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := l.runRelease(ctx, give); err != nil {
			l.log.Warn("redis host limiter: giving the leases back on close failed; they free at their TTL",
				"hosts", len(give), "ttl", l.cfg.SlotTTL, "err", err)
		}
	}
	return nil
}

// startMs is AutoThrottle's start delay in ms for the lease script
// (at least 1), or 0 without AutoThrottle.
func (l *HostLimiter) startMs() int64 {
	if l.cfg.AutoThrottle == nil {
		return 0
	}
	return max(l.cfg.AutoThrottle.StartDelay.Milliseconds(), 1)
}

// keys returns host's keys: lease, next, throttle, want.
func (l *HostLimiter) keys(host string) []string {
	k := redislayout.HostKeys(l.cfg.Crawl, host)
	return []string{k.Lease, k.Next, k.Throttle, k.Want}
}

// floor is host's minimum delay: Delay or its SetDelay. l.mu is held.
func (l *HostLimiter) floor(host string) time.Duration {
	return max(l.cfg.Delay, l.delays[host])
}

// hostDelay is h's delay between starts while held. l.mu is held.
func (l *HostLimiter) hostDelay(h *leaseHost) time.Duration {
	d := l.floor(h.name)
	if a := l.cfg.AutoThrottle; a != nil {
		if h.auto == 0 {
			return max(d, a.StartDelay)
		}
		return max(d, h.auto)
	}
	return d
}

// host returns host's entry, creating it. l.mu is held.
func (l *HostLimiter) host(host string) *leaseHost {
	h := l.hosts[host]
	if h == nil {
		if len(l.hosts) >= l.sweepAt {
			l.sweep(time.Now())
		}
		h = &leaseHost{name: host, keys: l.keys(host), changed: make(chan struct{})}
		l.hosts[host] = h
	}
	return h
}

// sweep forgets the hosts that hold nothing. l.mu is held.
func (l *HostLimiter) sweep(now time.Time) {
	for name, h := range l.hosts {
		if !h.held && h.ask == nil && !h.releasing && h.active == 0 && h.waiters == 0 &&
			len(h.ready) == 0 && !now.Before(h.retry) && !slices.ContainsFunc(l.failed, func(r releaseCall) bool { return r.h == h }) {
			delete(l.hosts, name)
		}
	}
	l.sweepAt = max(minSweep, 2*len(l.hosts))
}

// wake wakes h's waiting Acquire calls and returns its HostLeaser
// callbacks, for the caller to call once l.mu is released. l.mu is held.
func (h *leaseHost) wake() []func() {
	close(h.changed)
	h.changed = make(chan struct{})
	r := h.ready
	h.ready = nil
	return r
}

func call(fs []func()) {
	for _, f := range fs {
		f()
	}
}

// Lease tells, without waiting, whether this worker holds host's lease
// (see engine.HostLeaser). If it does not, it asks for it (unless it is
// asked for already, or another worker was found holding it less than a
// retry ago) and calls ready once host is worth trying again: its lease
// taken here, or the time to ask again come.
func (l *HostLimiter) Lease(host string, ready func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return true // Acquire decides, alone
	}
	h := l.host(host)
	if h.held && !h.releasing && !h.yield {
		h.used = time.Now()
		l.idleAfter(h)
		return true
	}
	h.ready = append(h.ready, ready)
	if !h.held && h.ask == nil && !time.Now().Before(h.retry) {
		l.askLease(h)
	}
	return false
}

// askLease queues an ask for h's lease, starts the sender and returns
// the ask. l.mu is held.
func (l *HostLimiter) askLease(h *leaseHost) *leaseAsk {
	a := &leaseAsk{done: make(chan struct{})}
	if l.closed { // no sender after Close
		a.err = errClosed
		close(a.done)
		return a
	}
	h.ask = a
	// A release that failed is overtaken: the ask takes the lease again.
	l.failed = slices.DeleteFunc(l.failed, func(r releaseCall) bool { return r.h == h })
	l.asks = append(l.asks, h)
	l.send()
	return a
}

// send starts the sender if it is not running. l.mu is held.
func (l *HostLimiter) send() {
	if l.sending || l.closed {
		return
	}
	l.sending = true
	l.wg.Add(1)
	go l.sender()
}

// Acquire waits until a request to host may start, or ctx ends: it takes
// the host's lease if this worker does not hold it (waiting while another
// worker does), then a slot and the delay, in memory.
func (l *HostLimiter) Acquire(ctx context.Context, host string) (func(), error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		l.mu.Lock()
		h := l.host(host)
		now := time.Now()
		var wait time.Duration = -1 // until changed
		var ask *leaseAsk
		switch {
		case h.held && h.yield: // given back once idle: wait for it
		case h.held && !h.releasing:
			gate := h.next
			if h.backoff.After(gate) {
				gate = h.backoff
			}
			if h.active < l.cfg.PerHost && !now.Before(gate) {
				h.active++
				h.next = now.Add(l.hostDelay(h))
				h.used = now
				if h.idleT != nil {
					h.idleT.Stop()
					h.idleT = nil
				}
				l.mu.Unlock()
				var once sync.Once
				return func() { once.Do(func() { l.release(h) }) }, nil
			}
			if h.active < l.cfg.PerHost {
				wait = gate.Sub(now)
			}
		case h.ask != nil:
			ask = h.ask
		case h.releasing || now.Before(h.retry):
			if !h.releasing {
				wait = h.retry.Sub(now)
			}
		default:
			ask = l.askLease(h)
		}
		changed := h.changed
		h.waiters++
		l.mu.Unlock()
		var err error
		if ask != nil {
			select {
			case <-ask.done:
				err = ask.err
			case <-ctx.Done():
			}
		} else {
			var timer <-chan time.Time
			var t *time.Timer
			if wait >= 0 {
				t = time.NewTimer(wait)
				timer = t.C
			}
			select {
			case <-changed:
			case <-timer:
			case <-ctx.Done():
			}
			if t != nil {
				t.Stop()
			}
		}
		l.mu.Lock()
		h.waiters--
		l.mu.Unlock()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("redis host limiter: acquire %q: %w", host, err)
		}
	}
}

// errClosed is Acquire's error after Close, for a host not held.
var errClosed = errors.New("limiter closed")

// release ends a request to h, and gives the lease back once h has been
// idle for leaseLinger.
func (l *HostLimiter) release(h *leaseHost) {
	l.mu.Lock()
	h.active--
	h.used = time.Now()
	if h.yield {
		l.yieldIfIdle(h)
	} else {
		l.idleAfter(h)
	}
	ready := h.wake()
	l.mu.Unlock()
	call(ready)
}

// idleAfter arms h's timer that gives its lease back once idle for
// leaseLinger. l.mu is held.
func (l *HostLimiter) idleAfter(h *leaseHost) {
	if h.active > 0 || h.idleT != nil || l.closed {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(leaseLinger, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if h.idleT != t {
			return
		}
		h.idleT = nil
		if !h.held || h.releasing || h.active > 0 || l.closed {
			return
		}
		if left := leaseLinger - time.Since(h.used); left > 0 {
			l.idleAfter(h) // used since: wait on
			return
		}
		h.releasing = true
		l.releases = append(l.releases, h)
		l.send()
	})
	h.idleT = t
}

// yieldIfIdle gives h's lease back at once if nothing is in progress
// there: another worker wants it (see renewScript). l.mu is held.
func (l *HostLimiter) yieldIfIdle(h *leaseHost) {
	if h.active > 0 || h.releasing || l.closed {
		return
	}
	if h.idleT != nil {
		h.idleT.Stop()
		h.idleT = nil
	}
	h.releasing = true
	l.releases = append(l.releases, h)
	l.send()
}

// releaseOf is h's release, taken from its state; h is no longer held
// here. l.mu is held.
func (l *HostLimiter) releaseOf(h *leaseHost) releaseCall {
	r := releaseCall{h: h}
	gate := h.next
	if h.backoff.After(gate) {
		gate = h.backoff
	}
	if left := time.Until(gate); left > 0 {
		r.next = pxAtLeast(left)
	}
	if h.autoDirty {
		r.throt = max(h.auto.Milliseconds(), 1)
	}
	if h.yield {
		// Leave the host to the worker that wants it: it asks again
		// within maxRetry.
		h.yield = false
		h.retry = time.Now().Add(yieldPause)
		l.retryAt(h)
	}
	h.held, h.autoDirty = false, false
	return r
}

// sender sends the queued releases, then the queued asks, up to maxGroup
// hosts in one script call each, until none is left. It is started by
// send and owned by l (Close waits for it).
func (l *HostLimiter) sender() {
	defer l.wg.Done()
	for {
		l.mu.Lock()
		if n := min(len(l.releases), maxGroup); n > 0 {
			group := make([]releaseCall, n)
			for i, h := range l.releases[:n] {
				group[i] = l.releaseOf(h)
			}
			l.releases = slices.Delete(l.releases, 0, n)
			l.mu.Unlock()
			l.sendReleases(group)
			continue
		}
		n := min(len(l.asks), maxGroup)
		if n == 0 {
			l.sending = false
			l.mu.Unlock()
			return
		}
		group := slices.Clone(l.asks[:n])
		l.asks = slices.Delete(l.asks, 0, n)
		l.mu.Unlock()
		l.sendAsks(group)
	}
}

// scriptTimeout bounds one script call of the sender or the keeper.
const scriptTimeout = 10 * time.Second

// sendReleases gives back the leases of group; a failure leaves them to
// the keeper, which retries.
func (l *HostLimiter) sendReleases(group []releaseCall) {
	ctx, cancel := context.WithTimeout(context.Background(), scriptTimeout)
	defer cancel()
	err := l.runRelease(ctx, group)
	l.mu.Lock()
	var ready []func()
	for _, r := range group {
		r.h.releasing = false
		ready = append(ready, r.h.wake()...)
	}
	if err != nil {
		l.log.Warn("redis host limiter: giving leases back failed; retrying in the background (they free at their TTL otherwise)",
			"hosts", len(group), "ttl", l.cfg.SlotTTL, "err", err)
		l.failed = append(l.failed, group...)
		l.keep()
	}
	l.mu.Unlock()
	call(ready)
}

// runRelease runs releaseScript for group.
func (l *HostLimiter) runRelease(ctx context.Context, group []releaseCall) error {
	keys := make([]string, 0, 3*len(group))
	args := make([]any, 0, 2+2*len(group))
	args = append(args, l.token, throttleTTL.Milliseconds())
	for _, r := range group {
		keys = append(keys, r.h.keys[:3]...)
		args = append(args, r.next, r.throt)
	}
	return releaseScript.Run(ctx, l.cfg.Client, keys, args...).Err()
}

// sendAsks asks for the leases of group and answers each ask.
func (l *HostLimiter) sendAsks(group []*leaseHost) {
	keys := make([]string, 0, 4*len(group))
	for _, h := range group {
		keys = append(keys, h.keys...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), scriptTimeout)
	defer cancel()
	out, err := leaseScript.Run(ctx, l.cfg.Client, keys, l.token, l.cfg.SlotTTL.Milliseconds(), l.startMs(), wantTTL.Milliseconds()).Int64Slice()
	if err == nil && len(out) != 3*len(group) {
		err = fmt.Errorf("the lease script answered %d numbers for %d hosts", len(out), len(group))
	}
	now := time.Now()
	l.mu.Lock()
	var ready []func()
	for i, h := range group {
		a := h.ask
		h.ask = nil
		switch {
		case err != nil:
			// The script may have run without its answer reaching us: the
			// lease, if taken, frees at its TTL, or is taken again by the
			// next ask (it is ours).
			a.err = err
			h.retry = now.Add(time.Second)
			l.retryAt(h)
		case out[3*i] == 1:
			h.held, h.backoffN = true, 0
			if next := now.Add(time.Duration(out[3*i+1]) * time.Millisecond); next.After(h.next) {
				h.next = next
			}
			h.auto = time.Duration(out[3*i+2]) * time.Millisecond
			h.used = now
			l.idleAfter(h)
			l.keep()
		default:
			left := time.Duration(out[3*i+1]) * time.Millisecond
			h.retry = now.Add(min(left, min(l.cfg.Poll<<min(h.backoffN, 10), maxRetry)))
			h.backoffN++
			l.retryAt(h)
		}
		close(a.done)
		ready = append(ready, h.wake()...)
	}
	l.mu.Unlock()
	call(ready)
	if err != nil {
		l.log.Warn("redis host limiter: asking for host leases failed", "hosts", len(group), "err", err)
	}
}

// retryAt arms h's timer that wakes its waiters at h.retry. l.mu is held.
func (l *HostLimiter) retryAt(h *leaseHost) {
	if h.retryT != nil {
		h.retryT.Stop()
	}
	if l.closed {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(time.Until(h.retry), func() {
		l.mu.Lock()
		if h.retryT != t {
			l.mu.Unlock()
			return
		}
		h.retryT = nil
		ready := h.wake()
		l.mu.Unlock()
		call(ready)
	})
	h.retryT = t
}

// keep starts the keeper if it is not running. l.mu is held.
func (l *HostLimiter) keep() {
	if l.running || l.closed {
		return
	}
	l.running = true
	l.wg.Add(1)
	go l.keeper()
}

// keepTick is how often the keeper retries failed releases.
const keepTick = time.Second

// keeper renews the leases held every SlotTTL/3 and retries failed
// releases every keepTick, until nothing is held or pending, or Close.
func (l *HostLimiter) keeper() {
	defer l.wg.Done()
	tick := min(keepTick, l.cfg.SlotTTL/3)
	t := time.NewTicker(tick)
	defer t.Stop()
	lastRenew := time.Now()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		renew := time.Since(lastRenew) >= l.cfg.SlotTTL/3-tick/2
		l.mu.Lock()
		var held []*leaseHost
		for _, h := range l.hosts {
			if h.held {
				held = append(held, h)
			}
		}
		if len(held) == 0 && len(l.failed) == 0 {
			l.running = false
			l.mu.Unlock()
			return
		}
		failed := l.failed
		l.failed = nil
		l.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), max(tick, time.Second))
		if len(failed) > 0 {
			if err := l.runRelease(ctx, failed); err != nil {
				l.log.Debug("redis host limiter: giving leases back still failing", "hosts", len(failed), "err", err)
				l.mu.Lock()
				l.failed = append(l.failed, failed...)
				l.mu.Unlock()
			}
		}
		if renew {
			lastRenew = time.Now()
			for part := range slices.Chunk(held, maxGroup) {
				l.renew(ctx, part)
			}
		}
		cancel()
	}
}

// renew extends the leases of hosts; those found lost are no longer held.
func (l *HostLimiter) renew(ctx context.Context, hosts []*leaseHost) {
	keys := make([]string, 0, 2*len(hosts))
	for _, h := range hosts {
		keys = append(keys, h.keys[0], h.keys[3])
	}
	out, err := renewScript.Run(ctx, l.cfg.Client, keys, l.token, l.cfg.SlotTTL.Milliseconds()).Int64Slice()
	if err != nil {
		l.log.Warn("redis host limiter: could not renew host leases; others may take them after their TTL",
			"hosts", len(hosts), "ttl", l.cfg.SlotTTL, "err", err)
		return
	}
	lost := 0
	l.mu.Lock()
	for i, h := range hosts {
		if i >= len(out) || !h.held || h.releasing {
			continue
		}
		switch out[i] {
		case 0:
			h.held = false
			lost++
		case 2:
			h.yield = true
			l.yieldIfIdle(h)
		}
	}
	l.mu.Unlock()
	if lost > 0 {
		l.log.Warn("redis host limiter: host leases expired while held; the per-host cap may be exceeded for their requests in progress",
			"lost", lost)
	}
}

// Backoff holds every worker's requests to host until t: at once here,
// and for the others through Redis.
func (l *HostLimiter) Backoff(host string, until time.Time) {
	left := time.Until(until)
	if left <= 0 {
		return
	}
	ms := pxAtLeast(left)
	l.mu.Lock()
	if h := l.hosts[host]; h != nil && until.After(h.backoff) {
		h.backoff = until
	}
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := backoffScript.Run(ctx, l.cfg.Client, l.keys(host)[1:2], ms).Err(); err != nil {
		l.log.Warn("redis host limiter: backoff failed", "host", host, "err", err)
	}
}

// SetDelay raises host's delay (robots.txt Crawl-delay); every worker
// reads the same robots.txt, so each sets the same value.
func (l *HostLimiter) SetDelay(host string, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d > l.cfg.Delay {
		l.delays[host] = d
	} else {
		delete(l.delays, host)
	}
}

var (
	_ engine.HostLimiter = (*HostLimiter)(nil)
	_ engine.HostLeaser  = (*HostLimiter)(nil)
)

// Observe moves host's delay by a response's latency and status with
// AutoThrottle (see engine.AutoThrottle.Next): in memory while this worker
// holds the host (left in Redis when it gives it back), else in Redis, in
// one round trip. Without AutoThrottle it does nothing. A failure is
// logged: the delay stays as it was.
func (l *HostLimiter) Observe(host string, latency time.Duration, status int) {
	a := l.cfg.AutoThrottle
	if a == nil {
		return
	}
	l.mu.Lock()
	if h := l.hosts[host]; h != nil && h.held && !h.releasing {
		old := l.hostDelay(h)
		h.auto = a.Next(old, l.floor(host), latency, status)
		h.autoDirty = true
		if d := l.hostDelay(h); d < old {
			h.next = h.next.Add(d - old) // a lowered delay applies to the next start
		}
		ready := h.wake()
		l.mu.Unlock()
		call(ready)
		return
	}
	floor := l.floor(host)
	l.mu.Unlock()
	keys := l.keys(host)
	ok := "0"
	if status >= 200 && status <= 299 {
		ok = "1"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := observeScript.Run(ctx, l.cfg.Client, []string{keys[2], keys[1]},
		float64(latency)/float64(time.Millisecond), a.TargetConcurrency, floor.Milliseconds(),
		a.MaxDelay.Milliseconds(), l.startMs(), ok, throttleTTL.Milliseconds()).Err()
	if err != nil {
		l.log.Warn("redis host limiter: autothrottle update failed; the host's delay stays as it was", "host", host, "err", err)
	}
}

// Delay returns host's current delay between request starts across the
// crawl: the minimum delay (Delay, SetDelay) or, with AutoThrottle, the
// adapted delay if larger (the start delay before any response): this
// worker's while it holds the host, else the one in Redis.
func (l *HostLimiter) Delay(ctx context.Context, host string) (time.Duration, error) {
	l.mu.Lock()
	floor := l.floor(host)
	if h := l.hosts[host]; h != nil && h.held && !h.releasing {
		d := l.hostDelay(h)
		l.mu.Unlock()
		return d, nil
	}
	l.mu.Unlock()
	if l.cfg.AutoThrottle == nil {
		return floor, nil
	}
	ms, err := l.cfg.Client.Get(ctx, l.keys(host)[2]).Int64()
	switch {
	case errors.Is(err, goredis.Nil):
		ms = l.startMs()
	case err != nil:
		return 0, fmt.Errorf("redis host limiter: delay of %q: %w", host, err)
	}
	return max(floor, time.Duration(ms)*time.Millisecond), nil
}
