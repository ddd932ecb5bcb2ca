package crawl_test

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker"
	redisbroker "github.com/trawlhq/trawl/broker/redis"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/integration"
	"github.com/trawlhq/trawl/internal/redislayout"
	"github.com/trawlhq/trawl/internal/syncbuf"
	"github.com/trawlhq/trawl/internal/testsite"
)

// TestRepartition (issue 24): a crawl with one partition, stopped by
// --max-pages with over 5,000 requests queued, is repartitioned to 4
// (trawl repartition --partitions 4): every queued request moves, each to
// the partition of its host (four sites on four loopback addresses, one
// per partition); a worker started without --partitions adopts the 4 and
// finishes the crawl; every page is fetched once. On NATS (with a Redis
// filter, not partitioned) and on Redis, whose filter is partitioned with
// the queue and whose claims every new partition gets a copy of (a page
// fetched before the repartition and linked again after it is not fetched
// twice), and where nothing of the one partition stays
// (integration.CheckPartitionKeys); on Redis with a Bloom filter too,
// whose kind and sizes only the seed and the first worker are given.
func TestRepartition(t *testing.T) {
	for _, backend := range []string{"nats", "redis", "redis-bloom"} {
		t.Run(backend, func(t *testing.T) { testRepartition(t, backend) })
	}
}

func testRepartition(t *testing.T, backend string) {
	redis := integration.Redis(t)
	brokerArgs := []string{"--broker=redis", "--redis-url", redis}
	if backend == "nats" {
		brokerArgs = []string{"--broker=nats", "--nats-url", integration.NATS(t), "--redis-url", redis}
	}
	// The filter's kind and sizes are given to the seed and the first
	// worker alone: the repartition, trawl stats and the second worker
	// open the crawl's filter as it was made.
	var made []string
	if backend == "redis-bloom" {
		made = []string{"--dedup=bloom", "--bloom-capacity=200000"}
	}
	hosts := []string{"127.0.0.3", "127.0.0.5", "127.0.0.2", "127.0.0.4"} // partitions 0 to 3 of 4
	var sites []*testsite.Site
	var urls []string
	expected := 0
	for i, host := range hosts {
		if p := broker.PartitionOf(host, 4); p != i {
			t.Fatalf("host %s is in partition %d of 4, want %d", host, p, i)
		}
		site, base := serveOn(t, host, testsite.Config{Pages: 4000, Links: 40, Seed: int64(60 + i), NoTraps: true})
		sites = append(sites, site)
		urls = append(urls, base)
		expected += site.Expected()
	}
	name := integration.Name(t)
	args := func(more ...string) []string {
		return flags(append(brokerArgs, "--name", name,
			"--allow-private", "--idle-timeout=3s", "--concurrency=16", "--per-host=16"), more...)
	}
	mustRun(t, append([]string{"seed"}, args(append(made, urls...)...)...)...)
	first := start(t, append([]string{"worker"}, args(append(made, "--max-pages=1000")...)...)...)
	if code := first.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("first worker exit %d:\n%s", code, first.stderr.String())
	}
	queued := func() (int64, []int64) {
		code, out, errOut := runOut(t, append([]string{"stats", "--json"}, args()...)...)
		if code != 0 {
			t.Fatalf("stats exit %d: %s", code, errOut)
		}
		var m map[string]int64
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatal(err)
		}
		q := name + ":requests"
		if backend != "nats" {
			q = redislayout.Of(q) // as trawl stats names it: {NAME}:requests
		}
		var parts []int64
		for p := 0; ; p++ {
			n, ok := m[fmt.Sprintf("%s/p%d/ready", q, p)]
			if !ok {
				break
			}
			parts = append(parts, n)
		}
		return m[q+"/ready"], parts
	}
	before, _ := queued()
	t.Logf("queued after the first worker: %d", before)
	if before < 5000 {
		t.Fatalf("%d requests queued, want over 5,000 for the test", before)
	}
	code, out, errOut := runOut(t, append([]string{"repartition", "--partitions", "4"}, args()...)...)
	if code != 0 {
		t.Fatalf("repartition exit %d: %s", code, errOut)
	}
	t.Logf("repartition: %s", strings.TrimSpace(out))
	if !strings.Contains(out, fmt.Sprintf("%d queued requests", before)) || !strings.Contains(out, "from 1 to 4 partitions") {
		t.Errorf("repartition said %q, want %d queued requests moved from 1 to 4 partitions", out, before)
	}
	if backend != "nats" {
		// Nothing of one partition stays but the crawl's two marks in
		// its filter's own keys.
		integration.CheckPartitionKeys(t, integration.RedisClient(t), name, 4, 2)
	}
	after, parts := queued()
	t.Logf("queued after the repartition: %d, by partition %v", after, parts)
	if after != before || len(parts) != 4 {
		t.Fatalf("queued %d in %d partitions after the repartition, want %d in 4", after, len(parts), before)
	}
	for p, n := range parts {
		if n == 0 {
			t.Errorf("partition %d holds no request, want those of %s", p, hosts[p])
		}
	}
	second := start(t, append([]string{"worker"}, args()...)...)
	if code := second.wait(t, 5*time.Minute); code != 0 {
		t.Fatalf("second worker exit %d:\n%s", code, second.stderr.String())
	}
	distinct, dups := union(t, first, second)
	twice := 0
	for _, s := range sites {
		for path, k := range s.Served() {
			if k > 1 {
				twice++
				t.Logf("%s fetched %d times", path, k)
			}
		}
	}
	t.Logf("pages expected %d, fetched %d, item duplicates %d, pages fetched more than once %d", expected, distinct, dups, twice)
	if distinct != expected || dups != 0 || twice != 0 {
		t.Errorf("pages: %d of %d fetched, %d items twice, %d fetched more than once; want every page once", distinct, expected, dups, twice)
	}
}

