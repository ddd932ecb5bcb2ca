package linkscan

import (
	"bytes"
	"unicode/utf8"

	"golang.org/x/net/html"
)

// This file holds the scanner behind Extract. It finds the few tags
// Extract reads (a, area, link, base, title) by jumping from '<' to '<'
// with bytes.IndexByte, and skips text, comments, other tags and raw text
// without copying or allocating.
//
// It follows the tokenization rules of golang.org/x/net/html's Tokenizer
// exactly, quirks included, because Extract was first written on that
// Tokenizer: how a tag, its attributes, a comment, a doctype or a bogus
// comment end; which start tags make the following text raw (script, style,
// textarea, title, xmp, iframe, noembed, noframes, plaintext, but not
// noscript: a crawler runs no scripts) and where that text ends, with the
// script-data escape states; that a tag cut off by the end of the input is
// dropped; that a repeated attribute keeps its first value; and how
// character references in attribute values and in the title are decoded.
// links_ref_test.go keeps the Tokenizer version as the reference, and
// FuzzExtractLinksDifferential checks that both agree on every input.

// tagKind says which of the tags Extract reads a start tag is.
type tagKind uint8

const (
	tagOther tagKind = iota
	tagA             // <a> and <area>
	tagLink
	tagBase
	tagTitle
)

// tagAttrs locates the raw (undecoded) values of the first href and rel
// attributes of a tag in the document.
type tagAttrs struct {
	href, rel       span
	hasHref, hasRel bool
}

// span is the range [start, end) of a byte slice.
type span struct{ start, end int }

// hrefSpan locates a cleaned href: in the document, or in linkScan.arena.
type hrefSpan struct {
	span
	inArena bool
}

// linkScan is the state of one Extract scan.
type linkScan struct {
	// hrefs holds the cleaned hrefs in document order, as slices of the
	// document or decoded copies. The first max distinct ones count:
	// while there are fewer than max, hrefs keeps duplicates (which
	// costs less than a set); then it is deduplicated, and seen holds its
	// members from there on.
	hrefs    []hrefSpan
	seen     map[string]struct{}
	full     bool   // hrefs holds max distinct hrefs
	max      int    // the most hrefs kept
	dropped  int    // hrefs past max, not duplicates of those kept
	docBase  string // the first <base href>
	haveBase bool
	title    []byte // the raw text of the first <title>
	inTitle  bool   // a <title> start tag was seen
	body     []byte // the document
	arena    []byte // holds hrefs that are not as written in body
}

// href returns the bytes of h.
func (s *linkScan) href(h hrefSpan) []byte {
	if h.inArena {
		return s.arena[h.start:h.end]
	}
	return s.body[h.start:h.end]
}

// run scans body, recording hrefs, the document base and the title.
func (s *linkScan) run(b []byte) {
	s.body = b
	n := len(b)
	p := 0
	for p < n {
		i := bytes.IndexByte(b[p:], '<')
		if i < 0 {
			return
		}
		i += p
		if i+1 >= n {
			return
		}
		c := b[i+1]
		switch {
		case isASCIILetter(c):
			nameEnd, q, ok := scanTagName(b, i+1)
			if !ok {
				return
			}
			kind, raw := classifyTag(b[i+1 : nameEnd])
			if kind == tagA || kind == tagLink || kind == tagBase {
				var a tagAttrs
				if p, ok = scanAttrs(b, q, true, &a); !ok {
					return // a tag cut off by the end of input is dropped
				}
				s.startTag(kind, &a)
			} else if p = tagEnd(b, q); p < 0 {
				return
			}
			if raw != "" {
				end, ok := rawTextEnd(b, p, raw)
				if kind == tagTitle && !s.inTitle {
					s.title, s.inTitle = b[p:end], true
				}
				if !ok {
					return
				}
				p = end
			}
		case c == '/':
			if i+2 >= n {
				return
			}
			switch c2 := b[i+2]; {
			case c2 == '>': // "</>" is nothing
				p = i + 3
			case isASCIILetter(c2): // an end tag: attributes are parsed but unused
				_, q, ok := scanTagName(b, i+2)
				if !ok {
					return
				}
				if p = tagEnd(b, q); p < 0 {
					return
				}
			default: // a bogus comment, up to the next '>'
				if p = closeAngle(b, i+2); p < 0 {
					return
				}
			}
		case c == '!':
			if i+3 >= n {
				return
			}
			if b[i+2] == '-' && b[i+3] == '-' {
				if p = commentEnd(b, i+4); p < 0 {
					return
				}
			} else if p = closeAngle(b, i+2); p < 0 { // doctype, CDATA or bogus comment
				return
			}
		case c == '?': // a processing instruction: a bogus comment
			if p = closeAngle(b, i+2); p < 0 {
				return
			}
		default: // '<' as text
			p = i + 1
		}
	}
}

