package engine_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/dedup"
	"github.com/trawlhq/trawl/engine"
)

// A sitemap redelivered after its earlier attempt claimed its URLs and
// died publishes exactly the claimed, unpublished ones: sitemap URLs go
// through the engine's enqueue and its marks, like a page's links.
func TestRedeliveredSitemapRepublishesClaimedURLs(t *testing.T) {
	var mu sync.Mutex
	fetches := map[string]int{}
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		fetches[r.URL.Path]++
		mu.Unlock()
		if r.URL.Path == "/sitemap.xml" {
			w.Header().Set("Content-Type", "application/xml")
			fmt.Fprintf(w, `<urlset><url><loc>%[1]s/a</loc></url><url><loc>%[1]s/b</loc></url><url><loc>%[1]s/c</loc></url></urlset>`, srv.URL)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<html>leaf</html>`)
	}))
	t.Cleanup(srv.Close)
	fp := func(path string) dedup.Fingerprint {
		u, _ := url.Parse(srv.URL + path)
		return dedup.Fingerprinter{}.Fingerprint("GET", u, nil, nil)
	}
	b, f := newMemoryBackends(t)
	ctx := t.Context()
	sm, a, bb, c := fp("/sitemap.xml"), fp("/a"), fp("/b"), fp("/c")
	// The sitemap was published; /c by another page; the sitemap's
	// earlier attempt claimed /a, /b and /c and died.
	sc := newScene(t, b, f)
	sc.published(sm)
	sc.published(c)
	sc.diedAfterClaiming(sm, a, bb, c)
	body, err := (&engine.Request{URL: srv.URL + "/sitemap.xml", Callback: engine.CallbackSitemap, Scope: "127.0.0.1"}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	q := engine.RequestsQueue("trawl")
	if err := b.Publish(ctx, q, broker.Message{Body: body}); err != nil {
		t.Fatal(err)
	}
	ds, err := b.Receive(ctx, q, 1) // the first attempt, which "died"
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive: %v, %v", ds, err)
	}
	if err := ds[0].Nack(ctx, 0); err != nil {
		t.Fatal(err)
	}
	st := runUntilIdle(t, b, f)
	mu.Lock()
	got := [4]int{fetches["/sitemap.xml"], fetches["/a"], fetches["/b"], fetches["/c"]}
	mu.Unlock()
	if got != [4]int{1, 1, 1, 0} {
		t.Errorf("fetches of /sitemap.xml, /a, /b, /c = %v, want [1 1 1 0]: exactly the claimed, unpublished URLs", got)
	}
	if n := st.Get(engine.StatRepublished); n != 2 {
		t.Errorf("%s = %d, want 2", engine.StatRepublished, n)
	}
	if n := st.Get(engine.StatSitemapURLs); n != 3 {
		t.Errorf("%s = %d, want 3", engine.StatSitemapURLs, n)
	}
}
