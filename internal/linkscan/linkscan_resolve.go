package linkscan

import (
	"bytes"
	"hash/maphash"
	"net/url"
	"strings"
	"unsafe"
)

// resolver resolves the hrefs of one document against its base URL and
// returns the distinct results, as resolve and a set of their String()
// would. It is built for the common cases:
//
//   - A relative reference made of characters a URL path never escapes (and
//     a printable query) resolves by joining strings, without url.Parse and
//     ResolveReference, and a plain absolute http(s) URL needs neither: in
//     both cases the result's String() is known without calling it, and
//     its host, path and query are substrings of it (see Link).
//   - The String() of every link is written into one buffer, which becomes
//     one string at the end, and the links' URLs are substrings of it. So
//     a page's links take a handful of allocations, not a few per link,
//     and a duplicate takes none. (Holding on to one link keeps those of
//     its page in memory; links are small and short-lived.)
//
// Anything else goes through resolve.
type resolver struct {
	base *url.URL
	// fast is whether base is an http(s) URL without user information,
	// with a host written as it is (no escapes), and basePath, its escaped
	// path, holds only bytes a path never escapes; prefix is then what
	// base.String() starts with: scheme, "://" and host; https whether
	// the scheme is https.
	fast     bool
	https    bool
	basePath string
	prefix   string
	// baseDir is basePath up to its last '/'; cleanDir and cleanBase say
	// that baseDir and basePath start with '/' and have no dot segments,
	// so that resolving a reference without dot segments is joining.
	baseDir             string
	cleanDir, cleanBase bool

	keys []byte     // the String() of each entry, one after another
	ents []linkEnt  // one per resolved href, duplicates included
	slow []*url.URL // the links resolve returned
	full []byte     // scratch: the merged path being resolved
	set  []int32    // scratch: links' set of entries
}

// linkEnt is a resolved href: its String() is keys[start:end]. If slow >
// 0, the URL is slow[slow-1]. Otherwise, it has scheme https if https,
// else http; host keys[start+len(scheme)+3:start+hostEnd]; path
// keys[start+hostEnd:start+pathEnd] and, if query, query
// keys[start+pathEnd+1:end]; and ForceQuery force (see Link). (No
// pointers: the garbage collector need not look into these.)
type linkEnt struct {
	start, end       int32
	hostEnd, pathEnd int32
	slow             int32
	https, force     bool
	query            bool
	dup              bool // the same link as an earlier entry
}

// newResolver returns a resolver for the hrefs s found, against base,
// whose scratch slices are sc's (see scratch). (A value, not a pointer:
// kept on the stack, its appends need no write barriers.)
func newResolver(base *url.URL, s *linkScan, sc *scratch) resolver {
	r := resolver{base: base, ents: sc.ents[:0], set: sc.set, full: sc.full}
	if cap(r.ents) < len(s.hrefs) {
		r.ents = make([]linkEnt, 0, len(s.hrefs))
	}
	if base != nil && (base.Scheme == "http" || base.Scheme == "https") && base.Host != "" && base.Opaque == "" && base.User == nil {
		p := base.EscapedPath()
		prefix := (&url.URL{Scheme: base.Scheme, Host: base.Host}).String()
		if plainPath(p, true) && len(prefix) == len(base.Scheme)+len("://")+len(base.Host) && strings.HasSuffix(prefix, base.Host) {
			r.fast, r.https, r.basePath, r.prefix = true, base.Scheme == "https", p, prefix
			r.baseDir = p[:strings.LastIndexByte(p, '/')+1]
			r.cleanDir = strings.HasPrefix(p, "/") && !hasDotSegment([]byte(r.baseDir))
			r.cleanBase = strings.HasPrefix(p, "/") && !hasDotSegment([]byte(p))
		}
	}
	n := 0
	for _, h := range s.hrefs {
		n += h.end - h.start
	}
	r.keys = make([]byte, 0, n+len(s.hrefs)*(len(r.prefix)+len(r.basePath)))
	return r
}

