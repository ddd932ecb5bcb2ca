package engine

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/PuerkitoBio/goquery"
	"github.com/andybalholm/cascadia"
)

// What an extraction takes from each element a selector matches.
const (
	takeText = iota // the text of the element and its descendants, trimmed
	takeAttr        // an attribute's value
	takeHTML        // the element's outer HTML
)

// extraction is a compiled extraction rule of Config.Extract: a CSS
// selector (a group with commas allowed) and what to take from each
// element it matches, given by a suffix:
//
//   - "::text" (the default, when there is no suffix): the text of the
//     element and its descendants, trimmed;
//   - "::attr(NAME)": the value of attribute NAME; elements without it give
//     nothing. The values of href and src are made absolute against the
//     page's URL (and its <base href>); a value that does not resolve to
//     an http or https URL is kept as it is.
//   - "::html": the element's outer HTML.
//
// The suffix applies to the whole selector group: "h1, h2::text" takes the
// text of every h1 and h2. Every match gives one value, in document order:
// a field is always a list (empty matches of ::text are kept, as ""), and
// a selector that matches nothing gives no field.
type extraction struct {
	Name     string // the field's name
	Selector string // the CSS selector, without the suffix
	Attr     string // the attribute, for ::attr(NAME)
	take     int
	match    cascadia.Selector
}

// attrSuffix matches a trailing ::attr(NAME).
var attrSuffix = regexp.MustCompile(`::attr\(\s*([^()\s]+)\s*\)\s*$`)

// ErrBadExtract is wrapped by the errors of extraction rules that do not
// compile.
var ErrBadExtract = errors.New("engine: bad extraction rule")

// parseExtraction compiles the rule of a field: a CSS selector with an
// optional suffix (see extraction).
func parseExtraction(name, rule string) (*extraction, error) {
	if name == "" {
		return nil, fmt.Errorf("%w: extract %q: the field needs a name", ErrBadExtract, rule)
	}
	e := &extraction{Name: name}
	sel := strings.TrimSpace(rule)
	switch {
	case strings.HasSuffix(sel, "::text"):
		sel = strings.TrimSuffix(sel, "::text")
	case strings.HasSuffix(sel, "::html"):
		sel, e.take = strings.TrimSuffix(sel, "::html"), takeHTML
	default:
		if m := attrSuffix.FindStringSubmatchIndex(sel); m != nil {
			e.Attr = strings.ToLower(sel[m[2]:m[3]])
			sel, e.take = sel[:m[0]], takeAttr
		} else if i := strings.LastIndex(sel, "::"); i >= 0 && !strings.ContainsAny(sel[i:], " >+~,[]'\"") {
			return nil, fmt.Errorf("%w: extract %s=%q: unknown suffix %q (want ::text, ::attr(NAME) or ::html)",
				ErrBadExtract, name, rule, sel[i:])
		}
	}
	sel = strings.TrimSpace(sel)
	if sel == "" {
		return nil, fmt.Errorf("%w: extract %s=%q: no selector before the suffix", ErrBadExtract, name, rule)
	}
	m, err := cascadia.Compile(sel)
	if err != nil {
		return nil, fmt.Errorf("%w: extract %s=%q: %w", ErrBadExtract, name, rule, err)
	}
	e.Selector, e.match = sel, m
	return e, nil
}

// Values returns what e takes from doc, a page fetched from base (already
// adjusted for <base href>, see documentBase).
func (e *extraction) values(doc *goquery.Document, base *url.URL) []string {
	var out []string
	doc.FindMatcher(e.match).Each(func(_ int, s *goquery.Selection) {
		switch e.take {
		case takeText:
			out = append(out, strings.TrimSpace(s.Text()))
		case takeHTML:
			if h, err := goquery.OuterHtml(s); err == nil {
				out = append(out, h)
			}
		case takeAttr:
			v, ok := s.Attr(e.Attr)
			if !ok {
				return
			}
			if e.Attr == "href" || e.Attr == "src" {
				v = absolute(base, v)
			}
			out = append(out, v)
		}
	})
	return out
}

// absolute resolves ref against base, without its fragment; a ref that
// does not resolve to an http or https URL is returned as it is.
func absolute(base *url.URL, ref string) string {
	t := strings.TrimSpace(ref)
	if base == nil || t == "" {
		return ref
	}
	u, err := base.Parse(t)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return ref
	}
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}

// documentBase is what relative URLs of doc, fetched from page, resolve
// against: the page's URL, or its first <base href>.
func documentBase(doc *goquery.Document, page *url.URL) *url.URL {
	if href, ok := doc.Find("base[href]").First().Attr("href"); ok {
		if u, err := page.Parse(strings.TrimSpace(href)); err == nil {
			return u
		}
	}
	return page
}

// compileExtract compiles Config.Extract.
func compileExtract(rules map[string]string) ([]*extraction, error) {
	var out []*extraction
	var errs []error
	for name, rule := range rules {
		e, err := parseExtraction(name, rule)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, e)
	}
	return out, errors.Join(errs...)
}

// extractFields applies the extractions to an HTML body fetched from page.
// It returns nil when the body does not parse or nothing matched.
func extractFields(ex []*extraction, page *url.URL, body []byte) map[string][]string {
	doc, err := goquery.NewDocumentFromReader(bytes.NewReader(body))
	if err != nil {
		return nil
	}
	base := documentBase(doc, page)
	fields := make(map[string][]string, len(ex))
	for _, e := range ex {
		if v := e.values(doc, base); len(v) > 0 {
			fields[e.Name] = v
		}
	}
	return fields
}
