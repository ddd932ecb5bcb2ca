package linkscan

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/net/html"

	"github.com/trawlhq/trawl/internal/testsite"
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
			title, links := Extract(base, []byte(tc.html))
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
	_, links := Extract(nil, []byte(`<a href="/rel">r</a><a href="http://abs.example/">a</a>`))
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
	_, links := Extract(base, []byte(b.String()))
	if len(links) != maxLinks {
		t.Errorf("%d links, want the cap of %d", len(links), maxLinks)
	}

	long := strings.Repeat("é", maxTitle) // 2 bytes each
	title, _ := Extract(base, []byte("<title>"+long+"</title>"))
	if len(title) > maxTitle || !strings.HasPrefix(long, title) || len(title) < maxTitle-1 {
		t.Errorf("title of %d bytes, want at most %d on a rune boundary", len(title), maxTitle)
	}

	// Binary input does not blow up.
	bin := make([]byte, 1<<16)
	for i := range bin {
		bin[i] = byte(i * 7)
	}
	Extract(base, bin)
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
		_, ls, _ := ExtractLimited(base, body, 0)
		links := make([]*url.URL, len(ls))
		for i := range ls {
			links[i] = ls[i].Parsed()
			checkLink(t, &ls[i], links[i])
		}
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
	cpu := processCPU()
	for b.Loop() {
		_, links := Extract(base, page)
		n = len(links)
	}
	if cpu > 0 {
		b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	}
	b.ReportMetric(float64(len(page)), "page_bytes")
	b.ReportMetric(float64(n), "links/page")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pages/s")
}

// benchmarkExtract runs extract on the benchmark page and also reports the
// process CPU time per page (garbage collection included), which a busy
// machine disturbs less than the wall clock.
func benchmarkExtract(b *testing.B, extract func(*url.URL, []byte) (string, []*url.URL)) {
	page := benchPage()
	base, _ := url.Parse("https://example.com/list/index.html")
	b.SetBytes(int64(len(page)))
	b.ReportAllocs()
	cpu := processCPU()
	for b.Loop() {
		extract(base, page)
	}
	if cpu > 0 {
		b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	}
}

