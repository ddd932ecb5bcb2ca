package redis

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/dedup"
	"github.com/trawlhq/trawl/internal/redislayout"
)

// Defaults of BloomConfig's zero values.
const (
	DefaultBloomCapacity = 10_000_000
	DefaultBloomFPRate   = 0.01
)

// maxPartBits is the most bits one Redis string holds (512 MB).
const maxPartBits = 1 << 32

// BloomConfig configures a Bloom filter. The zero value of each field but
// Client and Key is its documented default.
type BloomConfig struct {
	// Client is the Redis connection. Required; never closed by the filter.
	Client goredis.UniversalClient
	// Key names the filter, conventionally NAME:dupefilter. Required.
	Key string
	// Capacity is the number of fingerprints the filter is sized for
	// (0: DefaultBloomCapacity). Beyond it the false-positive rate grows.
	Capacity uint
	// FPRate is the false-positive rate at Capacity, in (0, 0.5)
	// (0: DefaultBloomFPRate).
	FPRate float64
	// Logger receives lifecycle logs (default: discarded).
	Logger *slog.Logger
}

// Validate reports every problem of c at once.
func (c BloomConfig) Validate() error {
	var errs []error
	if c.Client == nil {
		errs = append(errs, errors.New("nil Client"))
	}
	if c.Key == "" {
		errs = append(errs, errors.New("empty Key"))
	}
	if c.FPRate < 0 || c.FPRate >= 0.5 || math.IsNaN(c.FPRate) {
		errs = append(errs, fmt.Errorf("FPRate %v: want 0 (default) or in (0, 0.5)", c.FPRate))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("redis bloom filter config: %w", err)
	}
	return nil
}

// BloomParams returns the bit count m and hash count k of a Bloom filter
// for capacity items at false-positive rate p: m = -n ln p / (ln 2)^2,
// k = m/n ln 2, rounded.
func BloomParams(capacity uint, p float64) (m uint64, k int) {
	n := float64(max(capacity, 1))
	m = uint64(math.Ceil(-n * math.Log(p) / (math.Ln2 * math.Ln2)))
	m = (m + 7) &^ 7 // whole bytes
	k = max(1, int(math.Round(float64(m)/n*math.Ln2)))
	return m, k
}

// Bloom is a Bloom filter kept in Redis bitmaps and shared by all workers
// of a crawl.
type Bloom struct {
	client   goredis.UniversalClient
	key      string // as configured, for messages
	parts    []string
	partBits uint64
	m        uint64
	k        int
	closed   *atomic.Bool // shared with its partitions (Partition)
}

var (
	_ dedup.Filter  = (*Bloom)(nil)
	_ dedup.Checker = (*Bloom)(nil)
)

func bloomLayout(m uint64, k int) string {
	return "bloom:v1:m=" + strconv.FormatUint(m, 10) + ",k=" + strconv.Itoa(k)
}

// parseBloomLayout returns the bit and hash counts of a Bloom filter's
// layout; false if layout is not a Bloom filter's.
func parseBloomLayout(layout string) (m uint64, k int, ok bool) {
	var ms, ks string
	ms, ks, ok = strings.Cut(strings.TrimPrefix(layout, "bloom:v1:m="), ",k=")
	if !ok || !strings.HasPrefix(layout, "bloom:v1:m=") {
		return 0, 0, false
	}
	m, err := strconv.ParseUint(ms, 10, 64)
	if err != nil || m == 0 || m%8 != 0 {
		return 0, 0, false
	}
	k, err = strconv.Atoi(ks)
	return m, k, err == nil && k > 0
}