// startTag records what Extract needs from a start tag.
func (s *linkScan) startTag(kind tagKind, a *tagAttrs) {
	switch kind {
	case tagA:
		if a.hasHref {
			s.add(a.href)
		}
	case tagLink:
		if a.hasHref && a.hasRel && hasToken(attrValue(&s.arena, s.body[a.rel.start:a.rel.end]), "next") {
			s.add(a.href)
		}
	case tagBase:
		if !s.haveBase && a.hasHref {
			if h, ok := s.clean(a.href); ok {
				s.docBase, s.haveBase = string(s.href(h)), true
			}
		}
	}
}

// clean decodes the raw href at v in the document as the tokenizer does,
// trims white space around it and drops tabs and newlines in it (as the URL
// standard does, and as bytes.Map does, replacing invalid UTF-8), and
// returns where the result is, or false if it is empty.
func (s *linkScan) clean(v span) (hrefSpan, bool) {
	raw := s.body[v.start:v.end]
	start := len(s.arena)
	d := attrValue(&s.arena, raw) // raw, or s.arena[start:]
	decoded := len(s.arena) > start
	t := trimSpace(d)
	if hasTabOrNewline(t) {
		s.arena = append(s.arena[:start], bytes.Map(dropTabOrNewline, t)...)
		return hrefSpan{span{start, len(s.arena)}, true}, len(s.arena) > start
	}
	if len(t) == 0 {
		s.arena = s.arena[:start]
		return hrefSpan{}, false
	}
	off := cap(d) - cap(t) // t is d[off:off+len(t)]
	if decoded {
		return hrefSpan{span{start + off, start + off + len(t)}, true}, true
	}
	return hrefSpan{span: span{v.start + off, v.start + off + len(t)}}, true
}

func dropTabOrNewline(r rune) rune {
	if r == '\t' || r == '\n' || r == '\r' {
		return -1
	}
	return r
}

// add records the raw href at v unless it is empty once cleaned, or the cap
// is reached.
func (s *linkScan) add(v span) {
	h, ok := s.clean(v)
	if !ok {
		return
	}
	if s.full {
		if _, dup := s.seen[string(s.href(h))]; !dup {
			s.dropped++
		}
		return
	}
	if s.seen == nil {
		if s.hrefs == nil {
			s.hrefs = make([]hrefSpan, 0, hrefsGuess(s.body, s.max))
		}
		s.hrefs = append(s.hrefs, h)
		if len(s.hrefs) == s.max {
			s.dedup()
		}
		return
	}
	b := s.href(h)
	if _, dup := s.seen[string(b)]; dup {
		return
	}
	s.seen[string(b)] = struct{}{}
	s.hrefs = append(s.hrefs, h)
	s.full = len(s.hrefs) >= s.max
}

// hrefsGuess is the room for hrefs a scan of body starts with: one link
// per 512 bytes, growing past it. Pages of tens of KB with some tens of
// links are common, and a guess of one per 100 bytes allocated 5 to 10
// times what they use (bench-web's pages: 90 links in 50 KB).
func hrefsGuess(body []byte, max int) int {
	return min(len(body)/512+32, max)
}

