package engine

import (
	"net/http"
	"net/http/cookiejar"
	"net/url"

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
	return jar
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
