package dedup

import (
	"context"
	"errors"
)

// ErrClosed is returned by operations on a closed filter.
var ErrClosed = errors.New("dedup: closed")

// Size is the length of a fingerprint in bytes.
const Size = 16

// Fingerprint identifies a request: a 128-bit hash of its method, canonical
// URL and body (see Fingerprinter). It is stored in binary, never as hex.
type Fingerprint [Size]byte

// Filter is a duplicate filter shared by all workers of a crawl.
type Filter interface {
	// Add inserts fingerprints and reports, for each, whether it was new.
	// It is an atomic test-and-set: when several callers add the same
	// fingerprint at once, exactly one of them hears true. A probabilistic
	// filter may answer false for a fingerprint never added (a false
	// positive), never true for one added before.
	Add(ctx context.Context, fps ...Fingerprint) ([]bool, error)
	// Purge forgets every fingerprint, for every handle on the filter.
	Purge(ctx context.Context) error
	// Close releases the filter; a local filter saves its state first.
	// Close is idempotent.
	Close() error
}
