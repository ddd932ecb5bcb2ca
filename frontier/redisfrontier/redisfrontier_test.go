package redisfrontier_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/broker"
	redisbroker "github.com/trawlhq/trawl/broker/redis"
	"github.com/trawlhq/trawl/dedup"
	dedupredis "github.com/trawlhq/trawl/dedup/redis"
	"github.com/trawlhq/trawl/frontier"
	"github.com/trawlhq/trawl/frontier/frontiertest"
	"github.com/trawlhq/trawl/frontier/redisfrontier"
	"github.com/trawlhq/trawl/internal/integration"
)

func TestMain(m *testing.M) { integration.Main(m) }

// servers are the Redis deployments the tests run on: a single server
// and a Cluster.
var servers = []struct {
	name   string
	client func(*testing.T) goredis.UniversalClient
}{
	{"single", func(t *testing.T) goredis.UniversalClient { return integration.RedisClient(t) }},
	{"cluster", func(t *testing.T) goredis.UniversalClient { return integration.RedisClusterClient(t) }},
}

// open returns a Redis frontier of a crawl of its own on c, with a set
// filter or a Bloom one, and its requests queue.
func open(t *testing.T, c goredis.UniversalClient, bloom bool) (*redisfrontier.Frontier, string) {
	t.Helper()
	return openCrawl(t, c, integration.Name(t), bloom, 1)
}

// openCrawl is open for the crawl named crawl, its queue split into
// partitions.
func openCrawl(t *testing.T, c goredis.UniversalClient, crawl string, bloom bool, partitions int) (*redisfrontier.Frontier, string) {
	t.Helper()
	ctx := t.Context()
	b, err := redisbroker.New(ctx, redisbroker.Config{Client: c, Lease: time.Minute, Partitions: partitions})
	if err != nil {
		t.Fatalf("redis broker: %v", err)
	}
	var f dedupredis.Claimer
	if bloom {
		f, err = dedupredis.NewBloom(ctx, dedupredis.BloomConfig{Client: c, Key: crawl + ":dupefilter", Capacity: 100_000, FPRate: 0.001})
	} else {
		f, err = dedupredis.NewSet(ctx, dedupredis.SetConfig{Client: c, Key: crawl + ":dupefilter", Capacity: 100_000})
	}
	if err != nil {
		t.Fatalf("redis filter: %v", err)
	}
	t.Cleanup(func() {
		_ = f.Close()
		_ = b.Close()
	})
	return redisfrontier.New(b, f), crawl + ":requests"
}

func fp(name string) dedup.Fingerprint {
	sum := sha256.Sum256([]byte(name))
	var f dedup.Fingerprint
	copy(f[:], sum[:])
	return f
}

func page(names ...string) frontier.Page {
	var p frontier.Page
	for _, n := range names {
		p.Links = append(p.Links, frontier.Link{Fingerprint: fp(n), Message: broker.Message{Body: []byte(n)}})
	}
	return p
}

// letters writes outcomes one letter a link: P published, F filtered.
func letters(out []frontier.Outcome) string {
	var b strings.Builder
	for _, o := range out {
		b.WriteString(strings.ToUpper(o.String()[:1]))
	}
	return b.String()
}

// drain takes and acknowledges what is ready, and returns the bodies.
func drain(t *testing.T, fr frontier.Frontier, q string) []string {
	t.Helper()
	var got []string
	for {
		n, err := fr.Broker().Counts(t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		if n.Ready == 0 {
			slices.Sort(got)
			return got
		}
		ds, err := fr.Broker().Receive(t.Context(), q, int(n.Ready))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			got = append(got, string(d.Message().Body))
			if err := d.Ack(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestExpand checks the Redis frontier's outcomes on a single server and
// a Cluster, with either filter: new links published once across pages,
// pages expanded again and workers at once; a Known link filtered without
// being resolved; an unfiltered one published every time.
func TestExpand(t *testing.T) {
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			c := srv.client(t)
			for _, bloom := range []bool{false, true} {
				t.Run(map[bool]string{false: "set", true: "bloom"}[bloom], func(t *testing.T) { testExpand(t, c, bloom) })
			}
		})
	}
}

func testExpand(t *testing.T, c goredis.UniversalClient, bloom bool) {
	fr, q := open(t, c, bloom)
	ctx := t.Context()
	a := page("l1", "l2", "l1")
	a.Links = append(a.Links, frontier.Link{Unfiltered: true, Message: broker.Message{Body: []byte("u")}})
	known := page("l3", "k")
	known.Links[1] = frontier.Link{Known: true}
	known.Resolve = func(int) (frontier.Link, error) { return frontier.Link{}, errors.New("resolved") }
	out, err := fr.Expand(ctx, q, []frontier.Page{a, known, page("l2", "l3")})
	if err != nil {
		t.Fatalf("Expand: %v", err)
	}
	if got := []string{letters(out[0]), letters(out[1]), letters(out[2])}; !slices.Equal(got, []string{"PPFP", "PF", "FF"}) {
		t.Errorf("outcomes %q, want [PPFP PF FF]", got)
	}
	if got := drain(t, fr, q); !slices.Equal(got, []string{"l1", "l2", "l3", "u"}) {
		t.Errorf("published %q, want l1 l2 l3 u once each", got)
	}
	// The same pages again, by four workers at once: only u, each time.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			out, err := fr.Expand(ctx, q, []frontier.Page{a, known})
			if err != nil {
				t.Errorf("Expand: %v", err)
				return
			}
			if got := letters(out[0]) + letters(out[1]); got != "FFFPFF" {
				t.Errorf("outcomes again %s, want FFFPFF", got)
			}
		})
	}
	wg.Wait()
	if got := drain(t, fr, q); !slices.Equal(got, []string{"u", "u", "u", "u"}) {
		t.Errorf("published again %q, want u four times", got)
	}
	// Marks are the filter's, apart from the links.
	if err := fr.Mark(ctx, fp("identity")); err != nil {
		t.Fatal(err)
	}
	in, err := fr.Marked(ctx, fp("identity"), fp("l1"), fp("never"))
	if err != nil || !slices.Equal(in, []bool{true, true, false}) {
		t.Errorf("Marked = %v, %v; want [true true false]", in, err)
	}
}

// TestConformance runs the frontier's suite on a single Redis server and
// on a Redis Cluster, with either filter. The stores are not wrapped with
// faults: one script claims and publishes, so there is no call between
// the two for a worker to die at (the suite's kill tests are skipped).
func TestConformance(t *testing.T) {
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			c := srv.client(t)
			for _, parts := range []int{1, 3} {
				for _, bloom := range []bool{false, true} {
					t.Run(fmt.Sprintf("%s/partitions=%d", map[bool]string{false: "set", true: "bloom"}[bloom], parts), func(t *testing.T) {
						frontiertest.Run(t, frontiertest.Harness{New: func(t *testing.T, crawl string, _ *frontiertest.Faults) frontier.Frontier {
							fr, _ := openCrawl(t, c, crawl, bloom, parts)
							return fr
						}})
					})
				}
			}
		})
	}
}
