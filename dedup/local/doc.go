// Package local is trawl's single-node duplicate filter: a Bloom filter of
// request fingerprints held in memory, saved to a file on Close and loaded
// from it by New, so that a stopped crawl resumes where it was.
//
// # Guarantees
//
//   - Add is an atomic test-and-set under one mutex: when goroutines add the
//     same fingerprint at once, exactly one hears "new"; within one batch,
//     later copies of a fingerprint are not new. The filter passes
//     dedup/deduptest.
//   - No false negatives: a fingerprint added before is never reported new,
//     across Save, Close and New from the same file.
//   - False positives: a fingerprint never added is reported seen with
//     probability about Config.FPRate once Len reaches Config.Capacity (less
//     before; more past it, and a warning is logged when it is passed).
//     The filter is sized by bloom.EstimateParameters: about 1.2 bytes per
//     fingerprint at 1%, 1.8 at 0.1% (18 MB for the default 10 million).
//   - Save writes atomically (temporary file, fsync, rename, directory
//     fsync): the file holds either the old state or the new one, never a
//     mix. A damaged file (bad checksum, wrong size, not a filter) is
//     rejected by New with ErrCorrupt, one made for another capacity or
//     rate with ErrMismatch; neither is silently replaced by an empty filter.
//   - Close saves (if Config.Path is set) and is idempotent; afterwards Add,
//     Purge and Save fail with dedup.ErrClosed.
//
// # Deviations
//
// The filter is local to one process: workers on other machines do not see
// it (use the Redis filters for that). Add checks ctx only on entry; it
// never blocks on anything but the mutex. Only state as of the last Save or
// Close survives a crash (kill -9): fingerprints added since are forgotten,
// so their pages may be fetched again, which at-least-once crawling allows.
//
// Bit positions are derived from the fingerprint's own 128 bits (mixed with
// the murmur3 finalizer, then enhanced double hashing) instead of hashing it
// again, which is about three times faster; the file records the scheme, so
// a change of scheme is detected on load.
package local
