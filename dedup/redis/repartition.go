package redis

import (
	"bytes"
	"context"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/dedup"
	"github.com/trawlhq/trawl/internal/redislayout"
)

// A filter's claims cannot be moved by host when a crawl's partition count
// changes (trawl repartition): a set member is the last 64 bits of a
// fingerprint, and a Bloom filter's bits are shared by many. So
// CopyClaims gives every new partition the claims of every old one: a
// superset of each partition's own, so that no link claimed before is
// claimed (and fetched) again, at the cost of the memory of m copies.

// CopyClaims adds the claims of f's from partitions to each of its to
// partitions (see Claimer.Partition), on a stopped crawl: a set filter's
// shards are read and added shard by shard, a Bloom filter's bitmaps are
// OR-ed a MiB at a time, so that it works alike on one server and on a
// Cluster, where the partitions' keys are in different slots. Run again
// after it was cut short, it adds what is missing. from == to copies
// nothing.
func CopyClaims(ctx context.Context, f Claimer, from, to int) error {
	if from == to {
		return nil
	}
	var err error
	switch f := f.(type) {
	case *Set:
		err = f.copyClaims(ctx, from, to)
	case *Bloom:
		err = f.copyClaims(ctx, from, to)
	default:
		err = fmt.Errorf("a filter of type %T", f)
	}
	if err != nil {
		return fmt.Errorf("redis dedup %q: copy the claims of %d partitions into %d: %w", f.Key(), from, to, err)
	}
	return nil
}

// DropPartitions deletes the claims of those of f's from partitions whose
// keys none of its to partitions uses (redislayout.Retired: a partition's
// tag depends on the count, and partition 0 of 4 and of 8 may share
// theirs). Run it once the crawl uses to partitions, after CopyClaims.
//
// The one partition of a crawl of one is the filter's own keys, which
// also hold what is added to f itself: the crawl's marks (see
// frontier.Frontier.Mark), which keep, the fingerprints the caller
// passes. A set filter's own shards lose every member but those; a Bloom
// filter's own bitmaps are left as they are: a bitmap's memory is its
// length, not the bits set in it, and the marks' bits spread over the
// whole of it, so clearing the claims would free nothing.
func DropPartitions(ctx context.Context, f Claimer, from, to int, keep ...dedup.Fingerprint) error {
	if from == to {
		return nil
	}
	for _, p := range redislayout.Retired(f.Key(), from, to) {
		var err error
		switch f := f.(type) {
		case *Set:
			if from <= 1 {
				err = f.purgeBut(ctx, keep)
				break
			}
			err = f.Partition(p, from).Purge(ctx)
		case *Bloom:
			if from <= 1 {
				continue
			}
			err = f.Partition(p, from).Purge(ctx)
		default:
			err = fmt.Errorf("a filter of type %T", f)
		}
		if err != nil {
			return fmt.Errorf("redis dedup %q: drop partition %d of %d: %w", f.Key(), p, from, err)
		}
	}
	return nil
}

// purgeBut deletes every member of s but keep's: every shard none of keep
// is in, and in the others (one transaction each) every other member.
func (s *Set) purgeBut(ctx context.Context, keep []dedup.Fingerprint) error {
	kept := map[string][]any{} // shard -> the members that stay
	for _, fp := range keep {
		k, m := s.locate(fp)
		kept[k] = append(kept[k], m)
	}
	n := uint64(1) << s.bits
	for lo := uint64(0); lo < n; lo += copyShards {
		var keys []string
		for sh := lo; sh < min(n, lo+copyShards); sh++ {
			if k := s.keys.Shard(sh); kept[k] == nil {
				keys = append(keys, k)
			}
		}
		if len(keys) > 0 {
			if err := s.client.Unlink(ctx, keys...).Err(); err != nil {
				return fmt.Errorf("delete shards %x-%x: %w", lo, min(n, lo+copyShards)-1, err)
			}
		}
	}
	for k, members := range kept {
		if _, err := s.client.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			p.Del(ctx, k)
			p.SAdd(ctx, k, members...)
			return nil
		}); err != nil {
			return fmt.Errorf("keep %d members of %s: %w", len(members), k, err)
		}
	}
	return nil
}

// partitionsOf returns the filters of f's from partitions and of its to
// partitions, of f's own type (see Claimer.Partition).
func partitionsOf[F Claimer](f F, from, to int) (src, dst []F) {
	of := func(n int) []F {
		out := make([]F, n)
		for p := range n {
			out[p] = f.Partition(p, n).(F)
		}
		return out
	}
	return of(from), of(to)
}

// copyShards is how many shards of every partition one step of
// Set.copyClaims reads.
const copyShards = 256

func (s *Set) copyClaims(ctx context.Context, from, to int) error {
	src, dst := partitionsOf(s, from, to)
	n := uint64(1) << s.bits
	for lo := uint64(0); lo < n; lo += copyShards {
		hi := min(n, lo+copyShards)
		got := make([][]*goredis.StringSliceCmd, from)
		if _, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for i, f := range src {
				for sh := lo; sh < hi; sh++ {
					got[i] = append(got[i], p.SMembers(ctx, f.keys.Shard(sh)))
				}
			}
			return nil
		}); err != nil {
			return fmt.Errorf("read shards %x-%x: %w", lo, hi-1, err)
		}
		if _, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for j := range hi - lo {
				var members []any
				for i := range src {
					for _, m := range got[i][j].Val() {
						members = append(members, m)
					}
				}
				if len(members) == 0 {
					continue
				}
				for _, f := range dst {
					p.SAdd(ctx, f.keys.Shard(lo+j), members...)
				}
			}
			return nil
		}); err != nil {
			return fmt.Errorf("write shards %x-%x: %w", lo, hi-1, err)
		}
	}
	return nil
}

// copyChunk is how many bytes of a bitmap one step of Bloom.copyClaims
// reads from every partition.
const copyChunk = 1 << 20

func (f *Bloom) copyClaims(ctx context.Context, from, to int) error {
	src, dst := partitionsOf(f, from, to)
	size := int64(f.partBits / 8)
	for part := range f.parts {
		for off := int64(0); off < size; off += copyChunk {
			end := min(size, off+copyChunk) - 1
			var olds, news []*goredis.StringCmd
			if _, err := f.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
				for _, b := range src {
					olds = append(olds, p.GetRange(ctx, b.parts[part], off, end))
				}
				for _, b := range dst {
					news = append(news, p.GetRange(ctx, b.parts[part], off, end))
				}
				return nil
			}); err != nil {
				return fmt.Errorf("read bitmap part %d at byte %d: %w", part, off, err)
			}
			union := make([]byte, end-off+1)
			for _, c := range olds {
				orInto(union, []byte(c.Val()))
			}
			if _, err := f.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
				for i, b := range dst {
					have := make([]byte, len(union))
					copy(have, news[i].Val())
					want := bytes.Clone(have)
					orInto(want, union)
					if !bytes.Equal(want, have) {
						p.SetRange(ctx, b.parts[part], off, string(want))
					}
				}
				return nil
			}); err != nil {
				return fmt.Errorf("write bitmap part %d at byte %d: %w", part, off, err)
			}
		}
	}
	return nil
}

// orInto sets in dst the bits set in src (as long as dst).
func orInto(dst, src []byte) {
	for i := range min(len(dst), len(src)) {
		dst[i] |= src[i]
	}
}