// dedup removes duplicates from hrefs, keeping first-seen order, and starts
// tracking them in seen.
func (s *linkScan) dedup() {
	s.seen = make(map[string]struct{}, len(s.hrefs))
	out := s.hrefs[:0]
	for _, h := range s.hrefs {
		b := s.href(h)
		if _, dup := s.seen[string(b)]; !dup {
			s.seen[string(b)] = struct{}{}
			out = append(out, h)
		}
	}
	s.hrefs = out
	s.full = len(s.hrefs) >= s.max
}

// trimSpace is bytes.TrimSpace, quicker for the common short ASCII href.
func trimSpace(v []byte) []byte {
	i, j := 0, len(v)
	for i < j && v[i] < utf8.RuneSelf && asciiSpace(v[i]) {
		i++
	}
	for j > i && v[j-1] < utf8.RuneSelf && asciiSpace(v[j-1]) {
		j--
	}
	if (i < j && v[i] >= utf8.RuneSelf) || (j > i && v[j-1] >= utf8.RuneSelf) {
		return bytes.TrimSpace(v[i:j])
	}
	return v[i:j]
}

// asciiSpace reports whether c is white space as unicode.IsSpace sees it.
func asciiSpace(c byte) bool {
	return c == ' ' || '\t' <= c && c <= '\r'
}

// hasTabOrNewline reports whether v holds '\t', '\n' or '\r'.
func hasTabOrNewline(v []byte) bool {
	for _, c := range v {
		if c <= '\r' && (c == '\t' || c == '\n' || c == '\r') {
			return true
		}
	}
	return false
}

// isSpace reports whether c is HTML whitespace as the tokenizer sees it.
func isSpace(c byte) bool {
	return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\f'
}

func isASCIILetter(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

func isASCIIAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// equalLower reports whether b equals the lower-case ASCII letters in s,
// ignoring ASCII case.
func equalLower(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		if b[i]|0x20 != s[i] {
			return false
		}
	}
	return true
}

// skipSpace returns the index of the first non-whitespace byte at or after q.
func skipSpace(b []byte, q int) int {
	for q < len(b) && isSpace(b[q]) {
		q++
	}
	return q
}

// closeAngle returns the index after the first '>' at or after q, or -1.
func closeAngle(b []byte, q int) int {
	if q > len(b) {
		return -1
	}
	j := bytes.IndexByte(b[q:], '>')
	if j < 0 {
		return -1
	}
	return q + j + 1
}

// scanTagName reads the tag name starting at b[q], a letter. It returns the
// end of the name and where attributes start (past one whitespace byte that
// ends the name), or false at the end of input.
func scanTagName(b []byte, q int) (nameEnd, next int, ok bool) {
	for i := q + 1; i < len(b); i++ {
		switch b[i] {
		case ' ', '\n', '\r', '\t', '\f':
			return i, i + 1, true
		case '/', '>':
			return i, i, true
		}
	}
	return 0, 0, false
}

// classifyTag returns the kind of the start tag named name and, if the text
// after it is raw, the lower-case name of the end tag that ends it.
func classifyTag(name []byte) (tagKind, string) {
	switch len(name) {
	case 1:
		if name[0]|0x20 == 'a' {
			return tagA, ""
		}
	case 3:
		if equalLower(name, "xmp") {
			return tagOther, "xmp"
		}
	case 4:
		switch {
		case equalLower(name, "link"):
			return tagLink, ""
		case equalLower(name, "area"):
			return tagA, ""
		case equalLower(name, "base"):
			return tagBase, ""
		}
	case 5:
		switch {
		case equalLower(name, "title"):
			return tagTitle, "title"
		case equalLower(name, "style"):
			return tagOther, "style"
		}
	case 6:
		switch {
		case equalLower(name, "script"):
			return tagOther, "script"
		case equalLower(name, "iframe"):
			return tagOther, "iframe"
		}
	case 7:
		if equalLower(name, "noembed") {
			return tagOther, "noembed"
		}
	case 8:
		switch {
		case equalLower(name, "textarea"):
			return tagOther, "textarea"
		case equalLower(name, "noframes"):
			return tagOther, "noframes"
		}
		// noscript would be raw text too, but a crawler runs no scripts:
		// its content is markup.
	case 9:
		if equalLower(name, "plaintext") {
			return tagOther, "plaintext"
		}
	}
	return tagOther, ""
}