// add resolves href; if the result is an http(s) URL it is kept unless it
// is a duplicate.
func (r *resolver) add(href []byte) {
	if r.fast && r.relative(href) {
		return
	}
	if r.absolute(href) {
		return
	}
	if otherScheme(href) {
		return // before allocating: mailto: links are common, data: URLs long
	}
	if u := resolve(r.base, string(href)); u != nil {
		start := len(r.keys)
		r.keys = append(r.keys, u.String()...)
		r.slow = append(r.slow, u)
		r.ents = append(r.ents, linkEnt{start: int32(start), end: int32(len(r.keys)), slow: int32(len(r.slow))})
	}
}

// links returns the distinct links in the order they were added, or nil.
func (r *resolver) links() []Link {
	if len(r.ents) == 0 {
		return nil
	}
	// r.keys is not written to from here on: it can be the string's bytes.
	keys := unsafe.String(unsafe.SliceData(r.keys), len(r.keys))

	// Mark the duplicates, with an open-addressing set of entry indices
	// (plus one; 0 is empty): one pointer-free slice, the scratch's
	// where it has room, where a map[string] takes several allocations
	// the garbage collector must scan.
	size := 1
	for size < 2*len(r.ents) {
		size <<= 1
	}
	set := r.set[:0]
	if cap(set) >= size {
		set = set[:size]
		clear(set)
	} else {
		set = make([]int32, size)
	}
	r.set = set
	seed := maphash.MakeSeed()
	kept := 0
	for i := range r.ents {
		e := &r.ents[i]
		key := keys[e.start:e.end]
		for h := maphash.String(seed, key) & uint64(size-1); ; h = (h + 1) & uint64(size-1) {
			j := set[h]
			if j == 0 {
				set[h] = int32(i + 1)
				kept++
				break
			}
			if o := &r.ents[j-1]; keys[o.start:o.end] == key {
				e.dup = true
				break
			}
		}
	}

	links := make([]Link, 0, kept)
	for _, e := range r.ents {
		if e.dup {
			continue
		}
		l := Link{URL: keys[e.start:e.end]}
		if e.slow > 0 {
			l.slow = r.slow[e.slow-1]
		} else {
			l.hostEnd, l.pathEnd = e.hostEnd, e.pathEnd
			l.https, l.query, l.force = e.https, e.query, e.force
		}
		links = append(links, l)
	}
	return links
}

// splitRef splits a reference into the part before the query and the query
// as url.Parse would (it strips the fragment, and a '?' alone at the end
// sets ForceQuery). ok is false if the fragment might not parse (it has a
// '%'), or the query holds other than printable ASCII.
func splitRef(ref []byte) (path, query []byte, force, ok bool) {
	ref, frag, _ := bytes.Cut(ref, []byte("#"))
	if bytes.IndexByte(frag, '%') >= 0 {
		return nil, nil, false, false
	}
	if n := len(ref); n > 0 && ref[n-1] == '?' && bytes.IndexByte(ref, '?') == n-1 {
		path, force = ref[:n-1], true
	} else {
		path, query, _ = bytes.Cut(ref, []byte("?"))
	}
	for _, c := range query {
		if c <= ' ' || c >= 0x7f {
			return nil, nil, false, false
		}
	}
	return path, query, force, true
}

