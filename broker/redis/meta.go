package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/internal/redislayout"
)

// Meta keeps a crawl's metadata in the Redis hash {NAME}:meta and its
// workers' announcements in the sorted set {NAME}:workers (member: the
// worker's id; score: when its announcement expires, in the server's
// milliseconds). It implements broker.Metadata (with its Presence); a
// Broker does too, through a Meta on its client. Deployments whose
// broker is not Redis but that keep their filter in Redis (RabbitMQ)
// use a Meta of their own.
type Meta struct {
	client goredis.UniversalClient
}

var (
	_ broker.Metadata = Meta{}
	_ broker.Metadata = (*Broker)(nil)
	_ broker.Roster   = Meta{}
	_ broker.Roster   = (*Broker)(nil)
)

// NewMeta returns the metadata and presence of crawls on client.
func NewMeta(client goredis.UniversalClient) Meta { return Meta{client: client} }

// GetMeta returns field key of {crawl}:meta.
func (m Meta) GetMeta(ctx context.Context, crawl, key string) ([]byte, error) {
	hash := redislayout.Meta(crawl)
	v, err := m.client.HGet(ctx, hash, key).Bytes()
	if errors.Is(err, goredis.Nil) {
		return nil, fmt.Errorf("redis: %q field %q: %w", hash, key, broker.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("redis: read %q field %q: %w", hash, key, err)
	}
	return v, nil
}

// SetMeta sets field key of {crawl}:meta.
func (m Meta) SetMeta(ctx context.Context, crawl, key string, value []byte) error {
	hash := redislayout.Meta(crawl)
	if err := m.client.HSet(ctx, hash, key, value).Err(); err != nil {
		return fmt.Errorf("redis: write %q field %q: %w", hash, key, err)
	}
	return nil
}

// CreateMeta sets field key of {crawl}:meta if it has no value (HSETNX).
func (m Meta) CreateMeta(ctx context.Context, crawl, key string, value []byte) error {
	hash := redislayout.Meta(crawl)
	ok, err := m.client.HSetNX(ctx, hash, key, value).Result()
	if err != nil {
		return fmt.Errorf("redis: write %q field %q: %w", hash, key, err)
	}
	if !ok {
		return fmt.Errorf("redis: %q field %q: %w", hash, key, broker.ErrExists)
	}
	return nil
}

// PurgeMeta deletes {crawl}:meta.
func (m Meta) PurgeMeta(ctx context.Context, crawl string) error {
	hash := redislayout.Meta(crawl)
	if err := m.client.Del(ctx, hash).Err(); err != nil {
		return fmt.Errorf("redis: purge %q: %w", hash, err)
	}
	return nil
}

// announceScript records ARGV[1] in KEYS[1] until ARGV[2] ms from the
// server's now, drops expired members and keeps the set itself for as
// long as its last member. The server's clock, not the workers', so that
// their clocks may disagree.
var announceScript = goredis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
return 1`)

// liveScript counts the members of KEYS[1] that have not expired.
var liveScript = goredis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')`)

// membersScript returns the members of KEYS[1] that have not expired.
var membersScript = goredis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')`)

// Announce records worker id in {crawl}:workers for ttl.
func (m Meta) Announce(ctx context.Context, crawl, id string, ttl time.Duration) error {
	key := redislayout.Workers(crawl)
	if err := announceScript.Run(ctx, m.client, []string{key}, id, max(ttl.Milliseconds(), 1)).Err(); err != nil {
		return fmt.Errorf("redis: announce worker in %q: %w", key, err)
	}
	return nil
}

// Leave removes worker id from {crawl}:workers.
func (m Meta) Leave(ctx context.Context, crawl, id string) error {
	key := redislayout.Workers(crawl)
	if err := m.client.ZRem(ctx, key, id).Err(); err != nil {
		return fmt.Errorf("redis: remove worker from %q: %w", key, err)
	}
	return nil
}

// Live counts the unexpired members of {crawl}:workers.
func (m Meta) Live(ctx context.Context, crawl string) (int, error) {
	key := redislayout.Workers(crawl)
	n, err := liveScript.Run(ctx, m.client, []string{key}).Int()
	if err != nil {
		return 0, fmt.Errorf("redis: count workers in %q: %w", key, err)
	}
	return n, nil
}

// Members returns the unexpired members of {crawl}:workers, sorted
// (broker.Roster).
func (m Meta) Members(ctx context.Context, crawl string) ([]string, error) {
	key := redislayout.Workers(crawl)
	ids, err := membersScript.Run(ctx, m.client, []string{key}).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("redis: list workers in %q: %w", key, err)
	}
	slices.Sort(ids)
	return ids, nil
}

// GetMeta implements broker.Metadata (see Meta).
func (b *Broker) GetMeta(ctx context.Context, crawl, key string) ([]byte, error) {
	return NewMeta(b.client).GetMeta(ctx, crawl, key)
}

// SetMeta implements broker.Metadata (see Meta).
func (b *Broker) SetMeta(ctx context.Context, crawl, key string, value []byte) error {
	return NewMeta(b.client).SetMeta(ctx, crawl, key, value)
}

// CreateMeta implements broker.Metadata (see Meta).
func (b *Broker) CreateMeta(ctx context.Context, crawl, key string, value []byte) error {
	return NewMeta(b.client).CreateMeta(ctx, crawl, key, value)
}

// PurgeMeta implements broker.Metadata (see Meta).
func (b *Broker) PurgeMeta(ctx context.Context, crawl string) error {
	return NewMeta(b.client).PurgeMeta(ctx, crawl)
}

// Announce implements broker.Presence (see Meta).
func (b *Broker) Announce(ctx context.Context, crawl, id string, ttl time.Duration) error {
	return NewMeta(b.client).Announce(ctx, crawl, id, ttl)
}

// Leave implements broker.Presence (see Meta).
func (b *Broker) Leave(ctx context.Context, crawl, id string) error {
	return NewMeta(b.client).Leave(ctx, crawl, id)
}

// Members implements broker.Roster (see Meta).
func (b *Broker) Members(ctx context.Context, crawl string) ([]string, error) {
	return NewMeta(b.client).Members(ctx, crawl)
}

// Live implements broker.Presence (see Meta).
func (b *Broker) Live(ctx context.Context, crawl string) (int, error) {
	return NewMeta(b.client).Live(ctx, crawl)
}
