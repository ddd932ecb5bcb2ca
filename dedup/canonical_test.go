package dedup_test

import (
	"errors"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/trawlhq/trawl/dedup"
)

func TestCanonicalURL(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		// Scheme, host, port.
		{"HTTP://Example.COM:80/a/./b/../c", "http://example.com/a/c"},
		{"http://example.com", "http://example.com/"},
		{"https://example.com:443/", "https://example.com/"},
		{"https://example.com:80/", "https://example.com:80/"},
		{"http://example.com:443/", "http://example.com:443/"},
		{"http://example.com:0080/", "http://example.com/"},
		{"http://example.com:08080/", "http://example.com:8080/"},
		{"http://example.com:/", "http://example.com/"},
		{"http://example.com./", "http://example.com/"},
		{"http://example.com..:8080/", "http://example.com:8080/"},
		{"http://my_host.example.com/", "http://my_host.example.com/"},
		{"http://[2001:DB8:0:0::1]:8080/", "http://[2001:db8::1]:8080/"},
		{"http://[::1]:80/", "http://[::1]/"},
		{"http://[fe80::1%25en0]/", "http://[fe80::1%25en0]/"},
		{"http://127.0.0.1:8080/x", "http://127.0.0.1:8080/x"},
		// IDN.
		{"http://BÜCHER.example/", "http://xn--bcher-kva.example/"},
		{"http://b%C3%BCcher.example/", "http://xn--bcher-kva.example/"},
		{"http://xn--bcher-kva.example/", "http://xn--bcher-kva.example/"},
		{"http://例え.テスト/", "http://xn--r8jz45g.xn--zckzah/"},
		{"http://ｅｘａｍｐｌｅ。com/", "http://example.com/"},
		// User information.
		{"http://user:pa%20ss@example.com/", "http://user:pa%20ss@example.com/"},
		{"http://@example.com/", "http://example.com/"},
		// Fragment.
		{"http://example.com/p#top", "http://example.com/p"},
		{"http://example.com/p?a=1#top", "http://example.com/p?a=1"},
		{"http://example.com/#", "http://example.com/"},
		// Paths and dot segments.
		{"http://example.com/a/b/..", "http://example.com/a/"},
		{"http://example.com/a/b/.", "http://example.com/a/b/"},
		{"http://example.com/../../a", "http://example.com/a"},
		{"http://example.com/a//../b", "http://example.com/a/b"},
		{"http://example.com/a//b", "http://example.com/a//b"},
		{"http://example.com/a/%2E%2E/b", "http://example.com/b"},
		{"http://example.com/a/.b/c.", "http://example.com/a/.b/c."},
		{"http://example.com/a/", "http://example.com/a/"},
		// Percent-encoding.
		{"http://example.com/%7e", "http://example.com/~"},
		{"http://example.com/%7Euser", "http://example.com/~user"},
		{"http://example.com/%41%42c", "http://example.com/ABc"},
		{"http://example.com/a%2fb", "http://example.com/a%2Fb"},
		{"http://example.com/a%2Fb", "http://example.com/a%2Fb"},
		{"http://example.com/a b", "http://example.com/a%20b"},
		{"http://example.com/%e4%bd%a0", "http://example.com/%E4%BD%A0"},
		{"http://example.com/你", "http://example.com/%E4%BD%A0"},
		{"http://example.com/a[b]", "http://example.com/a%5Bb%5D"},
		{"http://example.com/!$&'()*+,;=:@", "http://example.com/!$&'()*+,;=:@"},
		{"http://example.com/?q=%7e%2b+", "http://example.com/?q=~%2B+"},
		{"http://example.com/?q=100%", "http://example.com/?q=100%25"},
		{"http://example.com/?q=%zz", "http://example.com/?q=%25zz"},
		{"http://example.com/?q=a b", "http://example.com/?q=a%20b"},
		{"http://example.com/?q=a=b", "http://example.com/?q=a=b"},
		{"http://example.com/?q=a%3Db", "http://example.com/?q=a%3Db"},
		{"http://example.com/?q=a%26b", "http://example.com/?q=a%26b"},
		{"http://example.com/?q=/?:@", "http://example.com/?q=/?:@"},
		// Query.
		{"http://example.com/p?b=2&a=1", "http://example.com/p?a=1&b=2"},
		{"http://example.com/p?a=1&b=2", "http://example.com/p?a=1&b=2"},
		{"http://example.com/p?a=2&a=1&a=10", "http://example.com/p?a=1&a=10&a=2"},
		{"http://example.com/p?", "http://example.com/p"},
		{"http://example.com/p?&&", "http://example.com/p"},
		{"http://example.com/p?a&b=", "http://example.com/p?a&b"},
		{"http://example.com/p?a=", "http://example.com/p?a"},
		{"http://example.com/p?b&a=1&&", "http://example.com/p?a=1&b"},
		{"http://example.com/p?=x", "http://example.com/p?=x"},
		{"http://example.com/p?a&=&b", "http://example.com/p?a&b"},
		{"http://example.com/p?%62=1&a=2", "http://example.com/p?a=2&b=1"},
		// White space around the URL.
		{"  http://example.com/ \n", "http://example.com/"},
	}
	for _, tt := range tests {
		got, err := dedup.CanonicalURL(tt.in)
		if err != nil {
			t.Errorf("CanonicalURL(%q): %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("CanonicalURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
		again, err := dedup.CanonicalURL(got)
		if err != nil || again != got {
			t.Errorf("CanonicalURL(%q) = %q, %v; not idempotent", got, again, err)
		}
	}
}

func TestCanonicalURLErrors(t *testing.T) {
	for _, in := range []string{
		"",
		"/relative/path",
		"example.com/path",
		"//example.com/path",
		"ftp://example.com/",
		"mailto:someone@example.com",
		"javascript:alert(1)",
		"http:opaque",
		"http:///path",
		"http://./",
		"http://:80/",
		"http://example.com:99999/",
		"http://exa mple.com/",
		"http://example.com/%zz",
		"http://[::1/",
		"http://[example.com]/",
		"http://a:b:80/",
		"http://%FF/",
		"http://ex\x00ample.com/",
	} {
		got, err := dedup.CanonicalURL(in)
		if err == nil {
			t.Errorf("CanonicalURL(%q) = %q, want an error", in, got)
			continue
		}
		if !errors.Is(err, dedup.ErrBadURL) {
			t.Errorf("CanonicalURL(%q): error %v does not wrap ErrBadURL", in, err)
		}
	}
}

// TestCanonicalizeMatchesParse checks that the returned URL is the one
// url.Parse returns for its String form, so callers may use its fields.
func TestCanonicalizeMatchesParse(t *testing.T) {
	for _, in := range []string{
		"HTTP://Example.COM:80/a/./b/../c?b=2&a=1#x",
		"http://example.com/a%2fb/%7e?q=%e4",
		"http://user:pw@[::1]:8080/x y",
	} {
		u, err := dedup.Canonicalize(in)
		if err != nil {
			t.Fatalf("Canonicalize(%q): %v", in, err)
		}
		p, err := url.Parse(u.String())
		if err != nil {
			t.Fatalf("url.Parse(%q): %v", u, err)
		}
		if !reflect.DeepEqual(u, p) {
			t.Errorf("Canonicalize(%q) = %#v; url.Parse of its string = %#v", in, u, p)
		}
	}
}

func FuzzCanonicalize(f *testing.F) {
	for _, s := range []string{
		"http://example.com/",
		"HTTP://Example.COM:80/a/./b/../c",
		"https://example.com:443/p?b=2&a=1#top",
		"http://example.com/%7e%2f%zz?q=%7e&&a=&b",
		"http://user:pass@[fe80::1%25en0]:8080/x",
		"http://BÜCHER.example./über?ä=ö",
		"http://example.com/a/b/../../../c/./d/.",
		"http://example.com/?q=a=b;c+d%20e",
		"https://xn--bcher-kva.example/",
		"http://127.0.0.1:0/",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := dedup.Canonicalize(raw)
		if err != nil {
			if !errors.Is(err, dedup.ErrBadURL) {
				t.Fatalf("Canonicalize(%q): error %v does not wrap ErrBadURL", raw, err)
			}
			return
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			t.Fatalf("Canonicalize(%q): scheme %q", raw, u.Scheme)
		}
		if u.Host == "" || u.Hostname() == "" {
			t.Fatalf("Canonicalize(%q): no host in %q", raw, u)
		}
		if u.Fragment != "" || strings.Contains(u.String(), "#") {
			t.Fatalf("Canonicalize(%q): fragment in %q", raw, u)
		}
		s := u.String()
		again, err := dedup.CanonicalURL(s)
		if err != nil {
			t.Fatalf("CanonicalURL(%q) (canonical form of %q): %v", s, raw, err)
		}
		if again != s {
			t.Fatalf("not idempotent: %q -> %q -> %q", raw, s, again)
		}
		// A fingerprint of the parsed input equals that of the canonical form.
		if p, err := url.Parse(strings.Trim(raw, " \t\n\r\f")); err == nil {
			var fpr dedup.Fingerprinter
			if a, b := fpr.Fingerprint("", p, nil, nil), fpr.Fingerprint("", u, nil, nil); a != b {
				t.Fatalf("fingerprint of %q differs from that of its canonical form %q", raw, s)
			}
		}
	})
}

func BenchmarkCanonicalURL(b *testing.B) {
	const raw = "HTTP://Example.COM:80/a/./b/../c/%7euser/page.html?utm_source=x&b=2&a=1#top"
	b.ReportAllocs()
	for b.Loop() {
		if _, err := dedup.CanonicalURL(raw); err != nil {
			b.Fatal(err)
		}
	}
}
