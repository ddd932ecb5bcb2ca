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

// leaseScript takes slots of one or more hosts for this worker, or says
// how long the other workers' slots have left (see HostLimiter).
//
// ARGV[1] the worker's token, ARGV[2] the slots' TTL (ms), ARGV[3]
// AutoThrottle's start delay (ms; 0 = off: the throttle key is not
// read), ARGV[4] the want key's TTL (ms), ARGV[5] the per-host cap; per
// host i (from 1), ARGV[4+2i] the slots wanted in all, ARGV[5+2i] "1" to
// take the host whole (all its slots, only while no other worker holds
// any). KEYS[4i-3] slots: a hash, worker token -> "COUNT:EXPIRY" (ms of
// the server's clock), and "~" -> the key's own expiry, which a write
// that needs it later extends to twice the TTL (so that not every ask
// sets the key's TTL); KEYS[4i-2] next: a key whose TTL is the time until
// the host's next request may start; KEYS[4i-1] throttle: AutoThrottle's
// adapted delay (ms); KEYS[4i] want: set when a worker found no slot free
// (holders yield at their next renewal). Holders past their expiry are
// dropped. An ask takes all the slots if no other worker holds one; else
// a slot ask takes what it wants of the free slots, a whole ask none;
// neither gives back what this worker holds. Returns three
// numbers per host: the slots this worker now holds, then, if it holds
// any, the ms until the next start and the adapted delay (0 = none); if
// none, the ms until the first of the others' slots expires, and 0.
var leaseScript = goredis.NewScript(`
local me, ttl, start, wantttl, cap = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for i = 1, #KEYS / 4 do
  local slots, next_, throttle, want = KEYS[4*i-3], KEYS[4*i-2], KEYS[4*i-1], KEYS[4*i]
  local target, whole = tonumber(ARGV[4+2*i]), ARGV[5+2*i] == '1'
  local all = redis.call('HGETALL', slots)
  local mine, others, first, last, keyexp = 0, 0, nil, now + ttl, 0
  for j = 1, #all, 2 do
    local n, exp = string.match(all[j+1], '^(%d+):(%d+)$')
    n, exp = tonumber(n), tonumber(exp)
    if all[j] == '~' then
      keyexp = tonumber(all[j+1])
    elseif exp <= now then
      redis.call('HDEL', slots, all[j])
    elseif all[j] == me then
      mine = n
    else
      others = others + n
      if first == nil or exp < first then first = exp end
      if exp > last then last = exp end
    end
  end
  local got = mine
  if others == 0 then
    got = cap
  elseif not whole then
    got = math.max(mine, math.min(target, cap - others))
  end
  if got > 0 then
    local v = string.format('%d:%d', got, now + ttl)
    if last > keyexp then
      keyexp = math.max(last, now + 2 * ttl)
      redis.call('HSET', slots, me, v, '~', string.format('%d', keyexp))
      redis.call('PEXPIRE', slots, keyexp - now)
    else
      redis.call('HSET', slots, me, v)
    end
    local thr = 0
    if start > 0 then thr = tonumber(redis.call('GET', throttle) or '0') end
    out[3*i-2], out[3*i-1], out[3*i] = got, math.max(0, redis.call('PTTL', next_)), thr
  else
    redis.call('SET', want, 1, 'PX', wantttl)
    out[3*i-2], out[3*i-1], out[3*i] = 0, math.max(1, (first or now + 1) - now), 0
  end
  if got > 0 and got < target then
    redis.call('SET', want, 1, 'PX', wantttl)
  end
end
return out
`)

