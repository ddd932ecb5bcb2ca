package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/redislayout"
)

// The crawl's Redis pieces beside its queues: start URLs, items, shared
// stats (here) and per-host limits (limiter.go). Their keys are
// "{NAME}:part" (internal/redislayout), hash-tagged like the broker's and the
// duplicate filter's keys, so that a crawl's keys share one Cluster slot.
var (
	_ engine.StartSource   = (*StartURLs)(nil)
	_ engine.StartLeaser   = (*StartURLs)(nil)
	_ engine.StartReturner = (*StartURLs)(nil)
	_ engine.StartRejecter = (*StartURLs)(nil)
	_ engine.StartBatch    = (*leasedStarts)(nil)
	_ engine.Sink          = (*Items)(nil)
	_ engine.SharedStats   = (*Stats)(nil)
)

// StartURLs keeps a crawl's start URLs in a plain Redis list (or set) at
// {NAME}:start_urls, as scrapy-redis does: "redis-cli rpush '{books}:start_urls'
// https://example.com/" feeds a running crawl. It implements
// engine.StartSource and engine.StartLeaser. Taking is at least once: a
// taken batch is moved, in the same script, into a lease record of the
// crawl (the sorted set {NAME}:start_urls:taken of batch tokens scored by
// lease deadline, and the hash {NAME}:start_urls:leased of each token's
// payloads) until the engine confirms the batch is in the frontier. A
// worker killed in between (kill -9) loses nothing: once the lease is over,
// the next take of any worker puts the batch back at the head of the list.
//
// Payloads the engine rejects (not a start URL, too long) are kept with the
// reason in the list {NAME}:start_urls:dead, one JSON object
// {"reason": …, "payload": …} each (see RejectStart).
type StartURLs struct {
	client goredis.UniversalClient
	key    string
	dead   string
	taken  string // sorted set: batch token -> lease deadline (Unix ms)
	leased string // hash: batch token -> msgpack array of its payloads
	set    bool
}

// maxRejectedStarts bounds {NAME}:start_urls:dead: the oldest rejected
// payloads go once it holds that many.
const maxRejectedStarts = 10_000

// maxRejectedPayload is how much of a rejected payload is kept.
const maxRejectedPayload = 1 << 10

// NewStartURLs returns the start URLs of crawl; with set, a Redis set
// (no duplicates, no order) instead of a list.
func NewStartURLs(client goredis.UniversalClient, crawl string, set bool) *StartURLs {
	k := redislayout.StartKeys(crawl)
	return &StartURLs{client: client, key: k.List, dead: k.Dead, taken: k.Taken, leased: k.Leased, set: set}
}

// RejectStart keeps a rejected payload (its first KiB) with the reason in
// {NAME}:start_urls:dead, which holds the latest 10,000. It implements
// engine.StartRejecter.
func (s *StartURLs) RejectStart(ctx context.Context, payload []byte, reason string) error {
	rec, err := json.Marshal(struct {
		Reason  string `json:"reason"`
		Payload string `json:"payload"`
		Bytes   int    `json:"bytes"`
	}{reason, string(payload[:min(len(payload), maxRejectedPayload)]), len(payload)})
	if err != nil {
		return fmt.Errorf("redis start urls: encode a rejected payload: %w", err)
	}
	_, err = s.client.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.RPush(ctx, s.dead, rec)
		p.LTrim(ctx, s.dead, -maxRejectedStarts, -1)
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis start urls: keep a rejected payload in %q: %w", s.dead, err)
	}
	return nil
}

// luaPushFront defines pushFront(key, mode, t, i, j): it puts t[i..j]
// back at the front of the list (the first ends first), or into the set,
// in chunks of 1,000 (unpack is bounded by the Lua stack).
const luaPushFront = `
local function pushFront(key, mode, t, i, j)
  for hi = j, i, -1000 do
    local lo = math.max(i, hi - 999)
    if mode == 'set' then
      redis.call('SADD', key, unpack(t, lo, hi))
    else
      local rev = {}
      for k = hi, lo, -1 do rev[#rev + 1] = t[k] end
      redis.call('LPUSH', key, unpack(rev))
    end
  end
end
`

