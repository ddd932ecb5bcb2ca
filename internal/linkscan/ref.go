package linkscan

import (
	"bytes"
	"net/url"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/html"
)

// ExtractTokenized is the original Extract, built on the x/net/html
// Tokenizer, kept unchanged as the reference the fast scanner is checked
// against (FuzzExtractLinksDifferential). It parses an HTML document and returns its title and the absolute
// http(s) links of <a href>, <area href> and <link rel="next" href> (rel may
// hold several tokens), resolved against the first <base href> if there is
// one, else against base. Fragments are removed; duplicates (same string) are
// removed keeping first-seen order; javascript:, mailto:, data:, tel: and
// other non-http(s) links, empty and unparsable hrefs are skipped; whitespace around
// hrefs (and tabs and newlines within, as browsers do) is dropped.
//
// It uses a streaming tokenizer, so broken HTML yields what a browser would
// mostly find, and binary input yields little; it returns at most 10,000
// links, and a title of at most 1,024 bytes with whitespace collapsed. Links
// in scripts, styles and comments are not found; links in <noscript> are.
func ExtractTokenized(base *url.URL, body []byte) (title string, links []*url.URL) {
	z := html.NewTokenizer(bytes.NewReader(body))
	var (
		hrefs     []string
		seenHref  = make(map[string]struct{})
		docBase   string
		haveBase  bool
		inTitle   bool
		haveTitle bool
		titleBuf  []byte
	)
	add := func(h string) {
		if len(hrefs) >= maxLinks {
			return
		}
		if _, dup := seenHref[h]; dup {
			return
		}
		seenHref[h] = struct{}{}
		hrefs = append(hrefs, h)
	}
loop:
	for {
		switch z.Next() {
		case html.ErrorToken:
			break loop
		case html.TextToken:
			if inTitle && len(titleBuf) <= maxTitle*2 {
				titleBuf = append(titleBuf, z.Text()...)
			}
		case html.EndTagToken:
			if inTitle {
				name, _ := z.TagName()
				if string(name) == "title" {
					inTitle, haveTitle = false, true
				}
			}
		case html.StartTagToken, html.SelfClosingTagToken:
			name, hasAttr := z.TagName()
			switch string(name) {
			case "noscript":
				// A crawler runs no scripts: parse the contents as markup.
				z.NextIsNotRawText()
			case "title":
				if !haveTitle && !inTitle {
					inTitle = true
				}
			case "a", "area":
				if h, ok := refAttr(z, hasAttr, "href", ""); ok {
					add(h)
				}
			case "link":
				if h, ok := refAttr(z, hasAttr, "href", "rel"); ok {
					add(h)
				}
			case "base":
				if !haveBase {
					if h, ok := refAttr(z, hasAttr, "href", ""); ok {
						docBase, haveBase = h, true
					}
				}
			}
		}
	}
	if inTitle || haveTitle {
		title = refCleanTitle(titleBuf)
	}

	// The document's base URL applies to every link, even those before <base>.
	if haveBase {
		if b := refResolve(base, docBase); b != nil {
			base = b
		}
	}
	seen := make(map[string]struct{}, len(hrefs))
	for _, h := range hrefs {
		u := refResolve(base, h)
		if u == nil {
			continue
		}
		s := u.String()
		if _, dup := seen[s]; dup {
			continue
		}
		seen[s] = struct{}{}
		links = append(links, u)
	}
	return title, links
}

// refAttr returns the cleaned value of attribute key of the current tag. If rel
// is not "", the tag must also have a rel attribute listing "next".
func refAttr(z *html.Tokenizer, more bool, key, rel string) (string, bool) {
	var val string
	var found, relOK bool
	for more {
		var k, v []byte
		k, v, more = z.TagAttr()
		switch {
		case !found && string(k) == key:
			val, found = refCleanHref(v), true
		case rel != "" && string(k) == rel:
			relOK = refHasToken(v, "next")
		}
	}
	if rel != "" && !relOK {
		return "", false
	}
	return val, found && val != ""
}

// refHasToken reports whether the space-separated list v holds tok (ASCII
// case-insensitive).
func refHasToken(v []byte, tok string) bool {
	for _, f := range bytes.Fields(v) {
		if bytes.EqualFold(f, []byte(tok)) {
			return true
		}
	}
	return false
}

// refCleanHref trims whitespace around an href and drops tabs and newlines in
// it, as the URL standard does.
func refCleanHref(v []byte) string {
	v = bytes.TrimSpace(v)
	if bytes.ContainsAny(v, "\t\n\r") {
		v = bytes.Map(func(r rune) rune {
			if r == '\t' || r == '\n' || r == '\r' {
				return -1
			}
			return r
		}, v)
	}
	return string(v)
}

// refResolve returns href resolved against base if the result is an absolute
// http(s) URL, with its fragment removed; else nil.
func refResolve(base *url.URL, href string) *url.URL {
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

// refCleanTitle collapses whitespace and caps the length at a rune boundary.
func refCleanTitle(b []byte) string {
	t := strings.Join(strings.Fields(string(b)), " ")
	if len(t) > maxTitle {
		i := maxTitle
		for i > 0 && !utf8.RuneStart(t[i]) {
			i--
		}
		t = t[:i]
	}
	return t
}
