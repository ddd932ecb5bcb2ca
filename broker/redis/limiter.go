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
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/redislayout"
)

// acquireScript takes a request slot of a host, shared by every worker of a
// crawl, or says how long to wait, for each of one or more Acquire calls
// of this worker sent together (see HostLimiter).
//
// ARGV[1] per-host cap, ARGV[2] token TTL (ms), ARGV[3] AutoThrottle's
// start delay (ms; 0 = off: the throttle key is not read). Then for each
// call i (from 1), KEYS[3i-2] slots: sorted set of tokens of requests in
// progress, scored by the time (ms) the token expires (a worker that died
// frees its slot then); KEYS[3i-1] next: the earliest time (ms) the next
// request may start; KEYS[3i] throttle: AutoThrottle's adapted delay (ms)
// of the host; and in ARGV from a = 4 on: ARGV[a] token, ARGV[a+1]
// minimum delay (ms), ARGV[a+2] the count g of tokens of this worker's
// slots of the host given back since (removed first), ARGV[a+3..a+2+g]
// those tokens; the next call's arguments follow.
// Returns, per call, 0 when the slot was taken, else the milliseconds to
// wait. Calls for one host are served in order: a later one sees the slot
// an earlier one took.
var acquireScript = goredis.NewScript(luaLib + `
local now = now_ms()
local cap, ttl, start = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local out = {}
local a = 4
for i = 1, #KEYS / 3 do
  local slots, next_, throttle = KEYS[3*i-2], KEYS[3*i-1], KEYS[3*i]
  local token, delay, g = ARGV[a], tonumber(ARGV[a+1]), tonumber(ARGV[a+2])
  for j = a + 3, a + 2 + g do
    redis.call('ZREM', slots, ARGV[j])
  end
  a = a + 3 + g
  redis.call('ZREMRANGEBYSCORE', slots, '-inf', now)
  local nxt = tonumber(redis.call('GET', next_) or '0')
  local n = redis.call('ZCARD', slots)
  if start > 0 then
    delay = math.max(delay, tonumber(redis.call('GET', throttle) or start))
  end
  local wait = 0
  if n < cap and now >= nxt then
    redis.call('ZADD', slots, now + ttl, token)
    redis.call('PEXPIRE', slots, ttl)
    if delay > 0 then
      redis.call('SET', next_, now + delay, 'PX', delay)
    end
  else
    if now < nxt then wait = nxt - now end
    if n >= cap then wait = math.max(wait, 1) end
  end
  out[i] = wait
end
return out
`)

// maxGroup bounds the Acquire calls sent in one script call.
const maxGroup = 64

// observeScript applies AutoThrottle's rule (engine.AutoThrottle.Next) to
// a host's shared delay, so that every worker paces the host by one value
// that each response moves. A lowered delay moves the next start time
// earlier by as much.
//
// KEYS[1] throttle, KEYS[2] next. ARGV[1] latency (ms, fractional),
// ARGV[2] target concurrency, ARGV[3] minimum delay (ms), ARGV[4] max
// delay (ms), ARGV[5] start delay (ms), ARGV[6] "1" for a 2xx response,
// ARGV[7] the throttle key's TTL (ms). Returns the delay (ms).
var observeScript = goredis.NewScript(luaLib + `
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
  local now = now_ms()
  local nxt = tonumber(redis.call('GET', KEYS[2]) or '0')
  if nxt > now then
    local moved = nxt - (old - new)
    if moved > now then
      redis.call('SET', KEYS[2], moved, 'PX', moved - now)
    else
      redis.call('DEL', KEYS[2])
    end
  end
end
return new
`)

// throttleTTL is how long a host's adapted delay outlives its last update.
const throttleTTL = time.Hour

// backoffScript pushes a host's next start time to at least ARGV[1] ms from now.
//
// KEYS[1] next. ARGV[1] milliseconds. Returns nothing.
var backoffScript = goredis.NewScript(luaLib + `
local now = now_ms()
local until_ = now + tonumber(ARGV[1])
local nxt = tonumber(redis.call('GET', KEYS[1]) or '0')
if until_ > nxt then
  redis.call('SET', KEYS[1], until_, 'PX', tonumber(ARGV[1]))
end
return 0
`)

