package engine

import (
	"sync"
	"sync/atomic"
	"time"
)

// membership is this worker's place in its crawl: whether it joined
// (adopted the crawl's settings, once: see joinCrawl), whether its guard
// is the crawl's (its settings came from, or were stored with, the
// crawl, so its refusals are the crawl's: see refuse), and when its
// trusted hosts last grew after it joined (see refreshTrust).
type membership struct {
	mu     sync.Mutex // held while joining
	joined bool
	shared atomic.Bool
	grew   atomic.Int64 // unix nanoseconds; 0: never
}

// join runs adopt unless a call of it succeeded before, one call at a
// time: adopt joins the crawl and says whether this worker's settings are
// the crawl's (shared). A failed join is tried again by the next call.
func (m *membership) join(adopt func() (shared bool, err error)) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.joined {
		return nil
	}
	shared, err := adopt()
	if err != nil {
		return err
	}
	m.joined = true
	if shared {
		m.shared.Store(true)
	}
	return nil
}

// isShared reports whether this worker's settings are the crawl's.
func (m *membership) isShared() bool { return m.shared.Load() }

// trustGrown records that this worker came to trust a host the crawl
// trusts, now.
func (m *membership) trustGrown() { m.grew.Store(time.Now().UnixNano()) }

// trustGrewSince reports whether this worker's trusted hosts grew after t.
func (m *membership) trustGrewSince(t time.Time) bool { return m.grew.Load() > t.UnixNano() }
