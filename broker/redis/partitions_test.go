package redis_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/brokertest"
	"github.com/trawlhq/trawl/broker/redis"
	"github.com/trawlhq/trawl/dedup"
	dedupredis "github.com/trawlhq/trawl/dedup/redis"
	"github.com/trawlhq/trawl/internal/integration"
	"github.com/trawlhq/trawl/internal/redislayout"
)

// TestPartitionsSpread: messages go to the keys of their key's partition,
// each under the partition's hash tag (none under the crawl's own),
// PartitionCounts counts each and Counts adds them up, and one consumer
// delivers every message once; on a Cluster the partitions' keys are
// served by every primary.
func TestPartitionsSpread(t *testing.T) {
	for _, srv := range []struct {
		name   string
		client func(*testing.T) goredis.UniversalClient
	}{
		{"single", func(t *testing.T) goredis.UniversalClient { return integration.RedisClient(t) }},
		{"cluster", func(t *testing.T) goredis.UniversalClient { return integration.RedisClusterClient(t) }},
	} {
		t.Run(srv.name, func(t *testing.T) {
			c := srv.client(t)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			const parts, hosts, each = 6, 40, 10
			b := newBroker(t, c, redis.Config{Partitions: parts, Lease: time.Minute})
			if b.Partitions() != parts {
				t.Fatalf("Partitions() = %d", b.Partitions())
			}
			q := integration.Name(t) + ":requests"
			want := make([]int64, parts)
			var msgs []broker.Message
			for h := range hosts {
				key := fmt.Sprintf("h%d.example", h)
				for i := range each {
					msgs = append(msgs, broker.Message{Body: fmt.Appendf(nil, "%s/%d", key, i), Key: key})
				}
				want[broker.PartitionOf(key, parts)] += each
			}
			if err := b.Publish(ctx, q, msgs...); err != nil {
				t.Fatal(err)
			}
			got, err := b.PartitionCounts(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			primaries := map[string]bool{}
			for p := range parts {
				if got[p].Ready != want[p] {
					t.Errorf("partition %d holds %d ready, want %d (all: %+v)", p, got[p].Ready, want[p], got)
				}
				k := redislayout.PartitionQueueKeys(q, p, parts).Ready
				if n := c.ZCard(ctx, k).Val(); n != want[p] {
					t.Errorf("%s holds %d, want %d", k, n, want[p])
				}
				if cc, ok := c.(*goredis.ClusterClient); ok {
					node, err := cc.MasterForKey(ctx, k)
					if err != nil {
						t.Fatal(err)
					}
					primaries[node.Options().Addr] = true
				}
			}
			if n := c.Exists(ctx, redislayout.QueueKeys(q).Ready).Val(); n != 0 {
				t.Errorf("the crawl's own %s exists: a partitioned queue writes none of its keys", redislayout.QueueKeys(q).Ready)
			}
			if _, ok := c.(*goredis.ClusterClient); ok && len(primaries) != 3 {
				t.Errorf("the %d partitions are served by %d primaries, want all 3", parts, len(primaries))
			}
			if n, err := b.Counts(ctx, q); err != nil || n.Ready != int64(len(msgs)) {
				t.Errorf("Counts = %+v, %v; want %d ready", n, err, len(msgs))
			}
			cons, err := b.Consume(ctx, q, 8)
			if err != nil {
				t.Fatal(err)
			}
			defer cons.Close()
			seen := map[string]bool{}
			for len(seen) < len(msgs)/2 {
				d, err := cons.Next(ctx)
				if err != nil {
					t.Fatalf("after %d of %d: %v", len(seen), len(msgs), err)
				}
				body := string(d.Message().Body)
				if seen[body] {
					t.Fatalf("%s delivered twice", body)
				}
				seen[body] = true
				if err := d.Ack(ctx); err != nil {
					t.Fatal(err)
				}
			}
			// Receive takes the rest, from every partition, with what the
			// consumer read ahead and gave back.
			if err := cons.Close(); err != nil {
				t.Fatal(err)
			}
			for len(seen) < len(msgs) {
				ds, err := b.Receive(ctx, q, 50)
				if err != nil {
					t.Fatal(err)
				}
				for _, d := range ds {
					body := string(d.Message().Body)
					if seen[body] {
						t.Fatalf("%s delivered twice", body)
					}
					seen[body] = true
				}
				if err := b.AckBatch(ctx, slices.Collect(func(yield func(broker.Delivery) bool) {
					for _, d := range ds {
						if !yield(d) {
							return
						}
					}
				})...); err != nil {
					t.Fatal(err)
				}
			}
			if n, err := b.Counts(ctx, q); err != nil || n != (broker.Counts{}) {
				t.Errorf("counts after the drain: %+v, %v", n, err)
			}
		})
	}
}

// TestClaimPublishPartitions: ClaimPublish claims each link in its
// partition's filter shard and publishes it to its partition's queue, both
// under the partition's tag; the same links again publish nothing, and
// the filter's own shards (the crawl's home slot) are not written.
func TestClaimPublishPartitions(t *testing.T) {
	for _, srv := range []struct {
		name   string
		client func(*testing.T) goredis.UniversalClient
	}{
		{"single", func(t *testing.T) goredis.UniversalClient { return integration.RedisClient(t) }},
		{"cluster", func(t *testing.T) goredis.UniversalClient { return integration.RedisClusterClient(t) }},
	} {
		t.Run(srv.name, func(t *testing.T) {
			c := srv.client(t)
			ctx := t.Context()
			const parts = 4
			b := newBroker(t, c, redis.Config{Partitions: parts, Lease: time.Minute})
			name := integration.Name(t)
			q := name + ":requests"
			f, err := dedupredis.NewSet(ctx, dedupredis.SetConfig{Client: c, Key: redislayout.FilterName(name), Capacity: 100})
			if err != nil {
				t.Fatal(err)
			}
			var links []redis.Link
			want := make([]int64, parts)
			for h := range 12 {
				key := fmt.Sprintf("h%d.example", h)
				for i := range 3 {
					body := fmt.Sprintf("%s/%d", key, i)
					var fp dedup.Fingerprint
					sum := sha256.Sum256([]byte(body))
					copy(fp[:], sum[:])
					links = append(links, redis.Link{Fingerprint: fp, Message: broker.Message{Body: []byte(body), Key: key}})
				}
				want[broker.PartitionOf(key, parts)] += 3
			}
			pub, err := b.ClaimPublish(ctx, q, f, links)
			if err != nil {
				t.Fatal(err)
			}
			if slices.Contains(pub, false) {
				t.Fatalf("first ClaimPublish: %v, want all published", pub)
			}
			got, err := b.PartitionCounts(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			for p := range parts {
				if got[p].Ready != want[p] {
					t.Errorf("partition %d holds %d, want %d", p, got[p].Ready, want[p])
				}
				shard := redislayout.PartitionFilterKeys(redislayout.FilterName(name), p, parts).Shard(0)
				if n := c.SCard(ctx, shard).Val(); n != want[p] {
					t.Errorf("%s holds %d claims, want %d", shard, n, want[p])
				}
			}
			if home := redislayout.FilterKeys(redislayout.FilterName(name)).Shard(0); c.Exists(ctx, home).Val() != 0 {
				t.Errorf("the crawl's own filter shard %s was written", home)
			}
			pub, err = b.ClaimPublish(ctx, q, f, links)
			if err != nil || slices.Contains(pub, true) {
				t.Fatalf("second ClaimPublish: %v, %v; want nothing published", pub, err)
			}
			if n, err := b.Counts(ctx, q); err != nil || n.Ready != int64(len(links)) {
				t.Errorf("Counts = %+v, %v; want %d", n, err, len(links))
			}
		})
	}
}

// roundTrips counts the round trips a client makes: one per command sent
// alone, one per pipeline.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (r *roundTrips) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmds)
	}
}

