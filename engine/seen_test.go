package engine_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/dedup"
	"github.com/trawlhq/trawl/engine"
)

// A link the crawler has already seen filtered (claimed by another worker)
// is still republished when a redelivered page of the claimer's links it
// and the claimer died before publishing it: the crawler's memory of links
// it offered the filter spares filter calls on first-time pages only, never
// the recheck that recovers a dead worker's claims.
func TestSeenLinksDoNotHideDeadClaims(t *testing.T) {
	var mu sync.Mutex
	fetches := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		fetches[r.URL.Path]++
		mu.Unlock()
		w.Header().Set("Content-Type", "text/html")
		switch r.URL.Path {
		case "/one", "/two":
			fmt.Fprint(w, `<html><a href="/x">x</a></html>`)
		default:
			fmt.Fprint(w, `<html>leaf</html>`)
		}
	}))
	defer srv.Close()
	fp := func(path string) dedup.Fingerprint {
		u, err := url.Parse(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		return dedup.Fingerprinter{}.Fingerprint("GET", u, nil, nil)
	}
	b, f := newMemoryBackends(t)
	ctx := t.Context()
	// /two was expanded by a worker that claimed /x and died before
	// publishing it; /one and /two themselves were published.
	sc := newScene(t, b, f)
	sc.published(fp("/one"), fp("/two"))
	sc.diedAfterClaiming(fp("/two"), fp("/x"))
	c, err := engine.New(b, f, engine.Config{
		Concurrency: 1, IdleTimeout: 100 * time.Millisecond, IgnoreRobots: true,
		TrustedHosts: []string{"127.0.0.1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	run := func(path string) {
		t.Helper()
		body, err := (&engine.Request{URL: srv.URL + path, Scope: "127.0.0.1"}).MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Publish(ctx, engine.RequestsQueue("trawl"), broker.Message{Body: body}); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := c.Run(rctx); err != nil {
			t.Fatalf("run: %v", err)
		}
	}
	// /one is new: its link /x is claimed already, so it is filtered,
	// and the crawler remembers it.
	run("/one")
	if n := c.Stats().Get(engine.StatFiltered); n != 1 {
		t.Fatalf("after /one, %s = %d, want 1", engine.StatFiltered, n)
	}
	// /two comes back (its expanded mark is there): /x has no publication
	// mark, so it is published again and fetched.
	run("/two")
	mu.Lock()
	defer mu.Unlock()
	if fetches["/x"] != 1 {
		t.Errorf("/x fetched %d times, want 1: the dead worker's claim was not recovered", fetches["/x"])
	}
}

// The same link on page after page is offered to the filter once: the
// crawler remembers the links of batches it has written.
func TestSeenLinksSpareFilterCalls(t *testing.T) {
	const pages = 30
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		var n int
		fmt.Sscanf(r.URL.Path, "/p/%d", &n)
		// Every page links to the home page and the next page.
		fmt.Fprintf(w, `<html><a href="/">home</a> <a href="/about">about</a> <a href="/p/%d">next</a></html>`, min(n+1, pages))
	}))
	defer srv.Close()
	b, f := newMemoryBackends(t)
	cf := &countingFilter{Filter: f}
	c, err := engine.New(b, cf, engine.Config{
		Concurrency: 1, IdleTimeout: 100 * time.Millisecond, IgnoreRobots: true,
		TrustedHosts: []string{"127.0.0.1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c.Seed(ctx, engine.StartURL{URL: srv.URL + "/p/0"})
	if err := c.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if n := c.Stats().Get(engine.StatResponses); n != pages+3 {
		t.Fatalf("%d responses, want %d", n, pages+3)
	}
	// The crawl's two marks (see state.go); the start URL and its
	// publication mark; each page's expanded mark; /, /about and /p/1 …
	// /p/30 claimed once each, and their publication marks. Without the
	// memory each page would offer its three links (168 in all). The
	// memory is direct-mapped (see seenLinks) under a seed of its own
	// each run: in about 1 run of 170 two of the 32 links share a slot
	// (119 of 20,000 seeds), and the one pushed out may be offered once
	// more (102 once in a -race -count=20 run), so two more are allowed.
	if got, most := cf.offered(), 2+2+(pages+3)+2*(pages+2)+2; got > most {
		t.Errorf("the filter was offered %d fingerprints, want at most %d: repeated links were fingerprinted and claimed again", got, most)
	}
}

// countingFilter counts the fingerprints offered to Add.
type countingFilter struct {
	dedup.Filter
	mu sync.Mutex
	n  int
}

func (f *countingFilter) Add(ctx context.Context, fps ...dedup.Fingerprint) ([]bool, error) {
	f.mu.Lock()
	f.n += len(fps)
	f.mu.Unlock()
	return f.Filter.Add(ctx, fps...)
}

func (f *countingFilter) offered() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}
