package engine

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"testing"

	"github.com/trawlhq/trawl/broker/memory"
	"github.com/trawlhq/trawl/dedup/local"
)

// webPages are pages shaped like bench-web's (internal/benchcrawl): hosts
// of Zipf-like sizes on addresses of their own, HTML of 20 to 80 KB with
// 30 to 150 links, 1 in 20 to another host, the rest to pages of the same
// host by path.
func webPages(hosts int) (bases []string, pages [][]byte, urls []*url.URL) {
	rng := rand.New(rand.NewPCG(26, 26))
	// Zipf sizes, at most 200 pages, about 20 pages a host (bench-web's).
	sizes := func(c float64) (s []int, sum int) {
		for r := range hosts {
			s = append(s, max(1, min(200, int(math.Round(c/float64(r+1))))))
			sum += s[r]
		}
		return s, sum
	}
	lo, hi := 0.0, 20.0*float64(hosts)*float64(hosts)
	for range 100 {
		if _, sum := sizes((lo + hi) / 2); sum < 20*hosts {
			lo = (lo + hi) / 2
		} else {
			hi = (lo + hi) / 2
		}
	}
	sz, _ := sizes(hi)
	size := func(h int) int { return sz[h] }
	filler := make([]byte, 0, 80<<10)
	for len(filler) < 80<<10 {
		filler = append(filler, "lorem ipsum dolor sit amet consectetur "...)
	}
	for h := range hosts {
		scheme := "http"
		if h%2 == 1 {
			scheme = "https"
		}
		bases = append(bases, fmt.Sprintf("%s://127.0.%d.%d:8080", scheme, h/250, 1+h%250))
	}
	for h := range hosts {
		for p := range size(h) {
			sz := 20<<10 + rng.IntN(60<<10)
			b := fmt.Appendf(make([]byte, 0, sz+256), "<!DOCTYPE html>\n<html><head><title>host %d page %d</title></head><body>\n<h1>host %d page %d</h1>\n", h, p, h, p)
			for range 30 + rng.IntN(121) {
				host, page := h, rng.IntN(size(h))
				if rng.IntN(20) == 0 {
					host = rng.IntN(hosts)
					page = rng.IntN(size(host))
				}
				b = append(b, `<a href="`...)
				if host != h {
					b = append(b, bases[host]...)
				}
				b = fmt.Appendf(b, "/p/%d\">a link</a>\n", page)
			}
			b = append(b, "<p>"...)
			b = append(b, filler[:max(0, sz-len(b))]...)
			pages = append(pages, append(b, "</p></body></html>\n"...))
			u, _ := url.Parse(fmt.Sprintf("%s/p/%d", bases[h], p))
			urls = append(urls, u)
		}
	}
	return bases, pages, urls
}

// BenchmarkPagePath measures the engine's work on a fetched page beyond
// the fetch, in bench-web's conditions: the default callback (the link
// scan and the Page item), the links' scope and guards, the seen-link
// table, fingerprints, encoding and the frontier's Expand on the
// in-memory broker and the local Bloom filter (trawl's defaults). Pages
// cycle over the 20,000 pages of 1,000 hosts, so past the first pass most links are known,
// as in a crawl (bench-web filters about 37 links a page for 1 it
// enqueues).
func BenchmarkPagePath(b *testing.B) {
	_, pages, urls := webPages(1000)
	mb, _ := memory.New(memory.Config{})
	defer mb.Close()
	f, _ := local.New(local.Config{})
	defer f.Close()
	c, err := New(mb, f, Config{Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer c.kit.fetcher.Close()
	ctx := context.Background()
	header := http.Header{"Content-Type": {"text/html; charset=utf-8"}}
	var nlinks int
	b.ReportAllocs()
	cpu := processCPU()
	i := 0
	for b.Loop() {
		n := i % len(pages)
		// Each pass's pages are new to the frontier (not redeliveries,
		// which recheck every link with the filter).
		req := &Request{URL: fmt.Sprintf("%s?pass=%d", urls[n], i/len(pages)), Depth: 1, Scope: urls[n].Hostname()}
		resp := &Response{Request: req, URL: urls[n], StatusCode: 200, Header: header, Body: pages[n]}
		res, err := c.defaultCallback(ctx, resp)
		if err != nil {
			b.Fatal(err)
		}
		res.found.scope = req.Scope // as follow does
		nlinks += res.found.len()
		if err := c.enqueueAll(ctx, []links{{parent: req, found: res.found}}); err != nil {
			b.Fatal(err)
		}
		i++
	}
	if cpu > 0 {
		b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	}
	b.ReportMetric(float64(nlinks)/float64(b.N), "links/op")
}
