package engine

import (
	"mime"
	"strings"
	"testing"
)

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
		if got := isHTML(tc.ct, []byte(tc.body)); got != tc.want {
			t.Errorf("isHTML(%q, %q) = %v, want %v", tc.ct, tc.body, got, tc.want)
		}
	}
}

// FuzzIsHTML: isHTML reads a Content-Type as mime.ParseMediaType does,
// falling back to what precedes the parameters where that fails (the
// reference below, which isHTML was before it stopped parsing every
// page's parameters into a map).
func FuzzIsHTML(f *testing.F) {
	for _, ct := range []string{
		"text/html", " Text/HTML ; charset=utf-8", "text/html; a=1; a=2", "text/html; =x", "text/html;", "text/html ;; ;",
		"text/html\u00a0", "\u00a0text/html", "text/htmL\xff", "application/XHTML+xml;q", "text / html", "text/html,text/plain", "",
	} {
		f.Add(ct)
	}
	f.Fuzz(func(t *testing.T, ct string) {
		ref := func(ct string) bool {
			ct = strings.TrimSpace(ct)
			mt, _, err := mime.ParseMediaType(ct)
			if err != nil {
				mt, _, _ = strings.Cut(ct, ";")
				mt = strings.ToLower(strings.TrimSpace(mt))
			}
			return mt == "text/html" || mt == "application/xhtml+xml"
		}
		if strings.TrimSpace(ct) == "" {
			return // sniffed
		}
		if got, want := isHTML(ct, nil), ref(ct); got != want {
			t.Errorf("isHTML(%q) = %v, the reference says %v", ct, got, want)
		}
	})
}
