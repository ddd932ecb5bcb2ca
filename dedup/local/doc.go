// Package local is trawl's single-node duplicate filter: a scalable Bloom
// filter of request fingerprints held in memory, that starts small and
// grows with the crawl, saved to a file and, between saves, journaled
// beside it, so that a stopped or killed crawl resumes where it was.
//
// # Guarantees
//
//   - Add is an atomic test-and-set under one mutex: when goroutines add the
//     same fingerprint at once, exactly one hears "new"; within one batch,
//     later copies of a fingerprint are not new. The filter passes
//     dedup/deduptest.
//   - No false negatives: a fingerprint added before is never reported new,
//     across Save, Close, a crash, and New from the same file.
//   - False positives: a fingerprint never added is reported seen with
//     probability under Config.FPRate, at any size. The filter is a
//     scalable Bloom filter (Almeida et al., 2007): layer i holds
//     Capacity·2^i fingerprints at a rate of FPRate·0.1·0.9^i, and a new
//     layer is added when the last one is full, so the rates sum to less
//     than FPRate. The default bound is one in a million, because a false
//     positive is a page never crawled: a crawl of ten million URLs expects
//     to lose a few, not thousands. A full layer then takes about 4.4 bytes
//     per fingerprint, and the newest layer may be up to half empty: a
//     300-page crawl takes 4 KB, a million fingerprints 5 to 9 MB, ten
//     million 38 to 76 MB (at 0.1%, 2.5 bytes per fingerprint; the fixed
//     filter of earlier versions took 18 MB from the first fingerprint on,
//     sized for ten million at 0.1%).
//   - Durability: with a Path, each Add that finds new fingerprints appends
//     them to a journal file (Path.journal.N) in one write, before it
//     returns. New loads the file, then replays the journals, so a kill -9
//     loses no fingerprint whose Add returned. A record cut short by a kill
//     during its write (a torn tail: short, or failing its CRC at the end of
//     the file, or followed only by zeros) is ignored and logged; a damaged
//     record followed by others is an error wrapping ErrCorrupt. If the
//     journal write fails, Add fails and the filter is unchanged.
//   - The journal is written, not synced: like the embedded NATS server of
//     trawl's default mode, whose JetStream file store writes each message
//     to the file at once and syncs it every two minutes, the filter
//     survives the death of its process but an operating-system crash or
//     power loss may take the last writes of both. Save, Close and Purge
//     sync.
//   - When the journal passes Config.JournalLimit (by default the larger of
//     1 MiB and the filter's size), a goroutine owned by the filter saves it
//     and drops the journals the file now holds; Close stops it. Nobody
//     needs to call Save.
//   - Save writes atomically (temporary file, fsync, rename, directory
//     fsync): the file holds either the old state or the new one, never a
//     mix. A damaged file (bad checksum, wrong size, not a filter) is
//     rejected by New with ErrCorrupt, one made for another FPRate with
//     ErrMismatch; neither is silently replaced by an empty filter. The
//     file format is versioned: a format-1 file (the fixed-size filter of
//     earlier versions) is read as the first layer and rewritten in the
//     current format 3 on the next save; past its capacity the bound is
//     (1+0.9)·FPRate. Format-2 files are read too.
//   - Close saves (if Config.Path is set) and is idempotent; afterwards Add,
//     Contains, Purge and Save fail with dedup.ErrClosed.
//
// # Deviations
//
// The filter is local to one process: workers on other machines do not see
// it (use the Redis filters for that). Add checks ctx only on entry; it
// never blocks on anything but the mutex and one write to the journal.
// Config.Capacity is only the size of the first layer.
//
// Bit positions are derived from the fingerprint's own 128 bits (mixed with
// the murmur3 finalizer, enhanced double hashing, each value mixed again)
// instead of hashing it again with bloom's murmur3, which is faster; each
// layer records its scheme in the file. Plain double hashing, used by files
// of formats 1 and 2 (and kept for their layers), has a false-positive
// floor far above 1e-7 in small layers.
package local
