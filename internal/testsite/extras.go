package testsite

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// HiddenPages is how many pages under /hidden/ the sitemaps list. Nothing
// links to them: a crawler finds them through the sitemaps alone.
const HiddenPages = 30

// The sitemaps of the site (see doc.go, "Sitemaps, cookies"):
//
//	/robots.txt                 Sitemap: http://HOST/sitemaps/index.xml
//	/sitemap.xml                urlset: /hidden/0
//	/sitemaps/index.xml         sitemapindex: hidden.xml.gz, encoded.xml, and a sitemap on external.invalid
//	/sitemaps/hidden.xml.gz     gzip file (application/gzip), urlset: /hidden/1…20, /hidden/1 again,
//	                            /private/hidden (disallowed by robots.txt), http://external.invalid/hidden
//	/sitemaps/encoded.xml       urlset served with Content-Encoding: gzip: /hidden/21…29
const (
	hiddenInPlain = 1  // /hidden/0 is in /sitemap.xml
	hiddenInGzip  = 21 // /hidden/1…20 in hidden.xml.gz; the rest in encoded.xml
)

// isExtra reports whether path is served by serveExtras.
func isExtra(path string) bool {
	return path == "/sitemap.xml" || strings.HasPrefix(path, "/sitemaps/") ||
		strings.HasPrefix(path, "/hidden/") || strings.HasPrefix(path, "/session/")
}

// serveExtras serves the sitemaps, the hidden pages and the session pages,
// counted apart (ExtrasServed), so Verify of a crawl from / is unaffected.
func (s *Site) serveExtras(w http.ResponseWriter, r *http.Request) {
	key := canonicalKey(r.URL)
	s.mu.Lock()
	s.extraHits[key]++
	s.mu.Unlock()
	if s.latency > 0 && !wait(r.Context(), s.latency) {
		return
	}
	host := scheme(r) + "://" + r.Host
	switch {
	case key == "/sitemap.xml":
		serveText(w, http.StatusOK, "application/xml", urlset(host, hiddenRange(0, hiddenInPlain)))
	case key == "/sitemaps/index.xml":
		serveText(w, http.StatusOK, "application/xml", sitemapIndex(
			host+"/sitemaps/hidden.xml.gz", host+"/sitemaps/encoded.xml", "http://external.invalid/sitemap.xml"))
	case key == "/sitemaps/hidden.xml.gz":
		locs := hiddenRange(hiddenInPlain, hiddenInGzip)
		locs = append(locs, "/hidden/1", "/private/hidden", "http://external.invalid/hidden")
		body := gzipped(urlset(host, locs))
		h := w.Header()
		h.Set("Content-Type", "application/gzip")
		h.Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
	case key == "/sitemaps/encoded.xml":
		body := gzipped(urlset(host, hiddenRange(hiddenInGzip, HiddenPages)))
		h := w.Header()
		h.Set("Content-Type", "application/xml")
		h.Set("Content-Encoding", "gzip")
		h.Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
	case strings.HasPrefix(key, "/hidden/"):
		n, err := strconv.Atoi(strings.TrimPrefix(key, "/hidden/"))
		if err != nil || n < 0 || n >= HiddenPages || strconv.Itoa(n) != strings.TrimPrefix(key, "/hidden/") {
			serveText(w, http.StatusNotFound, ctText, "404 not found\n")
			return
		}
		serveText(w, http.StatusOK, ctHTML[0], fmt.Sprintf(
			"<!doctype html><html><head><title>Hidden page %d</title></head><body><h1>Hidden page %d</h1>"+
				"<p>Only the sitemaps list this page.</p></body></html>\n", n, n))
	case key == "/session/login":
		http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "opened", Path: "/session/", HttpOnly: true})
		serveText(w, http.StatusOK, ctHTML[0], "<!doctype html><html><head><title>Logged in</title></head><body>"+
			"<p>Welcome. <a href=\"members\">Members only</a></p></body></html>\n")
	case key == "/session/members":
		if c, err := r.Cookie(SessionCookie); err != nil || c.Value != "opened" {
			serveText(w, http.StatusForbidden, ctText, "403 log in first: /session/login\n")
			return
		}
		serveText(w, http.StatusOK, ctHTML[0], "<!doctype html><html><head><title>Members</title></head><body>"+
			"<h1>Members only</h1></body></html>\n")
	default:
		serveText(w, http.StatusNotFound, ctText, "404 not found\n")
	}
}

// SessionCookie is the cookie /session/login sets and /session/members
// needs (403 without it).
const SessionCookie = "trawl_session"

// HiddenPaths returns the paths of the hidden pages: what a crawl with
// sitemaps finds beyond the links.
func HiddenPaths() []string { return hiddenRange(0, HiddenPages) }

func hiddenRange(from, to int) []string {
	out := make([]string, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, "/hidden/"+strconv.Itoa(i))
	}
	return out
}

// urlset is a sitemap listing locs (paths are made absolute on host).
func urlset(host string, locs []string) string {
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n" +
		`<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">` + "\n")
	for _, l := range locs {
		if strings.HasPrefix(l, "/") {
			l = host + l
		}
		fmt.Fprintf(&b, "  <url><loc>%s</loc><changefreq>daily</changefreq></url>\n", l)
	}
	b.WriteString("</urlset>\n")
	return b.String()
}

// sitemapIndex is a sitemap index listing locs.
func sitemapIndex(locs ...string) string {
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n" +
		`<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">` + "\n")
	for _, l := range locs {
		fmt.Fprintf(&b, "  <sitemap><loc>%s</loc></sitemap>\n", l)
	}
	b.WriteString("</sitemapindex>\n")
	return b.String()
}

func gzipped(s string) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	_, _ = zw.Write([]byte(s))
	_ = zw.Close()
	return b.Bytes()
}

// ExtrasServed returns how often each path of the sitemaps, the hidden
// pages and the session pages was requested since New or Reset
// ("/sitemap.xml", "/sitemaps/…", "/hidden/N", "/session/…"). They are
// not counted by Served.
func (s *Site) ExtrasServed() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]int, len(s.extraHits))
	for k, n := range s.extraHits {
		m[k] = n
	}
	return m
}
