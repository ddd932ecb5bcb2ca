package dedup

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// ErrBadURL is wrapped by the errors of Canonicalize and CanonicalURL: the
// URL is unparsable, not absolute, not http or https, or has no usable host.
var ErrBadURL = errors.New("dedup: bad url")

// idnaProfile maps internationalized host names to their ASCII (punycode)
// form. It is the lookup profile without the STD3 restriction, so that
// labels with underscores, common in the wild, are kept; the result is
// checked against the reg-name alphabet afterwards.
var idnaProfile = idna.New(
	idna.MapForLookup(),
	idna.BidiRule(),
	idna.Transitional(false),
	idna.StrictDomainName(false),
)

// Canonicalize parses raw and returns its canonical form, in which URLs that
// name the same resource compare equal as strings:
//
//   - leading and trailing ASCII white space is ignored;
//   - scheme and host are lower-cased; only http and https are accepted;
//   - internationalized host names are converted to punycode, trailing dots
//     of the host are dropped, IPv6 literals are written in their RFC 5952
//     form;
//   - the default port (80 for http, 443 for https) is dropped, and leading
//     zeros of any other port;
//   - an empty path becomes "/", and dot segments ("." and "..") are
//     resolved;
//   - percent-encoding is normalized in path and query: escapes of
//     unreserved characters are decoded (%41 -> A, %7E -> ~), the escapes
//     that stay use upper-case hex, and characters that must be escaped are;
//   - query parameters are sorted by key, then value (stable); empty
//     parameters ("&&", "&=&") are dropped, "a=" is written "a", and an empty query
//     (a trailing "?") is dropped;
//   - the fragment is dropped; empty user information ("http://@host/") is
//     dropped, other user information is kept.
//
// Canonicalize is idempotent: canonicalizing the String form of its result
// gives the same URL.
func Canonicalize(raw string) (*url.URL, error) {
	u, err := url.Parse(strings.Trim(raw, " \t\n\r\f"))
	if err != nil {
		return nil, fmt.Errorf("canonicalize url: %w: %w", ErrBadURL, err)
	}
	c, err := canonicalize(u)
	if err != nil {
		return nil, fmt.Errorf("canonicalize url %q: %w", raw, err)
	}
	return c, nil
}

// CanonicalURL returns the string form of Canonicalize(raw).
func CanonicalURL(raw string) (string, error) {
	u, err := Canonicalize(raw)
	if err != nil {
		return "", err
	}
	return u.String(), nil
}

// canonicalize returns the canonical form of u as a new URL; u is not
// modified. Errors wrap ErrBadURL.
func canonicalize(u *url.URL) (*url.URL, error) {
	scheme := strings.ToLower(u.Scheme)
	var defaultPort string
	switch scheme {
	case "http":
		defaultPort = "80"
	case "https":
		defaultPort = "443"
	case "":
		return nil, fmt.Errorf("%w: not absolute", ErrBadURL)
	default:
		return nil, fmt.Errorf("%w: scheme %q is not http or https", ErrBadURL, u.Scheme)
	}
	if u.Opaque != "" {
		return nil, fmt.Errorf("%w: no host", ErrBadURL)
	}
	host, err := canonicalHost(u.Hostname(), strings.HasPrefix(u.Host, "["))
	if err != nil {
		return nil, err
	}
	if port := u.Port(); port != "" {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("%w: bad port %q", ErrBadURL, port)
		}
		if port = strconv.FormatUint(n, 10); port != defaultPort {
			host += ":" + port
		}
	}

	c := &url.URL{Scheme: scheme, Host: host}
	if u.User != nil {
		if _, hasPassword := u.User.Password(); hasPassword || u.User.Username() != "" {
			c.User = u.User
		}
	}

	c.RawPath = removeDotSegments(normalizeEscapes(rawPath(u), pathChar))
	c.Path, err = url.PathUnescape(c.RawPath)
	if err != nil { // cannot happen: normalizeEscapes leaves only valid escapes
		return nil, fmt.Errorf("%w: path: %w", ErrBadURL, err)
	}
	if (&url.URL{Path: c.Path}).EscapedPath() == c.RawPath {
		c.RawPath = "" // as url.Parse leaves it
	}
	c.RawQuery = canonicalQuery(u.RawQuery)
	return c, nil
}