// takeStartsScript recovers the batches whose lease is over (their worker
// died before confirming them), putting them back at the front of the
// list, earliest deadline first, and then takes up to max payloads; with a
// token, the batch taken is leased: recorded under the token until
// confirmDeadline + lease, the server's clock. Recovery writes ZREM (which
// never grows memory) before its push, so that a server out of memory
// (maxmemory, noeviction) does not refuse it: see returnStartsScript.
//
// KEYS: start_urls, start_urls:taken, start_urls:leased
// ARGV: "set" or "list", max, lease in ms, token ("" for a plain pop)
// Returns the payloads taken, in order.
var takeStartsScript = goredis.NewScript(luaPushFront + `
local mode, max, lease, token = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
-- the latest deadline first, each to the front: the earliest ends first
for e = #expired, 1, -1 do
  local tok = expired[e]
  local blob = redis.call('HGET', KEYS[3], tok)
  redis.call('ZREM', KEYS[2], tok)
  if blob then
    local ps = cmsgpack.unpack(blob)
    if #ps > 0 then pushFront(KEYS[1], mode, ps, 1, #ps) end
    redis.call('HDEL', KEYS[3], tok)
  end
end
local vals
if mode == 'set' then
  vals = redis.call('SPOP', KEYS[1], max)
else
  vals = redis.call('LPOP', KEYS[1], max)
end
if not vals or #vals == 0 then return {} end
if token ~= '' then
  redis.call('HSET', KEYS[3], token, cmsgpack.pack(vals))
  redis.call('ZADD', KEYS[2], now + lease, token)
end
return vals
`)

// TakeStarts takes up to max payloads for good (no lease), after putting
// back the batches whose lease is over.
func (s *StartURLs) TakeStarts(ctx context.Context, max int) ([][]byte, error) {
	return s.take(ctx, max, 0, "")
}

// take runs takeStartsScript.
func (s *StartURLs) take(ctx context.Context, max int, lease time.Duration, token string) ([][]byte, error) {
	if max <= 0 {
		return nil, nil
	}
	// Idle workers look every second: one EXISTS while there is nothing
	// to take or to recover, instead of the script and the three commands
	// it runs. (An error here is left to the script to report.)
	if n, err := s.client.Exists(ctx, s.key, s.taken).Result(); err == nil && n == 0 {
		return nil, nil
	}
	mode := "list"
	if s.set {
		mode = "set"
	}
	vals, err := takeStartsScript.Run(ctx, s.client, []string{s.key, s.taken, s.leased},
		mode, max, lease.Milliseconds(), token).StringSlice()
	if errors.Is(err, goredis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("redis start urls: take from %q: %w", s.key, err)
	}
	out := make([][]byte, len(vals))
	for i, v := range vals {
		out[i] = []byte(v)
	}
	return out, nil
}

// TakeLeased takes up to max payloads under a lease: until the batch is
// confirmed (Done) or returned (Return), it stays in the lease record of
// the crawl, and once lease is over the next take of any worker puts it
// back at the front of the list. It implements engine.StartLeaser.
func (s *StartURLs) TakeLeased(ctx context.Context, max int, lease time.Duration) (engine.StartBatch, error) {
	if lease <= 0 {
		return nil, fmt.Errorf("redis start urls: lease %v: must be positive", lease)
	}
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	token := hex.EncodeToString(b[:])
	ps, err := s.take(ctx, max, lease, token)
	if err != nil || len(ps) == 0 {
		return nil, err
	}
	return &leasedStarts{s: s, token: token, payloads: ps}, nil
}

// leasedStarts is a batch taken by TakeLeased.
type leasedStarts struct {
	s        *StartURLs
	token    string
	payloads [][]byte
}

func (b *leasedStarts) Payloads() [][]byte { return b.payloads }

// confirmStartsScript drops a lease: its batch is in the frontier. Both
// writes shrink memory only.
//
// KEYS: start_urls:taken, start_urls:leased
// ARGV: token
// Returns 1 if the lease was still held, 0 if it was over and recovered.
var confirmStartsScript = goredis.NewScript(`
redis.call('HDEL', KEYS[2], ARGV[1])
return redis.call('ZREM', KEYS[1], ARGV[1])
`)

