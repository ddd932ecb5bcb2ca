package engine

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
)

func linkStrings(links []*url.URL) []string {
	out := make([]string, len(links))
	for i, u := range links {
		out[i] = u.String()
	}
	return out
}

func TestExtractLinks(t *testing.T) {
	base, _ := url.Parse("https://example.com/dir/page.html?q=1")
	for _, tc := range []struct {
		name  string
		html  string
		title string
		want  []string
	}{
		{"relative", `<a href="other.html">x</a><a href="../up">y</a><a href="?p=2">z</a>`, "",
			[]string{"https://example.com/dir/other.html", "https://example.com/up", "https://example.com/dir/page.html?p=2"}},
		{"root-relative and protocol-relative", `<a href="/root">x</a><a href="//cdn.example.org/a">y</a>`, "",
			[]string{"https://example.com/root", "https://cdn.example.org/a"}},
		{"absolute", `<a href="http://other.example/x">x</a><a href="HTTPS://Other.example/y">y</a>`, "",
			[]string{"http://other.example/x", "https://Other.example/y"}},
		{"base href", `<head><base href="http://base.example/sub/"><base href="http://second.example/"></head><a href="a">a</a><a href="/b">b</a>`, "",
			[]string{"http://base.example/sub/a", "http://base.example/b"}},
		{"base applies to earlier links", `<a href="early">e</a><base href="/other/"><a href="late">l</a>`, "",
			[]string{"https://example.com/other/early", "https://example.com/other/late"}},
		{"base without href skipped", `<base target="_blank"><base href="/b/"><a href="x">x</a>`, "",
			[]string{"https://example.com/b/x"}},
		{"javascript base ignored", `<base href="javascript:void(0)"><a href="x">x</a>`, "",
			[]string{"https://example.com/dir/x"}},
		{"area", `<map><area href="/area1" shape="rect"><area nohref></map>`, "",
			[]string{"https://example.com/area1"}},
		{"link rel next vs stylesheet", `<link rel="stylesheet" href="/s.css"><link rel="prefetch next" href="/p2"><link href="/norel"><link rel="NEXT" href="/p3"><link rel="nextpage" href="/p4">`, "",
			[]string{"https://example.com/p2", "https://example.com/p3"}},
		{"fragments removed and deduplicated", `<a href="#top">t</a><a href="/a#one">1</a><a href="/a#two">2</a><a href="/a">3</a>`, "",
			[]string{"https://example.com/dir/page.html?q=1", "https://example.com/a"}},
		{"entities in href", `<a href="/s?a=1&amp;b=2">x</a><a href="/s?a=1&b=3">y</a><a href="/&#x41;">z</a>`, "",
			[]string{"https://example.com/s?a=1&b=2", "https://example.com/s?a=1&b=3", "https://example.com/A"}},
		{"uppercase tags and attributes", `<HTML><TITLE>Big</TITLE><A HREF="/upper">x</A><AREA HREF="/ar"><LINK REL="Next" HREF="/n"></HTML>`, "Big",
			[]string{"https://example.com/upper", "https://example.com/ar", "https://example.com/n"}},
		{"skipped schemes", `<a href="javascript:alert(1)">j</a><a href="mailto:a@b.c">m</a><a href="data:text/html,<a href=x>">d</a><a href="tel:+1">t</a><a href="ftp://f.example/">f</a><a href="JavaScript:x">J</a><a href="/ok">ok</a>`, "",
			[]string{"https://example.com/ok"}},
		{"unparsable and empty hrefs", `<a href="http://[::1">bad</a><a href="http://a b.example/">sp</a><a href="">e</a><a href="   ">w</a><a>none</a><a href="/ok">ok</a>`, "",
			[]string{"https://example.com/ok"}},
		{"whitespace trimmed", "<a href=\"  /trim \n\">x</a><a href=\"/new\nline\">y</a><a href=\"\t/tab\">z</a>", "",
			[]string{"https://example.com/trim", "https://example.com/newline", "https://example.com/tab"}},
		{"broken html", `<div><a href="/one">one<a href=/two>two<p><a href='/three' <b>three</a><a href="/unterminated`, "",
			[]string{"https://example.com/one", "https://example.com/two", "https://example.com/three"}},
		{"scripts and comments are not markup", `<script>var s = '<a href="/js">';</script><!-- <a href="/comment"> --><style>a[href="/css"]{}</style><a href="/real">r</a>`, "",
			[]string{"https://example.com/real"}},
		{"noscript is markup", `<noscript><a href="/ns">n</a></noscript>`, "",
			[]string{"https://example.com/ns"}},
		{"title", "<html><head><title>\n  Hello &amp;\n  World </title><title>Second</title></head><svg><title>svg</title></svg></html>", "Hello & World", nil},
		{"title with markup inside", `<title>a <b>bold</b> move</title><a href="/after">x</a>`, "a <b>bold</b> move",
			[]string{"https://example.com/after"}},
		{"unclosed title", `<title>never closed <a href="/x">`, `never closed <a href="/x">`, nil},
		{"empty", ``, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			title, links := ExtractLinks(base, []byte(tc.html))
			if title != tc.title {
				t.Errorf("title %q, want %q", title, tc.title)
			}
			if got := linkStrings(links); !slices.Equal(got, tc.want) {
				t.Errorf("links\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestExtractLinksNilBase(t *testing.T) {
	_, links := ExtractLinks(nil, []byte(`<a href="/rel">r</a><a href="http://abs.example/">a</a>`))
	if got := linkStrings(links); !slices.Equal(got, []string{"http://abs.example/"}) {
		t.Errorf("links %q", got)
	}
}

func TestExtractLinksLimits(t *testing.T) {
	base, _ := url.Parse("http://example.com/")
	var b strings.Builder
	for i := range maxLinks + 500 {
		fmt.Fprintf(&b, `<a href="/p%d">x</a>`, i)
	}
	_, links := ExtractLinks(base, []byte(b.String()))
	if len(links) != maxLinks {
		t.Errorf("%d links, want the cap of %d", len(links), maxLinks)
	}

	long := strings.Repeat("é", maxTitle) // 2 bytes each
	title, _ := ExtractLinks(base, []byte("<title>"+long+"</title>"))
	if len(title) > maxTitle || !strings.HasPrefix(long, title) || len(title) < maxTitle-1 {
		t.Errorf("title of %d bytes, want at most %d on a rune boundary", len(title), maxTitle)
	}

	// Binary input does not blow up.
	bin := make([]byte, 1<<16)
	for i := range bin {
		bin[i] = byte(i * 7)
	}
	ExtractLinks(base, bin)
}

func FuzzExtractLinks(f *testing.F) {
	for _, seed := range []string{
		`<a href="/a">a</a>`,
		`<base href="http://b.example/x/"><a href="y#frag">`,
		`<link rel="next" href="?page=2"><area href="//c.example">`,
		`<a href="javascript:x"><a href="data:,x"><a href="http://[::1]:80/">`,
		`<title>t</title><a href=" HTTP://UP.example/%zz ">`,
		`<a href="http:opaque"><a href="https:/one-slash"><a href="http://user:pass@h/">`,
		"<a href=\"\x00\xff\">",
		`<svg><a href="/svg"/></svg><math><a href=x>`,
	} {
		f.Add("https://example.com/dir/", []byte(seed))
	}
	f.Add("http://[::1]:8080/", []byte(`<a href="../../x">`))
	f.Fuzz(func(t *testing.T, baseStr string, body []byte) {
		base, err := url.Parse(baseStr)
		if err != nil {
			base = nil
		}
		_, links := ExtractLinks(base, body)
		seen := make(map[string]bool)
		for _, u := range links {
			if u.Scheme != "http" && u.Scheme != "https" {
				t.Errorf("link %q has scheme %q", u, u.Scheme)
			}
			if !u.IsAbs() || u.Host == "" || u.Opaque != "" {
				t.Errorf("link %q is not absolute", u)
			}
			if u.Fragment != "" || u.RawFragment != "" || strings.Contains(u.String(), "#") {
				t.Errorf("link %q has a fragment", u)
			}
			if seen[u.String()] {
				t.Errorf("link %q twice", u)
			}
			seen[u.String()] = true
		}
		if len(links) > maxLinks {
			t.Errorf("%d links", len(links))
		}
	})
}

func TestIsHTML(t *testing.T) {
	for _, tc := range []struct {
		ct   string
		body string
		want bool
	}{
		{"text/html", "", true},
		{"text/html; charset=utf-8", "", true},
		{"TEXT/HTML;charset=UTF-8", "", true},
		{"application/xhtml+xml", "", true},
		{"text/html;;bad", "", true},
		{"text/plain", "<html><body>x</body></html>", false},
		{"application/json", "{}", false},
		{"image/png", "\x89PNG\r\n\x1a\n", false},
		{"", "<!DOCTYPE html><html><body>x</body></html>", true},
		{"", "  <html>", true},
		{"", "plain text", false},
		{"", "\x89PNG\r\n\x1a\n", false},
		{"", "", false},
	} {
		if got := IsHTML(tc.ct, []byte(tc.body)); got != tc.want {
			t.Errorf("IsHTML(%q, %q) = %v, want %v", tc.ct, tc.body, got, tc.want)
		}
	}
}

// benchPage builds a page of about 15 KB: a head, navigation, paragraphs and
// links of several kinds.
func benchPage() []byte {
	var b strings.Builder
	b.WriteString(`<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>A fairly ordinary page &amp; its links</title>
<link rel="stylesheet" href="/static/site.css"><link rel="next" href="/page/2"><script src="/static/app.js"></script>
<style>body{font-family:sans-serif} .nav a{color:#333}</style></head><body><div class="nav"><ul>`)
	for i := range 30 {
		fmt.Fprintf(&b, `<li><a href="/section/%d/" class="nav-link">Section %d</a></li>`, i, i)
	}
	b.WriteString("</ul></div><main>")
	for i := 0; b.Len() < 14500; i++ {
		fmt.Fprintf(&b, `<article><h2>Item %d</h2><p>Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor
incididunt ut labore et dolore magna aliqua. See <a href="item-%d.html#details">details</a>, <a href="https://other.example.org/ref?id=%d&amp;src=list">the reference</a>
or <a href="mailto:author%d@example.com">write</a>.</p></article>`, i, i, i, i)
	}
	b.WriteString(`</main><footer><a href="/about">About</a> <a href="/contact">Contact</a></footer></body></html>`)
	return []byte(b.String())
}

func BenchmarkExtractLinks(b *testing.B) {
	page := benchPage()
	base, _ := url.Parse("https://example.com/list/index.html")
	b.SetBytes(int64(len(page)))
	b.ReportAllocs()
	var n int
	for b.Loop() {
		_, links := ExtractLinks(base, page)
		n = len(links)
	}
	b.ReportMetric(float64(len(page)), "page_bytes")
	b.ReportMetric(float64(n), "links/page")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pages/s")
}