// canonicalHost returns the canonical form of a decoded host name (without
// port and brackets). bracketed tells whether it was written as an IP
// literal in brackets.
func canonicalHost(h string, bracketed bool) (string, error) {
	if bracketed {
		a, err := netip.ParseAddr(h)
		if err != nil || !a.Is6() || strings.ContainsFunc(a.Zone(), func(r rune) bool { return r >= 0x80 || !unreserved(byte(r)) }) {
			return "", fmt.Errorf("%w: bad IPv6 literal %q", ErrBadURL, h)
		}
		return "[" + a.String() + "]", nil
	}
	if !isASCII(h) {
		if !utf8.ValidString(h) {
			return "", fmt.Errorf("%w: host %q is not UTF-8", ErrBadURL, h)
		}
		a, err := idnaProfile.ToASCII(h)
		if err != nil {
			return "", fmt.Errorf("%w: host %q: %w", ErrBadURL, h, err)
		}
		h = a
	}
	h = strings.TrimRight(strings.ToLower(h), ".")
	if h == "" {
		return "", fmt.Errorf("%w: no host", ErrBadURL)
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !unreserved(c) && !subDelim(c) {
			return "", fmt.Errorf("%w: host %q has character %q", ErrBadURL, h, c)
		}
	}
	return h, nil
}

// rawPath returns the path of u as written, escapes included, so that an
// escaped "/" (%2F) stays distinct from a separator.
func rawPath(u *url.URL) string {
	p := u.EscapedPath()
	if u.RawPath != "" {
		if dp, err := url.PathUnescape(u.RawPath); err == nil && dp == u.Path {
			p = u.RawPath
		}
	}
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	return p
}

// canonicalQuery sorts the parameters of a raw query by key, then value,
// after normalizing their escapes. Empty parameters are dropped and an
// empty value is written without "=".
func canonicalQuery(q string) string {
	if q == "" {
		return ""
	}
	type param struct{ k, v string }
	var params []param
	for part := range strings.SplitSeq(q, "&") {
		k, v, _ := strings.Cut(part, "=")
		if k == "" && v == "" { // "&&" or "&=&"
			continue
		}
		params = append(params, param{normalizeEscapes(k, queryChar), normalizeEscapes(v, queryChar)})
	}
	slices.SortStableFunc(params, func(a, b param) int {
		if c := strings.Compare(a.k, b.k); c != 0 {
			return c
		}
		return strings.Compare(a.v, b.v)
	})
	var b strings.Builder
	b.Grow(len(q))
	for i, p := range params {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(p.k)
		if p.v != "" {
			b.WriteByte('=')
			b.WriteString(p.v)
		}
	}
	return b.String()
}

// normalizeEscapes rewrites s so that escapes of unreserved characters are
// decoded, the other escapes use upper-case hex, a "%" that starts no escape
// is escaped, and bytes for which allowed is false are escaped.
func normalizeEscapes(s string, allowed func(byte) bool) string {
	const hex = "0123456789ABCDEF"
	clean := true
	for i := 0; i < len(s) && clean; i++ {
		clean = s[i] != '%' && allowed(s[i])
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '%' && i+2 < len(s) && ishex(s[i+1]) && ishex(s[i+2]):
			d := unhex(s[i+1])<<4 | unhex(s[i+2])
			i += 2
			if unreserved(d) {
				b.WriteByte(d)
			} else {
				b.WriteByte('%')
				b.WriteByte(hex[d>>4])
				b.WriteByte(hex[d&15])
			}
		case c != '%' && allowed(c):
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		}
	}
	return b.String()
}

// removeDotSegments resolves "." and ".." segments of an absolute path
// (RFC 3986, section 5.2.4). Empty segments are kept.
func removeDotSegments(p string) string {
	if !strings.Contains(p, ".") {
		return p
	}
	segs := strings.Split(p[1:], "/")
	out := segs[:0]
	for i, s := range segs {
		last := i == len(segs)-1
		switch s {
		case ".":
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		default:
			out = append(out, s)
			continue
		}
		if last {
			out = append(out, "")
		}
	}
	return "/" + strings.Join(out, "/")
}

// unreserved reports whether c is an RFC 3986 unreserved character.
func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

// subDelim reports whether c is an RFC 3986 sub-delimiter.
func subDelim(c byte) bool {
	return strings.IndexByte("!$&'()*+,;=", c) >= 0
}

// pathChar reports whether c may appear unescaped in a path.
func pathChar(c byte) bool {
	return unreserved(c) || subDelim(c) || c == ':' || c == '@' || c == '/'
}

// queryChar reports whether c may appear unescaped in a query key or value
// ("&" separates parameters and so is always escaped inside one).
func queryChar(c byte) bool {
	return c != '&' && (unreserved(c) || subDelim(c) || c == ':' || c == '@' || c == '/' || c == '?')
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
