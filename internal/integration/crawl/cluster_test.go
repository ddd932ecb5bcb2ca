package crawl_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawlhq/trawl/internal/integration"
	"github.com/trawlhq/trawl/internal/testsite"
)

// Crawls on broker clusters with one server stopped mid-crawl (make
// test-cluster; skipped otherwise). Each logs one line: pages expected,
// fetched (distinct pages with an item), items, duplicates, lost.

// clusterCrawl seeds a crawl of a site of n pages, runs two workers, calls
// fault once the first has written an eighth of the pages, and checks that
// both exit 0 with every page's item written (lost = 0). Duplicates are
// measured and logged, not bounded: a stopped server may lose the acks of
// the pages in flight.
func clusterCrawl(t *testing.T, args func(string, ...string) []string, fault func(ctx context.Context, name string)) {
	t.Helper()
	const workers = 2
	n := 2000
	site, url := serveSite(t, testsite.Config{Pages: n, Links: 10, Seed: 31, NoTraps: true, Latency: 2 * time.Millisecond})
	name := integration.Name(t)
	began := time.Now()
	mustRun(t, append([]string{"seed"}, args(name, url)...)...)
	var ws []*proc
	for range workers {
		ws = append(ws, start(t, append([]string{"worker"}, args(name, "--lease=5s")...)...))
	}
	waitItemsOf(t, site.Expected()/8, 2*time.Minute, ws...) // together: one worker at a time may hold the site's one host
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fault(ctx, name)
	for i, w := range ws {
		if code := w.wait(t, 5*time.Minute); code != 0 {
			t.Fatalf("worker %d exit %d:\n%s", i, code, w.stderr.String())
		}
	}
	items := 0
	for _, w := range ws {
		items += len(w.items(t))
	}
	distinct, dups := union(t, ws...)
	lost := site.Expected() - distinct
	t.Logf("pages expected %d, fetched %d, items %d, duplicates %d, lost %d; %v",
		site.Expected(), distinct, items, dups, lost, time.Since(began).Round(time.Second))
	if lost != 0 {
		t.Errorf("%d pages lost", lost)
	}
	if err := site.Verify(); err != nil {
		for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
			if errors.Is(e, testsite.ErrMissed) {
				t.Errorf("page missed: %v", e)
			}
		}
	}
}

// TestNATSClusterStopNode: a three-server JetStream cluster, the crawl's
// streams and settings bucket with three replicas (--nats-replicas 3), two
// workers given every server's URL. The server that leads the crawl's
// request stream is stopped mid-crawl: the other two elect a new leader,
// the workers reconnect, and every page is fetched.
func TestNATSClusterStopNode(t *testing.T) {
	c := integration.StartNATSCluster(t)
	redis := integration.Redis(t)
	args := func(name string, more ...string) []string {
		return flags([]string{"--broker=nats", "--nats-url", c.URL(), "--nats-replicas=3", "--redis-url", redis, "--name", name,
			"--allow-private", "--idle-timeout=3s", "--concurrency=16", "--per-host=16"}, more...)
	}
	clusterCrawl(t, args, func(ctx context.Context, name string) {
		leader, err := natsStreamLeader(ctx, c.URL(), name)
		if err != nil {
			t.Fatalf("leader of the request stream: %v", err)
		}
		i := c.Index(leader)
		if i < 0 {
			t.Fatalf("leader %q is none of %v", leader, c.Names)
		}
		t.Logf("stopping %s, the leader of the request stream", leader)
		if err := c.Stop(ctx, i); err != nil {
			t.Fatal(err)
		}
	})
}

// natsStreamLeader returns the server that leads the request stream of
// crawl name, and checks that the stream has three replicas.
func natsStreamLeader(ctx context.Context, url, name string) (string, error) {
	nc, err := natsgo.Connect(url, natsgo.Timeout(2*time.Second))
	if err != nil {
		return "", err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return "", err
	}
	// The stream of queue "NAME:requests" (see broker/nats/names.go; a
	// name from integration.Name needs no escape but ':').
	want := "TRAWL_Q_" + strings.ReplaceAll(name+":requests", ":", "_3a")
	s, err := js.Stream(ctx, want)
	if err != nil {
		return "", err
	}
	info := s.CachedInfo()
	if info.Config.Replicas != 3 {
		return "", errors.New("stream " + want + " does not have 3 replicas")
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return "", errors.New("stream " + want + " has no leader")
	}
	return info.Cluster.Leader, nil
}

// TestRedisClusterFailover: a Redis Cluster of three primaries with one
// replica each holds the whole crawl (--redis-url with every node: frontier,
// filter, start URLs, counters, limits, all under the hash tag {NAME}, one
// slot). The primary serving the crawl's slot is killed mid-crawl; its
// replica takes over after the node timeout and the workers follow it.
// Replication is asynchronous: the writes the dead primary acknowledged
// and had not yet passed on are gone, so the crawl's state goes back a
// little, which may fetch some pages again but loses none.
func TestRedisClusterFailover(t *testing.T) {
	c := integration.StartRedisFailoverCluster(t)
	args := func(name string, more ...string) []string {
		return flags([]string{"--broker=redis", "--redis-url", c.URL(), "--name", name,
			"--allow-private", "--idle-timeout=3s", "--concurrency=16", "--per-host=16"}, more...)
	}
	clusterCrawl(t, args, func(ctx context.Context, name string) {
		key := "{" + name + "}:requests"
		i, err := c.Primary(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("killing %s, the primary of %s", c.Addrs[i], key)
		killed := time.Now()
		if err := c.Stop(ctx, i); err != nil {
			t.Fatal(err)
		}
		j, err := c.WaitPrimaryServing(ctx, key, i)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s took over after %v", c.Addrs[j], time.Since(killed).Round(100*time.Millisecond))
	})
}

// TestRabbitMQClusterStopNode: a three-node RabbitMQ cluster (no plugin:
// completion is counted over AMQP), the crawl's queues quorum queues
// (--amqp-queue-type quorum, --order fifo), two workers given every node's
// URL. The node that leads the request queue, which is also the one the
// workers are connected to (the first URL), is stopped mid-crawl: the
// other two elect a new leader, the workers reconnect to the next URL, and
// every page is fetched.
func TestRabbitMQClusterStopNode(t *testing.T) {
	c := integration.StartRabbitMQCluster(t)
	redis := integration.Redis(t)
	args := func(name string, more ...string) []string {
		return flags([]string{"--broker=rabbitmq", "--amqp-url", c.URL(), "--amqp-queue-type=quorum", "--order=fifo",
			"--redis-url", redis, "--name", name,
			"--allow-private", "--idle-timeout=3s", "--concurrency=16", "--per-host=16"}, more...)
	}
	clusterCrawl(t, args, func(ctx context.Context, name string) {
		leader, typ, err := c.QueueLeader(ctx, 1, name+":requests")
		if err != nil {
			t.Fatal(err)
		}
		if typ != "quorum" {
			t.Fatalf("queue %s:requests is %q, want quorum", name, typ)
		}
		i := c.Index(leader)
		if i < 0 {
			t.Fatalf("leader %q is none of %v", leader, c.Nodes)
		}
		t.Logf("stopping %s, the leader of the request queue", leader)
		if err := c.Stop(ctx, i); err != nil {
			t.Fatal(err)
		}
	})
}
