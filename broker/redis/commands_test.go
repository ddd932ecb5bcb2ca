package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/brokertest"
	"github.com/trawlhq/trawl/broker/redis"
	dedupredis "github.com/trawlhq/trawl/dedup/redis"
	"github.com/trawlhq/trawl/internal/integration"
)

// commands returns how many commands the server ran during f, those that
// scripts ran included (total_commands_processed; the INFO that reads it
// is not counted).
func commands(t *testing.T, c *goredis.Client, f func()) int {
	t.Helper()
	read := func() int {
		s, err := c.Info(context.Background(), "stats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(s, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
				n, err := strconv.Atoi(v)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
		}
		t.Fatalf("no total_commands_processed in INFO stats")
		return 0
	}
	before := read()
	f()
	return read() - before - 1 // the first INFO counts once it is done
}

// ownRedis returns a client of a Redis server of t's own: its counts are
// t's alone.
func ownRedis(t *testing.T) *goredis.Client {
	t.Helper()
	srv := integration.RedisContainer(t)
	return srv.Client(t)
}

// TestCommandsPerCall bounds the commands a lease and a claim-and-publish
// cost the server, those their scripts run included (the bar of issue 23
// counts them per page): a lease of a backlog runs 7 (it ran 12), a claim
// and publish of n links on the set filter n+4, on the Bloom filter 5.
func TestCommandsPerCall(t *testing.T) {
	c := ownRedis(t)
	ctx := t.Context()
	if n := commands(t, c, func() {}); n != 0 {
		t.Fatalf("nothing done counts %d commands: the count is off", n)
	}
	b := newBroker(t, c, redis.Config{Lease: time.Minute})
	set, err := dedupredis.NewSet(ctx, dedupredis.SetConfig{Client: c, Key: "cmds:dupefilter", Capacity: 1000})
	if err != nil {
		t.Fatal(err)
	}
	bloom, err := dedupredis.NewBloom(ctx, dedupredis.BloomConfig{Client: c, Key: "cmdb:dupefilter", Capacity: 1000, FPRate: 0.001})
	if err != nil {
		t.Fatal(err)
	}
	batch := func(prefix string) []redis.Link {
		var ls []redis.Link
		for i := range 10 {
			ls = append(ls, link(fmt.Sprint(prefix, i), i%3))
		}
		return ls
	}
	for _, tc := range []struct {
		f     dedupredis.Claimer
		queue string
		most  int
	}{
		{set, "cmds:requests", 10 + 4},
		{bloom, "cmdb:requests", 5},
	} {
		claimPublish(t, b, tc.queue, tc.f, batch("warm")...) // loads the script, leaves a token
		if n := commands(t, c, func() { claimPublish(t, b, tc.queue, tc.f, batch("x")...) }); n > tc.most {
			t.Errorf("%s: a claim and publish of 10 new links ran %d commands, want at most %d", tc.f.Key(), n, tc.most)
		}
	}
	q := "cmds:requests"
	if _, err := b.Receive(ctx, q, 1); err != nil { // loads the script
		t.Fatal(err)
	}
	if err := b.Publish(ctx, q, broker.Message{Body: []byte("more")}); err != nil {
		t.Fatal(err)
	}
	if n := commands(t, c, func() {
		if ds, err := b.Receive(ctx, q, 5); err != nil || len(ds) != 5 {
			t.Fatalf("Receive: %d, %v", len(ds), err)
		}
	}); n > 7 {
		t.Errorf("a lease of 5 of a backlog ran %d commands, want at most 7", n)
	}
}