// relative resolves href against r.base (r.fast must be true) and reports
// true if it is a relative reference simple enough that parsing and
// resolving it is a matter of splitting and joining strings: no scheme, no
// authority, a path of bytes a path never escapes (and no ':'), a query of
// printable ASCII, and a fragment without '%'. The result's String() is
// then r.prefix, the resolved path and the query.
func (r *resolver) relative(href []byte) bool {
	if rooted, ok := plainRelative(href); ok && (rooted || r.cleanDir) {
		// The commonest href ("/p/12", "page.html"): its own path, or the
		// base's directory and it, in one pass over it.
		start := len(r.keys)
		r.keys = append(r.keys, r.prefix...)
		if !rooted {
			r.keys = append(r.keys, r.baseDir...)
		}
		r.keys = append(r.keys, href...)
		r.ents = append(r.ents, linkEnt{
			start: int32(start), end: int32(len(r.keys)),
			hostEnd: int32(len(r.prefix)), pathEnd: int32(len(r.keys) - start),
			https: r.https,
		})
		return true
	}
	path, query, force, ok := splitRef(href)
	if !ok || bytes.HasPrefix(path, []byte("//")) || !plainPath(path, false) {
		return false
	}
	hasQuery := force || len(query) > 0
	if len(path) == 0 && !hasQuery {
		// ResolveReference keeps the base's query (not its ForceQuery).
		query = []byte(r.base.RawQuery) // does not allocate: only read
		hasQuery = len(query) > 0
	}
	start := len(r.keys)
	r.keys = append(r.keys, r.prefix...)
	r.keys = r.appendPath(r.keys, path)
	pathEnd := len(r.keys)
	if hasQuery {
		r.keys = append(r.keys, '?')
		r.keys = append(r.keys, query...)
	}
	r.ents = append(r.ents, linkEnt{
		start: int32(start), end: int32(len(r.keys)),
		hostEnd: int32(len(r.prefix)), pathEnd: int32(pathEnd - start),
		https: r.https, force: force, query: hasQuery,
	})
	return true
}

// absolute reports true if href is a plain absolute http(s) URL, and
// then keeps it: lower-case scheme, a host of letters, digits, '.' and '-'
// and maybe a port, a path of bytes a path never escapes and without dot
// segments, a query of printable ASCII and a fragment without '%'. url.Parse
// accepts it, ResolveReference leaves it as it is, and its String() is href
// up to the fragment.
func (r *resolver) absolute(href []byte) bool {
	var scheme string
	switch {
	case bytes.HasPrefix(href, []byte("http://")):
		scheme = "http"
	case bytes.HasPrefix(href, []byte("https://")):
		scheme = "https"
	default:
		return false
	}
	rest, query, force, ok := splitRef(href)
	if !ok {
		return false
	}
	hostStart := len(scheme) + len("://")
	hostEnd := len(rest)
	if i := bytes.IndexByte(rest[hostStart:], '/'); i >= 0 {
		hostEnd = hostStart + i
	}
	path := rest[hostEnd:]
	if !plainHost(rest[hostStart:hostEnd]) || !plainPath(path, true) || hasDotSegment(path) {
		return false
	}
	hasQuery := force || len(query) > 0
	end := len(rest)
	if hasQuery {
		end += 1 + len(query)
	}
	start := len(r.keys)
	r.keys = append(r.keys, href[:end]...)
	r.ents = append(r.ents, linkEnt{
		start: int32(start), end: int32(start + end),
		hostEnd: int32(hostEnd), pathEnd: int32(len(rest)),
		https: scheme == "https", force: force, query: hasQuery,
	})
	return true
}

// plainRelative reports whether href is a relative reference that is
// all path, of bytes a path never escapes (no ':', so no scheme; no '?',
// '#' or '%'), not starting with "//" (an authority), without dot
// segments; rooted says that it starts with '/'. Such a reference
// resolves to itself (rooted) or to the base's directory and itself.
func plainRelative(href []byte) (rooted, ok bool) {
	if len(href) == 0 || len(href) > 1 && href[0] == '/' && href[1] == '/' {
		return false, false
	}
	seg := 0 // where the current segment starts
	for i, c := range href {
		if !pathByte[c] {
			return false, false
		}
		if c == '/' {
			if dotSegment(href[seg:i]) {
				return false, false
			}
			seg = i + 1
		}
	}
	return href[0] == '/', !dotSegment(href[seg:])
}

// dotSegment reports whether seg is "." or "..".
func dotSegment(seg []byte) bool {
	return len(seg) == 1 && seg[0] == '.' || len(seg) == 2 && seg[0] == '.' && seg[1] == '.'
}

// pathByte says which bytes url.URL never escapes in a path, but ':' (see
// plainPath).
var pathByte = func() (t [256]bool) {
	for c := range 256 {
		t[c] = plainPath([]byte{byte(c)}, false)
	}
	return t
}()

