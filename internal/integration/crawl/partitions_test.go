package crawl_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/internal/integration"
	"github.com/trawlhq/trawl/internal/testsite"
)

// Crawls with --partitions 3 on broker clusters (issue 24; make
// test-cluster). The crawl is of three sites on three loopback addresses
// whose hosts fall in the three partitions; the server or node that leads
// partition 1 is stopped mid-crawl.

// partitionHosts are loopback addresses whose partitions among three are
// 0, 1 and 2 (broker.PartitionOf; checked by partitionedCrawl).
var partitionHosts = []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}

// serveOn serves a site made from cfg on host (a loopback address) until
// t ends, and returns it with its URL.
func serveOn(t *testing.T, host string, cfg testsite.Config) (*testsite.Site, string) {
	t.Helper()
	site := testsite.New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	base, wait, err := site.Serve(ctx, host+":0")
	if err != nil {
		cancel()
		t.Fatalf("serve a site on %s: %v", host, err)
	}
	t.Cleanup(func() { cancel(); _ = wait() })
	return site, base + "/"
}

// partitionedCrawl seeds a crawl of three sites of n pages each, one per
// partition, runs two workers with --partitions 3, checks the leaders
// (leaders returns the server or node leading each partition's queue),
// stops the one leading partition 1 (stop) once the first worker has
// written an eighth of the pages, and checks that both workers exit 0
// with every page's item written (lost = 0). Pages fetched twice are
// counted and logged: a stopped server may lose the acks of the pages in
// flight.
func partitionedCrawl(t *testing.T, args func(string, ...string) []string,
	leaders func(ctx context.Context, name string) []string, stop func(ctx context.Context, leader string)) {
	t.Helper()
	const workers, n = 2, 700
	var sites []*testsite.Site
	var urls []string
	for i, host := range partitionHosts {
		if p := broker.PartitionOf(host, 3); p != i {
			t.Fatalf("host %s is in partition %d, want %d", host, p, i)
		}
		site, base := serveOn(t, host, testsite.Config{Pages: n, Links: 10, Seed: int64(40 + i), NoTraps: true, Latency: 2 * time.Millisecond})
		sites = append(sites, site)
		urls = append(urls, base)
	}
	expected := 0
	for _, s := range sites {
		expected += s.Expected()
	}
	name := integration.Name(t)
	began := time.Now()
	mustRun(t, append([]string{"seed"}, args(name, urls...)...)...)
	var ws []*proc
	for range workers {
		ws = append(ws, start(t, append([]string{"worker"}, args(name, "--lease=5s")...)...))
	}
	ws[0].waitItems(t, expected/8, 2*time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ls := leaders(ctx, name)
	t.Logf("partition leaders: %q", ls)
	if ls[0] == ls[1] || ls[1] == ls[2] || ls[0] == ls[2] {
		t.Errorf("the partitions' leaders are %q, want three different servers", ls)
	}
	t.Logf("stopping %s, the leader of partition 1", ls[1])
	stop(ctx, ls[1])
	for i, w := range ws {
		if code := w.wait(t, 5*time.Minute); code != 0 {
			t.Fatalf("worker %d exit %d:\n%s", i, code, w.stderr.String())
		}
	}
	distinct, dups := union(t, ws...)
	twice := 0
	for _, s := range sites {
		for _, k := range s.Served() {
			twice += max(k-1, 0)
		}
	}
	lost := expected - distinct
	t.Logf("pages expected %d, fetched %d, item duplicates %d, requests beyond the first %d, lost %d; %v",
		expected, distinct, dups, twice, lost, time.Since(began).Round(time.Second))
	if lost != 0 {
		t.Errorf("%d pages lost", lost)
	}
	for _, s := range sites {
		if err := s.Verify(); err != nil {
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				if errors.Is(e, testsite.ErrMissed) {
					t.Errorf("page missed: %v", e)
				}
			}
		}
	}
}

// TestNATSClusterPartitions: three JetStream servers, --partitions 3 with
// --nats-replicas 3: the three partitions' streams are led by three
// different servers, and with the leader of partition 1 stopped mid-crawl
// every page is still fetched.
func TestNATSClusterPartitions(t *testing.T) {
	c := integration.StartNATSCluster(t)
	redis := integration.Redis(t)
	args := func(name string, more ...string) []string {
		return flags([]string{"--broker=nats", "--nats-url", c.URL(), "--nats-replicas=3", "--partitions=3", "--redis-url", redis, "--name", name,
			"--allow-private", "--idle-timeout=3s", "--concurrency=16", "--per-host=16"}, more...)
	}
	partitionedCrawl(t, args, func(ctx context.Context, name string) []string {
		js := integration.JetStream(t, c.URL(), natsgo.Timeout(2*time.Second))
		stream := "TRAWL_Q_" + strings.ReplaceAll(name+":requests", ":", "_3a")
		var out []string
		for p := range 3 {
			s := stream
			if p > 0 {
				s = fmt.Sprintf("%s_p%d", stream, p)
			}
			st, err := js.Stream(ctx, s)
			if err != nil {
				t.Fatalf("stream %s: %v", s, err)
			}
			leader := ""
			if info := st.CachedInfo(); info.Cluster != nil {
				leader = info.Cluster.Leader
			}
			out = append(out, leader)
		}
		return out
	}, func(ctx context.Context, leader string) {
		i := c.Index(leader)
		if i < 0 {
			t.Fatalf("leader %q is none of %v", leader, c.Names)
		}
		if err := c.Stop(ctx, i); err != nil {
			t.Fatal(err)
		}
	})
}

// TestRabbitMQClusterPartitions: three RabbitMQ nodes, --partitions 3 with
// quorum queues: the three partitions' queues are led by three different
// nodes, and with the leader of partition 1 stopped mid-crawl every page
// is still fetched.
func TestRabbitMQClusterPartitions(t *testing.T) {
	c := integration.StartRabbitMQCluster(t)
	redis := integration.Redis(t)
	args := func(name string, more ...string) []string {
		return flags([]string{"--broker=rabbitmq", "--amqp-url", c.URL(), "--amqp-queue-type=quorum", "--order=fifo", "--partitions=3",
			"--redis-url", redis, "--name", name,
			"--allow-private", "--idle-timeout=3s", "--concurrency=16", "--per-host=16"}, more...)
	}
	partitionedCrawl(t, args, func(ctx context.Context, name string) []string {
		var out []string
		for p := range 3 {
			q := name + ":requests"
			if p > 0 {
				q = fmt.Sprintf("%s:p%d", q, p)
			}
			leader, typ, err := c.QueueLeader(ctx, 1, q)
			if err != nil {
				t.Fatal(err)
			}
			if typ != "quorum" {
				t.Errorf("queue %s is %q, want quorum", q, typ)
			}
			out = append(out, leader)
		}
		return out
	}, func(ctx context.Context, leader string) {
		i := c.Index(leader)
		if i < 0 {
			t.Fatalf("leader %q is none of %v", leader, c.Nodes)
		}
		if err := c.Stop(ctx, i); err != nil {
			t.Fatal(err)
		}
	})
}