// releaseScript gives back slots of one or more hosts, leaving the time
// until each one's next start (and AutoThrottle's delay) for the workers
// that take them next.
//
// ARGV[1] the worker's token, ARGV[2] the throttle key's TTL (ms). For
// each host i (from 1), KEYS[3i-2..3i] as in leaseScript, ARGV[3i] the
// slots this worker keeps (0 = none), ARGV[3i+1] the ms until its next
// start (0 = none), ARGV[3i+2] its adapted delay (ms; 0 = unchanged). A
// later next start already set (another worker's back-off) is kept.
// Returns nothing.
var releaseScript = goredis.NewScript(`
local me, thrttl = ARGV[1], tonumber(ARGV[2])
for i = 1, #KEYS / 3 do
  local slots, next_, throttle = KEYS[3*i-2], KEYS[3*i-1], KEYS[3*i]
  local keep, wait, thr = tonumber(ARGV[3*i]), tonumber(ARGV[3*i+1]), tonumber(ARGV[3*i+2])
  local v = redis.call('HGET', slots, me)
  if v then
    if keep == 0 then
      redis.call('HDEL', slots, me)
    else
      redis.call('HSET', slots, me, keep .. ':' .. string.match(v, ':(%d+)$'))
    end
  end
  if wait > 0 and wait > redis.call('PTTL', next_) then
    redis.call('SET', next_, 1, 'PX', wait)
  end
  if thr > 0 then
    redis.call('SET', throttle, thr, 'PX', thrttl)
  end
end
return 0
`)

// renewScript extends the slots this worker still holds, says which
// hosts another worker wants, and passes on back-offs.
//
// ARGV[1] the worker's token, ARGV[2] the slots' TTL (ms); per host i,
// KEYS[3i-2] its slots, KEYS[3i-1] its want key, KEYS[3i] its next key.
// Returns two numbers per host: 1 when extended, 2 when extended and
// wanted by another worker (the want key is removed), 0 when this worker
// holds none of the host's slots any more (they expired, and maybe
// another took them); then the ms until the host's next start (a
// back-off another worker set; 0 = none).
var renewScript = goredis.NewScript(`
local me, ttl = ARGV[1], tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for i = 1, #KEYS / 3 do
  local slots = KEYS[3*i-2]
  local got = redis.call('HMGET', slots, me, '~')
  local v, keyexp = got[1], tonumber(got[2] or '0')
  local n, exp
  if v then n, exp = string.match(v, '^(%d+):(%d+)$') end
  if v == false or tonumber(exp) <= now then
    if v then redis.call('HDEL', slots, me) end
    out[2*i-1], out[2*i] = 0, 0
  else
    v = n .. ':' .. string.format('%d', now + ttl)
    if now + ttl > keyexp then
      keyexp = now + 2 * ttl
      redis.call('HSET', slots, me, v, '~', string.format('%d', keyexp))
      redis.call('PEXPIRE', slots, keyexp - now)
    else
      redis.call('HSET', slots, me, v)
    end
    out[2*i-1] = 1
    if redis.call('DEL', KEYS[3*i-1]) == 1 then out[2*i-1] = 2 end
    out[2*i] = math.max(0, redis.call('PTTL', KEYS[3*i]))
  end
end
return out
`)

