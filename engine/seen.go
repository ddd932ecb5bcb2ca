package engine

import (
	"hash/maphash"
	"sync/atomic"
)

// seenSlots is the size of a crawler's seenLinks: 1 MiB, enough for the
// links a site repeats on every page (navigation, footers) and the links
// of the last few thousand pages.
const seenSlots = 1 << 17

// seenLinks remembers, by a 64-bit hash of the URL, links this crawler
// has already offered to the duplicate filter in a batch that was written
// (published, or found claimed), so that the same link on the next page
// costs neither its fingerprint nor a filter call: the filter would only
// say again that it holds it. It is direct-mapped and lossy: a slot keeps
// the last hash that fell in it, so a forgotten link merely goes to the
// filter again. A link is never remembered before its batch was written,
// and only pages processed for the first time consult it: a page whose
// expanded mark was there already (a redelivery) rechecks every link with
// the filter, which is what recovers the links of a worker that died
// between claiming and publishing them.
//
// Methods are safe for concurrent use.
type seenLinks struct {
	seed  maphash.Seed
	slots []atomic.Uint64
}

func newSeenLinks() *seenLinks {
	return &seenLinks{seed: maphash.MakeSeed(), slots: make([]atomic.Uint64, seenSlots)}
}

// key is the hash of a request's URL; never 0, the empty slot.
func (s *seenLinks) key(u string) uint64 {
	return maphash.String(s.seed, u) | 1
}

func (s *seenLinks) has(k uint64) bool { return s.slots[k&(seenSlots-1)].Load() == k }

func (s *seenLinks) add(k uint64) { s.slots[k&(seenSlots-1)].Store(k) }

// seenKey is the key of r in s, and whether r may be remembered at all: a
// filtered GET of its URL alone (no body, no extra headers), whose
// fingerprint only its URL decides.
func (s *seenLinks) seenKey(r *Request) (uint64, bool) {
	if s == nil || r.DontFilter || (r.Method != "" && r.Method != "GET") || len(r.Body) > 0 || len(r.Header) > 0 {
		return 0, false
	}
	return s.key(r.URL), true
}
