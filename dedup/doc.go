// Package dedup defines trawl's duplicate filter and the request
// fingerprints it stores.
//
// # Fingerprints
//
// A Fingerprint is 128 bits of SHA-256 over a request's upper-cased method,
// canonical URL and body, and optionally chosen headers (see Fingerprinter).
// Every field is length-prefixed, so moving bytes from one field to another
// changes the fingerprint. The layout is versioned and stable across
// releases: a crawl resumed by a newer worker recognizes the pages an older
// one fetched. Fingerprints are stored in binary (16 bytes), never as hex;
// Fingerprint.String gives hex for logs.
//
// # Canonical URLs
//
// Canonicalize and CanonicalURL map the spellings of one http or https URL
// to one string: lower-case scheme and host, punycode for internationalized
// hosts, no default port, no fragment, dot segments resolved, percent-encoding
// normalized, query parameters sorted. So "/p?a=1&b=2", "/p?b=2&a=1" and
// "/p?a=1&b=2#top" are one page, fetched once. Canonicalization never
// changes which resource a standard server returns: path case, the order of
// path segments, empty segments, "+" and escaped reserved characters (%2F,
// %26, %3D) are kept as written. It is idempotent. Other schemes, relative
// URLs and URLs without a usable host are errors wrapping ErrBadURL.
//
// # Filters
//
// A Filter's Add is an atomic test-and-set across every worker that shares
// the filter: when several callers add the same fingerprint at once, exactly
// one of them hears "new". Within one batch, the second copy of a
// fingerprint is reported as not new. An exact filter never reports a new
// fingerprint as seen; a probabilistic one (a Bloom filter) may, at a rate
// it documents, but never reports a fingerprint added before as new. Close
// is idempotent, and Add after Close fails with an error wrapping ErrClosed.
// Purge forgets everything. Filters that can answer without adding
// implement Checker.
//
// # Marks
//
// Beside request fingerprints the engine keeps two kinds of marks in the
// same filter, derived from a request's fingerprint so that every worker
// and tool agrees on them: PublishedMark ("this request was published to
// the frontier") and ExpandedMark ("this page's links were claimed"). They
// are the durable record of what a page published: a page processed again
// after a crash republishes exactly the links that were claimed and never
// published, and nothing else. With a probabilistic filter, a false
// positive on a publication mark (at the filter's rate) can leave such a
// link unpublished; one on an expanded mark costs only a read. Marks count
// as items when a filter is sized: a crawl of N pages stores up to 3N
// fingerprints (N requests, up to N published marks, up to N expanded
// marks), so size a Bloom filter's capacity for three times the pages
// expected.
//
// Package dedup/deduptest is the conformance suite every Filter passes;
// dedup/local is the single-node Bloom filter.
package dedup