// observeScript applies AutoThrottle's rule (engine.AutoThrottle.Next) to
// a host's shared delay, for a response that came to a worker not
// holding the host (the worker holding it whole keeps it in memory). A lowered
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
	// SlotTTL is how long a host's slots outlive the last sign of life
	// of the worker holding them (0 = DefaultSlotTTL; trawl passes
	// --lease). A live worker renews its slots every SlotTTL/3, so it
	// may hold them longer; the slots of a worker that died, or lost
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
// A host's PerHost slots are leased to workers: a hash per host holds,
// for each worker holding some, their count and their expiry (on the
// server's clock), and the total never exceeds PerHost. While a worker
// holds slots of a host its requests to the host take them and keep
// back-offs in memory, asking Redis nothing; so a worker's pages of a
// host cost Redis nothing but the slots' taking and giving back.
//
// A host with no delay between request starts (no Delay, no Crawl-delay
// given through SetDelay, no AutoThrottle) is leased slot by slot, so
// that workers that each hold some of its pages run them at once: a
// worker asks for more slots when its workbench would start a page of
// the host and every slot it holds is busy (engine.HostLeaser.Lease),
// and takes what it asks for of the free ones, or all of them when no
// other worker holds one. A host with a delay is
// leased whole, all its slots to one worker, only while no other holds
// any: that worker keeps the delay between starts in memory, which two
// workers could not without asking Redis per request; a worker that
// learns of a delay (robots.txt) while it holds some slots of a host
// starts nothing more there, gives them back once its requests there
// end, and asks for the host whole.
//
// A worker gives back a slot it has not used for leaseLinger (a host's
// whole lease once it has had nothing in progress there for as long),
// leaving in Redis the time until the host's next start (its delay, a
// back-off) and AutoThrottle's delay for the next holder. Slots are
// taken and given back in one script call for every host that waits (a
// round trip per burst, not per host). A worker that finds no slot free
// asks again after Poll, doubling up to 400ms, or when the first of the
// others' slots runs out; the engine parks the host's pages meanwhile
// (engine.HostLeaser), so its slots go to other hosts. Finding no slot
// free leaves a mark (the host's want key); the holders, which find it
// when they next renew, start nothing more there, give their slots back
// as their requests end and leave the host alone for yieldPause, so that
// workers that all hold pages of a busy host take turns (within
// SlotTTL/3 each), rather than some holding it while the others' pages
// wait.
//
// A keeper goroutine renews the slots held every SlotTTL/3, in one script
// call per 128 hosts, and has the releases that failed because Redis was
// unreachable sent again (every second); it stops when nothing is held or
// owed, and Close stops it. So a host's slots come back within SlotTTL
// when their worker dies (kill -9), and within a second after Redis comes
// back from an outage during which their release failed. A worker that
// could not renew its slots for SlotTTL (a Redis outage that long) loses
// them to others while its requests still run: the cap may be exceeded
// once, for those requests.
//
// A back-off (Backoff) is kept in memory and also set in Redis at once.
// Another worker applies it when it next takes slots of the host, and a
// worker already holding some at its next renewal (within SlotTTL/3):
// a 429 or 503 usually reaches each holder's own requests sooner.
type HostLimiter struct {
	cfg   LimiterConfig
	log   *slog.Logger
	token string // this worker's token in the hosts' slot hashes

	mu       sync.Mutex
	delays   map[string]time.Duration // per-host delays above cfg.Delay
	hosts    map[string]*leaseHost
	sweepAt  int           // sweep idle hosts when len(hosts) reaches this
	asks     []*leaseHost  // hosts whose slots are to be asked for
	releases []*leaseHost  // hosts whose slots are to be given back (some or all)
	sending  bool          // the sender runs
	robots   []*robotsRead // Robots calls waiting for the reader
	reading  bool          // the robots.txt reader runs
	running  bool          // the keeper runs
	closed   bool
	stop     chan struct{} // closed by Close
	wg       sync.WaitGroup
}

// leaseHost is a host's state in one worker.
type leaseHost struct {
	name string
	keys []string // slots, next, throttle, want

	slots     int  // slots of the host this worker holds; 0 = none
	whole     bool // slots taken whole: the host has a delay, kept here
	gen       int  // counts grants, so that a renewal's answer about an older holding is ignored
	want      int  // slots wanted in all by the ask to be sent
	ask       *leaseAsk
	releasing bool        // a release is queued or being sent
	owed      bool        // a release failed: Redis may count more slots here than slots
	retry     time.Time   // no slot free (or an ask failed): no ask before this
	backoffN  int         // refusals in a row, for the retry's doubling
	retryT    *time.Timer // wakes the waiters at retry
	ready     []func()    // engine.HostLeaser callers to call when worth trying again
	yield     bool        // wanted by another worker: start nothing, give the slots back as they free
	changed   chan struct{}
	waiters   int       // Acquire calls waiting on changed
	turn      uint64    // the next Acquire call's turn
	turns     []uint64  // the turns of the Acquire calls under way, first come first
	active    int       // requests in progress here
	next      time.Time // earliest next start here, while held
	backoff   time.Time
	auto      time.Duration // AutoThrottle's adapted delay while held; 0 = the start delay
	autoDirty bool          // auto changed here since the host was taken
	// busy[k] is when k+1 requests were last in progress here, or a page
	// bound for the (k+1)th slot was handed out (Lease): slot k+1 is
	// given back once unused for leaseLinger.
	busy  []time.Time
	idleT *time.Timer // gives unused slots back once unused for leaseLinger
}

