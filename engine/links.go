package engine

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/trawlhq/trawl/internal/linkscan"
)

// ExtractLinks parses an HTML document and returns its title and the absolute
// http(s) links of <a href>, <area href> and <link rel="next" href>, resolved
// against the first <base href> if there is one, else against base; the
// crawler calls it on every HTML page. See internal/linkscan for the rules
// (fragments and duplicates removed, non-http(s) links skipped, at most
// 10,000 links and a title of at most 1,024 bytes); it does not modify body.
func ExtractLinks(base *url.URL, body []byte) (title string, links []*url.URL) {
	return linkscan.Extract(base, body)
}

// isHTML reports whether a response holds HTML: its content type is
// text/html or application/xhtml+xml or, if it has no content type, the body
// sniffs as HTML (http.DetectContentType).
func isHTML(contentType string, body []byte) bool {
	ct := strings.TrimSpace(contentType)
	if ct == "" {
		ct = http.DetectContentType(body)
	}
	// The media type as mime.ParseMediaType finds it (what precedes the
	// parameters, trimmed, in lower case), without parsing the parameters
	// into a map on every page.
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	return mt == "text/html" || mt == "application/xhtml+xml"
}
