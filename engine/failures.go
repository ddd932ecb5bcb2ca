package engine

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// failureClocks is this worker's account of what fails: a streak of
// failed writes (publishing links, the filter, the sink) and one of failed
// receives from the frontier, either of which stops Run with
// ErrBackendFailing once it lasts Config.FailureTimeout with no success in
// between; and the last error that lost a page, which Run wraps in
// ErrNoPages when no page could be fetched.
type failureClocks struct {
	writes   failures // publishing links, the filter and the sink
	receives failures // receiving from the frontier
	last     atomic.Pointer[error]
}

// lost records err as the last error that lost a page.
func (f *failureClocks) lost(err error) { f.last.Store(&err) }

// lastLost returns the last error that lost a page, or nil.
func (f *failureClocks) lastLost() error {
	if p := f.last.Load(); p != nil {
		return *p
	}
	return nil
}

// failures tracks a streak of failures of one kind of operation.
type failures struct {
	since atomic.Int64          // unix nanoseconds of the streak's first failure; 0: no streak
	last  atomic.Pointer[error] // the latest failure
}

// fail records a failure.
func (f *failures) fail(err error) {
	f.last.Store(&err)
	f.since.CompareAndSwap(0, time.Now().UnixNano())
}

// ok ends the streak.
func (f *failures) ok() {
	if f.since.Load() != 0 {
		f.since.Store(0)
	}
}

// bound returns ctx, ending when the streak reaches limit if one is
// under way (limit < 0: never), so that a wait for work does not outlast
// the check of the streak: a worker whose writes keep failing gives up at
// limit, not at the next delivery (a retry's back-off later).
func (f *failures) bound(ctx context.Context, limit time.Duration) (context.Context, context.CancelFunc) {
	since := f.since.Load()
	if since == 0 || limit < 0 {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, time.Unix(0, since).Add(limit))
}

// check returns an error when the streak has lasted longer than limit
// (limit < 0: never).
func (f *failures) check(limit time.Duration) error {
	since := f.since.Load()
	if since == 0 || limit < 0 {
		return nil
	}
	d := time.Since(time.Unix(0, since))
	if d < limit {
		return nil
	}
	var last error
	if p := f.last.Load(); p != nil {
		last = *p
	}
	return fmt.Errorf("failed for %v with no success (last: %w)", d.Round(time.Millisecond), last)
}
