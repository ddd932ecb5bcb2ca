package redis_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/brokertest"
	"github.com/trawlhq/trawl/broker/redis"
	"github.com/trawlhq/trawl/internal/integration"
)

func TestMain(m *testing.M) { integration.Main(m) }

func suiteConfig(client goredis.UniversalClient) brokertest.Config {
	return partitionedSuite(client, 0)
}

// partitionedSuite is suiteConfig for brokers whose queues have n
// partitions (0: one).
func partitionedSuite(client goredis.UniversalClient, n int) brokertest.Config {
	return brokertest.Config{
		// Redis leases work down to milliseconds, but a lease shorter than
		// a second lets a loaded machine's scheduling hiccups (two shared
		// cores, many test binaries) expire leases the suite extends.
		Lease: time.Second,
		New: func(t *testing.T, s brokertest.Setup) broker.Broker {
			b, err := redis.New(t.Context(), redis.Config{
				Client:        client,
				Order:         s.Order,
				Lease:         s.Lease,
				MaxDeliveries: s.MaxDeliveries,
				Partitions:    n,
			})
			if err != nil {
				t.Fatalf("redis.New: %v", err)
			}
			t.Cleanup(func() {
				if err := b.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			return b
		},
	}
}

func TestConformance(t *testing.T) {
	c := integration.RedisClient(t)
	cfg := suiteConfig(c)
	cfg.Restartable = func(t *testing.T) brokertest.Server {
		srv := integration.RedisContainer(t)
		client := srv.Client(t)
		return brokertest.Server{
			New: suiteConfig(client).New,
			Restart: func(t *testing.T) {
				if err := srv.Restart(t.Context()); err != nil {
					t.Fatalf("restart Redis: %v", err)
				}
			},
		}
	}
	brokertest.Run(t, cfg)
}

func TestConformanceCluster(t *testing.T) {
	brokertest.Run(t, suiteConfig(integration.RedisClusterClient(t)))
}

// TestConformancePartitioned runs the suite on brokers whose queues have
// three partitions, on a single server and on a Cluster (where they sit
// on three primaries): consumers drain them all, counts add them up.
//
// A consumer holds a connection per partition: the clients' pools have
// room for the suite's consumers (the deployment's does, see
// deployment.redisClient).
func TestConformancePartitioned(t *testing.T) {
	const pool = 200
	t.Run("single", func(t *testing.T) {
		opt, err := goredis.ParseURL(integration.Redis(t))
		if err != nil {
			t.Fatal(err)
		}
		opt.PoolSize = pool
		c := goredis.NewClient(opt)
		t.Cleanup(func() { _ = c.Close() })
		brokertest.Run(t, partitionedSuite(c, 3))
	})
	t.Run("cluster", func(t *testing.T) {
		c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: integration.RedisCluster(t), PoolSize: pool})
		t.Cleanup(func() { _ = c.Close() })
		brokertest.Run(t, partitionedSuite(c, 3))
	})
}

