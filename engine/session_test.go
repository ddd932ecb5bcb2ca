package engine

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"testing"
)

// TestHeaders: a request's own header replaces the common one of the
// same name; a JSON start URL's headers survive Marshal and ParseStartURL,
// and bad ones are refused as a bad payload (header lines: see
// internal/header).
func TestHeaders(t *testing.T) {
	h := requestHeader(http.Header{"X-A": {"common"}, "X-B": {"common"}, "Accept-Encoding": {"br"}}, http.Header{"X-B": {"own"}})
	if h.Get("X-A") != "common" || !slices.Equal(h["X-B"], []string{"own"}) || h.Get("Accept-Encoding") != "" {
		t.Errorf("merged header %v: want X-A common, X-B own alone, no Accept-Encoding (the transport's)", h)
	}

	s := StartURL{URL: "http://a.test/", Headers: map[string]string{"X-Start": "1"}}
	p, err := ParseStartURL(s.Marshal())
	if err != nil || p.Headers["X-Start"] != "1" {
		t.Errorf("ParseStartURL(%s) = %+v, %v; want the header kept", s.Marshal(), p, err)
	}
	req, err := startRequest(s.Marshal())
	if err != nil || req.Header.Get("X-Start") != "1" {
		t.Errorf("startRequest: %+v, %v; want the header on the request", req, err)
	}
	if _, err := ParseStartURL([]byte(`{"url": "http://a.test/", "headers": {"X-A": "a\nb"}}`)); !errors.Is(err, ErrBadPayload) {
		t.Errorf("a header value with a line break: %v, want ErrBadPayload", err)
	}
}

// TestDefaultJar: the default jar gives nothing before it was given a
// cookie, without asking the cookie jar (no allocation), and then what
// a cookiejar.Jar gives: a host's cookie to its host, a domain cookie to
// its subdomains, none to another host.
func TestDefaultJar(t *testing.T) {
	jar := newJar(FetchConfig{})
	a, _ := url.Parse("https://a.example.com/p/1")
	b, _ := url.Parse("https://b.example.com/p/1")
	other, _ := url.Parse("https://example.org/")
	if n := testing.AllocsPerRun(100, func() {
		if jar.Cookies(a) != nil {
			t.Fatal("cookies before any was set")
		}
	}); n != 0 {
		t.Errorf("Cookies of an empty jar: %v allocations, want 0", n)
	}
	jar.SetCookies(a, []*http.Cookie{{Name: "host", Value: "1"}, {Name: "dom", Value: "2", Domain: "example.com"}})
	names := func(u *url.URL) (s []string) {
		for _, c := range jar.Cookies(u) {
			s = append(s, c.Name+"="+c.Value)
		}
		slices.Sort(s)
		return s
	}
	if got := names(a); !slices.Equal(got, []string{"dom=2", "host=1"}) {
		t.Errorf("cookies of a.example.com: %v, want dom=2 host=1", got)
	}
	if got := names(b); !slices.Equal(got, []string{"dom=2"}) {
		t.Errorf("cookies of b.example.com: %v, want dom=2", got)
	}
	if got := names(other); got != nil {
		t.Errorf("cookies of example.org: %v, want none", got)
	}
}

// BenchmarkDefaultJarCookies measures what the default jar costs a
// request while it holds no cookie (a site that sets none).
func BenchmarkDefaultJarCookies(b *testing.B) {
	jar := newJar(FetchConfig{})
	u, _ := url.Parse("https://127.0.0.7:8443/p/12")
	b.ReportAllocs()
	for b.Loop() {
		jar.Cookies(u)
	}
}