// differentialSeeds returns documents that reach the tokenizer's corner
// cases, the benchmark page and test-site pages, for seeding the
// differential tests.
func differentialSeeds(t testing.TB) [][]byte {
	seeds := [][]byte{
		benchPage(),
		[]byte(`<a href="/one">one<a href=/two>two<p><a href='/three' <b>three</a><a href="/unterminated`),
		[]byte(`<script>var s = '<a href="/js">';</script><!-- <a href="/comment"> --><style>a[href="/css"]{}</style><a href="/real">r</a>`),
		[]byte(`<noscript><a href="/ns">n</a></noscript><NOSCRIPT><a href=/ns2></NOSCRIPT>`),
		[]byte("<html><head><title>\n  Hello &amp;\n  World </title><title>Second</title></head><svg><title>svg</title></svg></html>"),
		[]byte(`<title>a <b>bold</b> move</title><a href="/after">x</a>`),
		[]byte(`<title>never closed <a href="/x">`),
		[]byte(`<!--><a href="/after-empty-comment"><!---><a href=/b><!-- -- --!><a href=/c><!-- --!-><a href=/d> --><a href=/e>`),
		[]byte(`<!doctype html><!DOCTYPE><!><!x><a href=/1><?xml x="<a href=/pi>"?><a href=/2></ a href=/bogus><a href=/3></><a href=/4>`),
		[]byte(`<![CDATA[<a href="/cdata">]]><a href="/after-cdata">`),
		[]byte(`<script><!--<a href=/s1><script><a href=/s2></script><a href=/s3></script>--></script><a href=/after-script>`),
		[]byte(`<script><!-- x --></script><a href=/ok><SCRIPT>x</SCRIPT ><a href=/ok2><script>x</scripty><a href=/no></script/><a href=/ok3>`),
		[]byte(`<textarea><a href=/ta></textarea><a href=/t><xmp><a href=/x></xmp><iframe><a href=/if></iframe><noembed><a href=/ne></noembed><noframes><a href=/nf></noframes><a href=/end>`),
		[]byte(`<plaintext><a href=/never></plaintext><a href=/never2>`),
		[]byte(`<a href="/1" href="/2"><a HREF=/3 href=/4><a =href=/5 href=/6><a href = "/7" ><a href= '/8'><a href=/9/><a/href=/10><a href>`),
		[]byte(`<link rel=next href=/n1><link href=/n2 rel="prev next"><link rel="next" rel=prev href=/n3><link REL=NEXT HREF=/n4><link rel=&#110;ext href=/n5>`),
		[]byte(`<a href="/a?x=1&amp;y=2&lt;&gt&quot;&apos;&nbsp&notit;&not;&notin;&amp=&amp;=&#65;&#x42;&#X43&#;&#x;&#128;&#0;&#xD800;&#99999999999;&fjlig;&semi;&ampx">`),
		[]byte("<a href=\"\x00/nul\"><a h\x00ref=/k><title>\x00t&amp;\x00</title>"),
		[]byte("<a href=\"\u00a0/nbsp\u00a0\"><a href=\"&nbsp;/ent&#32;\"><a href=\"\u2028/ls\">"),
		[]byte(`<base target=_blank><base href=""><base href="/b/"><a href=x><base href="/c/">`),
		[]byte(`<a href="http://a/b"><a href="HTTP://A/b"><a href="//x.example"><a href="http:opaque"><a href="mailto:x"><a href="  javascript:x">`),
		[]byte(`<title></title><title>second</title>`),
		[]byte(`<title>a</title`),
		[]byte(`<title>a</title x="`),
		[]byte(`<title/>x</title>`),
		[]byte("<title>" + strings.Repeat("word ", 400) + "</title>"),
		[]byte("<title>" + strings.Repeat("é", 2000) + "</title>"),
		[]byte(`<a href=/x>` + "\xff\xfe<a href=/y>" + `<`),
		[]byte(`<a href='/q' title=">"><a title='>' href=/r></a title=">"><a href=/s>`),
	}
	site := testsite.New(testsite.Config{Pages: 10})
	for _, p := range []string{"/", "/page/3", "/page/9", "/broken", "/binary"} {
		rec := httptest.NewRecorder()
		site.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p, nil))
		if rec.Body.Len() == 0 {
			t.Fatalf("test site served nothing for %s", p)
		}
		seeds = append(seeds, rec.Body.Bytes())
	}
	return seeds
}

// checkSame fails t if Extract and ExtractLimited disagree with the
// reference on body: the title, the links' strings and, for each Link,
// what it says of its URL (see checkLink).
func checkSame(t *testing.T, base *url.URL, body []byte) {
	t.Helper()
	orig := string(body)
	title, links := Extract(base, body)
	if string(body) != orig {
		t.Fatalf("Extract modified its input")
	}
	rtitle, rlinks := ExtractTokenized(base, body)
	if title != rtitle {
		t.Errorf("title %q, reference %q", title, rtitle)
	}
	got, want := linkStrings(links), linkStrings(rlinks)
	if !slices.Equal(got, want) {
		t.Errorf("links\n got %q\nwant %q", got, want)
	}
	if (links == nil) != (rlinks == nil) {
		t.Errorf("links nil %v, reference nil %v", links == nil, rlinks == nil)
	}
	_, ls, _ := ExtractLimited(base, body, 0)
	if len(ls) != len(rlinks) {
		t.Fatalf("ExtractLimited: %d links, reference %d", len(ls), len(rlinks))
	}
	for i := range ls {
		checkLink(t, &ls[i], rlinks[i])
	}
}

