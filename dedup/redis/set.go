package redis

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/dedup"
	"github.com/trawlhq/trawl/internal/redislayout"
)

// DefaultSetCapacity is SetConfig.Capacity's zero value.
const DefaultSetCapacity = 10_000_000

// SetConfig configures a Set. The zero value of each field but Client and
// Key is its documented default.
type SetConfig struct {
	// Client is the Redis connection. Required; never closed by the Set.
	Client goredis.UniversalClient
	// Key names the filter, conventionally NAME:dupefilter. Required.
	Key string
	// Capacity is how many fingerprints the crawl is expected to hold
	// (0: DefaultSetCapacity). It sizes the shards; see the package doc.
	// The first worker of a crawl fixes the layout; later ones use it.
	Capacity uint
	// Logger receives warnings (default: discarded).
	Logger *slog.Logger
}

// Validate reports every problem of c at once.
func (c SetConfig) Validate() error {
	var errs []error
	if c.Client == nil {
		errs = append(errs, errors.New("nil Client"))
	}
	if c.Key == "" {
		errs = append(errs, errors.New("empty Key"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("redis set filter config: %w", err)
	}
	return nil
}

// Set is an exact duplicate filter in Redis sets of 64-bit integers.
type Set struct {
	client goredis.UniversalClient
	key    string // as configured, for messages
	keys   redislayout.Filter
	bits   int          // shard bits
	closed *atomic.Bool // shared with its partitions (Partition)
}

var (
	_ dedup.Filter  = (*Set)(nil)
	_ dedup.Checker = (*Set)(nil)
)

// maxShardBits bounds the shard count (2^20 keys).
const maxShardBits = 20

// setLayout names a Set layout in the filter's meta key.
func setLayout(bits int) string { return "set:v1:shardbits=" + strconv.Itoa(bits) }

// parseSetLayout returns the shard bits of a Set's layout; false if
// layout is not a Set's.
func parseSetLayout(layout string) (bits int, ok bool) {
	n, ok := strings.CutPrefix(layout, "set:v1:shardbits=")
	bits, err := strconv.Atoi(n)
	return bits, ok && err == nil && bits >= 0 && bits <= maxShardBits
}

// NewSet returns the Set of cfg.Key, creating its layout if it has none.
func NewSet(ctx context.Context, cfg SetConfig) (*Set, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Capacity == 0 {
		cfg.Capacity = DefaultSetCapacity
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("backend", "redis", "filter", "set", "key", cfg.Key)

	// Shards hold intsets (8 bytes a member) while they have at most
	// set-max-intset-entries members; aim at 3/4 of that at capacity, so
	// that chance leaves every shard below it.
	maxEntries := 512
	if v, err := cfg.Client.ConfigGet(ctx, "set-max-intset-entries").Result(); err == nil {
		if n, err := strconv.Atoi(v["set-max-intset-entries"]); err == nil && n > 0 {
			maxEntries = n
		}
	}
	bitsWanted := shardBits(cfg.Capacity, maxEntries)
	b := redislayout.FilterKeys(cfg.Key)
	stored, err := claimLayout(ctx, cfg.Client, b, setLayout(bitsWanted))
	if err != nil {
		return nil, fmt.Errorf("redis set filter %q: %w", cfg.Key, err)
	}
	shard, ok := parseSetLayout(stored)
	if !ok {
		return nil, fmt.Errorf("redis set filter %q: key holds a filter of layout %q, not a set filter: %w", cfg.Key, stored, ErrLayout)
	}
	if shard != bitsWanted {
		log.Info("filter exists with another shard count; using it", "shards", 1<<shard, "wanted", 1<<bitsWanted)
	}
	if per := float64(cfg.Capacity) / float64(uint64(1)<<shard); per > float64(maxEntries) {
		log.Warn("shards will outgrow the server's set-max-intset-entries and cost several times more memory",
			"per_shard", int(per), "set_max_intset_entries", maxEntries)
	}
	return &Set{client: cfg.Client, key: cfg.Key, keys: b, bits: shard, closed: new(atomic.Bool)}, nil
}

// shardBits returns the number of shard bits that puts at most 3/4 of
// maxEntries fingerprints into each shard when capacity are stored.
func shardBits(capacity uint, maxEntries int) int {
	per := max(1, maxEntries*3/4)
	shards := math.Ceil(float64(capacity) / float64(per))
	b := 0
	if shards > 1 {
		b = bits.Len64(uint64(shards) - 1)
	}
	return min(b, maxShardBits)
}

// locate returns the shard key and the member of fp: the first s.bits bits
// pick the shard, the last 64 bits are the member, as a decimal integer so
// that Redis stores it in an intset.
func (s *Set) locate(fp dedup.Fingerprint) (string, string) {
	var shard uint64
	if s.bits > 0 {
		shard = binary.BigEndian.Uint64(fp[:8]) >> (64 - s.bits)
	}
	member := int64(binary.BigEndian.Uint64(fp[8:]))
	return s.keys.Shard(shard), strconv.FormatInt(member, 10)
}

// Add adds fps with one SADD each, pipelined: one round trip per batch.
// SADD is atomic, so of several workers adding one fingerprint at once
// exactly one hears true.
func (s *Set) Add(ctx context.Context, fps ...dedup.Fingerprint) ([]bool, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("redis set filter %q: add: %w", s.key, dedup.ErrClosed)
	}
	if len(fps) == 0 {
		return []bool{}, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("redis set filter %q: add: %w", s.key, err)
	}
	cmds := make([]*goredis.IntCmd, len(fps))
	_, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, fp := range fps {
			k, m := s.locate(fp)
			cmds[i] = p.SAdd(ctx, k, m)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redis set filter %q: add %d fingerprints: %w", s.key, len(fps), err)
	}
	out := make([]bool, len(fps))
	for i, c := range cmds {
		out[i] = c.Val() == 1
	}
	return out, nil
}

// Contains reports, for each fingerprint, whether it was added, with one
// SISMEMBER each, pipelined: one round trip, nothing written. It
// implements dedup.Checker.
func (s *Set) Contains(ctx context.Context, fps ...dedup.Fingerprint) ([]bool, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("redis set filter %q: contains: %w", s.key, dedup.ErrClosed)
	}
	if len(fps) == 0 {
		return []bool{}, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("redis set filter %q: contains: %w", s.key, err)
	}
	cmds := make([]*goredis.BoolCmd, len(fps))
	_, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, fp := range fps {
			k, m := s.locate(fp)
			cmds[i] = p.SIsMember(ctx, k, m)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redis set filter %q: contains %d fingerprints: %w", s.key, len(fps), err)
	}
	out := make([]bool, len(fps))
	for i, c := range cmds {
		out[i] = c.Val()
	}
	return out, nil
}

// Purge deletes every fingerprint. The layout stays.
func (s *Set) Purge(ctx context.Context) error {
	if s.closed.Load() {
		return fmt.Errorf("redis set filter %q: purge: %w", s.key, dedup.ErrClosed)
	}
	n := uint64(1) << s.bits
	const chunk = 1000
	_, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		keys := make([]string, 0, chunk)
		for i := range n {
			keys = append(keys, s.keys.Shard(i))
			if len(keys) == chunk || i == n-1 {
				p.Unlink(ctx, keys...)
				keys = keys[:0]
			}
		}
		// The layout stays: it is what this Set uses.
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis set filter %q: purge: %w", s.key, err)
	}
	return nil
}

// Close makes later calls fail with dedup.ErrClosed; the client stays open.
func (s *Set) Close() error {
	s.closed.Store(true)
	return nil
}
