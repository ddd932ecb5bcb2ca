package local

import (
	"encoding/binary"
	"math"
	"math/bits"

	"github.com/bits-and-blooms/bloom/v3"

	"github.com/trawlhq/trawl/dedup"
)

// The growth schedule of a scalable Bloom filter (Almeida, Baquero, Preguiça
// and Hutchison, "Scalable Bloom Filters", 2007). Layer i holds
// Capacity·growth^i fingerprints at a false-positive rate of
// FPRate·(1-tightening)·tightening^i; a fingerprint is a false positive if
// any layer claims it, so the rate of the whole filter stays below the sum
// of the layers' rates, FPRate·(1-tightening)·Σ tightening^i < FPRate, at
// any size.
const (
	growth     = 2
	tightening = 0.9
)

// layerRate returns the false-positive rate of layer i of a filter whose
// bound is p.
func layerRate(p float64, i int) float64 {
	return p * (1 - tightening) * math.Pow(tightening, float64(i))
}

// Bit-position schemes: how a layer derives a fingerprint's k bit
// positions from its base hashes (see layer.testAndSet). Files record each
// layer's scheme.
const (
	// schemeDoubleHashing is enhanced double hashing on the base hashes,
	// each position mapped onto [0, m) by a multiply-high: the scheme of
	// format-1 and format-2 files. Its positions are not independent
	// enough for small, tight layers: at 1,024 fingerprints and a rate of
	// 1e-7 it measures 2.3e-6.
	schemeDoubleHashing = 1
	// schemeMixed mixes each position's double-hashing value with the
	// murmur3 finalizer before mapping it, which makes the positions of
	// different fingerprints independent: every new layer uses it.
	schemeMixed = 2
)

// layer is one Bloom filter of a scalable filter.
type layer struct {
	capacity uint64  // fingerprints it is sized for; it is full at capacity
	fpRate   float64 // its false-positive rate when full
	m, k     uint64  // bits, bit positions per fingerprint
	n        uint64  // fingerprints added to it
	scheme   uint64  // schemeDoubleHashing or schemeMixed
	words    []uint64
}

// newLayer returns an empty layer sized by bloom.EstimateParameters.
func newLayer(capacity uint64, fpRate float64) *layer {
	m, k := bloom.EstimateParameters(uint(capacity), fpRate)
	return &layer{capacity: capacity, fpRate: fpRate, m: uint64(m), k: uint64(k), scheme: schemeMixed,
		words: make([]uint64, wordsFor(uint64(m)))}
}

// layerBits returns the bits a layer of capacity fingerprints at fpRate
// takes.
func layerBits(capacity uint64, fpRate float64) uint64 {
	m, _ := bloom.EstimateParameters(uint(capacity), fpRate)
	return uint64(m)
}

// full reports whether the layer holds as many fingerprints as it is sized
// for.
func (l *layer) full() bool { return l.n >= l.capacity }

// sizeBytes returns the memory the layer's bits take.
func (l *layer) sizeBytes() uint64 { return 8 * uint64(len(l.words)) }

// clone returns a deep copy of l.
func (l *layer) clone() *layer {
	c := *l
	c.words = append([]uint64(nil), l.words...)
	return &c
}

// testAndSet sets the k bits of the fingerprint whose base hashes are h1
// and h2 (see baseHashes) and reports whether any was clear.
//
// The bit positions come straight from the fingerprint, which is already a
// uniform hash: its two 64-bit halves are mixed with the murmur3 finalizer
// (see baseHashes), then enhanced double hashing gives k values, each
// mixed again (schemeMixed) and mapped onto [0, m) by a multiply-high. This
// is faster than hashing the 16 bytes again with bloom's TestAndAdd (see
// BenchmarkLocations). The scheme is recorded in saved files.
func (l *layer) testAndSet(h1, h2 uint64) bool {
	if l.scheme == schemeDoubleHashing {
		return l.testAndSetDH(h1, h2)
	}
	fresh := false
	for i := uint64(0); i < l.k; i++ {
		loc, _ := bits.Mul64(fmix64(h1), l.m)
		w, bit := loc>>6, uint64(1)<<(loc&63)
		if l.words[w]&bit == 0 {
			l.words[w] |= bit
			fresh = true
		}
		h1 += h2
		h2 += i
	}
	return fresh
}

// contains reports whether all k bits of the fingerprint are set.
func (l *layer) contains(h1, h2 uint64) bool {
	if l.scheme == schemeDoubleHashing {
		return l.containsDH(h1, h2)
	}
	for i := uint64(0); i < l.k; i++ {
		loc, _ := bits.Mul64(fmix64(h1), l.m)
		if l.words[loc>>6]&(1<<(loc&63)) == 0 {
			return false
		}
		h1 += h2
		h2 += i
	}
	return true
}

// testAndSetDH is testAndSet in schemeDoubleHashing.
func (l *layer) testAndSetDH(h1, h2 uint64) bool {
	fresh := false
	for i := uint64(0); i < l.k; i++ {
		loc, _ := bits.Mul64(h1, l.m)
		w, bit := loc>>6, uint64(1)<<(loc&63)
		if l.words[w]&bit == 0 {
			l.words[w] |= bit
			fresh = true
		}
		h1 += h2
		h2 += i
	}
	return fresh
}

// containsDH is contains in schemeDoubleHashing.
func (l *layer) containsDH(h1, h2 uint64) bool {
	for i := uint64(0); i < l.k; i++ {
		loc, _ := bits.Mul64(h1, l.m)
		if l.words[loc>>6]&(1<<(loc&63)) == 0 {
			return false
		}
		h1 += h2
		h2 += i
	}
	return true
}

// estimatedFPRate returns the false-positive rate expected of the layer
// given n: (1 - e^(-k·n/m))^k.
func (l *layer) estimatedFPRate() float64 {
	return math.Pow(1-math.Exp(-float64(l.k)*float64(l.n)/float64(l.m)), float64(l.k))
}

// baseHashes returns the two hashes that double hashing starts from. Each
// depends on all 128 bits of fp, so that fingerprints differing in one half
// only (counters, in tests) still get unrelated bit positions. Every layer
// starts from the same two hashes; a layer's positions depend on its m, and
// the filter's bound is a sum over layers, which needs no independence
// between them.
func baseHashes(fp *dedup.Fingerprint) (h1, h2 uint64) {
	lo := binary.LittleEndian.Uint64(fp[:8])
	hi := binary.LittleEndian.Uint64(fp[8:])
	h1 = fmix64(hi ^ fmix64(lo+0x9e3779b97f4a7c15))
	h2 = fmix64(lo ^ fmix64(hi+0xc2b2ae3d27d4eb4f))
	return h1, h2
}

// fmix64 is the 64-bit finalizer of MurmurHash3.
func fmix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// wordsFor returns the number of 64-bit words that hold m bits.
func wordsFor(m uint64) uint64 { return (m + 63) / 64 }
