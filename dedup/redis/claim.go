package redis

import (
	"fmt"
	"strconv"

	"github.com/trawlhq/trawl/dedup"
	"github.com/trawlhq/trawl/internal/redislayout"
)

// ClaimKind says how a script claims a fingerprint (see Claims).
type ClaimKind uint8

const (
	// ClaimSet claims with one SADD Keys[Key] Arg per fingerprint: new
	// if SADD added it.
	ClaimSet ClaimKind = iota + 1
	// ClaimBloom claims by setting bit Arg of Keys[Key] for each op of a
	// fingerprint: new if any of its bits was 0.
	ClaimBloom
)

// ClaimOp is one write of a claim: on Keys[Key], a set member or a bit
// offset, in decimal.
type ClaimOp struct {
	Key int
	Arg string
}

// Claims are the writes that claim fingerprints in a filter, for a Lua
// script that claims them itself, beside other writes of the crawl's slot
// (broker/redis's ClaimPublish): the keys they touch, each once, and per
// fingerprint its ops. The script does what the filter's Add does, with
// the same answer.
type Claims struct {
	Kind ClaimKind
	Keys []string
	Ops  [][]ClaimOp // per fingerprint, in order
}

// A Claimer is a Redis filter whose claims a script can make: Set and
// Bloom.
type Claimer interface {
	dedup.Filter
	// Claims returns the writes that claim fps; dedup.ErrClosed once the
	// filter is closed.
	Claims(fps ...dedup.Fingerprint) (Claims, error)
	// Key is the filter's key as configured (NAME:dupefilter).
	Key() string
	// Partition returns the filter of partition p of n of the crawl
	// (internal/redislayout.PartitionFilterKeys): the same layout, with
	// shards (or Bloom parts) of its own under the partition's hash tag.
	// It shares the filter's client and is closed with it; its layout key
	// is the filter's. With n <= 1 it is the filter itself.
	Partition(p, n int) Claimer
}

var (
	_ Claimer = (*Set)(nil)
	_ Claimer = (*Bloom)(nil)
)

// Claims returns, per fingerprint, the SADD that claims it: its shard key
// and member, as Add sends them.
func (s *Set) Claims(fps ...dedup.Fingerprint) (Claims, error) {
	if s.closed.Load() {
		return Claims{}, fmt.Errorf("redis set filter %q: claims: %w", s.key, dedup.ErrClosed)
	}
	c := Claims{Kind: ClaimSet, Ops: make([][]ClaimOp, len(fps))}
	index := make(map[string]int, len(fps))
	ops := make([]ClaimOp, len(fps))
	for i, fp := range fps {
		k, m := s.locate(fp)
		j, ok := index[k]
		if !ok {
			j = len(c.Keys)
			index[k] = j
			c.Keys = append(c.Keys, k)
		}
		ops[i] = ClaimOp{Key: j, Arg: m}
		c.Ops[i] = ops[i : i+1 : i+1]
	}
	return c, nil
}

// Key is the filter's key as configured.
func (s *Set) Key() string { return s.key }

// Partition returns the Set of partition p of n (see Claimer).
func (s *Set) Partition(p, n int) Claimer {
	if n <= 1 {
		return s
	}
	return &Set{client: s.client, key: s.key, keys: redislayout.PartitionFilterKeys(s.key, p, n), bits: s.bits, closed: s.closed}
}

// Claims returns, per fingerprint, its k bits: the bitmap part (Keys are
// the filter's parts, in order) and the offset in it, as Add sets them.
func (f *Bloom) Claims(fps ...dedup.Fingerprint) (Claims, error) {
	if f.closed.Load() {
		return Claims{}, fmt.Errorf("redis bloom filter %q: claims: %w", f.key, dedup.ErrClosed)
	}
	c := Claims{Kind: ClaimBloom, Keys: f.parts, Ops: make([][]ClaimOp, len(fps))}
	ops := make([]ClaimOp, 0, f.k*len(fps))
	pos := make([]position, 0, f.k)
	for i, fp := range fps {
		pos = f.positions(pos[:0], fp)
		first := len(ops)
		for _, p := range pos {
			ops = append(ops, ClaimOp{Key: p.part, Arg: strconv.FormatUint(p.bit, 10)})
		}
		c.Ops[i] = ops[first:len(ops):len(ops)]
	}
	return c, nil
}

// Key is the filter's key as configured.
func (f *Bloom) Key() string { return f.key }

// Partition returns the Bloom filter of partition p of n (see Claimer):
// bitmaps of the filter's size each, which grow as bits are set.
func (f *Bloom) Partition(p, n int) Claimer {
	if n <= 1 {
		return f
	}
	keys := redislayout.PartitionFilterKeys(f.key, p, n)
	parts := make([]string, len(f.parts))
	for i := range parts {
		parts[i] = keys.BloomPart(uint64(i))
	}
	return &Bloom{client: f.client, key: f.key, parts: parts, partBits: f.partBits, m: f.m, k: f.k, closed: f.closed}
}
