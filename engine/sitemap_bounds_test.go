package engine_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/syncbuf"
	"github.com/trawlhq/trawl/internal/trawlbin"
)

// hitServer serves h and counts the requests of each path.
type hitServer struct {
	*httptest.Server
	mu   sync.Mutex
	hits map[string]int
}

func newHitServer(t *testing.T, h http.HandlerFunc) *hitServer {
	t.Helper()
	s := &hitServer{hits: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.hits[r.URL.Path]++
		s.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *hitServer) count(prefix string) (n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p, k := range s.hits {
		if strings.HasPrefix(p, prefix) {
			n += k
		}
	}
	return n
}

// crawlSitemaps crawls srv's home page with Config.Sitemaps and returns
// the crawler and its log.
func crawlSitemaps(t *testing.T, srv *hitServer, cfg engine.Config) (*engine.Crawler, string) {
	t.Helper()
	b, f := newBackends(t)
	var logs syncbuf.Buffer
	cfg.Sitemaps = true
	cfg.IdleTimeout = 300 * time.Millisecond
	cfg.TrustedHosts = []string{srv.Listener.Addr().String()}
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	c, err := engine.New(b, f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := c.Seed(ctx, engine.StartURL{URL: srv.URL + "/"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	return c, logs.String()
}

func serveXML(w http.ResponseWriter, format string, args ...any) {
	w.Header().Set("Content-Type", "application/xml")
	fmt.Fprintf(w, format, args...)
}

// An endless chain of sitemap indexes (each lists the next) is followed
// SitemapMaxNesting levels deep, and what lies deeper is counted and
// logged; it was followed without end (47,896 files in 300 s).
func TestSitemapIndexChainBounded(t *testing.T) {
	srv := newHitServer(t, func(w http.ResponseWriter, r *http.Request) {
		var n int
		switch _, err := fmt.Sscanf(r.URL.Path, "/idx/%d.xml", &n); {
		case r.URL.Path == "/robots.txt":
			fmt.Fprint(w, "User-agent: *\nSitemap: /idx/0.xml\n")
		case err == nil:
			serveXML(w, `<sitemapindex><sitemap><loc>/idx/%d.xml</loc></sitemap></sitemapindex>`, n+1)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	})
	c, logs := crawlSitemaps(t, srv, engine.Config{})
	if got, want := srv.count("/idx/"), engine.SitemapMaxNesting+1; got != want {
		t.Errorf("%d sitemap indexes of the chain fetched, want %d (levels 0 to %d)", got, want, engine.SitemapMaxNesting)
	}
	if n := c.Stats().Get(engine.StatSitemapSkipped); n != 1 {
		t.Errorf("%s = %d, want 1 (the index past the nesting limit)", engine.StatSitemapSkipped, n)
	}
	if !strings.Contains(logs, "sitemap index nested too deep") {
		t.Errorf("no warning of the nesting limit:\n%s", logs)
	}
}

// An index listing more sitemaps of one host than SitemapMaxPerHost: a
// worker fetches that many, counts the rest, and warns once.
func TestSitemapsPerHostBounded(t *testing.T) {
	const listed = engine.SitemapMaxPerHost + 200
	srv := newHitServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/robots.txt":
			fmt.Fprint(w, "User-agent: *\nSitemap: /index.xml\n")
		case r.URL.Path == "/index.xml":
			var b strings.Builder
			for i := range listed {
				fmt.Fprintf(&b, "<sitemap><loc>/s/%d.xml</loc></sitemap>", i)
			}
			serveXML(w, "<sitemapindex>%s</sitemapindex>", b.String())
		case strings.HasPrefix(r.URL.Path, "/s/"):
			serveXML(w, "<urlset></urlset>")
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	})
	c, logs := crawlSitemaps(t, srv, engine.Config{Concurrency: 32, PerHost: 32})
	// The budget counts every sitemap listed: by robots.txt (/index.xml)
	// and by the index.
	if got, want := srv.count("/s/"), engine.SitemapMaxPerHost-1; got != want {
		t.Errorf("%d listed sitemaps fetched, want %d (the per-host budget less the index)", got, want)
	}
	if n, want := c.Stats().Get(engine.StatSitemapSkipped), int64(listed-(engine.SitemapMaxPerHost-1)); n != want {
		t.Errorf("%s = %d, want %d", engine.StatSitemapSkipped, n, want)
	}
	if n := strings.Count(logs, "too many sitemaps on this host"); n != 1 {
		t.Errorf("%d warnings of the per-host budget, want 1:\n%.2000s", n, logs)
	}
}

// robots.txt is fetched once per host with Config.Sitemaps: its Sitemap:
// lines are read from the copy the robots cache fetched (it was fetched
// twice: as a request for its Sitemap: lines and by the cache).
func TestRobotsFetchedOnceWithSitemaps(t *testing.T) {
	srv := newHitServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/robots.txt":
			fmt.Fprint(w, "User-agent: *\nDisallow: /private\nSitemap: /listed.xml\n")
		case "/listed.xml":
			serveXML(w, "<urlset><url><loc>/hidden</loc></url></urlset>")
		case "/", "/hidden":
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, "<html></html>")
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	})
	crawlSitemaps(t, srv, engine.Config{})
	if n := srv.count("/robots.txt"); n != 1 {
		t.Errorf("robots.txt fetched %d times, want once", n)
	}
	if srv.count("/hidden") != 1 {
		t.Errorf("/hidden, listed by the sitemap robots.txt names, fetched %d times, want once", srv.count("/hidden"))
	}
}

