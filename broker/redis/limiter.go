package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// acquireScript takes a request slot of a host, shared by every worker of a
// crawl, or says how long to wait.
//
// KEYS[1] slots: sorted set of tokens of requests in progress, scored by
// the time (ms) the token expires (a worker that died frees its slot then)
// KEYS[2] next: the earliest time (ms) the next request may start
// ARGV[1] token, ARGV[2] per-host cap, ARGV[3] delay (ms), ARGV[4] token TTL (ms)
// Returns 0 when the slot was taken, else the milliseconds to wait.
var acquireScript = goredis.NewScript(luaLib + `
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local nxt = tonumber(redis.call('GET', KEYS[2]) or '0')
local n = redis.call('ZCARD', KEYS[1])
local cap, delay, ttl = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if n < cap and now >= nxt then
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ttl)
  if delay > 0 then
    redis.call('SET', KEYS[2], now + delay, 'PX', delay)
  end
  return 0
end
local wait = 0
if now < nxt then wait = nxt - now end
if n >= cap then wait = math.max(wait, 1) end
return wait
`)

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
	// SlotTTL frees the slot of a worker that died holding it (0 = 2 minutes):
	// set it above the fetch timeout.
	SlotTTL time.Duration
	// Poll bounds how long a waiting Acquire sleeps before it asks again
	// when all slots are taken (0 = 20ms).
	Poll time.Duration
	// Logger receives warnings (default: discarded).
	Logger *slog.Logger
}

// HostLimiter paces requests per host across every worker of a crawl:
// scrapy-redis applies its per-host limits per process, so N workers hit a
// site N times harder; here the cap and the delay hold for the whole crawl.
// Taking a slot is one round trip (a Lua script, on server time); giving it
// back is one more, made off the fetch's path. It implements
// engine.HostLimiter.
type HostLimiter struct {
	cfg LimiterConfig
	log *slog.Logger

	mu     sync.Mutex
	delays map[string]time.Duration // per-host delays above cfg.Delay
}

// NewHostLimiter returns a limiter shared by the workers of cfg.Crawl.
func NewHostLimiter(cfg LimiterConfig) (*HostLimiter, error) {
	if cfg.Client == nil || cfg.Crawl == "" || cfg.PerHost < 0 || cfg.Delay < 0 {
		return nil, fmt.Errorf("redis host limiter: need a client, a crawl name and non-negative limits")
	}
	if cfg.PerHost == 0 {
		cfg.PerHost = 8
	}
	if cfg.SlotTTL == 0 {
		cfg.SlotTTL = 2 * time.Minute
	}
	if cfg.Poll == 0 {
		cfg.Poll = 20 * time.Millisecond
	}
	l := &HostLimiter{cfg: cfg, log: cfg.Logger, delays: make(map[string]time.Duration)}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	return l, nil
}

func (l *HostLimiter) keys(host string) []string {
	base := CrawlKey(l.cfg.Crawl, "host:"+host)
	return []string{base + ":slots", base + ":next"}
}

func (l *HostLimiter) delay(host string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return max(l.cfg.Delay, l.delays[host])
}

// Acquire waits until a request to host may start, or ctx ends.
func (l *HostLimiter) Acquire(ctx context.Context, host string) (func(), error) {
	var b [12]byte
	rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	keys := l.keys(host)
	delay := l.delay(host).Milliseconds()
	for {
		wait, err := acquireScript.Run(ctx, l.cfg.Client, keys, token, l.cfg.PerHost, delay, l.cfg.SlotTTL.Milliseconds()).Int64()
		if err != nil {
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
	var once sync.Once
	return func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := l.cfg.Client.ZRem(ctx, keys[0], token).Err(); err != nil {
				l.log.Warn("redis host limiter: release failed; the slot frees at its TTL", "host", host, "err", err)
			}
		})
	}, nil
}

// Backoff holds every worker's requests to host until t.
func (l *HostLimiter) Backoff(host string, until time.Time) {
	ms := time.Until(until).Milliseconds()
	if ms <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := backoffScript.Run(ctx, l.cfg.Client, l.keys(host)[1:], ms).Err(); err != nil {
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
