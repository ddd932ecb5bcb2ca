package linkscan

import "net/url"

// Link is an absolute http(s) link, without fragment: its string form and
// what a crawler asks of it besides (its scheme, host and query) without
// a url.URL. Most links a page has never need one: they are only
// compared, scoped by host and hashed. Parsed builds it, the same
// url.URL as url.Parse and ResolveReference make of the link's href
// (the differential tests check it).
type Link struct {
	// URL is the link's String() (url.URL.String of Parsed).
	URL string
	// slow is the link as resolve returned it, or nil: a link the
	// resolver joined by strings (see resolver), whose host is
	// URL[len("http(s)://"):hostEnd], path URL[hostEnd:pathEnd] and
	// query, if query, URL[pathEnd+1:]; it has no user information, and
	// its host and path are written in URL as they are (no escapes).
	slow                *url.URL
	hostEnd, pathEnd    int32
	https, query, force bool
}

// FromURL returns the Link of u, an absolute URL whose String() is s. It
// keeps u, which Parsed returns.
func FromURL(u *url.URL, s string) Link { return Link{URL: s, slow: u} }

// hostStart is where l's host starts in l.URL (l.slow nil).
func (l *Link) hostStart() int32 {
	if l.https {
		return int32(len("https://"))
	}
	return int32(len("http://"))
}

// Scheme is the link's scheme, as url.URL.Scheme.
func (l *Link) Scheme() string {
	switch {
	case l.slow != nil:
		return l.slow.Scheme
	case l.https:
		return "https"
	}
	return "http"
}

// Host is the link's host and port, as url.URL.Host.
func (l *Link) Host() string {
	if l.slow != nil {
		return l.slow.Host
	}
	return l.URL[l.hostStart():l.hostEnd]
}

// RawQuery is the link's query without '?', as url.URL.RawQuery.
func (l *Link) RawQuery() string {
	switch {
	case l.slow != nil:
		return l.slow.RawQuery
	case l.query:
		return l.URL[l.pathEnd+1:]
	}
	return ""
}

// HasUser reports whether the link has user information (url.URL.User
// not nil).
func (l *Link) HasUser() bool { return l.slow != nil && l.slow.User != nil }

// Parsed returns the link as a url.URL. The caller must not modify it: a
// link that went through url.Parse returns the same one every time.
func (l *Link) Parsed() *url.URL {
	if l.slow != nil {
		return l.slow
	}
	u := l.Value()
	return &u
}

// Value returns a copy of *l.Parsed(), which a caller may keep on its
// stack.
func (l *Link) Value() url.URL {
	if l.slow != nil {
		return *l.slow
	}
	u := url.URL{Scheme: l.Scheme(), Host: l.Host(), Path: l.URL[l.hostEnd:l.pathEnd], ForceQuery: l.force}
	if l.query {
		u.RawQuery = l.URL[l.pathEnd+1:]
	}
	return u
}
