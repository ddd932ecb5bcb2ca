package engine

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"

	"github.com/trawlhq/trawl/internal/linkscan"
)

// withCredentials moves the user information of r's URL u, if any, into
// r's Authorization header (Basic, unless r has an Authorization header
// already), so that a page has one URL and one fingerprint with and
// without it, and no URL of the crawl (in the queue, items, logs)
// carries a password. A request with no Authorization header gets its
// parent's when both are on the same origin (scheme, host and port): the
// credentials of a start URL apply to its host, as a browser's Basic
// authentication does, and never go to another. It returns r's link
// without user information (lk: r's URL).
func withCredentials(parent, r *Request, lk *linkscan.Link) *linkscan.Link {
	if lk.HasUser() {
		u := lk.Parsed()
		cp := *u
		cp.User = nil
		if r.Header.Get("Authorization") == "" {
			pw, _ := u.User.Password()
			r.Header = r.Header.Clone()
			if r.Header == nil {
				r.Header = http.Header{}
			}
			r.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pw)))
		}
		l := linkscan.FromURL(&cp, cp.String())
		lk = &l
		r.URL, r.parsed = lk.URL, lk
	}
	if parent == nil || r.Header.Get("Authorization") != "" {
		return lk
	}
	if a := parent.Header.Get("Authorization"); a != "" {
		if pu, err := url.Parse(parent.URL); err == nil && sameOrigin(pu, lk.Parsed()) {
			r.Header = r.Header.Clone()
			if r.Header == nil {
				r.Header = http.Header{}
			}
			r.Header.Set("Authorization", a)
		}
	}
	return lk
}

// sameOrigin reports whether a and b have the same scheme, host and port.
func sameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Hostname(), b.Hostname()) &&
		defaultPort(a) == defaultPort(b)
}
