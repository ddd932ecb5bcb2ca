package dedup

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
)

// fingerprintDomain starts every hashed record. It names the layout below;
// fingerprints are stored by filters that outlive a worker's version, so a
// change of layout must change this string.
const fingerprintDomain = "trawl fingerprint v1\x00"

// Fingerprinter hashes requests into fingerprints. The zero value hashes
// method, canonical URL and body.
//
// The hash is SHA-256 truncated to 128 bits, over a record in which every
// field is length-prefixed, so that no two different (method, URL, body,
// headers) tuples are hashed from the same bytes. The record layout is
// stable across releases: fingerprints stored by one version of trawl match
// those computed by the next.
type Fingerprinter struct {
	// Headers names request headers that are also hashed, for sites that
	// serve different pages to different values (Accept-Language, say).
	// Names are canonicalized (accept-language = Accept-Language); their
	// order and repeats do not matter. A header's values are hashed in
	// order; an absent header hashes like one with no values.
	Headers []string
}

// Fingerprint returns the fingerprint of a request. u is canonicalized first
// (see Canonicalize), so callers may pass any parsed absolute URL; a URL that
// cannot be canonicalized (not http or https, no host) is hashed in its
// String form, and a nil URL as "". Method "" means GET; the method is
// upper-cased. A nil and an empty body are the same.
func (f Fingerprinter) Fingerprint(method string, u *url.URL, body []byte, h http.Header) Fingerprint {
	if method == "" {
		method = http.MethodGet
	}
	var us string
	if u != nil {
		if c, err := canonicalize(u); err == nil {
			us = c.String()
		} else {
			us = u.String()
		}
	}

	d := sha256.New()
	d.Write([]byte(fingerprintDomain))
	writeField(d, []byte(strings.ToUpper(method)))
	writeField(d, []byte(us))
	writeField(d, body)
	if len(f.Headers) > 0 {
		names := make([]string, len(f.Headers))
		for i, n := range f.Headers {
			names[i] = textproto.CanonicalMIMEHeaderKey(n)
		}
		slices.Sort(names)
		names = slices.Compact(names)
		writeLen(d, len(names))
		for _, n := range names {
			writeField(d, []byte(n))
			vs := h[n]
			writeLen(d, len(vs))
			for _, v := range vs {
				writeField(d, []byte(v))
			}
		}
	}
	var sum [sha256.Size]byte
	var fp Fingerprint
	copy(fp[:], d.Sum(sum[:0]))
	return fp
}

// String returns the fingerprint in hexadecimal, for logs.
func (fp Fingerprint) String() string {
	return hex.EncodeToString(fp[:])
}

// writeLen writes n as a big-endian 64-bit integer.
func writeLen(d hash.Hash, n int) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(n))
	d.Write(b[:])
}

// writeField writes p preceded by its length.
func writeField(d hash.Hash, p []byte) {
	writeLen(d, len(p))
	d.Write(p)
}
