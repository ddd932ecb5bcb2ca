package trawl

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/PuerkitoBio/goquery"

	"github.com/trawlhq/trawl/engine"
)

// Response is a fetched page handed to the handlers: the engine's response
// (URL, status, headers, body, and the Request) and what the handlers make
// of it, links to follow and items to store. It is valid only while the
// handlers run; it is not safe for use by several goroutines.
type Response struct {
	*engine.Response

	ctx      context.Context
	crawler  *Crawler
	callback string            // the name followed requests carry
	base     *url.URL          // what relative links resolve against: the page URL or its <base href>
	doc      *goquery.Document // nil unless the page is HTML and OnHTML handlers exist
	res      engine.Result
	errs     []error
}

// Context returns the context of the page's processing; it ends when the
// crawl stops for good.
func (r *Response) Context() context.Context { return r.ctx }

// Document returns the parsed page, or nil when the page is not HTML or no
// OnHTML handler is registered.
func (r *Response) Document() *goquery.Document { return r.doc }

// AbsURL resolves href against the page (and its <base href>), without the
// fragment. It returns "" for an empty or fragment-only href, one that does
// not parse, and one that is not http or https (mailto:, javascript:).
func (r *Response) AbsURL(href string) string {
	u := r.resolve(href)
	if u == nil {
		return ""
	}
	return u.String()
}

func (r *Response) resolve(href string) *url.URL {
	href = strings.TrimSpace(href)
	if href == "" || href[0] == '#' {
		return nil
	}
	u, err := r.base.Parse(href)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil
	}
	u.Fragment, u.RawFragment = "", ""
	return u
}

// Follow enqueues href, resolved as AbsURL does, to be fetched and handed
// to the same handlers, on whichever worker takes it. Like every link, it
// goes through the crawl's scope (by default the start URL's domain),
// depth limit and duplicate filter. An href AbsURL rejects is ignored.
func (r *Response) Follow(href string) { r.FollowLink(href, Link{}) }

// Link is what a followed link carries to the page it leads to, on
// whichever worker fetches it.
type Link struct {
	// Meta are values carried along: the followed page's Request.Meta,
	// read by its handlers as e.Request.Meta or r.Request.Meta.
	Meta map[string]string
	// Priority orders the link in the frontier: higher first (see the
	// broker's Order).
	Priority int
	// Header holds extra request headers for this link only.
	Header http.Header
}

// FollowLink is Follow with data carried along: meta values, a priority
// and request headers.
func (r *Response) FollowLink(href string, l Link) {
	u := r.resolve(href)
	if u == nil {
		return
	}
	r.res.Requests = append(r.res.Requests, &engine.Request{
		URL: u.String(), Callback: r.callback, Meta: l.Meta, Priority: l.Priority, Header: l.Header,
	})
}

// Item emits v, stored by the crawl's sink (JSON Lines by default) once the
// page's handlers are done. v must encode as the sink needs (JSON, for the
// default).
func (r *Response) Item(v any) { r.res.Items = append(r.res.Items, v) }

// Element is one element an OnHTML selector matched. Its methods read the
// element (Text, Attr, Child…) and act for the page (AbsURL, Follow,
// Item). It is valid only while the handler runs.
type Element struct {
	// Request is the request of the page.
	Request *engine.Request
	// Response is the page.
	Response *Response
	// DOM is the matched element, for what the methods below do not cover.
	DOM *goquery.Selection
	// Index is the element's position among the selector's matches.
	Index int
}

// Text returns the text of the element and its descendants, trimmed.
func (e *Element) Text() string { return strings.TrimSpace(e.DOM.Text()) }

// Attr returns the value of the element's attribute name, or "".
func (e *Element) Attr(name string) string {
	v, _ := e.DOM.Attr(name)
	return v
}

// ChildText returns the text of the descendants matching selector,
// trimmed (all of them, concatenated; "" if none).
func (e *Element) ChildText(selector string) string {
	return strings.TrimSpace(e.find(selector).Text())
}

// ChildAttr returns the attribute name of the first descendant matching
// selector, or "".
func (e *Element) ChildAttr(selector, name string) string {
	v, _ := e.find(selector).First().Attr(name)
	return v
}

// ChildAttrs returns the attribute name of every descendant matching
// selector that has it.
func (e *Element) ChildAttrs(selector, name string) []string {
	var out []string
	e.find(selector).Each(func(_ int, s *goquery.Selection) {
		if v, ok := s.Attr(name); ok {
			out = append(out, v)
		}
	})
	return out
}

// find returns the descendants matching selector. A selector that does not
// compile matches nothing and fails the page: its handlers' results are
// dropped and the page is retried, then dead-lettered with the reason.
func (e *Element) find(selector string) *goquery.Selection {
	m, err := e.Response.crawler.matcher(selector)
	if err != nil {
		if !slices.Contains(e.Response.errs, err) { // the same error value per selector
			e.Response.errs = append(e.Response.errs, err)
		}
		return e.DOM.FindNodes()
	}
	return e.DOM.FindMatcher(m)
}

// AbsURL resolves href against the page, see Response.AbsURL.
func (e *Element) AbsURL(href string) string { return e.Response.AbsURL(href) }

// Follow enqueues href, resolved against the page, see Response.Follow.
func (e *Element) Follow(href string) { e.Response.Follow(href) }

// FollowLink follows href for the page, with l carried along (see
// Response.FollowLink).
func (e *Element) FollowLink(href string, l Link) { e.Response.FollowLink(href, l) }

// Item emits v, see Response.Item.
func (e *Element) Item(v any) { e.Response.Item(v) }
