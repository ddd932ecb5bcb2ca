package engine

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/trawlhq/trawl/internal/linkscan"
)

// The sitemaps protocol's limits (sitemaps.org): a sitemap file lists at
// most SitemapMaxURLs URLs and is at most SitemapMaxSize bytes
// uncompressed. trawl reads the first SitemapMaxURLs URLs and the first
// SitemapMaxSize bytes of a file and ignores the rest, with a warning.
const (
	SitemapMaxURLs = 50_000
	SitemapMaxSize = 50 << 20
)

// Bounds of what a site's sitemaps can make a worker do.
//
// A sitemap is parsed as it is read, never held whole: a worker's memory
// for one holds the URLs it lists, at most FetchConfig.MaxBodySize bytes
// of them (10 MiB by default; the rest is ignored as past the protocol's
// limits), and one XML token of at most sitemapMaxToken bytes, so that a
// sitemap costs no more than a page (see FetchConfig), whatever it
// decompresses to.
const (
	// SitemapMaxNesting is how deep sitemap indexes are followed: the
	// sitemaps robots.txt names and /sitemap.xml are at level 0, those an
	// index at level n lists at n+1. What an index at this level lists is
	// not fetched (counted as StatSitemapSkipped).
	SitemapMaxNesting = 3
	// SitemapMaxPerHost is how many sitemap files of one host a worker
	// fetches in a crawl, listed by robots.txt or an index; the others
	// are not fetched (counted as StatSitemapSkipped, and a warning once
	// per host). A worker fetches listed sitemaps of 10,000 hosts at
	// most.
	SitemapMaxPerHost = 1000
	// sitemapMaxToken bounds one XML token of a sitemap (a run of white
	// space counts as one byte): a longer one ends the file, as past the
	// protocol's limits.
	sitemapMaxToken = 256 << 10
	// sitemapMaxDepth bounds the nesting of XML elements in a sitemap.
	sitemapMaxDepth = 16
	// metaSitemapLevel is the Meta key of a sitemap request's nesting
	// level (see SitemapMaxNesting); absent = 0.
	metaSitemapLevel = "sitemap_level"
)

// Names of the engine's own callbacks, for the requests of sitemaps
// (Config.Sitemaps). They are handled by every worker; the prefix
// "engine:" is reserved.
const (
	// CallbackSitemap parses a sitemap or a sitemap index.
	CallbackSitemap = "engine:sitemap"
	// CallbackRobotsSitemaps reads the Sitemap: lines of a robots.txt.
	CallbackRobotsSitemaps = "engine:robots-sitemaps"
)

// Counters of sitemaps.
const (
	StatSitemaps        = "sitemap/files"     // sitemap files and indexes parsed
	StatSitemapURLs     = "sitemap/urls"      // URLs listed (before scope and the filter)
	StatSitemapTruncate = "sitemap/truncated" // files cut at the protocol's limits
	StatSitemapInvalid  = "sitemap/invalid"   // files that are not sitemaps
	// StatSitemapSkipped counts sitemaps listed but not fetched: nested
	// deeper than SitemapMaxNesting, or past SitemapMaxPerHost.
	StatSitemapSkipped = "sitemap/skipped"
)

// isSitemap reports whether r fetches a sitemap or a robots.txt for its
// Sitemap: lines.
func isSitemap(r *Request) bool {
	return r.Callback == CallbackSitemap || r.Callback == CallbackRobotsSitemaps
}

// builtinCallback returns the engine's own callback of that name.
func (c *Crawler) builtinCallback(name string) (Callback, bool) {
	switch name {
	case CallbackSitemap:
		return c.sitemapCallback, true
	case CallbackRobotsSitemaps:
		return c.robotsSitemapsCallback, true
	}
	return nil, false
}

