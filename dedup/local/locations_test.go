package local

import (
	"context"
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"testing"

	"github.com/bits-and-blooms/bloom/v3"

	"github.com/trawlhq/trawl/dedup"
)

// BenchmarkLocations compares the two ways of finding a fingerprint's bits
// in a default-sized filter (10M, 0.1%): hashing its 16 bytes again with
// bloom's murmur3 (TestAndAdd), and deriving the positions from the
// fingerprint itself (testAndSet, what Filter uses).
func BenchmarkLocations(b *testing.B) {
	const n = 1 << 20
	r := rand.New(rand.NewPCG(1, 2))
	fps := make([]dedup.Fingerprint, n)
	for i := range fps {
		binary.LittleEndian.PutUint64(fps[i][:8], r.Uint64())
		binary.LittleEndian.PutUint64(fps[i][8:], r.Uint64())
	}
	b.Run("murmur", func(b *testing.B) {
		bf := bloom.NewWithEstimates(DefaultCapacity, DefaultFPRate)
		i := 0
		for b.Loop() {
			bf.TestAndAdd(fps[i%n][:])
			i++
		}
	})
	b.Run("derived", func(b *testing.B) {
		f, err := New(Config{})
		if err != nil {
			b.Fatal(err)
		}
		i := 0
		for b.Loop() {
			f.testAndSet(&fps[i%n])
			i++
		}
	})
}

// contains reports whether all of fp's bits are set, without setting them.
func (f *Filter) contains(fp *dedup.Fingerprint) bool {
	h1, h2 := baseHashes(fp)
	for i := uint64(0); i < f.k; i++ {
		loc, _ := bits.Mul64(h1, f.m)
		if f.words[loc>>6]&(1<<(loc&63)) == 0 {
			return false
		}
		h1 += h2
		h2 += i
	}
	return true
}

// TestFalsePositiveRate fills a filter to capacity and measures how many
// never-added fingerprints it claims to have seen, for random fingerprints
// and for structured ones (counters), which the bit derivation must spread.
func TestFalsePositiveRate(t *testing.T) {
	const (
		capacity = 100_000
		rate     = 0.01
		queries  = 100_000
	)
	r := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		name string
		fp   func(i uint64) dedup.Fingerprint
	}{
		{"random", func(uint64) (fp dedup.Fingerprint) {
			binary.LittleEndian.PutUint64(fp[:8], r.Uint64())
			binary.LittleEndian.PutUint64(fp[8:], r.Uint64())
			return fp
		}},
		{"counter", func(i uint64) (fp dedup.Fingerprint) {
			binary.BigEndian.PutUint64(fp[8:], i)
			return fp
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := New(Config{Capacity: capacity, FPRate: rate})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			added := map[dedup.Fingerprint]bool{}
			for i := uint64(0); i < capacity; i++ {
				fp := tc.fp(i)
				added[fp] = true
				if _, err := f.Add(context.Background(), fp); err != nil {
					t.Fatal(err)
				}
			}
			falsePositives, asked := 0, 0
			for i := uint64(capacity); asked < queries; i++ {
				fp := tc.fp(i)
				if added[fp] {
					continue
				}
				asked++
				if f.contains(&fp) {
					falsePositives++
				}
			}
			measured := float64(falsePositives) / queries
			t.Logf("%s: measured false-positive rate %.4f (target %v, estimated %.4f, %d bits, k=%d, %.2f bytes/fp)",
				tc.name, measured, rate, f.EstimatedFPRate(), f.m, f.k, float64(f.SizeBytes())/capacity)
			if measured > rate*1.5 || measured < rate/1.5 {
				t.Errorf("measured false-positive rate %.4f, want within 1.5x of %v", measured, rate)
			}
		})
	}
}
