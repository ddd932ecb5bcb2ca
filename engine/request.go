package engine

import (
	"net/http"
	"net/url"
	"time"

	"github.com/trawlhq/trawl/internal/linkscan"
)

// Request is one page to fetch. It travels through the broker in a compact,
// versioned binary encoding (see MarshalBinary).
type Request struct {
	URL        string            // absolute http or https URL
	Method     string            // "" means GET
	Header     http.Header       // extra request headers
	Body       []byte            // request body
	Priority   int               // higher first
	Depth      int               // link distance from a start URL
	Retries    int               // how often this request has been retried
	Callback   string            // name of the callback that handles the response; "" is the default
	Meta       map[string]string // free-form values carried along
	DontFilter bool              // skip the duplicate filter
	// Deferrals counts how often the request was given back untried
	// because a worker's address guard refused its host (see
	// ErrLocalRefusal). Past MaxDeferrals it is dead-lettered with the
	// reason.
	Deferrals int
	// Referrer is the page the request was found on, without credentials;
	// the engine sets it only with Config.ErrorItems, which reports it.
	Referrer string
	// Scope is the host of the start URL the request descends from. Unless
	// Config.AllowedDomains is set, followed links must stay on that host's
	// domain (or its subdomains). It travels with the request, so every
	// worker scopes alike, including ones that never saw the start URLs.
	Scope string

	// parsed is URL already parsed, when the engine made the request from
	// a link it found (see linkscan.Link: most need no url.URL); it spares
	// parsing it again.
	parsed *linkscan.Link
}

// Response is a fetched page handed to a callback.
type Response struct {
	Request    *Request
	URL        *url.URL // the URL fetched
	StatusCode int
	Header     http.Header
	Body       []byte // the callback may keep it: the engine never reuses it
	// Latency is the time from sending the request to its response
	// headers (Scrapy's download latency); AutoThrottle adapts to it.
	Latency time.Duration

	// sitemap is a sitemap's body as parsed while it was read (see
	// fetchStream); Body is then nil.
	sitemap *sitemapRead
}

// IsHTML reports whether r holds HTML: its content type is text/html or
// application/xhtml+xml or, without a content type, its body sniffs as
// HTML. The engine extracts links from such responses only.
func (r *Response) IsHTML() bool { return isHTML(r.Header.Get("Content-Type"), r.Body) }
