package engine

import (
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/publicsuffix"
)

// newJar returns the cookie jar of a Fetcher configured by o: o.Jar, or
// nil with o.NoCookies, or else a fresh jar that keeps cookies per host as
// a browser does (domain cookies bounded by the public suffix list).
func newJar(o FetchOptions) http.CookieJar {
	switch {
	case o.NoCookies:
		return nil
	case o.Jar != nil:
		return o.Jar
	}
	jar, _ := cookiejar.New(&cookiejar.Options{PublicSuffixList: publicsuffix.List}) // never fails
	return jar
}

// proxyFunc is the proxy of a Fetcher configured by o: o.Proxy for every
// request, or else the standard environment variables.
func proxyFunc(o FetchOptions) func(*http.Request) (*url.URL, error) {
	if o.Proxy != nil {
		return http.ProxyURL(o.Proxy)
	}
	return http.ProxyFromEnvironment
}

// requestHeader is the header of a request: the Fetcher's headers, then
// the request's own, which replace the Fetcher's of the same name.
func requestHeader(common, own http.Header) http.Header {
	if len(common) == 0 {
		if own == nil {
			return make(http.Header)
		}
		return own.Clone()
	}
	h := common.Clone()
	for k, vs := range own {
		h[k] = append([]string(nil), vs...)
	}
	return h
}

// ParseHeader parses a header line "Name: value", as --header takes it.
// The name must be a valid header field name and the value must not
// contain a line break.
func ParseHeader(line string) (name, value string, err error) {
	name, value, ok := strings.Cut(line, ":")
	name, value = strings.TrimSpace(name), strings.TrimSpace(value)
	if !ok || name == "" {
		return "", "", fmt.Errorf("header %q: want \"Name: value\"", line)
	}
	if err := checkHeader(name, value); err != nil {
		return "", "", err
	}
	return http.CanonicalHeaderKey(name), value, nil
}

// checkHeader validates a header's name and value.
func checkHeader(name, value string) error {
	if !httpguts.ValidHeaderFieldName(name) {
		return fmt.Errorf("header name %q: not a valid header field name", name)
	}
	if !httpguts.ValidHeaderFieldValue(value) {
		return fmt.Errorf("header %s: the value has a control character or line break", name)
	}
	return nil
}
