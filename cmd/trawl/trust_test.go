package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestTrustIsPerPort crawls a loopback site given on the command line
// whose page links to another port of the same address: trust covers the
// start URL's host and port only, so the other port is never contacted.
func TestTrustIsPerPort(t *testing.T) {
	t.Parallel()
	var secret atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secret.Add(1)
		fmt.Fprint(w, "secret")
	}))
	t.Cleanup(other.Close)
	var pages atomic.Int64
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		pages.Add(1)
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<html><a href="%s/secret">x</a><a href="/b">b</a></html>`, other.URL)
	}))
	t.Cleanup(site.Close)

	r := trawl(t, 2*time.Minute, "crawl", "--broker=memory", "--out", "-", "--idle-timeout", "500ms", site.URL+"/")
	if secret.Load() != 0 {
		t.Errorf("the other port of the start URL's address was fetched %d times; stderr:\n%s", secret.Load(), r.stderr)
	}
	if pages.Load() < 2 {
		t.Errorf("the start URL's site served %d pages, want 2; exit %d, stderr:\n%s", pages.Load(), r.code, r.stderr)
	}
}