// scanAttrs reads a tag's attributes from b[q:] up to and including the
// closing '>', and returns the index after it, or false if the input ends
// first. If want, it records the first href and rel attributes in a.
func scanAttrs(b []byte, q int, want bool, a *tagAttrs) (int, bool) {
	n := len(b)
	q = skipSpace(b, q)
	for {
		if q >= n {
			return 0, false
		}
		if b[q] == '>' {
			return q + 1, true
		}
		// The key: up to whitespace, '/', '>' or '=' (but a leading '=' is
		// part of it). It may be empty: a lone '/'.
		ks := q
	key:
		for {
			if q >= n {
				return 0, false
			}
			c := b[q]
			switch c {
			case '=':
				if q == ks {
					q++
					continue
				}
				break key
			case ' ', '\n', '\r', '\t', '\f', '/', '>':
				break key
			}
			q++
		}
		ke := q
		// The value, if there is an '='.
		vs, ve := q, q
		if q = skipSpace(b, q); q >= n {
			return 0, false
		}
		switch b[q] {
		case '/':
			q++
		case '=':
			if q = skipSpace(b, q+1); q >= n {
				return 0, false
			}
			switch quote := b[q]; quote {
			case '>':
			case '"', '\'':
				j := bytes.IndexByte(b[q+1:], quote)
				if j < 0 {
					return 0, false
				}
				vs, ve = q+1, q+1+j
				q = ve + 1
			default:
				vs = q
				for {
					if q++; q >= n {
						return 0, false
					}
					if c := b[q]; c == '>' {
						ve = q
						break
					} else if isSpace(c) {
						ve = q
						q++
						break
					}
				}
			}
		}
		if want && ke > ks {
			k := b[ks:ke]
			switch {
			case !a.hasHref && equalLower(k, "href"):
				a.href, a.hasHref = span{vs, ve}, true
			case !a.hasRel && equalLower(k, "rel"):
				a.rel, a.hasRel = span{vs, ve}, true
			}
		}
		q = skipSpace(b, q)
	}
}

// tagEnd returns the index after the '>' that closes a tag whose
// attributes start at b[q], or -1 if the input ends first.
func tagEnd(b []byte, q int) int {
	// Only a quoted attribute value can hold a '>': without a quote before
	// the first '>', that is the end.
	j := bytes.IndexByte(b[q:], '>')
	if j < 0 {
		return -1
	}
	for _, c := range b[q : q+j] {
		if c == '"' || c == '\'' {
			end, ok := scanAttrs(b, q, false, nil)
			if !ok {
				return -1
			}
			return end
		}
	}
	return q + j + 1
}

// rawTextEnd returns the index of the end tag "</name" (followed by
// whitespace, '/' or '>', any case) that ends the raw text starting at
// b[p:], or len(b) and false if the input ends first.
func rawTextEnd(b []byte, p int, name string) (int, bool) {
	switch name {
	case "plaintext":
		return len(b), false
	case "script":
		return scriptEnd(b, p)
	}
	for {
		j := bytes.IndexByte(b[p:], '<')
		if j < 0 {
			return len(b), false
		}
		p += j + 1
		if p >= len(b) {
			return len(b), false
		}
		if b[p] != '/' {
			continue
		}
		ok, q, eof := rawEndTag(b, p+1, name)
		if eof {
			return len(b), false
		}
		if ok {
			return q, true
		}
	}
}

