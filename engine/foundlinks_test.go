package engine

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/memory"
	"github.com/trawlhq/trawl/dedup"
	"github.com/trawlhq/trawl/dedup/local"
	"github.com/trawlhq/trawl/internal/linkscan"
)

// TestFoundLinksMatchReference: what the engine offers the frontier for
// a page's links (each one's encoded request, fingerprint, partition key
// and seen-link key, and which are in scope) is what it makes of the
// url.URLs that url.Parse and ResolveReference make of the hrefs
// (linkscan.ExtractTokenized), for awkward hrefs against awkward bases:
// the links are followed from linkscan.Links, without parsing them.
func TestFoundLinksMatchReference(t *testing.T) {
	hrefs := []string{
		"", "#f", "?", "?a", "?b=2&a=1", "a", "a/", "./a", "../a", "../../../a", "a/./b", "a/../b", ".", "..",
		"/", "//", "/a", "/a/", "/a//b", "/./a", "/../a", "/a/..", "/A%2fb", "/%7e", "/a b", "/a(b)", "/a:b", "a:b",
		"//h", "//H.example/p", "//h:80/p?q", "//u@h/p", "//u:pw@example.com/p", "//[::1]/p",
		"http://h", "http://h/", "http://h?q", "http://h?", "http://example.com/x#f", "http://EXAMPLE.com:80/x",
		"http://example.com:8080/p", "https://example.com/p?z=1&a", "http://sub.example.com/p", "http://u:pw@example.com/p",
		"http://example.com/a/../b", "http://example.com/a%2Fb", "http://example.com/%zz", "http://example.com/p?%zz",
		"http://example.com./p", "http://xn--nxasmq6b.example/", "http://\u00e9.example/p", "http://example.com/\u00e9",
		"HTTP://Example.com/p", "http:/example.com/p", "http:example.com/p", "mailto:a@example.com", "javascript:x", "ftp://example.com/",
	}
	var body strings.Builder
	for _, h := range hrefs {
		body.WriteString(`<a href="` + html.EscapeString(h) + `">x</a>`)
	}
	mb, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer mb.Close()
	f, err := local.New(local.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := New(mb, f, Config{Name: "ref", PartitionBy: broker.PartitionByDomain})
	if err != nil {
		t.Fatal(err)
	}
	defer c.kit.fetcher.Close()
	for _, b := range []string{
		"https://Example.COM:8443/dir/page.html?q=1",
		"http://example.com",
		"http://example.com/a%20b/c",
		"http://u:pw@example.com/a/",
		"http://[::1]:8080/d/p",
		"http://\u00e9.example/dir/",
		"http://sub.example.com/dir/x",
	} {
		base, err := url.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		// The scope of a start URL: its host name.
		req := &Request{URL: b, Depth: 1, Scope: base.Hostname()}
		resp := &Response{Request: req, URL: base, StatusCode: 200, Header: http.Header{"Content-Type": {"text/html"}}, Body: []byte(body.String())}
		res, err := c.defaultCallback(context.Background(), resp)
		if err != nil {
			t.Fatal(err)
		}
		res.found.scope = req.Scope // as follow does
		ls := c.followed(links{parent: req, found: res.found})
		seen := newSeenLinks()
		page, err := c.expansion(req, ls, seen)
		if err != nil {
			t.Fatal(err)
		}

		// The reference: the tokenizer's url.URLs, without user
		// information (see withCredentials), in the page's scope.
		_, refs := linkscan.ExtractTokenized(base, []byte(body.String()))
		var want []*url.URL
		for _, u := range refs {
			h, origin := strings.ToLower(u.Hostname()), strings.ToLower(req.Scope)
			if h != origin && !strings.HasSuffix(h, "."+origin) {
				continue
			}
			cp := *u
			cp.User = nil
			want = append(want, &cp)
		}
		if len(page.Links) != len(want) {
			var got []string
			for _, l := range ls {
				got = append(got, l.lk.URL)
			}
			t.Fatalf("base %s: %d links followed, reference %d:\n got %q\nwant %v", b, len(page.Links), len(want), got, want)
		}
		for i, u := range want {
			fl := page.Links[i]
			var r Request
			if err := r.UnmarshalBinary(fl.Message.Body); err != nil {
				t.Fatal(err)
			}
			if r.URL != u.String() || r.Depth != 2 || r.Scope != req.Scope || r.Referrer != "" || r.Method != "" || r.Callback != "" {
				t.Errorf("base %s: link %d is %+v, want URL %q depth 2 scope %q", b, i, r, u, req.Scope)
			}
			if fp := (dedup.Fingerprinter{}).Fingerprint("GET", u, nil, r.Header); fl.Fingerprint != fp {
				t.Errorf("base %s: link %s: fingerprint %s, reference %s", b, u, fl.Fingerprint, fp)
			}
			if k := broker.PartitionKey(u.Host, broker.PartitionByDomain); fl.Message.Key != k {
				t.Errorf("base %s: link %s: partition key %q, reference %q", b, u, fl.Message.Key, k)
			}
			// A link with credentials carries them in a header, and is
			// not one the seen-link table may remember.
			if k, ok := seen.seenKey(&r); ls[i].seen != k || (ls[i].seen != 0) != ok {
				t.Errorf("base %s: link %s: seen key %x, reference %x (%v)", b, u, ls[i].seen, k, ok)
			}
		}
	}
}