// checkLink fails t if l says other than ref, the URL url.Parse and
// ResolveReference made of its href, of its string, scheme, host, query,
// user information, or if its url.URL is not ref's.
func checkLink(t *testing.T, l *Link, ref *url.URL) {
	t.Helper()
	if l.URL != ref.String() {
		t.Errorf("link %q, reference %q", l.URL, ref)
	}
	if l.Scheme() != ref.Scheme || l.Host() != ref.Host || l.RawQuery() != ref.RawQuery || l.HasUser() != (ref.User != nil) {
		t.Errorf("link %q: scheme %q host %q query %q user %v, reference %q %q %q %v",
			l.URL, l.Scheme(), l.Host(), l.RawQuery(), l.HasUser(), ref.Scheme, ref.Host, ref.RawQuery, ref.User != nil)
	}
	u, ru := l.Value(), *ref
	if p := l.Parsed(); *p != u {
		t.Errorf("link %q: Parsed() %#v, Value() %#v", l.URL, *p, u)
	}
	if u.User.String() != ru.User.String() {
		t.Errorf("link %q has user %v, reference %v", l.URL, u.User, ru.User)
	}
	u.User, ru.User = nil, nil
	if u != ru {
		t.Errorf("link %q is %#v, reference %#v", l.URL, u, ru)
	}
}

func TestExtractLinksMatchesReference(t *testing.T) {
	base, _ := url.Parse("https://example.com/dir/page.html?q=1")
	for i, seed := range differentialSeeds(t) {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			checkSame(t, base, seed)
			// Every prefix: the end of input can fall anywhere.
			if len(seed) < 2000 {
				for n := range len(seed) {
					checkSame(t, base, seed[:n])
				}
			}
		})
	}
}

func FuzzExtractLinksDifferential(f *testing.F) {
	for _, seed := range differentialSeeds(f) {
		f.Add("https://example.com/dir/", seed)
	}
	f.Add("http://[::1]:8080/a/b", []byte(`<base href="../c/"><a href="../../x?y#z">`))
	f.Fuzz(func(t *testing.T, baseStr string, body []byte) {
		base, err := url.Parse(baseStr)
		if err != nil {
			base = nil
		}
		checkSame(t, base, body)
	})
}

// tokenizerAttr returns the value the x/net/html Tokenizer gives attribute x
// of <a x="raw">.
func tokenizerAttr(raw string) string {
	z := html.NewTokenizer(strings.NewReader(`<a x="` + raw + `">`))
	z.Next()
	_, v, _ := z.TagAttr()
	return string(v)
}

// TestAttrValue checks character reference decoding in attribute values
// against the tokenizer: every named reference x/net/html knows (read from
// its source in the module cache), and every short string over an alphabet
// that reaches the corner cases.
func TestAttrValue(t *testing.T) {
	check := func(raw string) {
		t.Helper()
		if got, want := string(attrValue(new([]byte), []byte(raw))), tokenizerAttr(raw); got != want {
			t.Errorf("attrValue(%q) = %q, tokenizer %q", raw, got, want)
		}
	}
	names := entityNames(t)
	t.Logf("%d entity names", len(names))
	for _, name := range names {
		bare := strings.TrimSuffix(name, ";")
		for _, raw := range []string{"&" + name, "&" + name + "=", "&" + name + "x", "&" + name + "1;", "a&" + name + "&" + name, "&" + bare, "&" + bare + "=", "&" + bare + ";=", "&" + bare + "z;", "&" + bare[:len(bare)-1] + ";"} {
			check(raw)
		}
	}
	const alphabet = "&#xX;=alt19F"
	var gen func(prefix string, n int)
	gen = func(prefix string, n int) {
		check(prefix)
		if n == 0 {
			return
		}
		for i := range len(alphabet) {
			gen(prefix+alphabet[i:i+1], n-1)
		}
	}
	for _, prefix := range []string{"", "&"} {
		gen(prefix, 4)
	}
	for _, prefix := range []string{"&#", "&#x", "&l", "&a"} {
		gen(prefix, 3)
	}
	for _, raw := range []string{"&#1114111;", "&#1114112;", "&#x10FFFF", "&#x110000", "&#xFFFFFFFFFFFFF;", "&#00000000000065;", "&#x80;&#x9f;&#159;&#x81", "\x00&amp;\x00", "&#13;&#10;&#9;"} {
		check(raw)
	}
}

