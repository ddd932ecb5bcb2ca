package engine

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
)

func gz(t *testing.T, s []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write(s)
	zw.Close()
	return b.Bytes()
}

// TestParseSitemap: a urlset and an index, plain or gzip, give their
// <loc> entries; the protocol's limits (50,000 URLs, 50 MB uncompressed)
// cut a file, with what came before; what is not a sitemap is refused.
func TestParseSitemap(t *testing.T) {
	set := []byte(`<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
<url><loc> http://a.test/1 </loc><lastmod>2026-01-01</lastmod></url><url><loc>http://a.test/2?a=1&amp;b=2</loc></url></urlset>`)
	idx := []byte(`<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><sitemap><loc>http://a.test/s.xml.gz</loc></sitemap></sitemapindex>`)
	for _, tc := range []struct {
		name  string
		body  []byte
		index bool
		want  []string
	}{
		{"urlset", set, false, []string{"http://a.test/1", "http://a.test/2?a=1&b=2"}},
		{"gzip urlset", gz(t, set), false, []string{"http://a.test/1", "http://a.test/2?a=1&b=2"}},
		{"index", idx, true, []string{"http://a.test/s.xml.gz"}},
	} {
		locs, index, err := ParseSitemap(bytes.NewReader(tc.body))
		if err != nil || index != tc.index || !slices.Equal(locs, tc.want) {
			t.Errorf("%s: %q, index %v, %v; want %q, index %v", tc.name, locs, index, err, tc.want, tc.index)
		}
	}

	checkLimits(t, func(r io.Reader) ([]string, bool, error) {
		return parseSitemap(r, sitemapLimits{urls: 500, size: 1 << 20, kept: 10 << 20})
	}, 500, 1<<20)
	for _, bad := range []string{"<html><body><a href='/x'>x</a></body></html>", "User-agent: *\n", "", "\x1f\x8bnot gzip"} {
		if _, _, err := ParseSitemap(strings.NewReader(bad)); !errors.Is(err, ErrNotSitemap) {
			t.Errorf("ParseSitemap(%.20q) = %v, want ErrNotSitemap", bad, err)
		}
	}
}

// TestSitemapProtocolLimits: ParseSitemap enforces the protocol's own
// limits, 50,000 URLs and 50 MB (slow under -race: skipped by -short).
func TestSitemapProtocolLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("parses 50 MB")
	}
	checkLimits(t, ParseSitemap, SitemapMaxURLs, SitemapMaxSize)
}

// checkLimits: a file of maxURLs+1 URLs gives the first maxURLs; one of
// maxSize+1 MB gives the URLs before the limit; both with
// ErrSitemapTruncated.
func checkLimits(t *testing.T, parse func(io.Reader) ([]string, bool, error), maxURLs, maxSize int) {
	t.Helper()
	var many bytes.Buffer
	many.WriteString(`<urlset>`)
	for i := range maxURLs + 1 {
		fmt.Fprintf(&many, "<url><loc>http://a.test/%d</loc></url>\n", i)
	}
	many.WriteString(`</urlset>`)
	locs, _, err := parse(bytes.NewReader(gz(t, many.Bytes())))
	if !errors.Is(err, ErrSitemapTruncated) || len(locs) != maxURLs || locs[maxURLs-1] != fmt.Sprintf("http://a.test/%d", maxURLs-1) {
		t.Errorf("%d URLs: kept %d, %v; want the first %d and ErrSitemapTruncated", maxURLs+1, len(locs), err, maxURLs)
	}
	// maxSize + 1 MB uncompressed (a few KB of gzip): cut at maxSize.
	big := append([]byte(`<urlset><url><loc>http://a.test/first</loc></url>`), bytes.Repeat([]byte(" "), maxSize+1<<20)...)
	big = append(big, `<url><loc>http://a.test/past-the-limit</loc></url></urlset>`...)
	locs, _, err = parse(bytes.NewReader(gz(t, big)))
	if !errors.Is(err, ErrSitemapTruncated) || !slices.Equal(locs, []string{"http://a.test/first"}) {
		t.Errorf("%d bytes: %q, %v; want the first URL and ErrSitemapTruncated", len(big), locs, err)
	}
	// Just under both limits: everything, no error.
	fit := append([]byte(`<urlset><url><loc>http://a.test/first</loc></url>`), bytes.Repeat([]byte(" "), maxSize-200)...)
	fit = append(fit, `<url><loc>http://a.test/last</loc></url></urlset>`...)
	if locs, _, err = parse(bytes.NewReader(gz(t, fit))); err != nil || len(locs) != 2 {
		t.Errorf("%d bytes (under the limit): %q, %v; want both URLs", len(fit), locs, err)
	}
}
