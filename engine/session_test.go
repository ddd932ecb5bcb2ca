package engine

import (
	"errors"
	"net/http"
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