// rawEndTag tries to read "name" followed by whitespace, '/' or '>' at
// b[q:], just after a "</". If it does, it returns true and the index of the
// '<'; else the index to go on from. eof is true if the input ended first.
func rawEndTag(b []byte, q int, name string) (ok bool, next int, eof bool) {
	for i := range len(name) {
		if q >= len(b) {
			return false, 0, true
		}
		if c := b[q]; c != name[i] && c != name[i]-('a'-'A') {
			return false, q, false
		}
		q++
	}
	if q >= len(b) {
		return false, 0, true
	}
	switch b[q] {
	case ' ', '\n', '\r', '\t', '\f', '/', '>':
		return true, q - len(name) - 2, false
	}
	return false, q, false
}

// scriptEnd returns the index of the "</script" that ends script data
// starting at b[p:], or len(b) and false if the input ends first. It follows
// the script data states of HTML tokenization as the x/net/html Tokenizer
// implements them: "<!--" starts an escape in which "<script" starts a
// double escape, where "</script" does not end the script.
func scriptEnd(b []byte, p int) (int, bool) {
	n := len(b)
	q := p
	var c byte
	var ok, eof bool

scriptData:
	if j := bytes.IndexByte(b[q:], '<'); j < 0 {
		return n, false
	} else {
		q += j + 1
	}
	// scriptDataLessThanSign
	if q >= n {
		return n, false
	}
	c = b[q]
	q++
	switch c {
	case '/':
		goto scriptDataEndTagOpen
	case '!':
		goto scriptDataEscapeStart
	}
	q--
	goto scriptData

scriptDataEndTagOpen:
	if ok, q, eof = rawEndTag(b, q, "script"); eof {
		return n, false
	} else if ok {
		return q, true
	}
	goto scriptData

scriptDataEscapeStart:
	if q >= n {
		return n, false
	}
	if b[q] != '-' {
		goto scriptData
	}
	q++
	// scriptDataEscapeStartDash
	if q >= n {
		return n, false
	}
	if b[q] != '-' {
		goto scriptData
	}
	q++
	goto scriptDataEscapedDashDash

scriptDataEscaped:
	if q >= n {
		return n, false
	}
	c = b[q]
	q++
	switch c {
	case '-':
		goto scriptDataEscapedDash
	case '<':
		goto scriptDataEscapedLessThanSign
	}
	goto scriptDataEscaped

scriptDataEscapedDash:
	if q >= n {
		return n, false
	}
	c = b[q]
	q++
	switch c {
	case '-':
		goto scriptDataEscapedDashDash
	case '<':
		goto scriptDataEscapedLessThanSign
	}
	goto scriptDataEscaped

scriptDataEscapedDashDash:
	if q >= n {
		return n, false
	}
	c = b[q]
	q++
	switch c {
	case '-':
		goto scriptDataEscapedDashDash
	case '<':
		goto scriptDataEscapedLessThanSign
	case '>':
		goto scriptData
	}
	goto scriptDataEscaped

scriptDataEscapedLessThanSign:
	if q >= n {
		return n, false
	}
	c = b[q]
	q++
	if c == '/' {
		goto scriptDataEscapedEndTagOpen
	}
	if isASCIILetter(c) {
		goto scriptDataDoubleEscapeStart
	}
	q--
	goto scriptData

scriptDataEscapedEndTagOpen:
	if ok, q, eof = rawEndTag(b, q, "script"); eof {
		return n, false
	} else if ok {
		return q, true
	}
	goto scriptDataEscaped

scriptDataDoubleEscapeStart:
	q--
	for i := range len("script") {
		if q >= n {
			return n, false
		}
		c = b[q]
		q++
		if c != "script"[i] && c != "SCRIPT"[i] {
			q--
			goto scriptDataEscaped
		}
	}
	if q >= n {
		return n, false
	}
	c = b[q]
	q++
	switch c {
	case ' ', '\n', '\r', '\t', '\f', '/', '>':
		goto scriptDataDoubleEscaped
	}
	q--
	goto scriptDataEscaped

scriptDataDoubleEscaped:
	if q >= n {
		return n, false
	}
	c = b[q]
	q++
	switch c {
	case '-':
		goto scriptDataDoubleEscapedDash
	case '<':
		goto scriptDataDoubleEscapedLessThanSign
	}
	goto scriptDataDoubleEscaped

scriptDataDoubleEscapedDash:
	if q >= n {
		return n, false
	}
	c = b[q]
	q++
	switch c {
	case '-':
		goto scriptDataDoubleEscapedDashDash
	case '<':
		goto scriptDataDoubleEscapedLessThanSign
	}
	goto scriptDataDoubleEscaped

scriptDataDoubleEscapedDashDash:
	if q >= n {
		return n, false
	}
	c = b[q]
	q++
	switch c {
	case '-':
		goto scriptDataDoubleEscapedDashDash
	case '<':
		goto scriptDataDoubleEscapedLessThanSign
	case '>':
		goto scriptData
	}
	goto scriptDataDoubleEscaped

scriptDataDoubleEscapedLessThanSign:
	if q >= n {
		return n, false
	}
	c = b[q]
	q++
	if c == '/' {
		// scriptDataDoubleEscapeEnd
		if ok, q, eof = rawEndTag(b, q, "script"); eof {
			return n, false
		} else if ok {
			q += len("</script>")
			goto scriptDataEscaped
		}
		goto scriptDataDoubleEscaped
	}
	q--
	goto scriptDataDoubleEscaped
}

