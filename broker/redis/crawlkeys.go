package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	goredis "github.com/redis/go-redis/v9"
)

// CrawlKey returns the Redis key of a crawl's part ("start_urls", "items",
// "stats"): "{NAME}:part", hash-tagged like the broker's and the duplicate
// filter's keys, so that a crawl's keys share one Cluster slot.
func CrawlKey(crawl, part string) string { return "{" + crawl + "}:" + part }

// StartURLs keeps a crawl's start URLs in a plain Redis list (or set) at
// {NAME}:start_urls, as scrapy-redis does: "redis-cli rpush '{books}:start_urls'
// https://example.com/" feeds a running crawl. It implements
// engine.StartSource. Taking is a destructive pop, like scrapy-redis: a
// worker killed between the pop and the publish of the request (one round
// trip) loses that start URL.
//
// Payloads the engine rejects (not a start URL, too long) are kept with the
// reason in the list {NAME}:start_urls:dead, one JSON object
// {"reason": …, "payload": …} each (see RejectStart).
type StartURLs struct {
	client goredis.UniversalClient
	key    string
	dead   string
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
	return &StartURLs{client: client, key: CrawlKey(crawl, "start_urls"), dead: CrawlKey(crawl, "start_urls:dead"), set: set}
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

// TakeStarts pops up to max payloads.
func (s *StartURLs) TakeStarts(ctx context.Context, max int) ([][]byte, error) {
	var (
		vals []string
		err  error
	)
	if s.set {
		vals, err = s.client.SPopN(ctx, s.key, int64(max)).Result()
	} else {
		vals, err = s.client.LPopCount(ctx, s.key, max).Result()
	}
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

// returnStartsScript puts taken start URLs back at the front of the list
// (or into the set).
//
// Redis refuses a script under maxmemory only at its first write that may
// grow memory, and only if nothing was written before: PERSIST, a write
// that never grows memory (the key has no expiry), comes first, so the
// push is not refused. Returning what was just taken grows nothing on
// balance, and refusing it would lose the start URLs for good.
//
// KEYS: start_urls
// ARGV: "set" or "list", payloads in the order they were taken
var returnStartsScript = goredis.NewScript(`
redis.call('PERSIST', KEYS[1])
-- from the last chunk to the first, each pushed from its end: the first
-- payload ends at the front
for j = #ARGV, 2, -1000 do
  local i = math.max(2, j - 999)
  if ARGV[1] == 'set' then
    redis.call('SADD', KEYS[1], unpack(ARGV, i, j))
  else
    local rev = {}
    for k = j, i, -1 do rev[#rev + 1] = ARGV[k] end
    redis.call('LPUSH', KEYS[1], unpack(rev))
  end
end
return #ARGV - 1
`)

// ReturnStarts puts back payloads taken by TakeStarts that could not be
// moved into the frontier, at the front of the list, in their order. Unlike
// AddStarts it is not refused by a server out of memory (maxmemory with
// noeviction): see returnStartsScript. It implements engine.StartReturner.
func (s *StartURLs) ReturnStarts(ctx context.Context, payloads ...[]byte) error {
	if len(payloads) == 0 {
		return nil
	}
	args := make([]any, 0, len(payloads)+1)
	mode := "list"
	if s.set {
		mode = "set"
	}
	args = append(args, mode)
	for _, p := range payloads {
		args = append(args, p)
	}
	if err := returnStartsScript.Run(ctx, s.client, []string{s.key}, args...).Err(); err != nil {
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

// PendingStarts counts the waiting payloads.
func (s *StartURLs) PendingStarts(ctx context.Context) (int64, error) {
	var cmd *goredis.IntCmd
	if s.set {
		cmd = s.client.SCard(ctx, s.key)
	} else {
		cmd = s.client.LLen(ctx, s.key)
	}
	n, err := cmd.Result()
	if err != nil {
		return 0, fmt.Errorf("redis start urls: count %q: %w", s.key, err)
	}
	return n, nil
}

// Purge deletes the start URLs and the rejected ones.
func (s *StartURLs) Purge(ctx context.Context) error {
	if err := s.client.Del(ctx, s.key, s.dead).Err(); err != nil {
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
	return &Items{client: client, key: CrawlKey(crawl, "items")}
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
	return &Stats{client: client, key: CrawlKey(crawl, "stats")}
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
