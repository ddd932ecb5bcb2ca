package trawl_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/trawlhq/trawl"
	"github.com/trawlhq/trawl/internal/testsite/sitetest"
)

// linkSite serves pages whose bodies link to the given paths; other paths
// answer 404. seen, if not nil, is told of every request first, and
// answers it if it returns true.
func linkSite(t *testing.T, pages map[string][]string, seen func(http.ResponseWriter, *http.Request) bool) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if seen != nil && seen(w, r) {
			return
		}
		links, ok := pages[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<html><body>")
		for _, l := range links {
			fmt.Fprintf(w, `<a href="%s">%s</a>`, l, l)
		}
		fmt.Fprint(w, "</body></html>")
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestOnRequest: OnRequest sees every page fetched, once, and not
// robots.txt; a header it sets reaches the server, and meta it sets
// reaches the page's handlers.
func TestOnRequest(t *testing.T) {
	var mu sync.Mutex
	served := map[string][]string{} // path -> X-Hook headers received
	srv := linkSite(t, map[string][]string{
		"/":  {"/a", "/b"},
		"/a": {"/", "/b", "/c"},
		"/b": {"/a"},
		"/c": {},
	}, func(_ http.ResponseWriter, r *http.Request) bool {
		mu.Lock()
		served[r.URL.Path] = append(served[r.URL.Path], r.Header.Get("X-Hook"))
		mu.Unlock()
		return false
	})
	requested := map[string]int{}
	metaSeen := map[string]string{}
	c := trawl.New(trawl.Config{InMemory: true, Output: io.Discard})
	c.OnRequest(func(r *trawl.Request) {
		mu.Lock()
		requested[r.URL]++
		mu.Unlock()
		r.Header.Set("X-Hook", fmt.Sprintf("depth %d", r.Depth))
		r.Meta = map[string]string{"hooked": r.URL}
	})
	c.OnHTML("a[href]", func(e *trawl.Element) { e.Follow(e.Attr("href")) })
	c.OnResponse(func(r *trawl.Response) {
		mu.Lock()
		metaSeen[r.Request.URL] = r.Request.Meta["hooked"]
		mu.Unlock()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Run(ctx, srv.URL+"/"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	depth := map[string]int{"/": 0, "/a": 1, "/b": 1, "/c": 2}
	for path, d := range depth {
		u := srv.URL + path
		if requested[u] != 1 {
			t.Errorf("OnRequest saw %s %d times, want once", u, requested[u])
		}
		want := fmt.Sprintf("depth %d", d)
		if got := served[path]; len(got) != 1 || got[0] != want {
			t.Errorf("the server got %s with X-Hook %q, want once with %q", path, got, want)
		}
		if metaSeen[u] != u {
			t.Errorf("the handlers of %s saw meta %q set by OnRequest, want %q", u, metaSeen[u], u)
		}
	}
	if len(requested) != len(depth) {
		t.Errorf("OnRequest saw %v, want the %d pages only (not robots.txt)", requested, len(depth))
	}
	if got := served["/robots.txt"]; len(got) != 1 || got[0] != "" {
		t.Errorf("robots.txt was fetched with X-Hook %q, want once without it", got)
	}
}

// failure is one call of OnError.
type failure struct {
	status int
	err    error
}

func (f failure) String() string { return fmt.Sprintf("{%d %v}", f.status, f.err) }

// TestOnError: OnError gets a 404 once with its status, a 500 retried
// MaxRetries times (OnRequest sees each attempt) once after the retries
// with the reason, and a refused
// connection (its robots.txt first, as robots.txt is obeyed by default)
// once after the retries; a page that answers 200 is not reported.
func TestOnError(t *testing.T) {
	closed := "http://" + sitetest.RefusedAddr(t) + "/"

	var mu sync.Mutex
	broken := 0
	srv := linkSite(t, map[string][]string{
		"/":   {"/missing", "/broken", "/ok", closed},
		"/ok": {},
	}, func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/broken" {
			return false
		}
		mu.Lock()
		broken++
		mu.Unlock()
		http.Error(w, "down", http.StatusInternalServerError)
		return true
	})
	got := map[string][]failure{}
	cfg := trawl.Config{InMemory: true, Output: io.Discard}
	cfg.Crawl.MaxRetries = 2
	cfg.Crawl.RetryBackoff = time.Millisecond
	cfg.Crawl.Fetch.AllowPrivate = true              // the refused link's port is not the start URL's
	cfg.Crawl.Logger = slog.New(slog.DiscardHandler) // the dead letters are warned of
	c := trawl.New(cfg)
	c.OnHTML("a[href]", func(e *trawl.Element) { e.Follow(e.Attr("href")) })
	attempts := 0
	c.OnRequest(func(r *trawl.Request) {
		if strings.HasSuffix(r.URL, "/broken") {
			mu.Lock()
			attempts++
			mu.Unlock()
		}
	})
	c.OnError(func(r *trawl.Response, err error) {
		mu.Lock()
		defer mu.Unlock()
		got[r.Request.URL] = append(got[r.Request.URL], failure{r.StatusCode, err})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Run(ctx, srv.URL+"/"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if f := got[srv.URL+"/missing"]; len(f) != 1 || f[0].status != 404 || f[0].err.Error() != "404 Not Found" {
		t.Errorf("OnError got /missing %+v, want once with 404 and \"404 Not Found\"", f)
	}
	if broken != 3 || attempts != 3 {
		t.Errorf("/broken was fetched %d times, OnRequest saw it %d times; want 3 each (MaxRetries 2)", broken, attempts)
	}
	if f := got[srv.URL+"/broken"]; len(f) != 1 || f[0].status != 500 ||
		!strings.Contains(f[0].err.Error(), "retries exhausted after 3 attempts: Internal Server Error") {
		t.Errorf("OnError got /broken %+v, want once, after the retries, with 500 and the reason", f)
	}
	if f := got[closed]; len(f) != 1 || f[0].status != 0 || !errors.Is(f[0].err, syscall.ECONNREFUSED) {
		t.Errorf("OnError got %s %+v, want once, after the retries, with status 0 and connection refused", closed, f)
	}
	if len(got) != 3 {
		t.Errorf("OnError got %d pages, want 3: %+v", len(got), got)
	}
}

// TestOnErrorItemWarns: an item emitted or a link followed in OnError is
// dropped with a warning, not silently.
func TestOnErrorItemWarns(t *testing.T) {
	srv := linkSite(t, map[string][]string{}, nil)
	logs, logger := logBuffer(slog.LevelWarn)
	cfg := trawl.Config{InMemory: true, Output: io.Discard}
	cfg.Crawl.Logger = logger
	c := trawl.New(cfg)
	c.OnError(func(r *trawl.Response, err error) {
		r.Item(map[string]string{"broken": r.Request.URL})
		r.Follow("/elsewhere")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Run(ctx, srv.URL+"/gone"); !errors.Is(err, trawl.ErrNothingDone) {
		t.Errorf("Run: %v, want ErrNothingDone (the start URL answered 404)", err)
	}
	if n := strings.Count(logs.String(), "OnError followed links or emitted items"); n != 1 {
		t.Errorf("the drop was warned of %d times, want once; log:\n%s", n, logs)
	}
}
