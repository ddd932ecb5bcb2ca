package redis_test

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
	"github.com/trawlhq/trawl/broker/redis"
	"github.com/trawlhq/trawl/dedup"
	dedupredis "github.com/trawlhq/trawl/dedup/redis"
	"github.com/trawlhq/trawl/internal/integration"
)

func fpOf(s string) dedup.Fingerprint {
	sum := sha256.Sum256([]byte(s))
	var fp dedup.Fingerprint
	copy(fp[:], sum[:])
	return fp
}

// link is a filtered link whose body is its name.
func link(name string, priority int) redis.Link {
	return redis.Link{Fingerprint: fpOf(name), Message: broker.Message{Body: []byte(name), Priority: priority}}
}

// filters are the Redis filters ClaimPublish claims in, each made on the
// key NAME:dupefilter of a crawl NAME.
var filters = []struct {
	kind string
	new  func(t *testing.T, c goredis.UniversalClient, crawl string) dedupredis.Claimer
}{
	{"set", func(t *testing.T, c goredis.UniversalClient, crawl string) dedupredis.Claimer {
		// a small capacity: few shards, so that links share them
		f, err := dedupredis.NewSet(t.Context(), dedupredis.SetConfig{Client: c, Key: crawl + ":dupefilter", Capacity: 1000})
		if err != nil {
			t.Fatalf("NewSet: %v", err)
		}
		return f
	}},
	{"bloom", func(t *testing.T, c goredis.UniversalClient, crawl string) dedupredis.Claimer {
		f, err := dedupredis.NewBloom(t.Context(), dedupredis.BloomConfig{Client: c, Key: crawl + ":dupefilter", Capacity: 100_000, FPRate: 0.001})
		if err != nil {
			t.Fatalf("NewBloom: %v", err)
		}
		return f
	}},
}

// drain receives everything ready on queue (leases of a minute), in
// delivery order, and returns the bodies.
func drain(t *testing.T, b *redis.Broker, queue string) []string {
	t.Helper()
	var got []string
	for {
		n, err := b.Counts(t.Context(), queue)
		if err != nil {
			t.Fatalf("Counts: %v", err)
		}
		if n.Ready == 0 {
			return got
		}
		ds, err := b.Receive(t.Context(), queue, 100)
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		for _, d := range ds {
			got = append(got, string(d.Message().Body))
			if err := d.Ack(t.Context()); err != nil {
				t.Fatalf("Ack: %v", err)
			}
		}
	}
}

func claimPublish(t *testing.T, b *redis.Broker, queue string, f dedupredis.Claimer, links ...redis.Link) []bool {
	t.Helper()
	pub, err := b.ClaimPublish(t.Context(), queue, f, links)
	if err != nil {
		t.Fatalf("ClaimPublish: %v", err)
	}
	return pub
}

// TestClaimPublish checks claim and publish in one step, on a single
// server and a Cluster, with either filter.
func TestClaimPublish(t *testing.T) {
	for _, srv := range []struct {
		name   string
		client func(t *testing.T) goredis.UniversalClient
	}{
		{"single", func(t *testing.T) goredis.UniversalClient { return integration.RedisClient(t) }},
		{"cluster", func(t *testing.T) goredis.UniversalClient { return integration.RedisClusterClient(t) }},
	} {
		t.Run(srv.name, func(t *testing.T) {
			c := srv.client(t)
			for _, f := range filters {
				t.Run(f.kind, func(t *testing.T) { testClaimPublish(t, c, f.new) })
			}
		})
	}
}

