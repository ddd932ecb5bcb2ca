package engine

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"testing/synctest"
	"time"

	"github.com/trawlhq/trawl/broker/memory"
	"github.com/trawlhq/trawl/dedup/local"
)

// crawlHostsLive crawls n hosts over pipes in a synctest bubble, each a
// home page (a start URL) that links to one other page of its host and a
// robots.txt that allows everything, as the memory check's small hosts;
// it returns how much the live heap grew from before the crawler was made
// to after its Run returned (the crawler, its broker and filter still
// referenced). If prof is not "", it writes a heap profile there then.
func crawlHostsLive(t *testing.T, n int, prof string) int64 {
	t.Helper()
	var grown int64
	synctest.Test(t, func(t *testing.T) {
		mb, err := memory.New(memory.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer mb.Close()
		f, err := local.New(local.Config{Capacity: 100_000, FPRate: 1e-6})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/robots.txt":
				fmt.Fprint(w, "User-agent: *\nAllow: /\n")
			case "/":
				w.Header().Set("Content-Type", "text/html")
				fmt.Fprint(w, `<html><a href="/a">a</a></html>`)
			default:
				w.Header().Set("Content-Type", "text/html")
				fmt.Fprint(w, "<html>leaf</html>")
			}
		})
		// The start URLs and their trusted addresses, as trawl crawl
		// gives them, are the caller's: made before and kept after.
		starts := make([]StartURL, n)
		trusted := make([]string, n)
		for i := range starts {
			starts[i] = StartURL{URL: fmt.Sprintf("http://h%d.test/", i)}
			trusted[i] = fmt.Sprintf("h%d.test:80", i)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		c, err := New(mb, f, Config{Concurrency: 256, PerHost: 2, IdleTimeout: time.Second,
			Fetch: FetchConfig{AllowPrivate: true}, TrustedHosts: trusted})
		if err != nil {
			t.Fatal(err)
		}
		pn := newPipeNet()
		srv := &http.Server{Handler: h}
		go srv.Serve(pn)
		c.kit.fetcher.transport.DialContext = pn.dial
		if err := c.Seed(t.Context(), starts...); err != nil {
			t.Fatal(err)
		}
		if err := c.Run(t.Context()); err != nil && !errors.Is(err, ErrNoPages) {
			t.Fatalf("run: %v", err)
		}
		if got := c.stats.Get(StatResponses); got != int64(2*n) {
			t.Errorf("%d responses, want %d", got, 2*n)
		}
		// What the site's side of the connections holds is not the
		// crawler's: the site stops, and its goroutines end.
		srv.Close()
		synctest.Wait()
		runtime.GC()
		runtime.GC() // pools' victims too
		runtime.ReadMemStats(&after)
		grown = int64(after.HeapAlloc) - int64(before.HeapAlloc)
		if prof != "" {
			w, err := os.Create(prof)
			if err != nil {
				t.Fatal(err)
			}
			pprof.Lookup("heap").WriteTo(w, 0)
			w.Close()
		}
		runtime.KeepAlive(c)
		runtime.KeepAlive(starts)
		runtime.KeepAlive(mb)
		runtime.KeepAlive(f)
	})
	return grown
}

// TestCrawlerBytesPerHost: what a worker keeps of a host once its pages
// are done, over all its per-host structures (the limiter, robots.txt
// cache, workbench, guard, tally, the crawl's trusted hosts, the memory
// broker): the live heap after a crawl of 10,000 hosts, each a start URL
// with its trusted address as trawl crawl gives them, less that after
// one of 1,000, over the 9,000 more, at most 400 bytes a host (296-324:
// the trusted hosts' metadata 113, the robots.txt cache about 80; the
// local limiter's entries of hosts done made it 590). HOSTPROF_SMALL and
// HOSTPROF_BIG name files for heap profiles of the two (sampled every
// 256 bytes), to compare with go tool pprof -base.
func TestCrawlerBytesPerHost(t *testing.T) {
	if testing.Short() {
		t.Skip("crawls 12,000 hosts")
	}
	if os.Getenv("HOSTPROF_SMALL") != "" {
		runtime.MemProfileRate = 256
	}
	crawlHostsLive(t, 1000, "") // warm-up: what the first crawl of a process allocates once
	small := crawlHostsLive(t, 1000, os.Getenv("HOSTPROF_SMALL"))
	big := crawlHostsLive(t, 10000, os.Getenv("HOSTPROF_BIG"))
	per := (big - small) / 9000
	t.Logf("live heap after the crawl: %d bytes at 1,000 hosts, %d at 10,000: %d bytes a host", small, big, per)
	if per > 400 {
		t.Errorf("a crawl's hosts done: %d bytes a host kept, want at most 400", per)
	}
}