// withSitemaps returns the requests of a start URL: itself and, with
// Config.Sitemaps, its host's robots.txt (for Sitemap: lines) and
// /sitemap.xml. They go through the filter like any request, so each
// host's are fetched once per crawl.
func (c *Crawler) withSitemaps(start *Request) []*Request {
	reqs := []*Request{start}
	if !c.cfg.Sitemaps {
		return reqs
	}
	u, err := url.Parse(start.URL)
	if err != nil {
		return reqs
	}
	for _, s := range []struct{ path, cb string }{
		{"/robots.txt", CallbackRobotsSitemaps},
		{"/sitemap.xml", CallbackSitemap},
	} {
		t := url.URL{Scheme: u.Scheme, User: u.User, Host: u.Host, Path: s.path}
		reqs = append(reqs, &Request{URL: t.String(), Callback: s.cb, Scope: start.Scope, Header: start.Header.Clone()})
	}
	return reqs
}

// fetchRequest fetches req. A sitemap is parsed as it is read (see
// readSitemap): its Response has no Body, its parse in sitemap.
func (c *Crawler) fetchRequest(ctx context.Context, req *Request) (*Response, error) {
	if req.Callback == CallbackSitemap {
		return c.kit.fetcher.fetchStream(ctx, req, c.readSitemap)
	}
	return c.kit.fetcher.Fetch(ctx, req)
}

// sitemapRead is a sitemap parsed as it was read.
type sitemapRead struct {
	locs  []string
	index bool
	err   error // from parseSitemap
	bytes int64 // read from the response body
}

// readSitemap parses a sitemap's body, up to the protocol's limits and
// keeping at most FetchConfig.MaxBodySize bytes of URLs.
func (c *Crawler) readSitemap(body io.Reader) *sitemapRead {
	cr := &countingReader{r: body}
	locs, index, err := parseSitemap(cr, sitemapLimits{urls: SitemapMaxURLs, size: SitemapMaxSize, kept: c.kit.fetcher.maxBody})
	return &sitemapRead{locs: locs, index: index, err: err, bytes: cr.n}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (r *countingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.n += int64(n)
	return n, err
}

// robotsSitemapsCallback turns the Sitemap: lines of a robots.txt into
// sitemap requests. The crawler calls it on the worker's cached robots.txt
// (see robotsSitemaps), or on a fetched one when robots.txt is ignored.
func (c *Crawler) robotsSitemapsCallback(_ context.Context, resp *Response) (Result, error) {
	var locs []string
	sc := bufio.NewScanner(bytes.NewReader(resp.Body))
	sc.Buffer(make([]byte, 0, 4096), MaxURLLength+64)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if len(line) < 8 || !strings.EqualFold(line[:8], "sitemap:") {
			continue
		}
		locs = append(locs, strings.TrimSpace(line[8:]))
	}
	return Result{Requests: c.sitemapRequests(resp, locs, CallbackSitemap)}, nil
}

// robotsSitemaps handles a request for the Sitemap: lines of a robots.txt
// without fetching it again: the robots cache fetched it to check the
// request (one fetch per host and worker, not two).
func (c *Crawler) robotsSitemaps(req *Request, u *url.URL, locs []string) action {
	resp := &Response{Request: req, URL: u, StatusCode: http.StatusOK}
	links := c.sitemapRequests(resp, locs, CallbackSitemap)
	for _, r := range links {
		if r.Scope == "" {
			r.Scope = req.Scope
		}
	}
	return written(&write{parent: req, links: links, failed: nack(c.cfg.retryDelay(1))})
}

// sitemapRequests returns the requests of the URLs a sitemap (or
// robots.txt) at resp lists: pages for callback "", sitemaps for
// CallbackSitemap, which are bounded by SitemapMaxNesting and
// SitemapMaxPerHost.
func (c *Crawler) sitemapRequests(resp *Response, locs []string, callback string) []*Request {
	level := 0
	if callback != "" && resp.Request.Callback == CallbackSitemap {
		level, _ = strconv.Atoi(resp.Request.Meta[metaSitemapLevel])
		level++ // listed by an index
	}
	if callback != "" && level > SitemapMaxNesting {
		c.stats.Add(StatSitemapSkipped, int64(len(locs)))
		c.log.Warn("sitemap index nested too deep; the sitemaps it lists are not fetched",
			"sitemap", Redact(resp.URL.String()), "nesting", level, "max", SitemapMaxNesting, "skipped", len(locs))
		return nil
	}
	out := make([]*Request, 0, len(locs))
	for _, loc := range locs {
		r := c.sitemapRequest(resp, loc, callback)
		if r == nil {
			continue
		}
		if callback != "" {
			if ok, warn := c.guards.sitemaps.reserve(r.parsed.Host()); !ok {
				c.stats.Inc(StatSitemapSkipped)
				if warn {
					c.log.Warn("too many sitemaps on this host; the rest are not fetched (sitemap/skipped counts them)",
						"host", r.parsed.Host(), "max", SitemapMaxPerHost)
				}
				continue
			}
			if level > 0 {
				r.Meta = map[string]string{metaSitemapLevel: strconv.Itoa(level)}
			}
		}
		out = append(out, r)
	}
	return out
}