// commentEnd returns the index after the end of a comment whose "<!--" ends
// at b[q], or -1 if the input ends first. Like the tokenizer it accepts
// "-->", "--!>", and "<!-->" and "<!--->" as empty comments.
func commentEnd(b []byte, q int) int {
	n := len(b)
	dashes, beginning := 0, true
	for {
		if dashes == 0 && !beginning {
			// Only a '-' can lead to the end.
			j := bytes.IndexByte(b[q:], '-')
			if j < 0 {
				return -1
			}
			q += j
		}
		if q >= n {
			return -1
		}
		c := b[q]
		q++
		switch c {
		case '-':
			dashes++
			continue
		case '>':
			if dashes >= 2 || beginning {
				return q
			}
		case '!':
			if dashes >= 2 {
				if q >= n {
					return -1
				}
				c = b[q]
				q++
				if c == '>' {
					return q
				} else if c == '-' {
					dashes, beginning = 1, false
					continue
				}
			}
		}
		dashes, beginning = 0, false
	}
}

// attrValue decodes a raw attribute value as the tokenizer's TagAttr does:
// NUL bytes become U+FFFD and character references are decoded with the
// rules for attributes. It returns v itself if there is nothing to decode,
// else the decoding appended to *arena (capacity-capped, so later appends do
// not overwrite it), and never modifies v.
func attrValue(arena *[]byte, v []byte) []byte {
	if bytes.IndexByte(v, '&') < 0 && bytes.IndexByte(v, 0) < 0 {
		return v
	}
	start := len(*arena)
	out := *arena
	if out == nil {
		out = make([]byte, 0, max(2048, 4*len(v)))
	}
	for len(v) > 0 {
		i := 0
		for i < len(v) && v[i] != '&' && v[i] != 0 {
			i++
		}
		if i == len(v) {
			out = append(out, v...)
			break
		}
		out = append(out, v[:i]...)
		v = v[i:]
		if v[0] == 0 {
			out = append(out, "\uFFFD"...)
			v = v[1:]
			continue
		}
		var n int
		if out, n = appendCharRef(out, v); n == 0 {
			out = append(out, '&')
			n = 1
		}
		v = v[n:]
	}
	*arena = out
	return out[start:len(out):len(out)]
}

