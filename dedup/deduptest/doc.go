// Package deduptest is the conformance suite for dedup.Filter: what the
// interface promises, said in code. Every filter passes it unchanged:
//
//	func TestConformance(t *testing.T) {
//		deduptest.Run(t, deduptest.Config{
//			New:               func(t *testing.T) dedup.Filter { … },
//			FalsePositiveRate: 0.001,
//		})
//	}
//
// The subtests, one per promise:
//
//   - NewThenSeen: a fingerprint is new once, then seen, singly or in batches.
//   - DuplicateInBatch: within one batch, later copies are not new.
//   - ResultOrder: results follow the input order, old and new mixed.
//   - EmptyBatch: an empty Add succeeds with no results.
//   - SharedAcrossHandles: two handles from New see each other's adds.
//   - ManyDistinct: 10,000 distinct fingerprints in random batches are all
//     new (allowing the configured false-positive rate), then all seen.
//   - LargeBatch: 10,000 fingerprints in one call, each twice.
//   - ConcurrentSameFingerprints: 8 goroutines on 2 handles add the same 1,000
//     fingerprints at once, shuffled; each is new exactly once in total (a
//     probabilistic filter: at most once, and at least (1-2·rate)·1000 are).
//   - Close: Close is idempotent; Add after Close wraps dedup.ErrClosed.
//   - CancelledContext: Add with a cancelled context returns promptly, and
//     if it fails, its error wraps context.Canceled; the filter still works.
//   - Purge: Purge forgets every fingerprint.
//   - ContainsChangesNothing, ContainsAfterAdd, ContainsClosed: for filters
//     that implement dedup.Checker (skipped otherwise), Contains never
//     changes the filter (Add still hears never-added fingerprints new),
//     reports every added fingerprint present through any handle, in input
//     order, reports never-added ones absent (an exact filter always, a
//     probabilistic one allowing its rate), and fails after Close with
//     dedup.ErrClosed.
//
// Each subtest has its own fresh namespace. Fingerprints
// are random (the seed is logged), so a backend that failed to give a
// subtest a fresh namespace still sees new fingerprints. Every call that
// could block is bounded: a hung backend fails the subtest rather than the
// whole run. Persistence is backend-specific and is not tested here.
package deduptest