// leaseAsk is an ask for a host's slots, answered by the sender.
type leaseAsk struct {
	done chan struct{} // closed when answered
	err  error
}

// releaseCall is a release as the release script takes it.
type releaseCall struct {
	h     *leaseHost
	keep  int   // slots kept
	next  int64 // ms until the next start
	throt int64 // ms; 0 = unchanged
}

// leaseLinger is how long a worker keeps a slot it does not use (a
// whole host with no request to it in progress): its next page of the
// host usually comes sooner (a page's links go through the filter and
// the frontier first), and a slot given back and taken again costs two
// script calls, about 8 commands. Other workers wait for it as long.
// bench-web's 1,000 hosts were leased 10,500 times at 200ms and 2,700 at
// 500ms (1.9 and 0.5 commands per page); 200ms keeps hand-overs between
// workers short.
const leaseLinger = 200 * time.Millisecond

// maxRetry bounds the wait before asking again for a host whose slots
// other workers hold: a slot may stand idle that long after a hand-over.
// With 4 workers on bench-web, at 1s the crawl reached 0.76–0.79 of the
// loop in two runs, at 400ms 0.91, for 0.3 more commands per page.
const maxRetry = 400 * time.Millisecond

// wantTTL is how long a worker's ask for a host whose slots others hold
// stays known to the holders (it asks again within maxRetry while it
// wants the host), and yieldPause how long a worker that gave a wanted
// host back waits before it asks for it again, so that the worker wanting
// it gets it.
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

// Close stops the keeper and gives back the slots of hosts with nothing
// in progress. Slots of hosts still in use are not given back: they free
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
		if (h.slots > 0 || h.owed) && h.active == 0 && !h.releasing {
			if r, ok := l.releaseOf(h, time.Now()); ok {
				give = append(give, r)
			}
		}
	}
	l.mu.Unlock()
	l.wg.Wait() // the keeper and the sender
	if len(give) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := l.runRelease(ctx, give); err != nil {
			l.log.Warn("redis host limiter: giving the slots back on close failed; they free at their TTL",
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

// keys returns host's keys: slots, next, throttle, want.
func (l *HostLimiter) keys(host string) []string {
	k := redislayout.HostKeys(l.cfg.Crawl, host)
	return []string{k.Slots, k.Next, k.Throttle, k.Want}
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

// wholeFor tells whether h is to be leased whole: it has a delay between
// starts, which one worker keeps. l.mu is held.
func (l *HostLimiter) wholeFor(h *leaseHost) bool {
	return l.cfg.AutoThrottle != nil || l.floor(h.name) > 0
}

// draining tells whether h's slots held here are to be given back as
// they free, nothing more started: another worker wants the host, or it
// has a delay now and is held by the slot. l.mu is held.
func (l *HostLimiter) draining(h *leaseHost) bool {
	return h.slots > 0 && (h.yield || (!h.whole && l.wholeFor(h)))
}

// host returns host's entry, creating it. l.mu is held.
func (l *HostLimiter) host(host string) *leaseHost {
	h := l.hosts[host]
	if h == nil {
		if len(l.hosts) >= l.sweepAt {
			l.sweep(time.Now())
		}
		h = &leaseHost{name: host, keys: l.keys(host), changed: make(chan struct{}), busy: make([]time.Time, l.cfg.PerHost)}
		l.hosts[host] = h
	}
	return h
}

// sweep forgets the hosts that hold nothing. l.mu is held.
func (l *HostLimiter) sweep(now time.Time) {
	for name, h := range l.hosts {
		if h.slots == 0 && h.ask == nil && !h.releasing && !h.owed && h.active == 0 && h.waiters == 0 &&
			len(h.turns) == 0 && len(h.ready) == 0 && !now.Before(h.retry) {
			delete(l.hosts, name)
		}
	}
	l.sweepAt = max(minSweep, 2*len(l.hosts))
}

// wake wakes h's waiting Acquire calls and returns its HostLeaser
// callbacks, for the caller to call once l.mu is released. l.mu is held.
func (h *leaseHost) wake() []func() {
	h.stir()
	r := h.ready
	h.ready = nil
	return r
}

// stir wakes h's waiting Acquire calls (not its HostLeaser callbacks).
// l.mu is held.
func (h *leaseHost) stir() {
	close(h.changed)
	h.changed = make(chan struct{})
}

// leave ends turn's Acquire call of h, and wakes the calls after it. l.mu
// is held.
func (h *leaseHost) leave(turn uint64) {
	if i := slices.Index(h.turns, turn); i >= 0 {
		h.turns = slices.Delete(h.turns, i, i+1)
		if len(h.turns) > 0 {
			h.stir()
		}
	}
}

func call(fs []func()) {
	for _, f := range fs {
		f()
	}
}

// Lease tells, without waiting, whether this worker may start one more
// of host's pages now, with active of them in progress (handed out, the
// fetch not ended) and waiting more held back (see engine.HostLeaser): it
// holds more of host's slots than active. If not, it asks for as many as
// it could use (unless it asks already, or found none free less than a
// retry ago) and calls ready once host is worth trying again: slots taken
// or given back here, or the time to ask again come.
func (l *HostLimiter) Lease(host string, active, waiting int, ready func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return true // Acquire decides, alone
	}
	h := l.host(host)
	if h.slots > 0 && !l.draining(h) && active < h.slots {
		h.busy[max(active, 0)] = time.Now()
		l.idleAfter(h)
		return true
	}
	h.ready = append(h.ready, ready)
	if l.draining(h) {
		l.drain(h)
		return false
	}
	h.want = max(h.want, active+max(waiting, 1))
	if h.slots < l.cfg.PerHost && h.ask == nil && !h.releasing && !time.Now().Before(h.retry) {
		l.askLease(h)
	}
	return false
}

// askLease queues an ask for h's slots (h.want of them in all, or the
// whole host), starts the sender and returns the ask. l.mu is held.
func (l *HostLimiter) askLease(h *leaseHost) *leaseAsk {
	a := &leaseAsk{done: make(chan struct{})}
	if l.closed { // no sender after Close
		a.err = errClosed
		close(a.done)
		return a
	}
	h.ask = a
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
// a slot of the host if this worker holds none free (waiting while
// others hold them all), then the slot and the delay, in memory. Calls
// for one host start in the order they came (first come, first served),
// so that a page waits for its host's pace no longer than the pages
// before it take: with the host's slots held here, at most --per-host
// pages wait at once, and the last starts within --per-host delays.
func (l *HostLimiter) Acquire(ctx context.Context, host string) (func(), error) {
	l.mu.Lock()
	h := l.host(host) // kept while it has turns: not swept
	me := h.turn
	h.turn++
	h.turns = append(h.turns, me)
	l.mu.Unlock()
	started := false
	defer func() {
		if !started {
			l.mu.Lock()
			h.leave(me)
			l.mu.Unlock()
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		l.mu.Lock()
		now := time.Now()
		var wait time.Duration = -1 // until changed
		var ask *leaseAsk
		switch {
		case h.slots > 0 && l.draining(h):
			l.drain(h) // given back as they free: wait for that
		case h.slots > 0 && h.active < h.slots:
			gate := h.next
			if h.backoff.After(gate) {
				gate = h.backoff
			}
			if h.turns[0] != me {
				break // an earlier call starts first, and wakes this one
			}
			if !now.Before(gate) {
				h.active++
				h.busy[h.active-1] = now
				h.next = now.Add(l.hostDelay(h))
				started = true
				h.leave(me)
				l.mu.Unlock()
				var once sync.Once
				return func() { once.Do(func() { l.release(h) }) }, nil
			}
			wait = gate.Sub(now)
		case h.ask != nil:
			h.want = max(h.want, h.active+h.waiters+1)
			ask = h.ask
		case h.slots == l.cfg.PerHost || h.releasing: // wait for a release
		case now.Before(h.retry):
			wait = h.retry.Sub(now)
		default:
			h.want = max(h.want, h.active+h.waiters+1)
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

// release ends a request to h, and gives its slot back once unused for
// leaseLinger, or at once if h is draining.
func (l *HostLimiter) release(h *leaseHost) {
	l.mu.Lock()
	h.active--
	h.busy[h.active] = time.Now()
	l.tidy(h)
	ready := h.wake()
	l.mu.Unlock()
	call(ready)
}

// tidy gives back h's slots as they free if h is draining, else arms
// the timer that gives back the unused ones. l.mu is held.
func (l *HostLimiter) tidy(h *leaseHost) {
	if l.draining(h) {
		l.drain(h)
	} else {
		l.idleAfter(h)
	}
}

// keepOf is how many of h's slots this worker keeps now: those in use,
// and (unless h is draining) those used within leaseLinger; a whole host
// is kept or given back whole. l.mu is held.
func (l *HostLimiter) keepOf(h *leaseHost, now time.Time) int {
	if h.slots == 0 || l.closed {
		return min(h.active, h.slots)
	}
	if h.whole {
		if h.active > 0 || (!h.yield && now.Sub(h.busy[0]) < leaseLinger) {
			return h.slots
		}
		return 0
	}
	if l.draining(h) {
		return min(h.active, h.slots)
	}
	k := h.slots
	for k > h.active && now.Sub(h.busy[k-1]) >= leaseLinger {
		k--
	}
	return k
}

// drain queues the release of h's slots not in use. l.mu is held.
func (l *HostLimiter) drain(h *leaseHost) {
	if h.releasing || l.closed || l.keepOf(h, time.Now()) >= h.slots {
		return
	}
	if h.idleT != nil {
		h.idleT.Stop()
		h.idleT = nil
	}
	l.queueRelease(h)
}

// queueRelease queues a release of h, to be sent by the sender. l.mu is
// held.
func (l *HostLimiter) queueRelease(h *leaseHost) {
	h.releasing = true
	l.releases = append(l.releases, h)
	l.send()
}

// idleAfter arms h's timer that gives back its slots unused for
// leaseLinger. l.mu is held.
func (l *HostLimiter) idleAfter(h *leaseHost) {
	if h.slots == 0 || h.active >= h.slots || h.idleT != nil || l.closed {
		return
	}
	last := h.busy[h.slots-1] // the first to go
	if h.whole {
		if h.active > 0 {
			return
		}
		last = h.busy[0]
	}
	var t *time.Timer
	t = time.AfterFunc(time.Until(last.Add(leaseLinger)), func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if h.idleT != t {
			return
		}
		h.idleT = nil
		if h.slots == 0 || h.releasing || l.closed {
			return
		}
		if l.keepOf(h, time.Now()) < h.slots {
			l.queueRelease(h)
			return
		}
		l.idleAfter(h) // used since: wait on
	})
	h.idleT = t
}

// releaseOf is h's release, taken from its state: the slots not kept are
// no longer held here. ok is false when there is nothing to give back.
// l.mu is held.
func (l *HostLimiter) releaseOf(h *leaseHost, now time.Time) (r releaseCall, ok bool) {
	keep := l.keepOf(h, now)
	if keep >= h.slots && !h.owed {
		return r, false
	}
	r = releaseCall{h: h, keep: keep}
	gate := h.next
	if h.backoff.After(gate) {
		gate = h.backoff
	}
	if left := gate.Sub(now); left > 0 {
		r.next = pxAtLeast(left)
	}
	if keep == 0 {
		if h.autoDirty {
			r.throt = max(h.auto.Milliseconds(), 1)
		}
		if h.yield {
			// Leave the host to the worker that wants it: it asks again
			// within maxRetry.
			h.yield = false
			h.retry = now.Add(yieldPause)
			l.retryAt(h)
		}
		h.whole, h.autoDirty = false, false
	}
	h.slots, h.owed = keep, false
	return r, true
}

// sender sends the queued releases, then the queued asks, up to maxGroup
// hosts in one script call each, until none is left. It is started by
// send and owned by l (Close waits for it).
func (l *HostLimiter) sender() {
	defer l.wg.Done()
	for {
		l.mu.Lock()
		if n := min(len(l.releases), maxGroup); n > 0 {
			now := time.Now()
			var group []releaseCall
			var ready []func()
			for _, h := range l.releases[:n] {
				if r, ok := l.releaseOf(h, now); ok {
					group = append(group, r)
					continue
				}
				h.releasing = false // used again since queued
				l.tidy(h)
				ready = append(ready, h.wake()...)
			}
			l.releases = slices.Delete(l.releases, 0, n)
			l.mu.Unlock()
			call(ready)
			if len(group) > 0 {
				l.sendReleases(group)
			}
			continue
		}
		n := min(len(l.asks), maxGroup)
		if n == 0 {
			l.sending = false
			l.mu.Unlock()
			return
		}
		group := make([]askCall, n)
		for i, h := range l.asks[:n] {
			group[i] = askCall{h: h, whole: l.wholeFor(h), want: min(max(h.want, 1), l.cfg.PerHost)}
			if group[i].whole {
				group[i].want = l.cfg.PerHost
			}
			h.want = 0
		}
		l.asks = slices.Delete(l.asks, 0, n)
		l.mu.Unlock()
		l.sendAsks(group)
	}
}

// askCall is an ask as the lease script takes it.
type askCall struct {
	h     *leaseHost
	whole bool
	want  int // slots wanted in all
}

// scriptTimeout bounds one script call of the sender or the keeper.
const scriptTimeout = 10 * time.Second

// sendReleases gives back the slots of group; a failure leaves them owed,
// for the keeper to give back again.
func (l *HostLimiter) sendReleases(group []releaseCall) {
	ctx, cancel := context.WithTimeout(context.Background(), scriptTimeout)
	defer cancel()
	err := l.runRelease(ctx, group)
	l.mu.Lock()
	var ready []func()
	for _, r := range group {
		r.h.releasing = false
		if err != nil {
			r.h.owed = true
		}
		l.tidy(r.h)
		ready = append(ready, r.h.wake()...)
	}
	if err != nil {
		l.log.Warn("redis host limiter: giving slots back failed; retrying in the background (they free at their TTL otherwise)",
			"hosts", len(group), "ttl", l.cfg.SlotTTL, "err", err)
		l.keep()
	}
	l.mu.Unlock()
	call(ready)
}

// runRelease runs releaseScript for group.
func (l *HostLimiter) runRelease(ctx context.Context, group []releaseCall) error {
	keys := make([]string, 0, 3*len(group))
	args := make([]any, 0, 2+3*len(group))
	args = append(args, l.token, throttleTTL.Milliseconds())
	for _, r := range group {
		keys = append(keys, r.h.keys[:3]...)
		args = append(args, r.keep, r.next, r.throt)
	}
	return releaseScript.Run(ctx, l.cfg.Client, keys, args...).Err()
}

// sendAsks asks for the slots of group and answers each ask.
func (l *HostLimiter) sendAsks(group []askCall) {
	keys := make([]string, 0, 4*len(group))
	args := make([]any, 0, 5+2*len(group))
	args = append(args, l.token, l.cfg.SlotTTL.Milliseconds(), l.startMs(), wantTTL.Milliseconds(), l.cfg.PerHost)
	for _, a := range group {
		keys = append(keys, a.h.keys...)
		whole := 0
		if a.whole {
			whole = 1
		}
		args = append(args, a.want, whole)
	}
	ctx, cancel := context.WithTimeout(context.Background(), scriptTimeout)
	defer cancel()
	out, err := leaseScript.Run(ctx, l.cfg.Client, keys, args...).Int64Slice()
	if err == nil && len(out) != 3*len(group) {
		err = fmt.Errorf("the lease script answered %d numbers for %d hosts", len(out), len(group))
	}
	now := time.Now()
	l.mu.Lock()
	var ready []func()
	lost := 0
	for i, ac := range group {
		h := ac.h
		a := h.ask
		h.ask = nil
		switch got := 0; {
		case err != nil:
			// The script may have run without its answer reaching us: the
			// slots, if taken, free at their TTL, or are taken again by
			// the next ask (the script counts what this worker holds).
			a.err = err
			h.retry = now.Add(time.Second)
			l.retryAt(h)
		default:
			got = int(out[3*i])
			ms := time.Duration(out[3*i+1]) * time.Millisecond
			if got == 0 && h.slots > 0 {
				lost++ // expired while held (an outage): see renew
				h.slots, h.whole, h.yield = 0, false, false
			}
			if got > h.slots {
				if h.slots == 0 {
					h.whole = ac.whole && got == l.cfg.PerHost
					h.auto = time.Duration(out[3*i+2]) * time.Millisecond
				}
				if next := now.Add(ms); next.After(h.next) {
					h.next = next // the holders' next start, a back-off
				}
				for k := h.slots; k < got; k++ {
					h.busy[k] = now
				}
				h.slots, h.owed = got, false
				h.gen++
				l.idleAfter(h)
				l.keep()
			}
			if got >= ac.want {
				h.backoffN = 0
				break
			}
			left := ms
			if got > 0 {
				left = maxRetry
			}
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
		l.log.Warn("redis host limiter: asking for host slots failed", "hosts", len(group), "err", err)
	}
	if lost > 0 {
		l.log.Warn("redis host limiter: host slots expired while held; the per-host cap may be exceeded for their requests in progress",
			"lost", lost)
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

// keepTick is how often the keeper has failed releases sent again.
const keepTick = time.Second

// renewal is a host whose slots the keeper renews, and the grant it renews.
type renewal struct {
	h   *leaseHost
	gen int
}

// keeper renews the slots held every SlotTTL/3 and has the failed
// releases sent again every keepTick, until nothing is held or owed, or
// Close.
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
		var hs []renewal
		owed := 0
		for _, h := range l.hosts {
			if h.slots > 0 {
				hs = append(hs, renewal{h, h.gen})
			}
			if h.owed {
				owed++
				if !h.releasing && h.ask == nil {
					l.queueRelease(h)
				}
			}
		}
		if len(hs) == 0 && owed == 0 {
			l.running = false
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		if renew {
			lastRenew = time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), max(tick, time.Second))
			for part := range slices.Chunk(hs, maxGroup) {
				l.renew(ctx, part)
			}
			cancel()
		}
	}
}

// renew extends the slots of hosts; those found lost are no longer held.
func (l *HostLimiter) renew(ctx context.Context, hosts []renewal) {
	keys := make([]string, 0, 3*len(hosts))
	for _, hh := range hosts {
		keys = append(keys, hh.h.keys[0], hh.h.keys[3], hh.h.keys[1])
	}
	out, err := renewScript.Run(ctx, l.cfg.Client, keys, l.token, l.cfg.SlotTTL.Milliseconds()).Int64Slice()
	if err != nil {
		l.log.Warn("redis host limiter: could not renew host slots; others may take them after their TTL",
			"hosts", len(hosts), "ttl", l.cfg.SlotTTL, "err", err)
		return
	}
	now := time.Now()
	lost := 0
	l.mu.Lock()
	var ready []func()
	for i, hh := range hosts {
		h := hh.h
		if 2*i+1 >= len(out) || h.gen != hh.gen || h.slots == 0 {
			continue
		}
		if ms := out[2*i+1]; ms > 0 {
			if until := now.Add(time.Duration(ms) * time.Millisecond); until.After(h.backoff) {
				h.backoff = until // another worker's back-off
			}
		}
		switch out[2*i] {
		case 0:
			if !h.releasing {
				h.slots, h.whole, h.yield = 0, false, false
				lost++
			}
		case 2:
			h.yield = true
			l.drain(h)
			ready = append(ready, h.wake()...)
		}
	}
	l.mu.Unlock()
	call(ready)
	if lost > 0 {
		l.log.Warn("redis host limiter: host slots expired while held; the per-host cap may be exceeded for their requests in progress",
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
	_ engine.HostHolders = (*HostLimiter)(nil)
)

// HeldElsewhere tells whether this worker's last ask for host's slots
// found other workers holding some it wanted (see engine.HostHolders).
func (l *HostLimiter) HeldElsewhere(host string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.hosts[host]
	return h != nil && h.backoffN > 0
}

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
	if h := l.hosts[host]; h != nil && h.slots > 0 && h.whole && !h.releasing {
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
	if h := l.hosts[host]; h != nil && h.slots > 0 && h.whole && !h.releasing {
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