// bomb returns a gzip stream of n bytes of a sitemap whose entries are
// all the same URL, and one of a sitemap that is n bytes of white space.
func bombs(t *testing.T, n int) (urls, space []byte) {
	t.Helper()
	z := func(open, fill, close string) []byte {
		var b bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
		zw.Write([]byte(open))
		chunk := []byte(strings.Repeat(fill, 64<<10/len(fill)))
		for w := 0; w < n; w += len(chunk) {
			zw.Write(chunk)
		}
		zw.Write([]byte(close))
		zw.Close()
		return b.Bytes()
	}
	return z("<urlset>", "<url><loc>/same</loc></url>", "</urlset>"), z("<urlset>", "        ", "</urlset>")
}

// TestSitemapBombsBounded: 32 sitemaps of a few KB that decompress to 50
// MB each (half sent with Content-Encoding: gzip, half as .xml.gz files),
// fetched at once, take memory within the documented bound: a sitemap is
// parsed as it is read, never held whole. Before, each was read whole
// into memory (peak RSS 3.4 GB at --concurrency 16; here over 1.6 GB
// allocated). The process's peak RSS may grow by the documented bound of
// Concurrency × 11 MiB at most.
func TestSitemapBombsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("decompresses 32 bombs")
	}
	const size = 50 << 20
	n := 32
	if trawlbin.RaceEnabled {
		n = 4 // decompressing is slow under the race detector
	}
	urls, space := bombs(t, size)
	t.Logf("bombs of %d MB: %d and %d bytes compressed", size>>20, len(urls), len(space))
	srv := newHitServer(t, func(w http.ResponseWriter, r *http.Request) {
		var i int
		switch _, err := fmt.Sscanf(r.URL.Path, "/bomb/%d", &i); {
		case r.URL.Path == "/robots.txt":
			for i := range n {
				fmt.Fprintf(w, "Sitemap: /bomb/%d.xml.gz\n", i)
			}
		case err == nil && i%2 == 0:
			w.Header().Set("Content-Encoding", "gzip")
			w.Header().Set("Content-Type", "application/xml")
			w.Write(map[bool][]byte{true: urls, false: space}[i%4 == 0])
		case err == nil:
			w.Header().Set("Content-Type", "application/gzip")
			w.Write(map[bool][]byte{true: urls, false: space}[i%4 == 1])
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	})
	before := resetPeakRSS(t)
	// A fetch that times out is retried: a starved machine may take long.
	c, _ := crawlSitemaps(t, srv, engine.Config{Concurrency: n, PerHost: n, Fetch: engine.FetchConfig{Timeout: 3 * time.Minute}})
	peak := peakRSS(t)
	srv.mu.Lock()
	for i := range n {
		if srv.hits[fmt.Sprintf("/bomb/%d.xml.gz", i)] == 0 {
			t.Errorf("bomb %d not fetched", i)
		}
	}
	srv.mu.Unlock()
	if got := c.Stats().Get(engine.StatSitemapTruncate); got != int64(n) {
		t.Errorf("%s = %d, want %d (every bomb is cut)", engine.StatSitemapTruncate, got, n)
	}
	grew := peak - before
	bound := int64(n) * 11 << 20
	t.Logf("peak RSS grew by %.1f MiB (from %.1f MiB) for %d bombs of %d MB; the bound is %d MiB", float64(grew)/(1<<20), float64(before)/(1<<20), n, size>>20, bound>>20)
	if grew > bound {
		t.Errorf("peak RSS grew by %d MiB, over the bound of %d × 11 MiB", grew>>20, n)
	}
}

// resetPeakRSS returns memory the runtime holds to the system, resets the
// process's peak RSS (VmHWM) to its RSS and returns that RSS; it skips t
// where /proc does not allow it.
func resetPeakRSS(t *testing.T) int64 {
	t.Helper()
	debug.FreeOSMemory()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak RSS: %v", err)
	}
	return procStatus(t, "VmRSS:")
}

// peakRSS returns the process's peak RSS since resetPeakRSS.
func peakRSS(t *testing.T) int64 { return procStatus(t, "VmHWM:") }

// procStatus returns a field of /proc/self/status, in bytes.
func procStatus(t *testing.T, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, field); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb)
			return kb << 10
		}
	}
	t.Skipf("no %s in /proc/self/status", field)
	return 0
}