// TestAckBatchPartitionsOneRoundTrip: AckBatch of deliveries of several
// partitions sends one pipeline (a ZREM per partition in it), not a
// round trip per partition (four here), and acknowledges them all.
func TestAckBatchPartitionsOneRoundTrip(t *testing.T) {
	c := ownRedis(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const parts = 4
	b := newBroker(t, c, redis.Config{Partitions: parts, Lease: time.Minute})
	q := integration.Name(t) + ":requests"
	var msgs []broker.Message
	for p := range parts {
		key := brokertest.KeyIn(t, p, parts)
		for i := range 3 {
			msgs = append(msgs, broker.Message{Body: fmt.Appendf(nil, "%s/%d", key, i), Key: key})
		}
	}
	if err := b.Publish(ctx, q, msgs...); err != nil {
		t.Fatal(err)
	}
	var ds []broker.Delivery
	for len(ds) < len(msgs) {
		got, err := b.Receive(ctx, q, len(msgs)-len(ds))
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, got...)
	}
	trips := &roundTrips{}
	c.AddHook(trips)
	if err := b.AckBatch(ctx, ds...); err != nil {
		t.Fatal(err)
	}
	if n := trips.n.Load(); n != 1 {
		t.Errorf("AckBatch of %d deliveries of %d partitions made %d round trips, want 1", len(ds), parts, n)
	}
	if n, err := b.Counts(ctx, q); err != nil || n.Ready+n.InFlight != 0 {
		t.Errorf("counts after AckBatch: %+v, %v; want none left", n, err)
	}
}