// TestRedisPurgeAfterCutShortRepartition: trawl purge after a trawl
// repartition cut short (killed while it waits for a leased request to
// come back, the crawl's requests in the queue it moves through) leaves
// no key of the crawl: NAME:requests~repartition is in the crawl's layout
// (it was not, and purge left it).
func TestRedisPurgeAfterCutShortRepartition(t *testing.T) {
	t.Parallel()
	_, url := serveSite(t, testsite.Config{Pages: 200, Links: 5, Seed: 71, NoTraps: true})
	name := integration.Name(t)
	args := redisArgs(t, name)
	mustRun(t, append([]string{"crawl"}, append(args, url, "--max-pages=3")...)...)
	// A request leased and never given back, as a worker killed with
	// kill -9 leaves one: the repartition waits for it to come back.
	client := integration.RedisClient(t)
	b, err := redisbroker.New(t.Context(), redisbroker.Config{Client: client, Lease: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if ds, err := b.Receive(t.Context(), engine.RequestsQueue(name), 1); err != nil || len(ds) != 1 {
		t.Fatalf("lease a request: %d, %v; want one", len(ds), err)
	}
	var stderr syncbuf.Buffer
	cmd := exec.Command(trawlBin, append([]string{"repartition", "--partitions", "2"}, args...)...)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for !strings.Contains(stderr.String(), "leased messages to come back") {
		select {
		case err := <-done:
			t.Fatalf("trawl repartition exited (%v) before it waited for the leased request:\n%s", err, stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	_ = cmd.Process.Kill()
	<-done
	moving, _ := redislayout.RepartitionQueues(engine.RequestsQueue(name))
	if n, err := client.Exists(t.Context(), redislayout.QueueKeys(moving).Ready).Result(); err != nil || n != 1 {
		t.Fatalf("the cut-short repartition left no %s (%d, %v): the test does not test", redislayout.QueueKeys(moving).Ready, n, err)
	}
	mustRun(t, append([]string{"purge"}, args...)...)
	for _, pattern := range []string{redislayout.Pattern(name), redislayout.PartitionPattern(name)} {
		var keys []string
		iter := client.Scan(t.Context(), 0, pattern, 1000).Iterator()
		for iter.Next(t.Context()) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
		if len(keys) > 0 {
			t.Errorf("trawl purge left %d keys of the crawl: %q", len(keys), keys)
		}
	}
}

// TestRedisRepartitionSameCount: trawl repartition to the crawl's own
// count says there is nothing to move, and exits 0 (it said "moved from
// 2 to 2 partitions", having moved every request out and back).
func TestRedisRepartitionSameCount(t *testing.T) {
	t.Parallel()
	_, url := serveSite(t, testsite.Config{Pages: 20, Links: 3, Seed: 72, NoTraps: true})
	name := integration.Name(t)
	args := redisArgs(t, name, "--partitions=2")
	mustRun(t, append([]string{"seed"}, append(args, url)...)...)
	code, out, stderr := runOut(t, append([]string{"repartition"}, args...)...)
	if want := fmt.Sprintf("crawl %s: already in 2 partitions: nothing to move\n", name); code != 0 || out != want {
		t.Errorf("repartition to the crawl's own count: exit %d, stdout %q, want 0 and %q; stderr:\n%s", code, out, want, stderr)
	}
}