// sitemapRequest is the request of a URL a sitemap (or robots.txt) lists,
// resolved against the sitemap's URL; nil if it is not http or https.
// Listed pages have depth 1, as if linked from the start URL; nested
// sitemaps keep the depth of the sitemap that lists them, so that
// Config.MaxDepth does not cut a chain of indexes (SitemapMaxNesting
// does).
func (c *Crawler) sitemapRequest(resp *Response, loc, callback string) *Request {
	loc = strings.TrimSpace(loc)
	if loc == "" || len(loc) > MaxURLLength {
		return nil
	}
	u, err := resp.URL.Parse(loc)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil
	}
	u.Fragment, u.RawFragment = "", ""
	lk := linkscan.FromURL(u, u.String())
	r := &Request{URL: lk.URL, Callback: callback, Depth: 1, parsed: &lk}
	if callback != "" {
		r.Depth = max(resp.Request.Depth, 1)
		r.Header = resp.Request.Header.Clone()
	}
	return r
}

// sitemapCallback reads a sitemap (its URLs become requests for the
// start URLs' callback) or a sitemap index (its sitemaps become sitemap
// requests), plain or gzip-compressed, as parsed while it was fetched.
func (c *Crawler) sitemapCallback(_ context.Context, resp *Response) (Result, error) {
	log := c.log.With("sitemap", Redact(resp.URL.String()))
	sm := resp.sitemap
	if sm == nil { // a Response made elsewhere: parse its Body
		sm = c.readSitemap(bytes.NewReader(resp.Body))
	}
	c.stats.Add(StatBytes, sm.bytes)
	locs, index, err := sm.locs, sm.index, sm.err
	switch {
	case errors.Is(err, ErrSitemapTruncated):
		c.stats.Inc(StatSitemapTruncate)
		log.Warn("sitemap over the protocol's limits; the rest is ignored", "urls", len(locs), "err", err)
	case err != nil && len(locs) == 0:
		c.stats.Inc(StatSitemapInvalid)
		log.Warn("not a sitemap; ignored", "err", err)
		return Result{}, nil
	case err != nil:
		c.stats.Inc(StatSitemapInvalid)
		log.Warn("sitemap broken; the URLs before the error are kept", "urls", len(locs), "err", err)
	}
	c.stats.Inc(StatSitemaps)
	cb := ""
	if index {
		cb = CallbackSitemap
	} else {
		c.stats.Add(StatSitemapURLs, int64(len(locs)))
	}
	res := Result{Requests: c.sitemapRequests(resp, locs, cb)}
	log.Debug("sitemap read", "index", index, "urls", len(locs), "requests", len(res.Requests))
	return res, nil
}

// ErrSitemapTruncated is returned by ParseSitemap, with the URLs read so
// far, for a file over SitemapMaxURLs URLs or SitemapMaxSize bytes.
var ErrSitemapTruncated = errors.New("engine: sitemap over the protocol's limits")

// ErrNotSitemap is returned by ParseSitemap for XML whose root is neither
// <urlset> nor <sitemapindex>, and for what is not XML.
var ErrNotSitemap = errors.New("engine: not a sitemap")

