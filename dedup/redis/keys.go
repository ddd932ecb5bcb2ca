package redis

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/internal/redislayout"
)

// The filters' keys are the crawl's layout's (internal/redislayout): the
// part of the filter's key before its last ':' (the crawl name) becomes
// the Cluster hash tag, as the broker's queue keys do, so that all keys
// of a crawl share a slot: "books:dupefilter" -> "{books}:dupefilter". A
// key without ':' is its own tag. They are:
//
//	{books}:dupefilter:meta      hash: the filter's layout ("layout" field)
//	{books}:dupefilter:<shard>   Set: the set of one shard (hex number)
//	{books}:dupefilter:bloom:<i> Bloom: bitmap part i

// ErrLayout is returned when a filter's key holds a filter of another kind
// or shape than the one configured: two workers of one crawl configured
// differently.
var ErrLayout = errors.New("redis dedup: filter layout mismatch")

// claimLayout stores layout as the filter's layout unless one is stored,
// and returns the stored one.
func claimLayout(ctx context.Context, c goredis.UniversalClient, keys redislayout.Filter, layout string) (string, error) {
	meta := keys.Meta
	var get *goredis.StringCmd
	_, err := c.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.HSetNX(ctx, meta, "layout", layout)
		get = p.HGet(ctx, meta, "layout")
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("read layout %q: %w", meta, err)
	}
	return get.Val(), nil
}

// DropLayout deletes the layout record of the filter under key, after
// its Purge: what is left of a filter made for a crawl that turned out
// not to exist, so that the key holds no filter again (Stored: ErrNoFilter).
func DropLayout(ctx context.Context, c goredis.UniversalClient, key string) error {
	meta := redislayout.FilterKeys(key).Meta
	if err := c.Del(ctx, meta).Err(); err != nil {
		return fmt.Errorf("redis dedup %q: delete layout %q: %w", key, meta, err)
	}
	return nil
}

// ErrNoFilter is wrapped by Stored when no filter is stored under its key.
var ErrNoFilter = errors.New("redis dedup: no filter stored")

// Stored returns the filter stored under key as its stored layout says: a
// Set of the shard count, or a Bloom filter of the bit and hash counts, it
// was made with (by NewSet or NewBloom), so that a program that joins a
// crawl needs neither its kind nor its sizes. It fails with an error
// wrapping ErrNoFilter when key holds none, and creates nothing.
func Stored(ctx context.Context, c goredis.UniversalClient, key string) (Claimer, error) {
	b := redislayout.FilterKeys(key)
	layout, err := c.HGet(ctx, b.Meta, "layout").Result()
	switch {
	case errors.Is(err, goredis.Nil):
		return nil, fmt.Errorf("%q: %w", key, ErrNoFilter)
	case err != nil:
		return nil, fmt.Errorf("redis dedup %q: read layout %q: %w", key, b.Meta, err)
	}
	if bits, ok := parseSetLayout(layout); ok {
		return &Set{client: c, key: key, keys: b, bits: bits, closed: new(atomic.Bool)}, nil
	}
	if m, k, ok := parseBloomLayout(layout); ok {
		return openBloom(ctx, c, key, m, k)
	}
	return nil, fmt.Errorf("redis dedup %q: layout %q is neither a set's nor a Bloom filter's: %w", key, layout, ErrLayout)
}
