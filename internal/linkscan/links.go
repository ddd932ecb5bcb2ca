package linkscan

import (
	"bytes"
	"net/url"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"golang.org/x/net/html"
)

const (
	// maxLinks caps the links Extract returns for one document.
	maxLinks = DefaultMaxLinks
	// maxTitle caps the length of the title Extract returns, in bytes.
	maxTitle = 1024
)

// Extract parses an HTML document and returns its title and the absolute
// http(s) links of <a href>, <area href> and <link rel="next" href> (rel may
// hold several tokens), resolved against the first <base href> if there is
// one, else against base. Fragments are removed; duplicates (same string) are
// removed keeping first-seen order; javascript:, mailto:, data:, tel: and
// other non-http(s) links, empty and unparsable hrefs are skipped; whitespace around
// hrefs (and tabs and newlines within, as browsers do) is dropped.
//
// It tokenizes as HTML does (as golang.org/x/net/html's Tokenizer does), so
// broken HTML yields what a browser would mostly find, and binary input
// yields little; it returns at most 10,000 links, and a title of at most
// 1,024 bytes with whitespace collapsed. Links in scripts, styles, comments
// and other raw text are not found; links in <noscript> are. It does not
// modify body.
func Extract(base *url.URL, body []byte) (title string, links []*url.URL) {
	title, ls, _ := ExtractLimited(base, body, maxLinks)
	if ls == nil {
		return title, nil
	}
	// One allocation for the url.URLs built from spans, not one each.
	links = make([]*url.URL, len(ls))
	slab := make([]url.URL, len(ls))
	for i := range ls {
		if ls[i].slow != nil {
			links[i] = ls[i].slow
			continue
		}
		slab[i] = ls[i].Value()
		links[i] = &slab[i]
	}
	return title, links
}

// DefaultMaxLinks is the most links Extract returns for one document.
const DefaultMaxLinks = 10000

// ExtractLimited is Extract returning Links, the first max distinct hrefs
// (max > 0) instead of DefaultMaxLinks; dropped counts the hrefs past
// them (a dropped href found again counts again). links[i].Parsed() is
// the i-th link Extract returns; most links need no url.URL (see Link).
func ExtractLimited(base *url.URL, body []byte, max int) (title string, links []Link, dropped int) {
	if max <= 0 {
		max = maxLinks
	}
	sc := getScratch()
	s := linkScan{max: max, arena: sc.arena}
	if cap(sc.hrefs) >= hrefsGuess(body, max) {
		s.hrefs = sc.hrefs
	}
	title, links = s.extract(base, body, sc)
	if cap(s.hrefs) > cap(sc.hrefs) {
		sc.hrefs = s.hrefs
	}
	sc.arena = s.arena
	sc.put()
	return title, links, s.dropped
}

// extract is ExtractLimited's work, with the scratch sc (see scratch).
func (s *linkScan) extract(base *url.URL, body []byte, sc *scratch) (title string, links []Link) {
	s.run(body)
	if s.inTitle {
		title = cleanTitle(titleText(s.title))
	}

	// The document's base URL applies to every link, even those before <base>.
	if s.haveBase {
		if b := resolve(base, s.docBase); b != nil {
			base = b
		}
	}
	if len(s.hrefs) == 0 {
		return title, nil
	}
	// s.hrefs may hold duplicates (see linkScan.add): they resolve to the
	// same URL, which the resolver drops.
	r := newResolver(base, s, sc)
	for _, h := range s.hrefs {
		r.add(s.href(h))
	}
	links = r.links()
	sc.ents, sc.set, sc.full = r.ents, r.set, r.full
	return title, links
}

// scratch holds what one ExtractLimited call uses and drops, for the
// next call: the hrefs found and the arena of those decoded (linkScan),
// the resolver's entries, its set of them and its merged path. What a
// call returns refers to none of it (the links' strings are the
// resolver's keys, allocated for each call). A page shaped like
// bench-web's (50 KB, 90 links) costs 4 allocations and 6 KB, not 8 and
// 14.5 KB (BenchmarkExtractLimitedWebPage).
type scratch struct {
	hrefs []hrefSpan
	arena []byte
	ents  []linkEnt
	set   []int32
	full  []byte
}

// scratches holds *scratch.
var scratches sync.Pool

// maxScratch bounds the entries of a scratch's slices kept for another
// call: a page of thousands of links leaves none of its large slices in
// the pool.
const maxScratch = 2048