// TestConsumerRefillsInBatches: a consumer taken from one message at a
// time leases its read-ahead back in batches of half a prefetch, not one
// message a call (a lease call runs 6 or 7 commands): 400 messages taken
// and acknowledged one by one, with a prefetch of 20, cost at most 2
// commands each, the acknowledgements' ZREM included (1.6 measured; 4.5
// when it refilled after each message taken). So with 8 partitions that
// all have messages: they lease in turn, half a read-ahead each, at most
// 2.5 commands a message (2.0 measured, the loops' first leases and a
// lease finding none at the end of each partition included; 4.2 when each
// leased its even share of the read-ahead, 2 or 3 at a time).
func TestConsumerRefillsInBatches(t *testing.T) {
	for _, parts := range []int{1, 8} {
		t.Run(fmt.Sprintf("partitions=%d", parts), func(t *testing.T) {
			c := ownRedis(t)
			ctx := t.Context()
			b := newBroker(t, c, redis.Config{Lease: time.Minute, Partitions: parts})
			const q, n = "refill:requests", 400
			msgs := make([]broker.Message, n)
			for i := range msgs {
				msgs[i] = broker.Message{Body: []byte(fmt.Sprint(i)), Key: brokertest.KeyIn(t, i%parts, parts)}
			}
			if err := b.Publish(ctx, q, msgs...); err != nil {
				t.Fatal(err)
			}
			got := commands(t, c, func() {
				cons, err := b.Consume(ctx, q, 20)
				if err != nil {
					t.Fatal(err)
				}
				defer cons.Close()
				for range n {
					d, err := cons.Next(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if err := d.Ack(ctx); err != nil {
						t.Fatal(err)
					}
				}
			})
			bar := 2 * n
			if parts > 1 {
				bar = 5 * n / 2
			}
			if got > bar {
				t.Errorf("%d messages taken one by one cost %d commands, want at most %d", n, got, bar)
			}
			t.Logf("%d commands for %d messages", got, n)
		})
	}
}

// scriptCalls returns how many script calls (EVALSHA, EVAL) the server
// ran during f, from INFO commandstats.
func scriptCalls(t *testing.T, c *goredis.Client, f func()) int {
	t.Helper()
	read := func() int {
		s, err := c.Info(context.Background(), "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, line := range strings.Split(s, "\n") {
			line = strings.TrimSpace(line)
			for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
				if v, ok := strings.CutPrefix(line, cmd); ok {
					v, _, _ = strings.Cut(v, ",")
					calls, err := strconv.Atoi(v)
					if err != nil {
						t.Fatal(err)
					}
					n += calls
				}
			}
		}
		return n
	}
	before := read()
	f()
	return read() - before
}

// TestExtendBatchCalls: ExtendBatch extends 2,500 leases of one queue of
// two partitions in 4 script calls (two chunks of at most 1,000 per
// partition), not one call per lease, and each lease it reports extended
// runs for the new duration: none of them comes back while a Receive
// waits past the old lease.
func TestExtendBatchCalls(t *testing.T) {
	c := ownRedis(t)
	ctx := t.Context()
	const lease = 2 * time.Second
	b := newBroker(t, c, redis.Config{Lease: lease, Partitions: 2})
	const q, n = "extend:requests", 2500
	msgs := make([]broker.Message, n)
	for i := range msgs {
		msgs[i] = broker.Message{Body: []byte(fmt.Sprint(i)), Key: brokertest.KeyIn(t, i%2, 2)}
	}
	if err := b.Publish(ctx, q, msgs...); err != nil {
		t.Fatal(err)
	}
	ds, err := b.Receive(ctx, q, n)
	if err != nil || len(ds) != n {
		t.Fatalf("Receive: %d deliveries, %v", len(ds), err)
	}
	// Load the script on the server first: a first EVALSHA fails.
	if errs := b.ExtendBatch(ctx, time.Minute, ds[0]); errs[0] != nil {
		t.Fatal(errs[0])
	}
	var errs []error
	calls := scriptCalls(t, c, func() { errs = b.ExtendBatch(ctx, time.Minute, ds...) })
	if calls != 4 {
		t.Errorf("ExtendBatch of %d leases over 2 partitions ran %d script calls, want 4", n, calls)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("lease %d: %v", i, err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 2*lease)
	defer cancel()
	if got, err := b.Receive(wctx, q, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a Receive past the old lease got %d deliveries (%v): the extended leases ran out", len(got), err)
	}
	if err := b.AckBatch(ctx, ds...); err != nil {
		t.Fatalf("AckBatch of the extended deliveries: %v", err)
	}
}
