package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
)

// ErrBadPayload is wrapped by UnmarshalBinary errors: a queue payload that is
// not a request of a known encoding version. Such payloads are dead-lettered.
var ErrBadPayload = errors.New("engine: undecodable request payload")

// codecVersion is the first byte of an encoded request. Version 2 adds
// Deferrals, version 3 Referrer; a request is written in the lowest
// version that holds it, so a request without deferrals or referrer is
// version 1, which workers of every version read.
const (
	codecVersion    = 1
	codecVersion2   = 2
	codecVersion3   = 3
	maxCodecVersion = codecVersion3
)

// Limits that keep a hostile payload from allocating without bound.
const (
	maxFieldLen = 1 << 24 // 16 MiB per string or body
	maxEntries  = 1 << 12 // meta pairs, header names, values per header
)

const flagDontFilter = 1 << 0

// MarshalBinary encodes r compactly: a version byte, then the fields as
// varints and length-prefixed strings. Decoding never executes code.
//
// Version 1 layout: version, flags, priority (zig-zag varint), depth,
// retries, url, method, callback, body, scope, meta (count, then key/value pairs),
// header (count, then name, value count, values). Version 2 (used only
// when Deferrals is not 0) appends deferrals; version 3 (used only when
// Referrer is set) appends deferrals and referrer.
func (r *Request) MarshalBinary() ([]byte, error) {
	n := 16 + len(r.URL) + len(r.Method) + len(r.Callback) + len(r.Body)
	for k, v := range r.Meta {
		n += len(k) + len(v) + 4
	}
	b := make([]byte, 0, n)
	var flags byte
	if r.DontFilter {
		flags |= flagDontFilter
	}
	version := byte(codecVersion)
	switch {
	case r.Referrer != "":
		version = codecVersion3
	case r.Deferrals > 0:
		version = codecVersion2
	}
	b = append(b, version, flags)
	b = binary.AppendVarint(b, int64(r.Priority))
	b = binary.AppendUvarint(b, uint64(max(r.Depth, 0)))
	b = binary.AppendUvarint(b, uint64(max(r.Retries, 0)))
	b = appendString(b, r.URL)
	b = appendString(b, r.Method)
	b = appendString(b, r.Callback)
	b = appendBytes(b, r.Body)
	b = appendString(b, r.Scope)
	b = binary.AppendUvarint(b, uint64(len(r.Meta)))
	for k, v := range r.Meta {
		b = appendString(b, k)
		b = appendString(b, v)
	}
	b = binary.AppendUvarint(b, uint64(len(r.Header)))
	for k, vs := range r.Header {
		b = appendString(b, k)
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendString(b, v)
		}
	}
	if version >= codecVersion2 {
		b = binary.AppendUvarint(b, uint64(max(r.Deferrals, 0)))
	}
	if version >= codecVersion3 {
		b = appendString(b, r.Referrer)
	}
	return b, nil
}

// UnmarshalBinary decodes a payload written by MarshalBinary. Errors wrap
// ErrBadPayload.
func (r *Request) UnmarshalBinary(data []byte) error {
	d := decoder{b: data}
	if len(data) == 0 {
		return fmt.Errorf("%w: empty", ErrBadPayload)
	}
	v := d.byte()
	if v < codecVersion || v > maxCodecVersion {
		return fmt.Errorf("%w: unknown version %d", ErrBadPayload, v)
	}
	flags := d.byte()
	var out Request
	out.DontFilter = flags&flagDontFilter != 0
	out.Priority = int(d.varint())
	out.Depth = int(d.count(1 << 30))
	out.Retries = int(d.count(1 << 30))
	out.URL = d.string()
	out.Method = d.string()
	out.Callback = d.string()
	if body := d.bytes(); len(body) > 0 {
		out.Body = body
	}
	out.Scope = d.string()
	if n := d.count(maxEntries); n > 0 {
		out.Meta = make(map[string]string, n)
		for range n {
			k := d.string()
			out.Meta[k] = d.string()
		}
	}
	if n := d.count(maxEntries); n > 0 {
		out.Header = make(http.Header, n)
		for range n {
			k := d.string()
			m := d.count(maxEntries)
			vs := make([]string, 0, m)
			for range m {
				vs = append(vs, d.string())
			}
			out.Header[k] = vs
		}
	}
	if v >= codecVersion2 {
		out.Deferrals = d.count(1 << 20)
	}
	if v >= codecVersion3 {
		out.Referrer = d.string()
	}
	if d.err != nil {
		return d.err
	}
	if len(d.b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrBadPayload, len(d.b))
	}
	if out.URL == "" {
		return fmt.Errorf("%w: no url", ErrBadPayload)
	}
	*r = out
	return nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

// decoder reads fields; after the first error every read returns zero.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: truncated or malformed %s", ErrBadPayload, what)
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.fail("header")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads an unsigned varint no larger than limit.
func (d *decoder) count(limit uint64) int {
	v, n := binary.Uvarint(d.b)
	if n <= 0 || v > limit {
		d.fail("count")
		return 0
	}
	d.b = d.b[n:]
	return int(v)
}

func (d *decoder) bytes() []byte {
	n := d.count(maxFieldLen)
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.fail("field")
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) string() string { return string(d.bytes()) }
