package trawl_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trawlhq/trawl"
	"github.com/trawlhq/trawl/deployment"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/integration"
	"github.com/trawlhq/trawl/internal/syncbuf"
	"github.com/trawlhq/trawl/internal/testsite"
)

func TestMain(m *testing.M) { integration.Main(m) }

// peakServer serves h and records the most requests it had in progress at
// once, and how many it served, robots.txt aside.
type peakServer struct {
	h            http.Handler
	mu           sync.Mutex
	active, peak int
	pages        int64 // requests served, robots.txt aside
}

func (p *peakServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/robots.txt" {
		p.mu.Lock()
		p.active++
		p.pages++
		p.peak = max(p.peak, p.active)
		p.mu.Unlock()
		defer func() { p.mu.Lock(); p.active--; p.mu.Unlock() }()
	}
	p.h.ServeHTTP(w, r)
}

// TestShopScrapeThreeProcessesOnRedis runs the Example's program
// (ExampleConfig_redis, as testdata/shopworker) in three processes on one
// Redis, named by its URL alone (Config.Deployment), one of them seeding:
// every product is emitted exactly once, every page is fetched exactly
// once, every worker did part of the work, PerHost 1 holds across the
// three (each limiting on its own, the site saw three requests at once),
// and the crawl's shared counters, which trawl stats prints, hold the
// three workers' pages and items (with no SharedStats, none).
func TestShopScrapeThreeProcessesOnRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a Redis server")
	}
	url := integration.Redis(t)
	name := integration.Name(t)
	bin := filepath.Join(t.TempDir(), "shopworker")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/shopworker").CombinedOutput(); err != nil {
		t.Fatalf("build the program: %v\n%s", err, out)
	}
	site := testsite.New(testsite.Config{Latency: 5 * time.Millisecond}) // long enough for three to overlap
	peak := &peakServer{h: site}
	srv := httptest.NewServer(peak)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	d, err := deployment.Open(ctx, deployment.Config{Broker: "redis", RedisURL: url, Admin: "seed"}, engine.Config{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()

	const workers = 3
	outs := make([]syncbuf.Buffer, workers)
	errs := make([]syncbuf.Buffer, workers)
	cmds := make([]*exec.Cmd, workers)
	for i := range workers {
		args := []string{url, name, "1"}
		if i == 0 {
			// One worker seeds, as a deployment may (a start URL given
			// to several workers at once is fetched once all the same).
			args = append(args, srv.URL+"/shop/page/1")
		}
		cmds[i] = exec.CommandContext(ctx, bin, args...)
		cmds[i].Stdout, cmds[i].Stderr = &outs[i], &errs[i]
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	var all strings.Builder
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("worker %d: %v; stderr:\n%s", i, err, errs[i].String())
		}
		n := len(products(t, outs[i].String()))
		if n == 0 {
			t.Errorf("worker %d wrote no product; the three should share the work", i)
		}
		t.Logf("worker %d: %d products", i, n)
		all.WriteString(outs[i].String())
	}
	checkProducts(t, products(t, all.String()))
	if err := site.VerifyShop(); err != nil {
		t.Error(err)
	}
	peak.mu.Lock()
	defer peak.mu.Unlock()
	if peak.peak > 1 {
		t.Errorf("the site saw %d requests at once from three workers with PerHost 1; want 1 (the Redis limiter shared)", peak.peak)
	}

	// What trawl stats --broker=redis --name NAME prints: the shared counters.
	shared, err := d.Stats.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if shared[engine.StatItems] != int64(len(testsite.Products())) || shared[engine.StatResponses] != peak.pages {
		t.Errorf("shared counters: %d pages, %d items; want the %d pages the site served, %d items",
			shared[engine.StatResponses], shared[engine.StatItems], peak.pages, len(testsite.Products()))
	}
}

// TestJoinNoCrawlOnRedis: Run given no start URL on a shared broker is a
// worker joining a crawl, as trawl worker is: of a crawl that does not
// exist (a mistyped Crawl.Name) it begins none, and returns an error
// wrapping deployment.ErrNoCrawl once Crawl.IdleTimeout passed, having
// stored no settings (it stored them, and returned nil).
func TestJoinNoCrawlOnRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a Redis server")
	}
	url := integration.Redis(t)
	name := integration.Name(t)
	c := trawl.New(trawl.Config{
		Deployment: deployment.Config{Broker: "redis", RedisURL: url, Stderr: io.Discard},
		Crawl:      engine.Config{Name: name, IdleTimeout: 300 * time.Millisecond},
		Output:     io.Discard,
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Run(ctx); !errors.Is(err, deployment.ErrNoCrawl) {
		t.Fatalf("run of a crawl that does not exist: %v, want deployment.ErrNoCrawl", err)
	}
	d, err := deployment.Open(ctx, deployment.Config{Broker: "redis", RedisURL: url, Admin: "stats"}, engine.Config{Name: name})
	if err == nil {
		d.Close()
		t.Errorf("after the run, trawl stats finds crawl %s; want no crawl", name)
	} else if !errors.Is(err, deployment.ErrNoCrawl) {
		t.Errorf("stats after the run: %v, want deployment.ErrNoCrawl", err)
	}
}