// getScratch returns a scratch whose slices are empty.
func getScratch() *scratch {
	if sc, ok := scratches.Get().(*scratch); ok {
		return sc
	}
	return new(scratch)
}

// put empties sc's slices, drops those over maxScratch and keeps sc for
// another call.
func (sc *scratch) put() {
	sc.hrefs = keep(sc.hrefs)
	sc.arena = keep(sc.arena)
	sc.ents = keep(sc.ents)
	sc.set = keep(sc.set)
	sc.full = keep(sc.full)
	scratches.Put(sc)
}

// keep returns s emptied, or nil if it holds room for more than
// maxScratch entries (8 of them for bytes).
func keep[T any](s []T) []T {
	if limit := maxScratch; cap(s) > limit && (cap(s) > 8*limit || unsafe.Sizeof(*new(T)) > 1) {
		return nil
	}
	return s[:0]
}

// hasToken reports whether the space-separated list v holds tok (ASCII
// case-insensitive).
func hasToken(v []byte, tok string) bool {
	for _, f := range bytes.Fields(v) {
		if bytes.EqualFold(f, []byte(tok)) {
			return true
		}
	}
	return false
}

// titleText decodes the raw text of a <title> as the tokenizer does: NUL
// bytes become U+FFFD and character references are decoded.
func titleText(raw []byte) string {
	t := string(raw)
	if strings.IndexByte(t, 0) >= 0 {
		t = strings.ReplaceAll(t, "\x00", "\uFFFD")
	}
	if strings.IndexByte(t, '&') >= 0 {
		t = html.UnescapeString(t)
	}
	return t
}

// resolve returns href resolved against base if the result is an absolute
// http(s) URL, with its fragment removed; else nil.
func resolve(base *url.URL, href string) *url.URL {
	// Skip other schemes cheaply: data: URLs can be large.
	if i := strings.IndexAny(href, ":/?#"); i > 0 && href[i] == ':' {
		scheme := strings.ToLower(href[:i])
		if scheme != "http" && scheme != "https" {
			return nil
		}
	}
	ref, err := url.Parse(href)
	if err != nil {
		return nil
	}
	u := ref
	if base != nil {
		u = base.ResolveReference(ref)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return nil
	}
	u.Fragment, u.RawFragment = "", ""
	return u
}

// cleanTitle collapses whitespace (as strings.Fields sees it) and caps the
// length at a rune boundary. It looks at no more of t than it needs.
func cleanTitle(t string) string {
	if clean(t) {
		return t
	}
	const enough = maxTitle + utf8.UTFMax + 1
	var b []byte
	for len(b) < enough {
		i := 0
		for i < len(t) && isUnicodeSpace(t, i) > 0 {
			i += isUnicodeSpace(t, i)
		}
		t = t[i:]
		if t == "" {
			break
		}
		j := 0
		for j < len(t) && isUnicodeSpace(t, j) == 0 {
			if t[j] < utf8.RuneSelf {
				j++
			} else {
				_, size := utf8.DecodeRuneInString(t[j:])
				j += size
			}
		}
		if len(b) > 0 {
			b = append(b, ' ')
		}
		b = append(b, t[:min(j, enough)]...)
		t = t[j:]
	}
	if len(b) > maxTitle {
		i := maxTitle
		for i > 0 && !utf8.RuneStart(b[i]) {
			i--
		}
		b = b[:i]
	}
	return string(b)
}

// clean reports whether cleanTitle would return t as it is: ASCII of at
// most maxTitle bytes, words separated by single spaces, no space at
// either end (most titles).
func clean(t string) bool {
	if len(t) > maxTitle {
		return false
	}
	space := true // before the first word
	for i := range len(t) {
		switch c := t[i]; {
		case c >= utf8.RuneSelf, '\t' <= c && c <= '\r':
			return false
		case c == ' ':
			if space {
				return false
			}
			space = true
		default:
			space = false
		}
	}
	return !space || t == ""
}

// isUnicodeSpace returns the length of the rune at t[i] if it is white space
// (unicode.IsSpace), else 0.
func isUnicodeSpace(t string, i int) int {
	if c := t[i]; c < utf8.RuneSelf {
		if c == ' ' || '\t' <= c && c <= '\r' {
			return 1
		}
		return 0
	}
	r, size := utf8.DecodeRuneInString(t[i:])
	if unicode.IsSpace(r) {
		return size
	}
	return 0
}