// ParseSitemap reads a sitemap (<urlset>) or a sitemap index
// (<sitemapindex>), plain or gzip-compressed (told by its first bytes),
// and returns the <loc> of its entries, at most SitemapMaxURLs of them
// from at most SitemapMaxSize uncompressed bytes: past either limit it
// returns what it read with ErrSitemapTruncated. A URL listed again is
// returned once. It reads r as a stream: what it holds is the URLs it
// returns, at most 10 MiB for them and their set (the default
// FetchConfig.MaxBodySize, counting each URL twice and 64 bytes more;
// past that ErrSitemapTruncated too)
// and one XML token (at most 256 KiB, a run of white space counting as
// one byte; a longer one ends the file with ErrSitemapTruncated).
func ParseSitemap(r io.Reader) (locs []string, index bool, err error) {
	return parseSitemap(r, sitemapLimits{urls: SitemapMaxURLs, size: SitemapMaxSize, kept: defaultMaxBodySize})
}

// sitemapLimits are the limits of parseSitemap.
type sitemapLimits struct {
	urls int   // URLs returned
	size int64 // bytes read, uncompressed
	kept int64 // bytes held for the URLs returned (see parseSitemap)
}

// parseSitemap is ParseSitemap with the limits given.
func parseSitemap(r io.Reader, lim sitemapLimits) (locs []string, index bool, err error) {
	r, closeGzip, err := gunzipped(r)
	if err != nil {
		return nil, false, err
	}
	defer closeGzip()
	p := newSitemapParser(r, lim)
	err = p.parse()
	if d, ok := err.(discarded); ok {
		return nil, false, d.err
	}
	return p.locs, p.index, err
}

// gunzipped returns r, decompressed if it is gzip (told by its first
// bytes), and what closes the decompressor.
func gunzipped(r io.Reader) (io.Reader, func(), error) {
	br := bufio.NewReader(r)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: gzip: %w", ErrNotSitemap, err)
		}
		return zr, func() { zr.Close() }, nil
	}
	return br, func() {}, nil
}

// discarded is a parse error for which parseSitemap returns no URL: what
// was read is not a sitemap.
type discarded struct{ err error }

func (d discarded) Error() string { return d.err.Error() }

// sitemapParser reads one sitemap, a token at a time (see parseSitemap).
type sitemapParser struct {
	lim     sitemapLimits
	lr      *io.LimitedReader
	tr      *tokenReader
	d       *xml.Decoder
	depth   int
	root    string // the root element's name, lower case; "" before it
	entry   string // "url" or "sitemap" while inside one
	kept    int64  // bytes held for locs and seen
	entries int    // <loc> entries read, repeated ones too
	seen    map[string]struct{}
	locs    []string
	index   bool // a sitemap index
}

func newSitemapParser(r io.Reader, lim sitemapLimits) *sitemapParser {
	lr := &io.LimitedReader{R: r, N: lim.size + 1}
	tr := &tokenReader{r: bufio.NewReader(lr), max: sitemapMaxToken}
	d := xml.NewDecoder(tr)
	d.Strict = false
	d.CharsetReader = func(_ string, in io.Reader) (io.Reader, error) { return in, nil }
	return &sitemapParser{lim: lim, lr: lr, tr: tr, d: d, seen: map[string]struct{}{}}
}

// parse reads the sitemap to its end, or to its first error.
func (p *sitemapParser) parse() error {
	for {
		p.tr.n = 0
		tok, err := p.d.Token()
		if err == io.EOF {
			break
		}
		if err := p.tokenErr(err); err != nil {
			return err
		}
		if err := p.token(tok); err != nil {
			return err
		}
	}
	if p.lr.N <= 0 {
		return fmt.Errorf("%w: more than %d bytes uncompressed", ErrSitemapTruncated, p.lim.size)
	}
	if p.root == "" {
		return discarded{fmt.Errorf("%w: no root element", ErrNotSitemap)}
	}
	return nil
}