func (b *leasedStarts) Done(ctx context.Context) error {
	if err := confirmStartsScript.Run(ctx, b.s.client, []string{b.s.taken, b.s.leased}, b.token).Err(); err != nil {
		return fmt.Errorf("redis start urls: confirm batch %s in %q: %w", b.token, b.s.taken, err)
	}
	return nil
}

func (b *leasedStarts) Return(ctx context.Context, payloads ...[]byte) error {
	return b.s.returnStarts(ctx, b.token, payloads)
}

// returnStartsScript puts taken start URLs back at the front of the list
// (or into the set), and drops the lease of their batch if they were
// leased.
//
// Redis refuses a script under maxmemory only at its first write that may
// grow memory, and only if nothing was written before: PERSIST, a write
// that never grows memory (the key has no expiry), comes first, so the
// push is not refused. Returning what was just taken grows nothing on
// balance, and refusing it would lose the start URLs for good.
//
// KEYS: start_urls, start_urls:taken, start_urls:leased
// ARGV: "set" or "list", token ("" if not leased), payloads in the order
// they were taken
// Returns the number of payloads put back.
var returnStartsScript = goredis.NewScript(luaPushFront + `
redis.call('PERSIST', KEYS[1])
if ARGV[2] ~= '' then
  redis.call('ZREM', KEYS[2], ARGV[2])
  redis.call('HDEL', KEYS[3], ARGV[2])
end
if #ARGV > 2 then pushFront(KEYS[1], ARGV[1], ARGV, 3, #ARGV) end
return #ARGV - 2
`)

// ReturnStarts puts back payloads taken by TakeStarts that could not be
// moved into the frontier, at the front of the list, in their order. Unlike
// AddStarts it is not refused by a server out of memory (maxmemory with
// noeviction): see returnStartsScript. It implements engine.StartReturner.
func (s *StartURLs) ReturnStarts(ctx context.Context, payloads ...[]byte) error {
	if len(payloads) == 0 {
		return nil
	}
	return s.returnStarts(ctx, "", payloads)
}

// returnStarts runs returnStartsScript.
func (s *StartURLs) returnStarts(ctx context.Context, token string, payloads [][]byte) error {
	args := make([]any, 0, len(payloads)+2)
	mode := "list"
	if s.set {
		mode = "set"
	}
	args = append(args, mode, token)
	for _, p := range payloads {
		args = append(args, p)
	}
	if err := returnStartsScript.Run(ctx, s.client, []string{s.key, s.taken, s.leased}, args...).Err(); err != nil {
		return fmt.Errorf("redis start urls: return %d to %q: %w", len(payloads), s.key, err)
	}
	return nil
}

// AddStarts appends payloads.
func (s *StartURLs) AddStarts(ctx context.Context, payloads ...[]byte) error {
	if len(payloads) == 0 {
		return nil
	}
	args := make([]any, len(payloads))
	for i, p := range payloads {
		args[i] = p
	}
	var err error
	if s.set {
		err = s.client.SAdd(ctx, s.key, args...).Err()
	} else {
		err = s.client.RPush(ctx, s.key, args...).Err()
	}
	if err != nil {
		return fmt.Errorf("redis start urls: add to %q: %w", s.key, err)
	}
	return nil
}

// PendingStarts counts the waiting payloads plus the leased batches not
// confirmed yet (each counts one, whatever its size): a crawl is not done
// while a batch is out, for its worker may have died with it.
func (s *StartURLs) PendingStarts(ctx context.Context) (int64, error) {
	var waiting, leased *goredis.IntCmd
	_, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		if s.set {
			waiting = p.SCard(ctx, s.key)
		} else {
			waiting = p.LLen(ctx, s.key)
		}
		leased = p.ZCard(ctx, s.taken)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("redis start urls: count %q and %q: %w", s.key, s.taken, err)
	}
	return waiting.Val() + leased.Val(), nil
}

// Purge deletes the start URLs, the leased batches and the rejected ones.
func (s *StartURLs) Purge(ctx context.Context) error {
	if err := s.client.Del(ctx, s.key, s.dead, s.taken, s.leased).Err(); err != nil {
		return fmt.Errorf("redis start urls: purge %q: %w", s.key, err)
	}
	return nil
}