// appendCharRef decodes the character reference at the start of s (which
// starts with '&') in an attribute value, appends it to out and returns the
// length of the reference; it returns 0 if s holds no reference. It follows
// x/net/html's unescapeEntity with attribute set: a named reference without
// ';' followed by '=' is not decoded, and a name is decoded only if it is
// whole (no longest-prefix match).
func appendCharRef(out, s []byte) ([]byte, int) {
	if len(s) <= 1 {
		return out, 0
	}
	if s[1] == '#' {
		if len(s) <= 2 {
			return out, 0
		}
		i := 2
		hex := false
		if c := s[i]; c == 'x' || c == 'X' {
			hex = true
			i++
		}
		i0 := i
		x := rune(0)
		for i < len(s) {
			c := s[i]
			var d, mult rune
			if hex {
				mult = 16
				switch {
				case '0' <= c && c <= '9':
					d = rune(c) - '0'
				case 'a' <= c && c <= 'f':
					d = rune(c) - 'a' + 10
				case 'A' <= c && c <= 'F':
					d = rune(c) - 'A' + 10
				default:
					goto done
				}
			} else {
				mult = 10
				if '0' <= c && c <= '9' {
					d = rune(c) - '0'
				} else {
					goto done
				}
			}
			if x <= 0x10FFFF {
				x = mult*x + d
			}
			i++
		}
	done:
		if i == i0 {
			return out, 0
		}
		if i < len(s) && s[i] == ';' {
			i++
		}
		switch {
		case 0x80 <= x && x <= 0x9F:
			x = windows1252[x-0x80]
		case x == 0 || (0xD800 <= x && x <= 0xDFFF) || x > 0x10FFFF:
			x = '\uFFFD'
		}
		return utf8.AppendRune(out, x), i
	}

	i := 1
	for i < len(s) {
		c := s[i]
		i++
		if isASCIIAlnum(c) {
			continue
		}
		if c != ';' {
			i--
		}
		break
	}
	name := s[1:i]
	if len(name) == 0 {
		return out, 0
	}
	if name[len(name)-1] != ';' && i < len(s) && s[i] == '=' {
		return out, 0
	}
	dec, ok := namedRef(name)
	if !ok {
		return out, 0
	}
	return append(out, dec...), i
}

// namedRef returns the decoding of the named character reference name
// (without the '&', with its ';' if it has one) if it is one of HTML's.
func namedRef(name []byte) (string, bool) {
	switch string(name) {
	case "amp;", "amp":
		return "&", true
	case "quot;", "quot":
		return `"`, true
	case "lt;", "lt":
		return "<", true
	case "gt;", "gt":
		return ">", true
	case "apos;":
		return "'", true
	case "nbsp;", "nbsp":
		return "\u00A0", true
	}
	// x/net/html keeps its table to itself: ask UnescapeString, which
	// decodes text (not attribute) references and so also decodes the
	// longest prefix of name that is a reference without ';' ("&notit;"
	// gives "¬it;"). Tell a whole match from that by the tail a prefix
	// match leaves: a name with ';' leaves ';' (only "semi;" decodes to
	// ';'), one without leaves a letter or digit (which no reference
	// without ';' decodes to). TestNamedRefs checks every name.
	ref := "&" + string(name)
	dec := html.UnescapeString(ref)
	if dec == ref {
		return "", false
	}
	last := dec[len(dec)-1]
	if name[len(name)-1] == ';' {
		if last == ';' && string(name) != "semi;" {
			return "", false
		}
	} else if isASCIIAlnum(last) {
		return "", false
	}
	return dec, true
}

// windows1252 maps the numeric references &#x80; to &#x9F; to the runes
// Windows-1252 has there, as HTML does.
var windows1252 = [...]rune{
	'\u20AC', '\u0081', '\u201A', '\u0192', '\u201E', '\u2026', '\u2020', '\u2021',
	'\u02C6', '\u2030', '\u0160', '\u2039', '\u0152', '\u008D', '\u017D', '\u008F',
	'\u0090', '\u2018', '\u2019', '\u201C', '\u201D', '\u2022', '\u2013', '\u2014',
	'\u02DC', '\u2122', '\u0161', '\u203A', '\u0153', '\u009D', '\u017E', '\u0178',
}