// tokenErr is the error that ends the parse after a token was read with
// err: the size limit, a token too long, or err.
func (p *sitemapParser) tokenErr(err error) error {
	switch {
	case p.lr.N <= 0:
		return fmt.Errorf("%w: more than %d bytes uncompressed", ErrSitemapTruncated, p.lim.size)
	case errors.Is(err, errTokenTooLong):
		return fmt.Errorf("%w: %w", ErrSitemapTruncated, err)
	case err != nil && p.root == "":
		return discarded{fmt.Errorf("%w: %w", ErrNotSitemap, err)}
	case err != nil:
		return fmt.Errorf("%w: %w", ErrNotSitemap, err)
	}
	return nil
}

// token takes in one token.
func (p *sitemapParser) token(tok xml.Token) error {
	switch t := tok.(type) {
	case xml.StartElement:
		return p.start(t)
	case xml.EndElement:
		p.depth--
		if p.depth == 1 {
			p.entry = ""
		}
	}
	return nil
}

// start takes in an element's start: the root, an entry, or an entry's
// <loc>.
func (p *sitemapParser) start(t xml.StartElement) error {
	p.depth++
	name := strings.ToLower(t.Name.Local)
	switch {
	case p.depth > sitemapMaxDepth:
		return fmt.Errorf("%w: elements nested over %d deep", ErrNotSitemap, sitemapMaxDepth)
	case p.depth == 1:
		if name != "urlset" && name != "sitemapindex" {
			return discarded{fmt.Errorf("%w: root element <%s>", ErrNotSitemap, t.Name.Local)}
		}
		p.root, p.index = name, name == "sitemapindex"
	case p.depth == 2:
		p.entry = name
	case p.depth == 3 && name == "loc" && (p.entry == "url" && !p.index || p.entry == "sitemap" && p.index):
		return p.loc(t)
	}
	return nil
}

// loc reads an entry's <loc>, and keeps it unless it was read before.
func (p *sitemapParser) loc(t xml.StartElement) error {
	var loc string
	p.tr.n = 0
	if err := p.d.DecodeElement(&loc, &t); errors.Is(err, errTokenTooLong) {
		return fmt.Errorf("%w: %w", ErrSitemapTruncated, err)
	} else if err != nil {
		return fmt.Errorf("%w: %w", ErrNotSitemap, err)
	}
	p.depth--
	if p.entries == p.lim.urls {
		return fmt.Errorf("%w: more than %d URLs", ErrSitemapTruncated, p.lim.urls)
	}
	p.entries++
	loc = strings.TrimSpace(loc)
	if _, dup := p.seen[loc]; dup {
		return nil // a file repeating a URL costs no more than listing it once
	}
	if p.kept += 2*int64(len(loc)) + 64; p.kept > p.lim.kept {
		return fmt.Errorf("%w: URLs over %d bytes", ErrSitemapTruncated, p.lim.kept)
	}
	p.seen[loc] = struct{}{}
	p.locs = append(p.locs, loc)
	return nil
}

// errTokenTooLong ends a sitemap with an XML token over sitemapMaxToken.
var errTokenTooLong = fmt.Errorf("an XML token over %d bytes", sitemapMaxToken)

// tokenReader is the byte source of a sitemap's XML decoder. It bounds
// what the decoder buffers: it fails once more than max bytes were read
// since n was last reset (before each token), and it turns every run of
// white space into one space, which the decoder sees as such (white
// space is insignificant in a sitemap, and trimmed around a <loc>).
type tokenReader struct {
	r   *bufio.Reader
	n   int
	max int
}

func (t *tokenReader) ReadByte() (byte, error) {
	if t.n++; t.n > t.max {
		return 0, errTokenTooLong
	}
	b, err := t.r.ReadByte()
	if err != nil || !isXMLSpace(b) {
		return b, err
	}
	for { // skip the run a buffer at a time: a bomb of white space is long
		buf, err := t.r.Peek(max(t.r.Buffered(), 1))
		k := 0
		for k < len(buf) && isXMLSpace(buf[k]) {
			k++
		}
		t.r.Discard(k)
		if k < len(buf) || err != nil {
			return ' ', nil // an error comes again on the next read
		}
	}
}

// Read is for io.Reader; the decoder reads bytes through ReadByte.
func (t *tokenReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	b, err := t.ReadByte()
	if err != nil {
		return 0, err
	}
	p[0] = b
	return 1, nil
}

func isXMLSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }
