package redis_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/dedup"
	"github.com/trawlhq/trawl/dedup/redis"
	"github.com/trawlhq/trawl/internal/integration"
)

// benchBatch is how many fingerprints one Add carries in benchmarks, about
// the links of a few pages.
const benchBatch = 1000

func benchAdd(b *testing.B, f dedup.Filter) {
	r := rand.New(rand.NewPCG(rand.Uint64(), 1))
	fps := randomFingerprints(r, benchBatch)
	ctx := b.Context()
	n := 0
	b.ResetTimer()
	for n < b.N {
		for i := range fps { // fresh fingerprints each round
			fps[i][0], fps[i][15] = byte(r.Uint32()), byte(r.Uint32())
			fps[i][7] ^= byte(n)
		}
		if _, err := f.Add(ctx, fps...); err != nil {
			b.Fatal(err)
		}
		n += len(fps)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "adds/s")
}

// BenchmarkSetAdd adds fingerprints to a Set in batches of 1000.
func BenchmarkSetAdd(b *testing.B) {
	c := integration.RedisClient(b)
	f, err := redis.NewSet(b.Context(), redis.SetConfig{Client: c, Key: integration.Name(b) + ":dupefilter", Capacity: 1_000_000})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = f.Purge(context.WithoutCancel(b.Context())) })
	benchAdd(b, f)
}

// BenchmarkBloomAdd adds fingerprints to a Bloom filter (1M at 1%) in
// batches of 1000.
func BenchmarkBloomAdd(b *testing.B) {
	c := integration.RedisClient(b)
	f, err := redis.NewBloom(b.Context(), redis.BloomConfig{Client: c, Key: integration.Name(b) + ":dupefilter", Capacity: 1_000_000, FPRate: 0.01})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = f.Purge(context.WithoutCancel(b.Context())) })
	benchAdd(b, f)
}

// memoryFingerprints is how many fingerprints BenchmarkMemory stores.
const memoryFingerprints = 1_000_000

// BenchmarkMemory stores 1,000,000 fingerprints in each kind of filter and
// reports Redis memory per fingerprint (INFO memory used_memory before and
// after) and, for the Bloom filter, the false-positive rate measured on
// 200,000 fingerprints never added. It does its work once whatever b.N is;
// run it alone (-run '^$' -bench Memory -benchtime 1x) on a server nothing
// else uses, or other traffic counts too.
func BenchmarkMemory(b *testing.B) {
	c := integration.RedisClient(b)
	fps := randomFingerprints(rand.New(rand.NewPCG(7, 8)), memoryFingerprints)
	add := func(b *testing.B, f dedup.Filter) {
		for i := 0; i < len(fps); i += benchBatch {
			if _, err := f.Add(b.Context(), fps[i:min(i+benchBatch, len(fps))]...); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("set", func(b *testing.B) {
		key := integration.Name(b) + ":dupefilter"
		f, err := redis.NewSet(b.Context(), redis.SetConfig{Client: c, Key: key, Capacity: memoryFingerprints})
		if err != nil {
			b.Fatal(err)
		}
		defer f.Purge(context.WithoutCancel(b.Context()))
		before := usedMemory(b, c)
		add(b, f)
		reportMemory(b, c, before)
	})
	b.Run("bloom-1%", func(b *testing.B) {
		key := integration.Name(b) + ":dupefilter"
		before := usedMemory(b, c)
		f, err := redis.NewBloom(b.Context(), redis.BloomConfig{Client: c, Key: key, Capacity: memoryFingerprints, FPRate: 0.01})
		if err != nil {
			b.Fatal(err)
		}
		defer f.Purge(context.WithoutCancel(b.Context()))
		add(b, f)
		reportMemory(b, c, before)
		fresh := randomFingerprints(rand.New(rand.NewPCG(9, 10)), 200_000)
		fp := 0
		for i := 0; i < len(fresh); i += benchBatch {
			in, err := f.Contains(b.Context(), fresh[i:i+benchBatch]...)
			if err != nil {
				b.Fatal(err)
			}
			for _, seen := range in {
				if seen {
					fp++
				}
			}
		}
		b.ReportMetric(float64(fp)/float64(len(fresh)), "fp-rate")
	})
	// What scrapy-redis stores: SHA-1 hex strings in one set.
	b.Run("scrapy-redis-hex40", func(b *testing.B) {
		key := integration.Name(b) + ":dupefilter"
		defer c.Del(context.WithoutCancel(b.Context()), key) // DEL, not UNLINK: free it before the next measurement
		before := usedMemory(b, c)
		sadd(b, c, key, func(i int) string {
			h := sha1.Sum(fps[i][:])
			return hex.EncodeToString(h[:])
		})
		reportMemory(b, c, before)
	})
	b.Run("binary16-one-set", func(b *testing.B) {
		key := integration.Name(b) + ":dupefilter"
		defer c.Del(context.WithoutCancel(b.Context()), key) // DEL, not UNLINK: free it before the next measurement
		before := usedMemory(b, c)
		sadd(b, c, key, func(i int) string { return string(fps[i][:]) })
		reportMemory(b, c, before)
	})
}

func sadd(b *testing.B, c goredis.UniversalClient, key string, member func(int) string) {
	for i := 0; i < memoryFingerprints; i += benchBatch {
		_, err := c.Pipelined(b.Context(), func(p goredis.Pipeliner) error {
			for j := i; j < i+benchBatch; j++ {
				p.SAdd(b.Context(), key, member(j))
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

func usedMemory(b *testing.B, c goredis.UniversalClient) int64 {
	b.Helper()
	info, err := c.Info(b.Context(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("INFO memory has no used_memory")
	return 0
}

func reportMemory(b *testing.B, c goredis.UniversalClient, before int64) {
	b.Helper()
	after := usedMemory(b, c)
	b.ReportMetric(float64(after-before)/memoryFingerprints, "bytes/fp")
}