func testClaimPublish(t *testing.T, c goredis.UniversalClient, newFilter func(*testing.T, goredis.UniversalClient, string) dedupredis.Claimer) {
	setup := func(t *testing.T, order broker.Order) (*redis.Broker, dedupredis.Claimer, string) {
		crawl := integration.Name(t)
		return newBroker(t, c, redis.Config{Order: order, Lease: time.Minute}), newFilter(t, c, crawl), crawl + ":requests"
	}

	t.Run("claimed before is not published", func(t *testing.T) {
		b, f, q := setup(t, broker.Priority)
		if _, err := f.Add(t.Context(), fpOf("old")); err != nil {
			t.Fatalf("Add: %v", err)
		}
		pub := claimPublish(t, b, q, f, link("old", 0), link("new", 0))
		if want := []bool{false, true}; !slices.Equal(pub, want) {
			t.Errorf("published %v, want %v", pub, want)
		}
		if got := drain(t, b, q); !slices.Equal(got, []string{"new"}) {
			t.Errorf("queue holds %q, want [new]", got)
		}
	})

	t.Run("claims are the filter's", func(t *testing.T) {
		b, f, q := setup(t, broker.Priority)
		claimPublish(t, b, q, f, link("a", 0), link("b", 0))
		// The script claimed them where the filter's Add looks.
		first, err := f.Add(t.Context(), fpOf("a"), fpOf("b"), fpOf("c"))
		if err != nil {
			t.Fatalf("Add: %v", err)
		}
		if want := []bool{false, false, true}; !slices.Equal(first, want) {
			t.Errorf("Add after ClaimPublish = %v, want %v", first, want)
		}
	})

	t.Run("a batch sent twice is published once", func(t *testing.T) {
		b, f, q := setup(t, broker.Priority)
		batch := []redis.Link{link("a", 0), link("b", 0), link("a", 0), link("c", 0)}
		if pub := claimPublish(t, b, q, f, batch...); !slices.Equal(pub, []bool{true, true, false, true}) {
			t.Errorf("first: published %v, want [true true false true]", pub)
		}
		if pub := claimPublish(t, b, q, f, batch...); !slices.Equal(pub, []bool{false, false, false, false}) {
			t.Errorf("again: published %v, want none", pub)
		}
		if got := drain(t, b, q); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Errorf("queue holds %q, want [a b c]", got)
		}
	})

	t.Run("at once from many clients, each link once", func(t *testing.T) {
		b, f, q := setup(t, broker.Priority)
		var batch []redis.Link
		for i := range 50 {
			batch = append(batch, link(fmt.Sprint("l", i), 0))
		}
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				if _, err := b.ClaimPublish(t.Context(), q, f, batch); err != nil {
					t.Errorf("ClaimPublish: %v", err)
				}
			})
		}
		wg.Wait()
		got := drain(t, b, q)
		slices.Sort(got)
		if len(got) != 50 || len(slices.Compact(got)) != 50 {
			t.Errorf("queue holds %d messages (%d distinct), want each of the 50 once", len(got), len(slices.Compact(got)))
		}
	})

	t.Run("unfiltered links are published every time and claim nothing", func(t *testing.T) {
		b, f, q := setup(t, broker.Priority)
		u := link("u", 0)
		u.Unfiltered = true
		claimPublish(t, b, q, f, u)
		if pub := claimPublish(t, b, q, f, u, link("u", 0)); !slices.Equal(pub, []bool{true, true}) {
			t.Errorf("published %v, want [true true]", pub)
		}
		if got := drain(t, b, q); !slices.Equal(got, []string{"u", "u", "u"}) {
			t.Errorf("queue holds %q, want u three times", got)
		}
	})

	t.Run("priorities and order kept", func(t *testing.T) {
		for _, tc := range []struct {
			order broker.Order
			want  []string
		}{
			{broker.Priority, []string{"p9", "q9", "p5", "q5", "p1", "q1"}},
			{broker.FIFO, []string{"p1", "p5", "p9", "q1", "q5", "q9"}},
			{broker.LIFO, []string{"q9", "q5", "q1", "p9", "p5", "p1"}},
		} {
			t.Run(tc.order.String(), func(t *testing.T) {
				b, f, q := setup(t, tc.order)
				claimPublish(t, b, q, f, link("p1", 1), link("p5", 5), link("p9", 9))
				claimPublish(t, b, q, f, link("q1", 1), link("q5", 5), link("p5", 5), link("q9", 9))
				if got := drain(t, b, q); !slices.Equal(got, tc.want) {
					t.Errorf("delivered %q, want %q", got, tc.want)
				}
			})
		}
	})

	t.Run("more than a script call's links", func(t *testing.T) {
		b, f, q := setup(t, broker.FIFO)
		var batch []redis.Link
		var want []string
		for i := range 2500 {
			batch = append(batch, link(fmt.Sprint(i), 0))
			want = append(want, fmt.Sprint(i))
		}
		pub := claimPublish(t, b, q, f, batch...)
		if n := len(slices.DeleteFunc(pub, func(p bool) bool { return !p })); n != len(batch) {
			t.Errorf("published %d of %d", n, len(batch))
		}
		if got := drain(t, b, q); !slices.Equal(got, want) {
			t.Errorf("delivered %d messages, want the %d in order", len(got), len(want))
		}
	})

	t.Run("a failed publish leaves nothing claimed", func(t *testing.T) {
		b, f, q := setup(t, broker.Priority)
		// The ready key of another type (a worker with another --order).
		ready := "{" + strings.TrimSuffix(q, ":requests") + "}:requests"
		if err := c.RPush(t.Context(), ready, "x").Err(); err != nil {
			t.Fatalf("RPUSH: %v", err)
		}
		if _, err := b.ClaimPublish(t.Context(), q, f, []redis.Link{link("a", 0), link("b", 0)}); err == nil {
			t.Fatal("ClaimPublish on a list in priority mode: no error")
		}
		first, err := f.Add(t.Context(), fpOf("a"), fpOf("b"))
		if err != nil {
			t.Fatalf("Add: %v", err)
		}
		if !slices.Equal(first, []bool{true, true}) {
			t.Errorf("Add after a failed ClaimPublish = %v, want both new: the claims were kept, the links lost", first)
		}
	})

	t.Run("a filter of another crawl", func(t *testing.T) {
		b, _, q := setup(t, broker.Priority)
		other := newFilter(t, c, integration.Name(t)+"-other")
		_, err := b.ClaimPublish(t.Context(), q, other, []redis.Link{link("a", 0)})
		if !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("ClaimPublish with another crawl's filter: %v, want ErrInvalid", err)
		}
	})
}
