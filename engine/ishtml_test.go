package engine

import "testing"

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
