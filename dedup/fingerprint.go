package dedup

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"
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

	// The record is built in one buffer (on the stack for the common
	// short URL) and hashed once: a hash.Hash written field by field
	// costs an allocation per field, as its Write's argument escapes.
	var buf [512]byte
	rec := append(buf[:0], fingerprintDomain...)
	rec = appendUpperField(rec, method)
	rec = appendField(rec, us)
	rec = appendField(rec, body)
	if len(f.Headers) > 0 {
		names := make([]string, len(f.Headers))
		for i, n := range f.Headers {
			names[i] = textproto.CanonicalMIMEHeaderKey(n)
		}
		slices.Sort(names)
		names = slices.Compact(names)
		rec = appendLen(rec, len(names))
		for _, n := range names {
			rec = appendField(rec, n)
			vs := h[n]
			rec = appendLen(rec, len(vs))
			for _, v := range vs {
				rec = appendField(rec, v)
			}
		}
	}
	sum := sha256.Sum256(rec)
	var fp Fingerprint
	copy(fp[:], sum[:])
	return fp
}

// String returns the fingerprint in hexadecimal, for logs.
func (fp Fingerprint) String() string {
	return hex.EncodeToString(fp[:])
}

// appendLen appends n as a big-endian 64-bit integer.
func appendLen(b []byte, n int) []byte {
	return binary.BigEndian.AppendUint64(b, uint64(n))
}

// appendField appends p preceded by its length.
func appendField[T string | []byte](b []byte, p T) []byte {
	return append(appendLen(b, len(p)), p...)
}

// appendUpperField is appendField of strings.ToUpper(s), without building
// it when s is ASCII (a method is).
func appendUpperField(b []byte, s string) []byte {
	for i := range len(s) {
		if s[i] >= utf8.RuneSelf {
			return appendField(b, strings.ToUpper(s))
		}
	}
	b = appendLen(b, len(s))
	for i := range len(s) {
		c := s[i]
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		b = append(b, c)
	}
	return b
}