// entityNames returns the names x/net/html's entity table holds, read from
// its source file next to the compiled package's, or nil if that is not
// there (a build with -trimpath).
func entityNames(t *testing.T) []string {
	t.Helper()
	pc := reflect.ValueOf(html.UnescapeString).Pointer()
	file, _ := runtime.FuncForPC(reflect.ValueOf(html.UnescapeString).Pointer()).FileLine(pc)
	src, err := os.ReadFile(filepath.Join(filepath.Dir(file), "entity.go"))
	if err != nil {
		t.Logf("x/net/html source not found, not checking every entity: %v", err)
		return nil
	}
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^\t"([A-Za-z0-9]+;?)":`).FindAllSubmatch(src, -1) {
		names = append(names, string(m[1]))
	}
	if len(names) < 2000 {
		t.Fatalf("found only %d entity names in %s", len(names), file)
	}
	return names
}

func TestTitleText(t *testing.T) {
	for _, raw := range []string{"a &amp; b", "&notit; &notin; &amp=x &ampx", "\x00&lt;\x00", "&#128;&#0;", "plain"} {
		z := html.NewTokenizer(strings.NewReader("<title>" + raw + "</title>"))
		z.Next()
		z.Next()
		if got, want := titleText([]byte(raw)), string(z.Text()); got != want {
			t.Errorf("titleText(%q) = %q, tokenizer %q", raw, got, want)
		}
	}
}

// BenchmarkExtractLinksReference measures the x/net/html version, to
// compare on the same machine at the same time.
func BenchmarkExtractLinksReference(b *testing.B) {
	benchmarkExtract(b, ExtractTokenized)
}

// TestResolveMatchesReference checks the resolver's shortcuts against
// resolve: every href of a list of awkward ones, against several bases, as
// the only link of a document (and all of them in one, for duplicates).
func TestResolveMatchesReference(t *testing.T) {
	hrefs := []string{
		"", "#", "#f", "#%zz", "#%41", "?", "??", "?a", "?a?", "?a#b", "?%zz", "? a", "?\u00e9",
		"a", "a/", "a/b", "./a", "../a", "../../../a", "a/./b", "a/../b", "a/..", "a/.", ".", "..", "./", "../",
		"/", "//", "///", "/a", "/a/", "/a//b", "/./a", "/../a", "/a/..", "/a/b/../../..", "/.a", "/a.", "/..a/b..",
		"a:b", "./a:b", "/a:b", "a/b:c", "a%20b", "a b", "a(b)", "a'b", "a*", "*", "*?x", "a!b", "a~b", "a$b&c+d,e;f=g@h",
		"//h", "//h/p", "//h:80/p?q", "//u@h/p", "//[::1]/p",
		"http://h", "http://h/", "http://h?q", "http://h?", "http://h#f", "http://h/p?q#f", "http://h:8080/p", "http://h:/p",
		"http://h:x/p", "http://:80/p", "http:///p", "http://u@h/p", "http://u:p@h/p", "http://H.Example/P", "http://h/a/../b",
		"http://h/./b", "http://h/a/.", "http://h/a%2Fb", "http://h/a b", "http://h/a(b)", "http://h/%zz", "http://[::1]:80/p",
		"http://h/p?q r", "http://h/p?%zz", "http://h/p#%zz", "http://h/p#%41", "http://h.example:99999/", "http://h:1:2/",
		"https://h/p", "HTTP://h/p", "Https://h/p", "http:h/p", "http:/h/p", "https:", "ftp://h/p", "mailto:a@b", "javascript:x",
		"data:,x", "tel:1", "x-y:z", "1a:b", ":a", "a:", "\u00e9", "/\u00e9", "http://\u00e9.example/", "http://h/\u00e9",
	}
	bases := []string{
		"https://example.com/dir/page.html?q=1",
		"https://example.com",
		"https://example.com/",
		"http://example.com:8080/a/b/",
		"http://u:p@example.com/a",
		"http://example.com/a/./b/../c",
		"http://example.com/a%20b/c",
		"http://example.com/a(b)/c",
		"http://example.com/a:b/c",
		"http://example.com/?",
		"http://example.com#frag",
		"http://\u00e9.example/dir/",
		"https://Example.COM:8443/d/",
		"http://[::1]:8080/d/p",
		"http:opaque",
		"ftp://example.com/a/",
		"/relative/base",
	}
	var all strings.Builder
	for _, h := range hrefs {
		fmt.Fprintf(&all, "<a href=\"%s\">", html.EscapeString(h))
	}
	for _, b := range bases {
		base, err := url.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hrefs {
			checkSame(t, base, []byte(`<a href="`+html.EscapeString(h)+`">`))
		}
		checkSame(t, base, []byte(all.String()+all.String()))
		// The URLs themselves, not just their strings.
		_, links := Extract(base, []byte(all.String()))
		_, rlinks := ExtractTokenized(base, []byte(all.String()))
		for i := range links {
			u, ru := *links[i], *rlinks[i]
			if u.User.String() != ru.User.String() {
				t.Errorf("base %s: link %d has user %v, reference %v", b, i, u.User, ru.User)
			}
			u.User, ru.User = nil, nil
			if u != ru {
				t.Errorf("base %s: link %d is %#v, reference %#v", b, i, u, ru)
			}
		}
	}
	checkSame(t, nil, []byte(all.String()))
}

// TestExtractLinksRandomDocs compares Extract with the reference on
// documents strung together from fragments that matter to tokenizing: a
// structured complement to the byte-level fuzz test, run every time.
func TestExtractLinksRandomDocs(t *testing.T) {
	frags := []string{
		"<a href=", "<a href=\"/x", "<A HREF='", "<area href=", "<link rel=next href=", "<link rel='a next' href=", "<base href=",
		"<a", " href", "=", "\"", "'", ">", "/>", "/", " ", "\n", "\t", "\f", "<", "</", "<!", "<?", "x", "a", "b",
		"<script>", "</script>", "</script", "<SCRIPT>", "<!--", "-->", "--!>", "-", "--", "<script", "</scrip", "<title>", "</title>",
		"</title", "</TITLE >", "<style>", "</style>", "<textarea>", "</textarea>", "<noscript>", "</noscript>", "<xmp>", "</xmp>",
		"<iframe>", "</iframe>", "<noembed>", "</noembed>", "<noframes>", "</noframes>", "<plaintext>", "<!DOCTYPE html>", "<!doctype",
		"<![CDATA[", "]]>", "&amp;", "&amp", "&", "&#", "&#x41;", "&lt", "&notin;", "&not", "=x", "\x00", "é", "&nbsp;", "\u00a0",
		"javascript:", "mailto:", "http://h/", "https://H:8/p", "//h/", "../", "./", "?q", "?", "#f", "%", "%41", "/p.html",
		"<title/>", "</>", "</ x>", "<a/", "<a =x ", "rel=\"next\"", "href=/y ", "href=\"/z\"", "href='/w'",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	bases := []*url.URL{nil}
	for _, b := range []string{"https://example.com/d/p?q", "http://example.com"} {
		u, _ := url.Parse(b)
		bases = append(bases, u)
	}
	for i := range 20000 {
		var doc strings.Builder
		for range 1 + rng.IntN(30) {
			doc.WriteString(frags[rng.IntN(len(frags))])
		}
		checkSame(t, bases[i%len(bases)], []byte(doc.String()))
		if t.Failed() {
			t.Fatalf("document %q", doc.String())
		}
	}
}

// BenchmarkExtractLinksSitePage measures both versions on a page of the
// test site the crawl benchmarks use.
func BenchmarkExtractLinksSitePage(b *testing.B) {
	site := testsite.New(testsite.Config{Pages: 3000, Links: 10, NoTraps: true, Seed: 3})
	rec := httptest.NewRecorder()
	site.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/page/42", nil))
	page := rec.Body.Bytes()
	base, _ := url.Parse("http://127.0.0.1:8080/page/42")
	for _, v := range []struct {
		name    string
		extract func(*url.URL, []byte) (string, []*url.URL)
	}{{"fast", Extract}, {"reference", ExtractTokenized}} {
		b.Run(v.name, func(b *testing.B) {
			b.SetBytes(int64(len(page)))
			b.ReportAllocs()
			cpu := processCPU()
			for b.Loop() {
				v.extract(base, page)
			}
			if cpu > 0 {
				b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
			}
		})
	}
}

// TestCleanTitle: cleanTitle collapses white space as strings.Fields does
// and caps the length at a rune boundary, whether the title is clean
// already (returned as it is) or not.
func TestCleanTitle(t *testing.T) {
	long := strings.Repeat("ab ", maxTitle)
	for _, title := range []string{
		"", " ", "a", "Host 3 page 12", " a", "a ", "a  b", "a\tb", "a\nb", "a\u00a0b", "é", "a\u2003b",
		long[:maxTitle], long[:maxTitle+1], long, strings.Repeat("é", maxTitle),
	} {
		want := strings.Join(strings.Fields(title), " ")
		if len(want) > maxTitle {
			i := maxTitle
			for !utf8.RuneStart(want[i]) {
				i--
			}
			want = want[:i]
		}
		if got := cleanTitle(title); got != want {
			t.Errorf("cleanTitle(%q) = %q, want %q", title, got, want)
		}
	}
}

// webPage is a page shaped like bench-web's (internal/benchcrawl): 50 KB
// of HTML with 90 links, 1 in 20 to another host, the rest by path on
// the page's host, some of them twice, one with a character reference.
func webPage() (*url.URL, []byte) {
	var b strings.Builder
	b.WriteString("<!DOCTYPE html>\n<html><head><title>host 7 page 12</title></head><body>\n<h1>host 7 page 12</h1>\n")
	for i := range 90 {
		switch {
		case i%20 == 0:
			fmt.Fprintf(&b, "<a href=\"https://127.0.0.%d:8443/p/%d\">a link</a>\n", 1+i/20, i)
		case i == 7:
			b.WriteString("<a href=\"/p/7?a=1&amp;b=2\">a link</a>\n")
		default:
			fmt.Fprintf(&b, "<a href=\"/p/%d\">a link</a>\n", i%70)
		}
	}
	b.WriteString("<p>")
	for b.Len() < 50<<10 {
		b.WriteString("lorem ipsum dolor sit amet consectetur ")
	}
	b.WriteString("</p></body></html>\n")
	base, _ := url.Parse("https://127.0.0.8:8443/p/12")
	return base, []byte(b.String())
}

// TestExtractLimitedScratch: a page's scan and resolution reuse the
// scratch of an earlier call (see scratch): ExtractLimited allocates
// the links' strings and slice and the title, 4 allocations for
// bench-web's page where it took 8, and a call after a page of many more
// links, or of other links, returns what a first call does.
func TestExtractLimitedScratch(t *testing.T) {
	base, page := webPage()
	_, want, _ := ExtractLimited(base, page, 0)
	if len(want) != 73 {
		t.Fatalf("%d links, want 73", len(want))
	}
	var many strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&many, "<a href=\"/m/%d?x=%d&amp;y\">m</a>", i, i)
	}
	for _, other := range [][]byte{[]byte(many.String()), []byte(`<a href="/q?a&amp;b">q</a><base href="/d/"><a href="x">x</a>`), page} {
		ExtractLimited(base, other, 0)
		if _, got, _ := ExtractLimited(base, page, 0); !slices.Equal(linkURLs(got), linkURLs(want)) {
			t.Fatalf("after another page: %q, want %q", linkURLs(got), linkURLs(want))
		}
	}
	if raceEnabled {
		t.Skip("the race detector drops some of a sync.Pool's Puts")
	}
	if n := testing.AllocsPerRun(100, func() { ExtractLimited(base, page, 0) }); n > 4 {
		t.Errorf("ExtractLimited of bench-web's page: %v allocations, want at most 4", n)
	}
}

func linkURLs(ls []Link) []string {
	out := make([]string, len(ls))
	for i := range ls {
		out[i] = ls[i].URL
	}
	return out
}

// BenchmarkExtractLimitedWebPage measures ExtractLimited on a page shaped
// like bench-web's (see webPage).
func BenchmarkExtractLimitedWebPage(b *testing.B) {
	base, page := webPage()
	b.SetBytes(int64(len(page)))
	b.ReportAllocs()
	cpu := processCPU()
	for b.Loop() {
		ExtractLimited(base, page, 0)
	}
	if cpu > 0 {
		b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	}
}