func newBroker(t testing.TB, c goredis.UniversalClient, cfg redis.Config) *redis.Broker {
	t.Helper()
	cfg.Client = c
	b, err := redis.New(t.Context(), cfg)
	if err != nil {
		t.Fatalf("redis.New: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func TestKeysShareASlot(t *testing.T) {
	c := integration.RedisClusterClient(t)
	ctx := t.Context()
	name := integration.Name(t)
	q := name + ":requests"
	b := newBroker(t, c, redis.Config{Lease: time.Minute})
	if err := b.Publish(ctx, q, broker.Message{Body: []byte("a")}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	ds, err := b.Receive(ctx, q, 1)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	if err := ds[0].Reject(ctx, "x"); err != nil {
		t.Fatalf("Reject: %v", err)
	}
	// The keys this left behind all sit in the slot of the crawl's name.
	want, err := c.ClusterKeySlot(ctx, name).Result()
	if err != nil {
		t.Fatalf("CLUSTER KEYSLOT: %v", err)
	}
	node, err := c.MasterForKey(ctx, "{"+name+"}")
	if err != nil {
		t.Fatalf("master: %v", err)
	}
	keys, err := node.Keys(ctx, "{"+name+"}*").Result()
	if err != nil {
		t.Fatalf("KEYS: %v", err)
	}
	slices.Sort(keys)
	wantKeys := []string{"{" + name + "}:requests:dead", "{" + name + "}:requests:notify", "{" + name + "}:requests:seq"}
	if !slices.Equal(keys, wantKeys) {
		t.Errorf("keys = %q, want %q", keys, wantKeys)
	}
	for _, k := range keys {
		if s, err := c.ClusterKeySlot(ctx, k).Result(); err != nil || s != want {
			t.Errorf("key %q in slot %d (%v), want %d", k, s, err, want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	err := redis.Config{Order: broker.Order(7), Lease: -time.Second, MaxDeliveries: -1, BlockTimeout: time.Microsecond}.Validate()
	if !errors.Is(err, broker.ErrInvalid) {
		t.Fatalf("Validate = %v, want ErrInvalid", err)
	}
	for _, want := range []string{"Client", "Order", "Lease", "MaxDeliveries", "BlockTimeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate error %q does not mention %s", err, want)
		}
	}
	c := goredis.NewClient(&goredis.Options{})
	defer c.Close()
	if err := (redis.Config{Client: c}).Validate(); err != nil {
		t.Errorf("zero config with a client: %v", err)
	}
}

func TestNewUnreachable(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer c.Close()
	_, err := redis.New(t.Context(), redis.Config{Client: c})
	if err == nil || !strings.Contains(err.Error(), "redis broker: connect") {
		t.Fatalf("New on an unreachable server = %v, want a connect error", err)
	}
}

func TestMalformedEntryIsDeadLettered(t *testing.T) {
	c := integration.RedisClient(t)
	ctx := t.Context()
	for _, order := range []broker.Order{broker.Priority, broker.FIFO} {
		t.Run(order.String(), func(t *testing.T) {
			q := integration.Name(t) + ":requests"
			b := newBroker(t, c, redis.Config{Order: order})
			if err := b.Publish(ctx, q, broker.Message{Body: []byte("good")}); err != nil {
				t.Fatalf("Publish: %v", err)
			}
			ready := "{" + strings.TrimSuffix(q, ":requests") + "}:requests"
			var err error
			if order == broker.Priority {
				err = c.ZAdd(ctx, ready, goredis.Z{Score: -100, Member: "garbage pushed by hand"}).Err()
			} else {
				err = c.RPush(ctx, ready, "x").Err() // RPOP takes it first
			}
			if err != nil {
				t.Fatalf("push garbage: %v", err)
			}
			ds, err := b.Receive(ctx, q, 10)
			if err != nil {
				t.Fatalf("Receive: %v", err)
			}
			if len(ds) != 1 || string(ds[0].Message().Body) != "good" {
				t.Fatalf("Receive = %d deliveries, want just good", len(ds))
			}
			if err := ds[0].Ack(ctx); err != nil {
				t.Fatalf("Ack: %v", err)
			}
			dls, err := b.DeadLetters(ctx, q, 10)
			if err != nil || len(dls) != 1 || dls[0].Reason != "malformed queue entry" {
				t.Fatalf("DeadLetters = %+v, %v; want the garbage as a malformed entry", dls, err)
			}
			if n, err := b.Requeue(ctx, q, 10); n != 1 || err != nil {
				t.Fatalf("Requeue = %d, %v", n, err)
			}
			ds, err = b.Receive(ctx, q, 10)
			if err != nil || len(ds) != 1 || ds[0].Attempt() != 1 {
				t.Fatalf("Receive after Requeue = %d deliveries, %v; want the requeued entry", len(ds), err)
			}
			if got := string(ds[0].Message().Body); got != string(dls[0].Message.Body) {
				t.Fatalf("requeued body %q, want %q", got, dls[0].Message.Body)
			}
		})
	}
}

func TestAckBatch(t *testing.T) {
	c := integration.RedisClient(t)
	ctx := t.Context()
	q := integration.Name(t) + ":requests"
	b := newBroker(t, c, redis.Config{})
	other := newBroker(t, c, redis.Config{})
	msgs := make([]broker.Message, 10)
	for i := range msgs {
		msgs[i] = broker.Message{Body: fmt.Appendf(nil, "m%d", i)}
	}
	if err := b.Publish(ctx, q, msgs...); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	ds, err := b.Receive(ctx, q, 10)
	if err != nil || len(ds) != 10 {
		t.Fatalf("Receive = %d, %v", len(ds), err)
	}
	if err := ds[0].Ack(ctx); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	err = b.AckBatch(ctx, ds...)
	if !errors.Is(err, broker.ErrSettled) {
		t.Fatalf("AckBatch with an acked delivery = %v, want ErrSettled for it", err)
	}
	if got, err := b.Counts(ctx, q); err != nil || got != (broker.Counts{}) {
		t.Fatalf("Counts after AckBatch = %+v, %v; want all acknowledged", got, err)
	}
	if err := ds[1].Ack(ctx); !errors.Is(err, broker.ErrSettled) {
		t.Fatalf("Ack after AckBatch = %v, want ErrSettled", err)
	}
	if err := other.AckBatch(ctx, ds[2]); !errors.Is(err, broker.ErrInvalid) {
		t.Fatalf("AckBatch of another broker's delivery = %v, want ErrInvalid", err)
	}
}

// TestLeaseLostAfterRedelivery checks that the lease token tells two
// deliveries of one message apart.
func TestLeaseLostAfterRedelivery(t *testing.T) {
	c := integration.RedisClient(t)
	ctx := t.Context()
	q := integration.Name(t) + ":q"
	b := newBroker(t, c, redis.Config{Lease: 50 * time.Millisecond})
	if err := b.Publish(ctx, q, broker.Message{Body: []byte("x")}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	d1, err := b.Receive(ctx, q, 1)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d2, err := b.Receive(rctx, q, 1)
	if err != nil || d2[0].Attempt() != 2 {
		t.Fatalf("second Receive = %v; want attempt 2", err)
	}
	if err := d2[0].Extend(ctx, time.Minute); err != nil {
		t.Fatalf("Extend of the live lease: %v", err)
	}
	if err := d1[0].Ack(ctx); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("Ack of the first delivery = %v, want ErrLeaseLost", err)
	}
	if got, err := b.Counts(ctx, q); err != nil || got.InFlight != 1 {
		t.Fatalf("Counts = %+v, %v: the stale Ack must not remove the live lease", got, err)
	}
	if err := d2[0].Ack(ctx); err != nil {
		t.Fatalf("Ack of the live delivery: %v", err)
	}
}

// TestAckBatchLostLeases checks that AckBatch tells which leases were lost
// when some ran out.
func TestAckBatchLostLeases(t *testing.T) {
	c := integration.RedisClient(t)
	ctx := t.Context()
	q := integration.Name(t) + ":requests"
	b := newBroker(t, c, redis.Config{Lease: 100 * time.Millisecond, MaxDeliveries: 10})
	other := newBroker(t, c, redis.Config{Lease: time.Minute, MaxDeliveries: 10})
	msgs := []broker.Message{{Body: []byte("a")}, {Body: []byte("b")}, {Body: []byte("c")}}
	if err := b.Publish(ctx, q, msgs...); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	old, err := b.Receive(ctx, q, 2)
	if err != nil || len(old) != 2 {
		t.Fatalf("Receive = %d, %v", len(old), err)
	}
	// The other broker takes c, then, once the leases ran out, a and b.
	var again []broker.Delivery
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for len(again) < 3 {
		ds, err := other.Receive(rctx, q, 3)
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		again = append(again, ds...)
	}
	err = b.AckBatch(ctx, append(old, again[0])...)
	if !errors.Is(err, broker.ErrLeaseLost) || !errors.Is(err, broker.ErrInvalid) {
		t.Fatalf("AckBatch = %v, want ErrLeaseLost for the expired deliveries, ErrInvalid for the other broker's", err)
	}
	if n := strings.Count(err.Error(), "lease lost"); n != 2 {
		t.Fatalf("AckBatch error names %d lost leases, want 2: %v", n, err)
	}
	if err := other.AckBatch(ctx, again...); err != nil {
		t.Fatalf("AckBatch of the live deliveries: %v", err)
	}
	if got, err := b.Counts(ctx, q); err != nil || got != (broker.Counts{}) {
		t.Fatalf("Counts = %+v, %v; want everything acknowledged", got, err)
	}
}