// otherScheme reports whether href starts with a scheme other than http and
// https (for which resolve returns nil).
func otherScheme(href []byte) bool {
	i := 0
	for i < len(href) && href[i] != ':' && href[i] != '/' && href[i] != '?' && href[i] != '#' {
		i++
	}
	if i == 0 || i == len(href) || href[i] != ':' {
		return false
	}
	s := href[:i]
	return !bytes.EqualFold(s, []byte("http")) && !bytes.EqualFold(s, []byte("https"))
}

// plainHost reports whether h is a non-empty host name or IPv4 address
// (letters, digits, '.' and '-') with maybe a port (':' and digits), which
// url.Parse accepts and url.URL.String writes as it is.
func plainHost(h []byte) bool {
	name, port, _ := bytes.Cut(h, []byte(":"))
	if len(name) == 0 {
		return false
	}
	for _, c := range name {
		if !isASCIIAlnum(c) && c != '.' && c != '-' {
			return false
		}
	}
	for _, c := range port {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// plainPath reports whether p holds only bytes url.URL never escapes in a
// path (and no ':' unless colon).
func plainPath[S string | []byte](p S, colon bool) bool {
	for i := range len(p) {
		c := p[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			continue
		}
		switch c {
		case '-', '_', '.', '~', '$', '&', '+', ',', '/', ';', '=', '@':
			continue
		case ':':
			if colon {
				continue
			}
		}
		return false
	}
	return true
}

// hasDotSegment reports whether the path p has a "." or ".." segment.
func hasDotSegment(p []byte) bool {
	for i := 0; ; i++ {
		j := bytes.IndexByte(p[i:], '.')
		if j < 0 {
			return false
		}
		i += j
		if i > 0 && p[i-1] != '/' {
			continue
		}
		if i+1 == len(p) || p[i+1] == '/' {
			return true
		}
		if p[i+1] == '.' && (i+2 == len(p) || p[i+2] == '/') {
			return true
		}
	}
}

// appendPath appends to dst the path net/url's resolvePath makes of
// r.basePath and ref (RFC 3986 merging and dot-segment removal).
func (r *resolver) appendPath(dst, ref []byte) []byte {
	// The common cases: a path that starts with '/' and has no dot segments
	// is its own resolution.
	switch {
	case len(ref) == 0:
		if r.cleanBase {
			return append(dst, r.basePath...)
		}
	case ref[0] == '/':
		if !hasDotSegment(ref) {
			return append(dst, ref...)
		}
	default:
		if r.cleanDir && !hasDotSegment(ref) {
			return append(append(dst, r.baseDir...), ref...)
		}
	}
	full := r.full[:0]
	switch {
	case len(ref) == 0:
		full = append(full, r.basePath...)
	case ref[0] != '/':
		full = append(full, r.basePath[:strings.LastIndexByte(r.basePath, '/')+1]...)
		full = append(full, ref...)
	default:
		full = append(full, ref...)
	}
	r.full = full
	if len(full) == 0 {
		return dst
	}
	start := len(dst)
	dst = append(dst, '/')
	var elem []byte
	remaining := full
	found := true
	first := true
	for found {
		elem, remaining, found = bytes.Cut(remaining, []byte("/"))
		switch string(elem) {
		case ".":
			first = false
			continue
		case "..":
			if i := bytes.LastIndexByte(dst[start+1:], '/'); i >= 0 {
				dst = dst[:start+i+1]
			} else {
				dst = dst[:start+1]
			}
			first = len(dst) == start+1
		default:
			if !first {
				dst = append(dst, '/')
			}
			dst = append(dst, elem...)
			first = false
		}
	}
	if string(elem) == "." || string(elem) == ".." {
		dst = append(dst, '/')
	}
	// We wrote an initial '/', but we don't want two.
	if len(dst) > start+1 && dst[start+1] == '/' {
		copy(dst[start:], dst[start+1:])
		dst = dst[:len(dst)-1]
	}
	return dst
}
