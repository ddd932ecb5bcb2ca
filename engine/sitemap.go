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
	"net/url"
	"strings"
)

// The sitemaps protocol's limits (sitemaps.org): a sitemap file lists at
// most SitemapMaxURLs URLs and is at most SitemapMaxSize bytes
// uncompressed. trawl reads the first SitemapMaxURLs URLs and the first
// SitemapMaxSize bytes of a file and ignores the rest, with a warning.
const (
	SitemapMaxURLs = 50_000
	SitemapMaxSize = 50 << 20
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

// fetchRequest fetches req; sitemaps may be as large as the protocol
// allows (SitemapMaxSize), whatever FetchConfig.MaxBodySize.
func (c *Crawler) fetchRequest(ctx context.Context, req *Request) (*Response, error) {
	if req.Callback == CallbackSitemap {
		return c.fetcher.fetch(ctx, req, max(c.fetcher.maxBody, SitemapMaxSize), false)
	}
	return c.fetcher.Fetch(ctx, req)
}

// robotsSitemapsCallback turns the Sitemap: lines of a robots.txt into
// sitemap requests.
func (c *Crawler) robotsSitemapsCallback(_ context.Context, resp *Response) (Result, error) {
	var res Result
	sc := bufio.NewScanner(bytes.NewReader(resp.Body))
	sc.Buffer(make([]byte, 0, 4096), MaxURLLength+64)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if len(line) < 8 || !strings.EqualFold(line[:8], "sitemap:") {
			continue
		}
		if r := c.sitemapRequest(resp, strings.TrimSpace(line[8:]), CallbackSitemap); r != nil {
			res.Requests = append(res.Requests, r)
		}
	}
	return res, nil
}

// sitemapRequest is the request of a URL a sitemap (or robots.txt) lists,
// resolved against the sitemap's URL; nil if it is not http or https.
// Listed pages have depth 1, as if linked from the start URL; nested
// sitemaps keep the depth of the sitemap that lists them, so that
// Config.MaxDepth does not cut a chain of indexes.
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
	r := &Request{URL: u.String(), Callback: callback, Depth: 1, parsed: u}
	if callback != "" {
		r.Depth = max(resp.Request.Depth, 1)
		r.Header = resp.Request.Header.Clone()
	}
	return r
}

// sitemapCallback reads a sitemap (its URLs become requests for the
// start URLs' callback) or a sitemap index (its sitemaps become sitemap
// requests), plain or gzip-compressed.
func (c *Crawler) sitemapCallback(_ context.Context, resp *Response) (Result, error) {
	log := c.log.With("sitemap", Redact(resp.URL.String()))
	locs, index, err := ParseSitemap(bytes.NewReader(resp.Body))
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
	res := Result{Requests: make([]*Request, 0, len(locs))}
	for _, loc := range locs {
		if r := c.sitemapRequest(resp, loc, cb); r != nil {
			res.Requests = append(res.Requests, r)
		}
	}
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
// returns what it read with ErrSitemapTruncated.
func ParseSitemap(r io.Reader) (locs []string, index bool, err error) {
	return parseSitemap(r, SitemapMaxURLs, SitemapMaxSize)
}

// parseSitemap is ParseSitemap with the limits given.
func parseSitemap(r io.Reader, maxURLs int, maxSize int64) (locs []string, index bool, err error) {
	br := bufio.NewReader(r)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, false, fmt.Errorf("%w: gzip: %w", ErrNotSitemap, err)
		}
		defer zr.Close()
		r = zr
	} else {
		r = br
	}
	lr := &io.LimitedReader{R: r, N: maxSize + 1}
	d := xml.NewDecoder(lr)
	d.Strict = false
	d.CharsetReader = func(_ string, in io.Reader) (io.Reader, error) { return in, nil }
	depth := 0
	root := ""
	entry := "" // "url" or "sitemap" while inside one
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if lr.N <= 0 {
			return locs, index, fmt.Errorf("%w: more than %d bytes uncompressed", ErrSitemapTruncated, maxSize)
		}
		if err != nil {
			if root == "" {
				return nil, false, fmt.Errorf("%w: %w", ErrNotSitemap, err)
			}
			return locs, index, fmt.Errorf("%w: %w", ErrNotSitemap, err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			depth++
			name := strings.ToLower(t.Name.Local)
			switch {
			case depth == 1:
				if name != "urlset" && name != "sitemapindex" {
					return nil, false, fmt.Errorf("%w: root element <%s>", ErrNotSitemap, t.Name.Local)
				}
				root, index = name, name == "sitemapindex"
			case depth == 2:
				entry = name
			case depth == 3 && name == "loc" && (entry == "url" && !index || entry == "sitemap" && index):
				var loc string
				if err := d.DecodeElement(&loc, &t); err != nil {
					return locs, index, fmt.Errorf("%w: %w", ErrNotSitemap, err)
				}
				depth--
				if len(locs) == maxURLs {
					return locs, index, fmt.Errorf("%w: more than %d URLs", ErrSitemapTruncated, maxURLs)
				}
				locs = append(locs, strings.TrimSpace(loc))
			}
		case xml.EndElement:
			depth--
			if depth == 1 {
				entry = ""
			}
		}
	}
	if lr.N <= 0 {
		return locs, index, fmt.Errorf("%w: more than %d bytes uncompressed", ErrSitemapTruncated, maxSize)
	}
	if root == "" {
		return nil, false, fmt.Errorf("%w: no root element", ErrNotSitemap)
	}
	return locs, index, nil
}