// refreshScript extends the slots a live worker holds: each of its tokens
// still in the set gets a new expiry, and the set outlives them. A token
// that is gone (it expired while its worker could not reach Redis) is not
// added back.
//
// KEYS[1] slots. ARGV[1] token TTL (ms), ARGV[2..] tokens.
// Returns how many of the tokens were still there.
var refreshScript = goredis.NewScript(luaLib + `
local ttl = tonumber(ARGV[1])
local exp = now_ms() + ttl
local n = 0
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], exp, ARGV[i])
    n = n + 1
  end
end
if n > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return n
`)

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
	// SlotTTL is how long a slot outlives the last sign of life of the
	// worker holding it (0 = DefaultSlotTTL; trawl passes --lease). A
	// live worker renews its slots every SlotTTL/3 while their requests
	// run, so a request may take longer than SlotTTL; the slots of a
	// worker that died, or lost Redis, free themselves within SlotTTL.
	// At least 300ms.
	SlotTTL time.Duration
	// Poll bounds how long a waiting Acquire sleeps before it asks again
	// when all slots are taken (0 = 20ms).
	Poll time.Duration
	// AutoThrottle, if not nil, adapts each host's delay to its latency
	// (see engine.AutoThrottle), never below Delay or the host's
	// Crawl-delay. The adapted delay is kept in Redis, one key per host
	// (redislayout.HostKeys(Crawl, HOST).Throttle, expiring an hour after its
	// last change), so every worker paces a host by the same value and
	// every worker's responses move it. nil = fixed delays.
	AutoThrottle *engine.AutoThrottle
	// Logger receives warnings (default: discarded).
	Logger *slog.Logger
}

// HostLimiter paces requests per host across every worker of a crawl:
// scrapy-redis applies its per-host limits per process, so N workers hit a
// site N times harder; here the cap and the delay hold for the whole crawl.
// Taking a slot is one round trip (a Lua script, on server time), shared
// by the Acquire calls of this worker that come while the one before it
// runs (any hosts: a crawl's keys share one Redis Cluster slot). Giving
// it back rides on this worker's next Acquire for the host, if one comes
// within releaseLinger (a crawl's pages of one host follow each other),
// and is a round trip of its own after that: at most one round trip per
// page, and one per burst of pages when they come close together. It
// implements engine.HostLimiter.
//
// A slot is a token in a sorted set, scored by the time it expires. While
// a limiter holds slots, a keeper goroutine renews them every SlotTTL/3,
// and retries (every second) the releases that failed because Redis was
// unreachable; it stops when nothing is held or pending, and Close stops
// it. So a slot comes back within SlotTTL when its worker dies (kill -9),
// and at once (within a second) after Redis comes back from an outage
// during which its release failed. A worker that could not renew its
// slots for SlotTTL (a Redis outage that long) loses them to others while
// its requests still run: the cap may be exceeded once, for those
// requests.
type HostLimiter struct {
	cfg LimiterConfig
	log *slog.Logger

	mu      sync.Mutex
	delays  map[string]time.Duration // per-host delays above cfg.Delay
	held    map[string]string        // token -> slots key, slots in use here
	pending map[string]string        // token -> slots key, releases that failed
	giving  map[string]*given        // slots key -> tokens given back, not yet removed
	asks    []*ask                   // Acquire calls waiting to be sent
	sending bool                     // the sender runs
	running bool                     // the keeper runs
	closed  bool
	stop    chan struct{} // closed by Close
	wg      sync.WaitGroup
}

// given are tokens of one slots key given back and not yet removed.
type given struct{ tokens []string }

// ask is one try of an Acquire call, sent by the sender with the tries of
// other calls that came while the script before it ran.
type ask struct {
	keys  []string // the host's keys
	token string
	delay int64 // ms
	state atomic.Int32
	done  chan answer // buffered: the sender never waits
}

// The states of an ask.
const (
	askWaiting   = iota
	askAnswered  // the sender answers on done
	askAbandoned // its caller is gone: the sender gives a slot taken back
)

// answer is the script's answer to an ask: wait as acquireScript returns
// it, or the error of the call.
type answer struct {
	wait int64
	err  error
}

// releaseLinger is how long a slot given back waits for this worker's
// next Acquire of its host to carry its removal, before it is removed on
// its own. Another worker waiting for a slot asks again every Poll (20ms).
const releaseLinger = 2 * time.Millisecond

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
	l := &HostLimiter{
		cfg: cfg, log: cfg.Logger, delays: make(map[string]time.Duration),
		held: make(map[string]string), pending: make(map[string]string), giving: make(map[string]*given),
		stop: make(chan struct{}),
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	return l, nil
}

// Close stops the keeper, after removing the slots given back. Slots
// still held are not released: they free themselves within SlotTTL (Close
// is not a release). Close is idempotent.
func (l *HostLimiter) Close() error {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.stop)
	}
	l.mu.Unlock()
	l.wg.Wait() // the keeper, the sender and the lingering releases
	return nil
}

func (l *HostLimiter) keys(host string) []string {
	k := redislayout.HostKeys(l.cfg.Crawl, host)
	return []string{k.Slots, k.Next, k.Throttle}
}

// startMs is AutoThrottle's start delay in ms for the acquire script
// (at least 1), or 0 without AutoThrottle.
func (l *HostLimiter) startMs() int64 {
	if l.cfg.AutoThrottle == nil {
		return 0
	}
	return max(l.cfg.AutoThrottle.StartDelay.Milliseconds(), 1)
}

func (l *HostLimiter) delay(host string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return max(l.cfg.Delay, l.delays[host])
}

// track records token as held (pending: as to be released) and starts the
// keeper if it is not running. l.mu is held.
func (l *HostLimiter) track(set map[string]string, token, key string) {
	set[token] = key
	if l.running || l.closed {
		return
	}
	l.running = true
	l.wg.Add(1)
	go l.keep()
}

// Acquire waits until a request to host may start, or ctx ends. The
// calls of this worker's page goroutines that come while the script of
// earlier ones runs are sent together, in one script call, by one sender
// goroutine: a round trip per burst of pages, not per page, with no wait
// added (a call that finds no script running is sent at once).
func (l *HostLimiter) Acquire(ctx context.Context, host string) (func(), error) {
	var b [12]byte
	rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	keys := l.keys(host)
	delay := l.delay(host).Milliseconds()
	for {
		wait, err := l.ask(ctx, keys, token, delay)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("redis host limiter: acquire %q: %w", host, err)
		}
		if wait == 0 {
			break
		}
		d := min(time.Duration(wait)*time.Millisecond, time.Minute)
		if wait == 1 { // all slots taken: ask again soon
			d = l.cfg.Poll
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
	l.mu.Lock()
	l.track(l.held, token, keys[0])
	l.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { l.give(keys[0], token) }) }, nil
}

// ask has the sender try once to take a slot of the host of keys for
// token, and returns the script's answer. If ctx ends first, the ask is
// abandoned: a slot it still takes is given back.
func (l *HostLimiter) ask(ctx context.Context, keys []string, token string, delay int64) (int64, error) {
	a := &ask{keys: keys, token: token, delay: delay, done: make(chan answer, 1)}
	l.mu.Lock()
	if l.closed { // no sender after Close: send it alone
		l.mu.Unlock()
		l.send([]*ask{a})
	} else {
		l.asks = append(l.asks, a)
		if !l.sending {
			l.sending = true
			l.wg.Add(1)
			go l.sender()
		}
		l.mu.Unlock()
	}
	select {
	case ans := <-a.done:
		return ans.wait, ans.err
	case <-ctx.Done():
		if a.state.CompareAndSwap(askWaiting, askAbandoned) {
			return 0, ctx.Err()
		}
		if ans := <-a.done; ans.err == nil && ans.wait == 0 {
			l.give(keys[0], token) // answered as ctx ended: not ours to keep
		}
		return 0, ctx.Err()
	}
}

// sender sends the waiting asks, up to maxGroup in one script call, until
// none is left. It is started by ask and owned by l (Close waits for it).
func (l *HostLimiter) sender() {
	defer l.wg.Done()
	for {
		l.mu.Lock()
		n := min(len(l.asks), maxGroup)
		if n == 0 {
			l.asks = nil
			l.sending = false
			l.mu.Unlock()
			return
		}
		group := slices.Clone(l.asks[:n])
		clear(l.asks[:n])
		l.asks = l.asks[n:]
		l.mu.Unlock()
		l.send(group)
	}
}

// askTimeout bounds one script call of the sender, whose asks' callers
// each wait for it or for their own context.
const askTimeout = 10 * time.Second

// send runs acquireScript for group, with the tokens given back of each of
// their hosts, and answers each ask.
func (l *HostLimiter) send(group []*ask) {
	var (
		keys   []string
		args   = []any{l.cfg.PerHost, l.cfg.SlotTTL.Milliseconds(), l.startMs()}
		gave   = make(map[string][]string) // slots key -> tokens removed by this call
		sent   = group[:0:0]
		tokens = 0
	)
	for _, a := range group {
		if a.state.Load() == askAbandoned {
			continue // never sent: nothing to give back
		}
		sent = append(sent, a)
		keys = append(keys, a.keys...)
		var g []string
		if _, done := gave[a.keys[0]]; !done {
			g = l.takeGiven(a.keys[0])
			gave[a.keys[0]] = g
		}
		args = append(args, a.token, a.delay, len(g))
		args = append(args, toAny(g)...)
		tokens += len(g)
	}
	if len(sent) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), askTimeout)
	defer cancel()
	waits, err := acquireScript.Run(ctx, l.cfg.Client, keys, args...).Int64Slice()
	if err == nil && len(waits) != len(sent) {
		err = fmt.Errorf("the script answered %d of %d calls", len(waits), len(sent))
	}
	if err != nil {
		// The script may have run without its reply reaching us: make
		// sure the tokens go, and those it was to remove.
		l.mu.Lock()
		for _, a := range sent {
			l.track(l.pending, a.token, a.keys[0])
		}
		for key, toks := range gave {
			for _, tok := range toks {
				l.track(l.pending, tok, key)
			}
		}
		l.mu.Unlock()
	}
	for i, a := range sent {
		ans := answer{err: err}
		if err == nil {
			ans.wait = waits[i]
		}
		if a.state.CompareAndSwap(askWaiting, askAnswered) {
			a.done <- ans
		} else if ans.err == nil && ans.wait == 0 {
			l.give(a.keys[0], a.token) // its caller is gone
		}
	}
}

// give gives the slot token of slots key back: its removal rides on the
// next Acquire of the host (see takeGiven), or is sent on its own after
// releaseLinger, or at once once l is closed (no Acquire comes).
func (l *HostLimiter) give(key, token string) {
	l.mu.Lock()
	delete(l.held, token)
	closed := l.closed
	if !closed {
		g := l.giving[key]
		if g == nil {
			g = &given{}
			l.giving[key] = g
			l.wg.Add(1)
			time.AfterFunc(releaseLinger, func() { // owned by l: Close waits for it
				defer l.wg.Done()
				l.mu.Lock()
				mine := l.giving[key] == g // not taken by an Acquire since
				if mine {
					delete(l.giving, key)
				}
				l.mu.Unlock()
				if mine {
					l.remove(key, g.tokens)
				}
			})
		}
		g.tokens = append(g.tokens, token)
	}
	l.mu.Unlock()
	if closed {
		l.remove(key, []string{token})
	}
}

// takeGiven returns the tokens of slots key given back and not yet
// removed, for the caller to remove.
func (l *HostLimiter) takeGiven(key string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.giving[key]
	if g == nil {
		return nil
	}
	delete(l.giving, key)
	return g.tokens
}

// remove removes tokens from slots key; a failure leaves them to the
// keeper, which retries.
func (l *HostLimiter) remove(key string, tokens []string) {
	if len(tokens) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.cfg.Client.ZRem(ctx, key, toAny(tokens)...).Err(); err != nil {
		l.log.Warn("redis host limiter: release failed; retrying in the background (it frees at its TTL otherwise)",
			"slots", key, "ttl", l.cfg.SlotTTL, "err", err)
		l.mu.Lock()
		for _, tok := range tokens {
			l.track(l.pending, tok, key)
		}
		l.mu.Unlock()
	}
}

// keepTick is how often the keeper retries failed releases.
const keepTick = time.Second

// keep renews the held slots every SlotTTL/3 and retries failed releases
// every keepTick, until nothing is held or pending, or Close.
func (l *HostLimiter) keep() {
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
		l.mu.Lock()
		if len(l.held) == 0 && len(l.pending) == 0 {
			l.running = false
			l.mu.Unlock()
			return
		}
		held := byKey(l.held)
		pending := byKey(l.pending)
		l.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), max(tick, time.Second))
		for key, tokens := range pending {
			if err := l.cfg.Client.ZRem(ctx, key, toAny(tokens)...).Err(); err != nil {
				l.log.Debug("redis host limiter: release still failing", "slots", key, "err", err)
				continue
			}
			l.mu.Lock()
			for _, tok := range tokens {
				delete(l.pending, tok)
			}
			l.mu.Unlock()
		}
		if time.Since(lastRenew) >= l.cfg.SlotTTL/3-tick/2 {
			lastRenew = time.Now()
			for key, tokens := range held {
				args := append([]any{l.cfg.SlotTTL.Milliseconds()}, toAny(tokens)...)
				n, err := refreshScript.Run(ctx, l.cfg.Client, []string{key}, args...).Int()
				switch {
				case err != nil:
					l.log.Warn("redis host limiter: could not renew slots; others may take them after their TTL",
						"slots", key, "ttl", l.cfg.SlotTTL, "err", err)
				case n < len(tokens):
					l.log.Warn("redis host limiter: slots expired while in use; the per-host cap may be exceeded for them",
						"slots", key, "lost", len(tokens)-n)
				}
			}
		}
		cancel()
	}
}

// byKey groups the tokens of m (token -> key) by key.
func byKey(m map[string]string) map[string][]string {
	out := make(map[string][]string)
	for tok, key := range m {
		out[key] = append(out[key], tok)
	}
	return out
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// Backoff holds every worker's requests to host until t.
func (l *HostLimiter) Backoff(host string, until time.Time) {
	ms := time.Until(until).Milliseconds()
	if ms <= 0 {
		return
	}
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

var _ engine.HostLimiter = (*HostLimiter)(nil)

// Observe moves host's shared delay by a response's latency and status
// with AutoThrottle (see engine.AutoThrottle.Next), in one round trip;
// without AutoThrottle it does nothing. A failure is logged: the delay
// stays as it was.
func (l *HostLimiter) Observe(host string, latency time.Duration, status int) {
	a := l.cfg.AutoThrottle
	if a == nil {
		return
	}
	keys := l.keys(host)
	ok := "0"
	if status >= 200 && status <= 299 {
		ok = "1"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := observeScript.Run(ctx, l.cfg.Client, []string{keys[2], keys[1]},
		float64(latency)/float64(time.Millisecond), a.TargetConcurrency, l.delay(host).Milliseconds(),
		a.MaxDelay.Milliseconds(), l.startMs(), ok, throttleTTL.Milliseconds()).Err()
	if err != nil {
		l.log.Warn("redis host limiter: autothrottle update failed; the host's delay stays as it was", "host", host, "err", err)
	}
}

// Delay returns host's current delay between request starts across the
// crawl: the minimum delay (Delay, SetDelay) or, with AutoThrottle, the
// shared adapted delay if larger (the start delay before any response).
func (l *HostLimiter) Delay(ctx context.Context, host string) (time.Duration, error) {
	floor := l.delay(host)
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
