package trawl_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/trawlhq/trawl"
)

// TestFollowLink: a followed link carries its meta values to the page's
// handlers and its headers to the request, on whichever worker fetches
// it; Follow carries none.
func TestFollowLink(t *testing.T) {
	var (
		mu      sync.Mutex
		headers = map[string]string{} // path -> X-From header received
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		headers[r.URL.Path] = r.Header.Get("X-From")
		mu.Unlock()
		w.Header().Set("Content-Type", "text/html")
		if r.URL.Path == "/" {
			io.WriteString(w, `<a class="meta" href="/with">with</a><a class="plain" href="/without">without</a>`)
		}
	}))
	defer srv.Close()
	c := trawl.New(trawl.Config{InMemory: true, Output: io.Discard})
	c.OnHTML("a.meta", func(e *trawl.Element) {
		e.FollowLink(e.Attr("href"), trawl.Link{Meta: map[string]string{"from": "home"}, Priority: 5, Header: http.Header{"X-From": {"home"}}})
	})
	c.OnHTML("a.plain", func(e *trawl.Element) { e.Follow(e.Attr("href")) })
	meta := map[string]string{}
	c.OnResponse(func(r *trawl.Response) {
		mu.Lock()
		defer mu.Unlock()
		meta[r.URL.Path] = r.Request.Meta["from"]
		if r.URL.Path == "/with" && r.Request.Priority != 5 {
			t.Errorf("/with has priority %d, want 5", r.Request.Priority)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Run(ctx, srv.URL+"/"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if meta["/with"] != "home" || headers["/with"] != "home" {
		t.Errorf("/with: meta from=%q, header X-From=%q; want home, home", meta["/with"], headers["/with"])
	}
	if meta["/without"] != "" || headers["/without"] != "" {
		t.Errorf("/without: meta from=%q, header X-From=%q; want none", meta["/without"], headers["/without"])
	}
}