// NewBloom returns the Bloom filter of cfg.Key, creating it if it does not
// exist. If it exists with another bit or hash count (a worker configured
// with another capacity or rate), it fails with ErrLayout.
func NewBloom(ctx context.Context, cfg BloomConfig) (*Bloom, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Capacity == 0 {
		cfg.Capacity = DefaultBloomCapacity
	}
	if cfg.FPRate == 0 {
		cfg.FPRate = DefaultBloomFPRate
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, k := BloomParams(cfg.Capacity, cfg.FPRate)
	b := redislayout.FilterKeys(cfg.Key)
	want := bloomLayout(m, k)
	stored, err := claimLayout(ctx, cfg.Client, b, want)
	if err != nil {
		return nil, fmt.Errorf("redis bloom filter %q: %w", cfg.Key, err)
	}
	if stored != want {
		return nil, fmt.Errorf("redis bloom filter %q exists with layout %q; capacity %d at rate %v needs %q "+
			"(use the crawl's capacity and rate, or purge it): %w", cfg.Key, stored, cfg.Capacity, cfg.FPRate, want, ErrLayout)
	}
	f, err := openBloom(ctx, cfg.Client, cfg.Key, m, k)
	if err != nil {
		return nil, err
	}
	log.Info("bloom filter ready", "backend", "redis", "filter", "bloom", "key", cfg.Key,
		"bits", m, "hashes", k, "bytes", m/8, "capacity", cfg.Capacity, "fp_rate", cfg.FPRate)
	return f, nil
}

// openBloom returns the Bloom filter of key of m bits and k hashes, whose
// layout is stored, allocating its bitmaps where they are small and
// missing.
func openBloom(ctx context.Context, client goredis.UniversalClient, key string, m uint64, k int) (*Bloom, error) {
	b := redislayout.FilterKeys(key)
	nparts := (m + maxPartBits - 1) / maxPartBits
	partBits := (m/nparts + 7) &^ 7
	f := &Bloom{client: client, key: key, partBits: partBits, m: m, k: k, closed: new(atomic.Bool)}
	for i := range nparts {
		f.parts = append(f.parts, b.BloomPart(i))
	}
	// Allocate small bitmaps whole, at their exact size; large ones grow as
	// bits are set (Redis then rounds them up to its allocator's classes).
	if partBits/8 <= 64<<20 {
		zero := make([]byte, partBits/8)
		for _, p := range f.parts {
			n, err := client.Exists(ctx, p).Result()
			if err == nil && n == 0 {
				err = client.SetNX(ctx, p, zero, 0).Err()
			}
			if err != nil {
				return nil, fmt.Errorf("redis bloom filter %q: create %q: %w", key, p, err)
			}
		}
	}
	return f, nil
}

// Params returns the filter's bit count and hash count.
func (f *Bloom) Params() (m uint64, k int) { return f.m, f.k }

// position is one bit of a fingerprint.
type position struct {
	part int
	bit  uint64
}

// positions appends the k bit positions of fp: double hashing on its two
// 64-bit halves, h1 + i*h2 mod m.
func (f *Bloom) positions(dst []position, fp dedup.Fingerprint) []position {
	a := binary.BigEndian.Uint64(fp[:8]) % f.m
	b := binary.BigEndian.Uint64(fp[8:]) % f.m
	if b == 0 {
		b = 1
	}
	for i := range uint64(f.k) {
		pos := (a + i*b) % f.m
		dst = append(dst, position{int(pos / f.partBits), pos % f.partBits})
	}
	return dst
}

// bitfieldOps bounds the SET operations of one BITFIELD command.
const bitfieldOps = 8000

// Add sets the bits of fps and reports, for each, whether any was clear
// (it is new), in one round trip. BITFIELD SET returns the old bits, so a
// BITFIELD is itself an atomic check-and-set; when a batch needs several
// (a filter of several parts, or more than 8000 bits), they run in one
// MULTI/EXEC transaction. Either way no other worker's Add comes between
// the check and the set, so of several workers adding one fingerprint at
// once exactly one hears true.
func (f *Bloom) Add(ctx context.Context, fps ...dedup.Fingerprint) ([]bool, error) {
	if f.closed.Load() {
		return nil, fmt.Errorf("redis bloom filter %q: add: %w", f.key, dedup.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("redis bloom filter %q: add: %w", f.key, err)
	}
	out := make([]bool, len(fps))
	if len(fps) == 0 {
		return out, nil
	}
	pos := make([]position, 0, f.k*len(fps))
	for _, fp := range fps {
		pos = f.positions(pos, fp)
	}
	// Per part, the BITFIELD arguments and which fingerprint each bit is of.
	args := make([][]any, len(f.parts))
	owner := make([][]int, len(f.parts))
	for i, p := range pos {
		args[p.part] = append(args[p.part], "SET", "u1", p.bit, 1)
		owner[p.part] = append(owner[p.part], i/f.k)
	}
	type call struct {
		cmd   *goredis.IntSliceCmd
		owner []int
	}
	var calls []call
	queue := func(p goredis.Pipeliner) error {
		for part, a := range args {
			for first := 0; first < len(owner[part]); first += bitfieldOps {
				last := min(first+bitfieldOps, len(owner[part]))
				calls = append(calls, call{p.BitField(ctx, f.parts[part], a[4*first:4*last]...), owner[part][first:last]})
			}
		}
		return nil
	}
	var err error
	if len(f.parts) == 1 && len(pos) <= bitfieldOps {
		_, err = f.client.Pipelined(ctx, queue)
	} else {
		_, err = f.client.TxPipelined(ctx, queue)
	}
	if err != nil {
		return nil, fmt.Errorf("redis bloom filter %q: add %d fingerprints: %w", f.key, len(fps), err)
	}
	for _, c := range calls {
		old := c.cmd.Val()
		if len(old) != len(c.owner) {
			return nil, fmt.Errorf("redis bloom filter %q: add: BITFIELD returned %d values for %d bits", f.key, len(old), len(c.owner))
		}
		for x, v := range old {
			if v == 0 {
				out[c.owner[x]] = true
			}
		}
	}
	return out, nil
}

// Contains reports, for each fingerprint, whether it is probably in the
// filter (all its bits are set), without adding it: false positives at
// the filter's rate, no false negatives. It reads the bits with
// BITFIELD_RO, pipelined: one round trip, nothing written, so it also
// works on replicas. It implements dedup.Checker.
func (f *Bloom) Contains(ctx context.Context, fps ...dedup.Fingerprint) ([]bool, error) {
	if f.closed.Load() {
		return nil, fmt.Errorf("redis bloom filter %q: contains: %w", f.key, dedup.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("redis bloom filter %q: contains: %w", f.key, err)
	}
	out := make([]bool, len(fps))
	if len(fps) == 0 {
		return out, nil
	}
	pos := make([]position, 0, f.k*len(fps))
	for i := range fps {
		out[i] = true
		pos = f.positions(pos, fps[i])
	}
	args := make([][]any, len(f.parts))
	owner := make([][]int, len(f.parts))
	for i, p := range pos {
		args[p.part] = append(args[p.part], "u1", p.bit)
		owner[p.part] = append(owner[p.part], i/f.k)
	}
	var cmds []*goredis.IntSliceCmd
	var owners [][]int
	_, err := f.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for part, a := range args {
			for first := 0; first < len(owner[part]); first += bitfieldOps {
				last := min(first+bitfieldOps, len(owner[part]))
				cmds = append(cmds, p.BitFieldRO(ctx, f.parts[part], a[2*first:2*last]...))
				owners = append(owners, owner[part][first:last])
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redis bloom filter %q: contains %d fingerprints: %w", f.key, len(fps), err)
	}
	for i, c := range cmds {
		for x, v := range c.Val() {
			if v == 0 {
				out[owners[i][x]] = false
			}
		}
	}
	return out, nil
}

// Purge clears every bit. The layout stays.
func (f *Bloom) Purge(ctx context.Context) error {
	if f.closed.Load() {
		return fmt.Errorf("redis bloom filter %q: purge: %w", f.key, dedup.ErrClosed)
	}
	if err := f.client.Unlink(ctx, f.parts...).Err(); err != nil {
		return fmt.Errorf("redis bloom filter %q: purge: %w", f.key, err)
	}
	return nil
}

// Close makes later calls fail with dedup.ErrClosed; the client stays open.
func (f *Bloom) Close() error {
	f.closed.Store(true)
	return nil
}
