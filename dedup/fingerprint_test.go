package dedup_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/trawlhq/trawl/dedup"
)

type request struct {
	method string
	url    string
	body   string
	header http.Header
}

func (r request) fingerprint(t testing.TB, f dedup.Fingerprinter) dedup.Fingerprint {
	t.Helper()
	u, err := url.Parse(r.url)
	if err != nil {
		t.Fatalf("parse %q: %v", r.url, err)
	}
	var body []byte
	if r.body != "" {
		body = []byte(r.body)
	}
	return f.Fingerprint(r.method, u, body, r.header)
}

func TestFingerprintSame(t *testing.T) {
	tests := []struct {
		name string
		f    dedup.Fingerprinter
		a, b request
	}{
		{"query order", dedup.Fingerprinter{},
			request{url: "http://example.com/p?a=1&b=2"}, request{url: "http://example.com/p?b=2&a=1"}},
		{"fragment", dedup.Fingerprinter{},
			request{url: "http://example.com/p?a=1&b=2"}, request{url: "http://example.com/p?a=1&b=2#top"}},
		{"dot segments, case, port", dedup.Fingerprinter{},
			request{url: "HTTP://Example.COM:80/a/./b/../c"}, request{url: "http://example.com/a/c"}},
		{"unreserved escape", dedup.Fingerprinter{},
			request{url: "http://example.com/%7euser"}, request{url: "http://example.com/~user"}},
		{"empty path", dedup.Fingerprinter{},
			request{url: "http://example.com"}, request{url: "http://example.com/"}},
		{"empty method is GET", dedup.Fingerprinter{},
			request{url: "http://example.com/"}, request{method: "GET", url: "http://example.com/"}},
		{"method case", dedup.Fingerprinter{},
			request{method: "post", url: "http://example.com/", body: "x"}, request{method: "POST", url: "http://example.com/", body: "x"}},
		{"unlisted header ignored", dedup.Fingerprinter{},
			request{url: "http://example.com/", header: http.Header{"Cookie": {"a"}}}, request{url: "http://example.com/"}},
		{"header name case and order", dedup.Fingerprinter{Headers: []string{"accept-language", "Accept", "ACCEPT"}},
			request{url: "http://example.com/", header: http.Header{"Accept-Language": {"en"}, "Accept": {"text/html"}}},
			request{url: "http://example.com/", header: http.Header{"Accept": {"text/html"}, "Accept-Language": {"en"}, "Cookie": {"x"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if a, b := tt.a.fingerprint(t, tt.f), tt.b.fingerprint(t, tt.f); a != b {
				t.Errorf("%+v -> %v\n%+v -> %v\nwant equal", tt.a, a, tt.b, b)
			}
		})
	}
}

func TestFingerprintDiffer(t *testing.T) {
	lang := dedup.Fingerprinter{Headers: []string{"Accept-Language"}}
	tests := []struct {
		name string
		f    dedup.Fingerprinter
		a, b request
	}{
		{"body", dedup.Fingerprinter{},
			request{method: "POST", url: "http://example.com/", body: "a=1"}, request{method: "POST", url: "http://example.com/", body: "a=2"}},
		{"empty and non-empty body", dedup.Fingerprinter{},
			request{method: "POST", url: "http://example.com/"}, request{method: "POST", url: "http://example.com/", body: "x"}},
		{"method", dedup.Fingerprinter{},
			request{method: "GET", url: "http://example.com/"}, request{method: "HEAD", url: "http://example.com/"}},
		{"scheme", dedup.Fingerprinter{},
			request{url: "http://example.com/"}, request{url: "https://example.com/"}},
		{"path", dedup.Fingerprinter{},
			request{url: "http://example.com/a"}, request{url: "http://example.com/b"}},
		{"trailing slash", dedup.Fingerprinter{},
			request{url: "http://example.com/a"}, request{url: "http://example.com/a/"}},
		{"escaped slash", dedup.Fingerprinter{},
			request{url: "http://example.com/a/b"}, request{url: "http://example.com/a%2Fb"}},
		{"query value", dedup.Fingerprinter{},
			request{url: "http://example.com/?a=1"}, request{url: "http://example.com/?a=2"}},
		{"path case", dedup.Fingerprinter{},
			request{url: "http://example.com/A"}, request{url: "http://example.com/a"}},
		{"non-default port", dedup.Fingerprinter{},
			request{url: "http://example.com/"}, request{url: "http://example.com:8080/"}},
		// Length prefixes: moving bytes between fields changes the fingerprint.
		{"method/url boundary", dedup.Fingerprinter{},
			request{method: "GE", url: "http://example.com/", body: "T"}, request{method: "GET", url: "http://example.com/"}},
		{"url/body boundary", dedup.Fingerprinter{},
			request{method: "POST", url: "http://example.com/ab", body: "c"}, request{method: "POST", url: "http://example.com/a", body: "bc"}},
		{"header value", lang,
			request{url: "http://example.com/", header: http.Header{"Accept-Language": {"en"}}},
			request{url: "http://example.com/", header: http.Header{"Accept-Language": {"de"}}}},
		{"header value order", lang,
			request{url: "http://example.com/", header: http.Header{"Accept-Language": {"en", "de"}}},
			request{url: "http://example.com/", header: http.Header{"Accept-Language": {"de", "en"}}}},
		{"header value split", lang,
			request{url: "http://example.com/", header: http.Header{"Accept-Language": {"ende"}}},
			request{url: "http://example.com/", header: http.Header{"Accept-Language": {"en", "de"}}}},
		{"header present and absent", lang,
			request{url: "http://example.com/", header: http.Header{"Accept-Language": {""}}},
			request{url: "http://example.com/"}},
		{"headers hashed or not", dedup.Fingerprinter{},
			request{url: "http://example.com/", header: http.Header{"Accept-Language": {"en"}}},
			request{url: "http://example.com/", header: http.Header{"Accept-Language": {"en"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.f
			b := tt.b.fingerprint(t, f)
			if tt.name == "headers hashed or not" {
				b = tt.b.fingerprint(t, lang)
			}
			if a := tt.a.fingerprint(t, f); a == b {
				t.Errorf("%+v and %+v both -> %v, want different", tt.a, tt.b, a)
			}
		})
	}
}

// TestFingerprintGolden pins the fingerprint layout (the values were checked
// against an independent implementation of it): filters store
// fingerprints across releases, so a change here must be deliberate.
func TestFingerprintGolden(t *testing.T) {
	tests := []struct {
		f    dedup.Fingerprinter
		r    request
		want string
	}{
		{dedup.Fingerprinter{}, request{url: "http://example.com/"}, "3896d798775745c7ac30237d489a4358"},
		{dedup.Fingerprinter{}, request{method: "POST", url: "https://example.com/form?b=2&a=1", body: "q=trawl"}, "0c93ff37fd0f8ec6890c3e8c29851248"},
		{dedup.Fingerprinter{Headers: []string{"Accept-Language"}},
			request{url: "http://example.com/", header: http.Header{"Accept-Language": {"en"}}}, "a1e015d6d9842cd09e4f01e41470be1e"},
	}
	for _, tt := range tests {
		if got := tt.r.fingerprint(t, tt.f).String(); got != tt.want {
			t.Errorf("fingerprint of %+v = %s, want %s", tt.r, got, tt.want)
		}
	}
}

func TestFingerprintOddURLs(t *testing.T) {
	var f dedup.Fingerprinter
	nilFP := f.Fingerprint("GET", nil, nil, nil)
	rel := f.Fingerprint("GET", &url.URL{Path: "/a"}, nil, nil)
	ftp := f.Fingerprint("GET", &url.URL{Scheme: "ftp", Host: "example.com", Path: "/a"}, nil, nil)
	if nilFP == rel || rel == ftp || nilFP == ftp {
		t.Errorf("nil, relative and ftp URLs share fingerprints: %v %v %v", nilFP, rel, ftp)
	}
	// A hand-built URL without a leading slash, and one whose RawPath is stale.
	a := f.Fingerprint("GET", &url.URL{Scheme: "http", Host: "example.com", Path: "a/b"}, nil, nil)
	b := f.Fingerprint("GET", &url.URL{Scheme: "http", Host: "example.com", Path: "/a/b", RawPath: "/x%2Fy"}, nil, nil)
	want := request{url: "http://example.com/a/b"}.fingerprint(t, f)
	if a != want || b != want {
		t.Errorf("hand-built URLs: %v, %v; want %v", a, b, want)
	}
}

func BenchmarkFingerprint(b *testing.B) {
	u, err := url.Parse("https://example.com/catalogue/category/books/travel_2/index.html?page=2&sort=asc")
	if err != nil {
		b.Fatal(err)
	}
	var f dedup.Fingerprinter
	b.ReportAllocs()
	for b.Loop() {
		f.Fingerprint("GET", u, nil, nil)
	}
}