// Items is an item sink that appends JSON documents to the Redis list
// {NAME}:items, as scrapy-redis's RedisPipeline does. Write returns once the
// list was pushed. It implements engine.Sink.
type Items struct {
	client goredis.UniversalClient
	key    string
}

// NewItems returns the item list of crawl.
func NewItems(client goredis.UniversalClient, crawl string) *Items {
	return &Items{client: client, key: redislayout.Items(crawl)}
}

// Write appends items as JSON, in one round trip.
func (s *Items) Write(ctx context.Context, items []any) error {
	if len(items) == 0 {
		return nil
	}
	args := make([]any, len(items))
	for i, it := range items {
		b, err := json.Marshal(it)
		if err != nil {
			return fmt.Errorf("redis items: encode: %w", err)
		}
		args[i] = b
	}
	if err := s.client.RPush(ctx, s.key, args...).Err(); err != nil {
		return fmt.Errorf("redis items: push to %q: %w", s.key, err)
	}
	return nil
}

// Close does nothing: every Write is already durable. The client is not closed.
func (s *Items) Close() error { return nil }

// Purge deletes the items.
func (s *Items) Purge(ctx context.Context) error {
	if err := s.client.Del(ctx, s.key).Err(); err != nil {
		return fmt.Errorf("redis items: purge %q: %w", s.key, err)
	}
	return nil
}

// Stats are a crawl's counters aggregated across workers in the Redis hash
// {NAME}:stats.
type Stats struct {
	client goredis.UniversalClient
	key    string
}

// NewStats returns the shared counters of crawl.
func NewStats(client goredis.UniversalClient, crawl string) *Stats {
	return &Stats{client: client, key: redislayout.Stats(crawl)}
}

// Add adds deltas to the counters in one round trip.
func (s *Stats) Add(ctx context.Context, deltas map[string]int64) error {
	if len(deltas) == 0 {
		return nil
	}
	_, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for k, v := range deltas {
			if v != 0 {
				p.HIncrBy(ctx, s.key, k, v)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis stats: add to %q: %w", s.key, err)
	}
	return nil
}

// Load returns the counters.
func (s *Stats) Load(ctx context.Context) (map[string]int64, error) {
	m, err := s.client.HGetAll(ctx, s.key).Result()
	if err != nil {
		return nil, fmt.Errorf("redis stats: read %q: %w", s.key, err)
	}
	out := make(map[string]int64, len(m))
	for k, v := range m {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("redis stats: %q field %q is not a number", s.key, k)
		}
		out[k] = n
	}
	return out, nil
}

// Purge deletes the counters.
func (s *Stats) Purge(ctx context.Context) error {
	if err := s.client.Del(ctx, s.key).Err(); err != nil {
		return fmt.Errorf("redis stats: purge %q: %w", s.key, err)
	}
	return nil
}

// PurgeCrawl deletes every key of crawl name's layout
// (internal/redislayout) in Redis, on every primary of a Cluster: its
// queues, start URLs, items, stats, host limits, duplicate filter, and the
// ones no component's Purge deletes (message id counters, the filter's
// layout). Afterwards nothing of the crawl is left, and nothing else was
// deleted: a key tagged {NAME} that is not the crawl's stays. It returns
// how many keys it deleted.
func PurgeCrawl(ctx context.Context, client goredis.UniversalClient, name string) (int, error) {
	pattern := redislayout.Pattern(name)
	var mu sync.Mutex
	n := 0
	del := func(ctx context.Context, c goredis.UniversalClient) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		var batch []string
		flush := func() error {
			if len(batch) == 0 {
				return nil
			}
			d, err := c.Del(ctx, batch...).Result()
			mu.Lock()
			n += int(d)
			mu.Unlock()
			batch = batch[:0]
			return err
		}
		for iter.Next(ctx) {
			if _, ok := redislayout.Match(name, iter.Val()); !ok {
				continue
			}
			batch = append(batch, iter.Val())
			if len(batch) == 500 {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if err := iter.Err(); err != nil {
			return err
		}
		return flush()
	}
	var err error
	if cc, ok := client.(*goredis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error { return del(ctx, c) })
	} else {
		err = del(ctx, client)
	}
	if err != nil {
		return n, fmt.Errorf("redis: purge %s: %w", pattern, err)
	}
	return n, nil
}
