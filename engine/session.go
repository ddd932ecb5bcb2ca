package engine

import (
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"sync/atomic"

	"golang.org/x/net/publicsuffix"

	"github.com/trawlhq/trawl/internal/header"
)

// newJar returns the cookie jar of an httpFetcher configured by o: o.Jar, or
// nil with o.NoCookies, or else a fresh jar that keeps cookies per host as
// a browser does (domain cookies bounded by the public suffix list).
func newJar(o FetchConfig) http.CookieJar {
	switch {
	case o.NoCookies:
		return nil
	case o.Jar != nil:
		return o.Jar
	}
	jar, _ := cookiejar.New(&cookiejar.Options{PublicSuffixList: publicsuffix.List}) // never fails
	return &lazyJar{jar: jar}
}

// lazyJar is a cookiejar.Jar that is asked for a request's cookies only
// once it was given some: until then it has none to give, and a crawl of
// sites that set no cookie does not pay the jar's lookup on every request
// (the host's canonical form and its public suffix, under the jar's lock:
// 1.5-2.5 us of a worker's CPU a page in bench-web's profiles,
// BENCHMARKS.md, issue 26, session 16).
type lazyJar struct {
	jar  *cookiejar.Jar
	some atomic.Bool // SetCookies was given a cookie
}

// SetCookies stores cookies as the jar does.
func (j *lazyJar) SetCookies(u *url.URL, cookies []*http.Cookie) {
	if len(cookies) > 0 {
		j.some.Store(true)
	}
	j.jar.SetCookies(u, cookies)
}

// Cookies returns the jar's cookies for u: none before any was stored.
func (j *lazyJar) Cookies(u *url.URL) []*http.Cookie {
	if !j.some.Load() {
		return nil
	}
	return j.jar.Cookies(u)
}

// proxyFunc is the proxy of an httpFetcher configured by o: o.Proxy for every
// request, or else the standard environment variables.
func proxyFunc(o FetchConfig) func(*http.Request) (*url.URL, error) {
	if o.Proxy != nil {
		return http.ProxyURL(o.Proxy)
	}
	return http.ProxyFromEnvironment
}

// requestHeader is the header of a request: the httpFetcher's headers, then
// the request's own, which replace the httpFetcher's of the same name.
//
// Accept-Encoding is dropped: the transport asks for gzip and decodes it
// only when the request does not set the header itself.
func requestHeader(common, own http.Header) http.Header {
	var h http.Header
	switch {
	case len(common) == 0 && own == nil:
		return make(http.Header)
	case len(common) == 0:
		h = own.Clone()
	default:
		h = common.Clone()
		for k, vs := range own {
			h[k] = append([]string(nil), vs...)
		}
	}
	h.Del("Accept-Encoding")
	return h
}

// checkHeader validates a header's name and value (see header.Check).
func checkHeader(name, value string) error { return header.Check(name, value) }
