package deployment_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/broker"
	redisbroker "github.com/trawlhq/trawl/broker/redis"
	"github.com/trawlhq/trawl/dedup"
	dedupredis "github.com/trawlhq/trawl/dedup/redis"
	"github.com/trawlhq/trawl/deployment"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/integration"
	"github.com/trawlhq/trawl/internal/redislayout"
)

// TestRepartitionDeadLetters: Repartition from 1 to 4 partitions moves
// every queued request and every dead letter, with its reason, to the
// partition of its host, and stores the count: the deployment opened
// afterwards without a count has 4. On NATS, RabbitMQ and Redis (one
// server, and a Cluster of three primaries), real servers; the queues it
// moved through are gone (checkTransitGone). On Redis, whose filter is
// partitioned with the queue, every new partition holds every claim made
// before (set and Bloom), the old partitions' claims are gone, and so is
// every other key of the old count (integration.CheckPartitionKeys). The
// repartition is given neither --dedup nor the Bloom sizes: the crawl's
// filter is opened as it was made.
func TestRepartitionDeadLetters(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  func(t *testing.T) deployment.Config
	}{
		{"nats", func(t *testing.T) deployment.Config {
			return deployment.Config{Broker: "nats", NATSURL: integration.NATS(t), Filter: "set", RedisURL: integration.Redis(t)}
		}},
		{"rabbitmq", func(t *testing.T) deployment.Config {
			return deployment.Config{Broker: "rabbitmq", AMQPURL: integration.RabbitMQ(t), Filter: "set", RedisURL: integration.Redis(t)}
		}},
		{"redis", func(t *testing.T) deployment.Config {
			return deployment.Config{Broker: "redis", Filter: "set", RedisURL: integration.Redis(t)}
		}},
		{"redis-bloom", func(t *testing.T) deployment.Config {
			return deployment.Config{Broker: "redis", Filter: "bloom", FilterCapacity: 100_000, RedisURL: integration.Redis(t)}
		}},
		{"redis-cluster", func(t *testing.T) deployment.Config {
			addrs := integration.RedisCluster(t)
			return deployment.Config{Broker: "redis", Filter: "set", RedisURL: "redis://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=")}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cfg := c.cfg(t)
			name := integration.Name(t)
			open := func() *deployment.Deployment {
				d, err := deployment.Open(ctx, cfg, engine.Config{Name: name})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { d.Close() })
				return d
			}
			d := open()
			// A seed stores the crawl's settings and marks its filter.
			cr, err := d.Crawler(engine.Config{Name: name})
			if err != nil {
				t.Fatal(err)
			}
			if err := cr.Seed(ctx); err != nil {
				t.Fatal(err)
			}
			marks, err := engine.FilterMarks(ctx, d.Metadata, name)
			if err != nil || len(marks) != 2 {
				t.Fatalf("the crawl's marks after a seed: %v, %v; want 2", marks, err)
			}
			q := engine.RequestsQueue(name)
			const total, dead, hosts = 40, 8, 8
			host := map[string]string{} // URL → host
			var msgs []broker.Message
			for i := range total {
				r := engine.Request{URL: fmt.Sprintf("http://h%d.example/%d", i%hosts, i), Priority: i % 2}
				host[r.URL] = fmt.Sprintf("h%d.example", i%hosts)
				b, err := r.MarshalBinary()
				if err != nil {
					t.Fatal(err)
				}
				msgs = append(msgs, broker.Message{Body: b, Priority: r.Priority})
			}
			if err := d.Broker.Publish(ctx, q, msgs...); err != nil {
				t.Fatal(err)
			}
			for buried := 0; buried < dead; {
				ds, err := d.Broker.Receive(ctx, q, dead-buried)
				if err != nil {
					t.Fatal(err)
				}
				for _, dd := range ds {
					if err := dd.Reject(ctx, "gone "+urlOf(t, dd.Message().Body)); err != nil {
						t.Fatal(err)
					}
					buried++
				}
			}
			// Claims made with one partition (Redis: in the filter's own
			// keys).
			fps := make([]dedup.Fingerprint, 50)
			for i := range fps {
				sum := sha256.Sum256(fmt.Appendf(nil, "claimed %d", i))
				copy(fps[i][:], sum[:])
			}
			claims, partitioned := d.Filter.(dedupredis.Claimer)
			partitioned = partitioned && cfg.Broker == "redis"
			// The client that SCANs the crawl's keys.
			var keys goredis.UniversalClient
			if partitioned && c.name == "redis-cluster" {
				keys = integration.RedisClusterClient(t)
			} else if partitioned {
				keys = integration.RedisClient(t)
			}
			if partitioned {
				if _, err := claims.Add(ctx, fps...); err != nil {
					t.Fatal(err)
				}
			}
			d.Close()
			// The repartition is given neither --dedup nor the Bloom
			// sizes: it opens the crawl's filter as it was made.
			lean := cfg
			lean.Filter, lean.FilterCapacity = "", 0
			dr, err := deployment.Open(ctx, lean, engine.Config{Name: name})
			if err != nil {
				t.Fatal(err)
			}
			m, err := dr.Repartition(ctx, 4)
			if err != nil {
				t.Fatal(err)
			}
			if m != (deployment.Moved{From: 1, To: 4, Ready: total - dead, Dead: dead}) {
				t.Errorf("Repartition moved %+v, want %d ready and %d dead from 1 to 4", m, total-dead, dead)
			}
			dr.Close()
			checkTransitGone(ctx, t, cfg, name)

			d4 := open()
			p, ok := d4.Broker.(broker.Partitioned)
			if !ok || p.Partitions() != 4 {
				t.Fatalf("the deployment opened after the repartition is not of 4 partitions")
			}
			if partitioned {
				f := d4.Filter.(dedupredis.Claimer)
				checkClaims(ctx, t, f, 4, fps, true)
				// The filter's own keys keep the crawl's marks; a set
				// filter's lose the claims (a Bloom filter's keep them).
				checkClaims(ctx, t, f, 1, marks, true)
				checkClaims(ctx, t, f, 1, fps, cfg.Filter == "bloom")
				integration.CheckPartitionKeys(t, keys, name, 4, len(marks))
			}
			want := make([]broker.Counts, 4)
			ds, err := receiveAll(ctx, d4.Broker, q, total-dead)
			if err != nil {
				t.Fatal(err)
			}
			for _, dd := range ds {
				want[broker.PartitionOf(host[urlOf(t, dd.Message().Body)], 4)].InFlight++
			}
			ls, err := d4.Broker.DeadLetters(ctx, q, 100)
			if err != nil {
				t.Fatal(err)
			}
			if len(ls) != dead {
				t.Errorf("%d dead letters after the repartition, want %d", len(ls), dead)
			}
			for _, l := range ls {
				u := urlOf(t, l.Message.Body)
				if l.Reason != "gone "+u {
					t.Errorf("dead letter %s has reason %q, want %q", u, l.Reason, "gone "+u)
				}
				want[broker.PartitionOf(host[u], 4)].Dead++
			}
			got, err := d4.Broker.(broker.PartitionCounter).PartitionCounts(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			for i := range got {
				got[i].Delayed = 0
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("partition counts %+v, want %+v (each request and dead letter in its host's partition)", got, want)
			}
			for _, dd := range ds {
				if err := dd.Ack(ctx); err != nil {
					t.Fatal(err)
				}
			}

			// Down to 2: the partitions beyond are dropped, and the
			// deployment opened afterwards uses the queue (RabbitMQ
			// refuses a queue with partitions beyond its broker's).
			m, err = d4.Repartition(ctx, 2)
			if err != nil {
				t.Fatal(err)
			}
			if m != (deployment.Moved{From: 4, To: 2, Dead: dead}) {
				t.Errorf("Repartition to 2 moved %+v, want the %d dead letters from 4 to 2", m, dead)
			}
			d4.Close()
			d2 := open()
			if partitioned {
				f := d2.Filter.(dedupredis.Claimer)
				checkClaims(ctx, t, f, 2, fps, true)
				for p := range 4 {
					base := redislayout.PartitionFilterKeys(f.Key(), p, 4).Base
					if base != redislayout.PartitionFilterKeys(f.Key(), 0, 2).Base && base != redislayout.PartitionFilterKeys(f.Key(), 1, 2).Base {
						checkPartition(ctx, t, f, p, 4, fps, false)
					}
				}
				checkClaims(ctx, t, f, 1, marks, true)
				integration.CheckPartitionKeys(t, keys, name, 2, len(marks))
			}
			if err := d2.Broker.Publish(ctx, q, broker.Message{Body: msgs[0].Body, Key: "h0.example"}); err != nil {
				t.Fatalf("publish after the repartition to 2: %v", err)
			}
			if n, err := d2.Broker.Counts(ctx, q); err != nil || n.Ready != 1 || n.Dead != dead {
				t.Errorf("counts after the repartition to 2: %+v, %v; want 1 ready, %d dead", n, err, dead)
			}
			if !partitioned {
				return
			}

			// What a repartition cut short after the count was stored
			// leaves, planted (the run that finishes it sees 2 as the
			// old count): keys of a partition of 3 and of the one
			// partition, claims in the filter's own keys. Run again
			// with 2, it has nothing to move (none on its way), deletes
			// them and loses nothing.
			f := d2.Filter.(dedupredis.Claimer)
			p3 := redislayout.Retired(q, 3, 2)[0] // a partition of 3 that 2 does not share
			old3, old1 := redislayout.PartitionQueueKeys(q, p3, 3), redislayout.QueueKeys(q)
			for _, err := range []error{
				keys.Set(ctx, old3.Seq, 7, 0).Err(), keys.RPush(ctx, old3.Notify, "1").Err(),
				keys.Set(ctx, old1.Seq, 9, 0).Err(), keys.RPush(ctx, old1.Notify, "1").Err(),
			} {
				if err != nil {
					t.Fatal(err)
				}
			}
			if _, err := f.Partition(p3, 3).Add(ctx, fps...); err != nil {
				t.Fatal(err)
			}
			if _, err := f.Add(ctx, fps...); err != nil { // the filter's own keys
				t.Fatal(err)
			}
			m, err = d2.Repartition(ctx, 2)
			if err != nil {
				t.Fatal(err)
			}
			if m != (deployment.Moved{From: 2, To: 2, Unchanged: true}) {
				t.Errorf("Repartition from 2 to 2 moved %+v, want nothing moved", m)
			}
			if n, err := d2.Broker.Counts(ctx, q); err != nil || n.Ready != 1 || n.Dead != dead {
				t.Errorf("counts after the repartition from 2 to 2: %+v, %v; want 1 ready, %d dead", n, err, dead)
			}
			checkClaims(ctx, t, f, 2, fps, true)
			checkClaims(ctx, t, f, 1, marks, true)
			integration.CheckPartitionKeys(t, keys, name, 2, len(marks))
		})
	}
}

// checkTransitGone checks that the queues a repartition of crawl name
// moves through, NAME:requests~repartition and ~repartition-dead, are gone
// from NATS and RabbitMQ once it is done (Redis: CheckPartitionKeys).
func checkTransitGone(ctx context.Context, t *testing.T, cfg deployment.Config, name string) {
	t.Helper()
	switch cfg.Broker {
	case "nats":
		streams := integration.JetStream(t, cfg.NATSURL).StreamNames(ctx)
		for s := range streams.Name() {
			// A stream is named by its queue, escaped: '~' is _7e.
			if strings.Contains(s, name) && strings.Contains(s, "_7erepartition") {
				t.Errorf("stream %s of a queue the repartition moved through remains", s)
			}
		}
		if err := streams.Err(); err != nil {
			t.Fatal(err)
		}
	case "rabbitmq":
		u, err := url.Parse(integration.RabbitMQManagement(t))
		if err != nil {
			t.Fatal(err)
		}
		pw, _ := u.User.Password()
		user := u.User.Username()
		u.User = nil
		for _, tq := range []string{"~repartition", "~repartition-dead", "~repartition:dead", "~repartition-dead:dead"} {
			q := engine.RequestsQueue(name) + tq
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String()+"/api/queues/%2F/"+url.PathEscape(q), nil)
			if err != nil {
				t.Fatal(err)
			}
			req.SetBasicAuth(user, pw)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("management API: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("queue %s of the repartition's: management API answers %s, want 404 Not Found", q, resp.Status)
			}
		}
	}
}

// checkClaims checks that each of the n partitions of f holds every one
// of fps (in), or none (!in).
func checkClaims(ctx context.Context, t *testing.T, f dedupredis.Claimer, n int, fps []dedup.Fingerprint, in bool) {
	t.Helper()
	for p := range n {
		checkPartition(ctx, t, f, p, n, fps, in)
	}
}

// checkPartition checks that partition p of n of f holds every one of
// fps (in), or none (!in).
func checkPartition(ctx context.Context, t *testing.T, f dedupredis.Claimer, p, n int, fps []dedup.Fingerprint, in bool) {
	t.Helper()
	got, err := f.Partition(p, n).(dedup.Checker).Contains(ctx, fps...)
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, ok := range got {
		if ok {
			held++
		}
	}
	if in && held != len(fps) || !in && held != 0 {
		t.Errorf("partition %d of %d of the filter holds %d of the %d claims made before the repartition, want %v", p, n, held, len(fps), map[bool]string{true: "all", false: "none"}[in])
	}
}

// urlOf returns the URL of the request a message body holds.
func urlOf(t *testing.T, body []byte) string {
	t.Helper()
	var r engine.Request
	if err := r.UnmarshalBinary(body); err != nil {
		t.Fatal(err)
	}
	return r.URL
}

// receiveAll receives n deliveries of q.
func receiveAll(ctx context.Context, b broker.Broker, q string, n int) ([]broker.Delivery, error) {
	var out []broker.Delivery
	for len(out) < n {
		ds, err := b.Receive(ctx, q, n-len(out))
		if err != nil {
			return out, err
		}
		out = append(out, ds...)
	}
	return out, nil
}

// TestRepartitionSameCount: a repartition to the crawl's own count moves
// nothing (it moved every request out and back, "from 3 to 3"): the
// queued requests stay where they are, none published again (each
// partition's message id counter unchanged).
func TestRepartitionSameCount(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const n = 3
	cfg := deployment.Config{Broker: "redis", Filter: "set", RedisURL: integration.Redis(t), Partitions: n}
	name := integration.Name(t)
	d, err := deployment.Open(ctx, cfg, engine.Config{Name: name, Partitions: n})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	cr, err := d.Crawler(engine.Config{Name: name, Partitions: n})
	if err != nil {
		t.Fatal(err)
	}
	if err := cr.Seed(ctx); err != nil { // stores the crawl's settings: 3 partitions
		t.Fatal(err)
	}
	q := engine.RequestsQueue(name)
	var msgs []broker.Message
	for i := range 30 {
		r := engine.Request{URL: fmt.Sprintf("http://h%d.example/%d", i%6, i)}
		b, err := r.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, broker.Message{Body: b, Key: fmt.Sprintf("h%d.example", i%6)})
	}
	if err := d.Broker.Publish(ctx, q, msgs...); err != nil {
		t.Fatal(err)
	}
	client := integration.RedisClient(t)
	seqs := func() []string {
		var out []string
		for p := range n {
			out = append(out, client.Get(ctx, redislayout.PartitionQueueKeys(q, p, n).Seq).Val())
		}
		return out
	}
	before := seqs()
	m, err := d.Repartition(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Unchanged || m.Ready != 0 || m.Dead != 0 || m.From != n || m.To != n {
		t.Errorf("Repartition to the crawl's own %d: %+v, want nothing moved, Unchanged", n, m)
	}
	if after := seqs(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("the partitions' message id counters went from %v to %v: requests were published again", before, after)
	}
	if c, err := d.Broker.Counts(ctx, q); err != nil || c.Ready != int64(len(msgs)) {
		t.Errorf("queued after: %+v, %v; want the %d requests", c, err, len(msgs))
	}

	// A request on its way, as a run to 3 cut short after it stored 3
	// leaves one: run again with 3, it finishes the move.
	one, err := redisbroker.New(ctx, redisbroker.Config{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	moving, _ := redislayout.RepartitionQueues(q)
	if err := one.Publish(ctx, moving, msgs[0]); err != nil {
		t.Fatal(err)
	}
	if m, err = d.Repartition(ctx, n); err != nil || m.Unchanged || m.Ready != len(msgs)+1 {
		t.Errorf("Repartition to 3 with a request on its way: %+v, %v; want all %d moved", m, err, len(msgs)+1)
	}
	if c, err := d.Broker.Counts(ctx, q); err != nil || c.Ready != int64(len(msgs)+1) {
		t.Errorf("queued after the move finished: %+v, %v; want %d", c, err, len(msgs)+1)
	}
}

// TestPurgeAfterCutShortRepartition: what a repartition cut short leaves
// on its way, requests and dead letters in the one-partition queues
// NAME:requests~repartition and ~repartition-dead, is gone after a purge
// (trawl purge: PurgeAll), on NATS and RabbitMQ (Redis:
// TestRedisPurgeAfterCutShortRepartition in internal/integration/crawl),
// cut short before the new count was stored (1) and after (2). They
// stayed: a purge purged the crawl's own queues only, and a repartition
// of a new crawl of that name moved the old crawl's requests into it.
func TestPurgeAfterCutShortRepartition(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  func(t *testing.T) deployment.Config
	}{
		{"nats", func(t *testing.T) deployment.Config {
			return deployment.Config{Broker: "nats", NATSURL: integration.NATS(t), Filter: "set", RedisURL: integration.Redis(t)}
		}},
		{"rabbitmq", func(t *testing.T) deployment.Config {
			return deployment.Config{Broker: "rabbitmq", AMQPURL: integration.RabbitMQ(t), Filter: "set", RedisURL: integration.Redis(t)}
		}},
	} {
		for _, stored := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/%d", c.name, stored), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
				defer cancel()
				cfg := c.cfg(t)
				name := integration.Name(t)
				d, err := deployment.Open(ctx, cfg, engine.Config{Name: name})
				if err != nil {
					t.Fatal(err)
				}
				defer d.Close()
				cr, err := d.Crawler(engine.Config{Name: name})
				if err != nil {
					t.Fatal(err)
				}
				if err := cr.Seed(ctx); err != nil { // one partition
					t.Fatal(err)
				}
				// A repartition cut short: requests on their way, and a
				// dead letter, in queues of one partition.
				moving, movingDead := redislayout.RepartitionQueues(engine.RequestsQueue(name))
				var msgs []broker.Message
				for i := range 3 {
					r := engine.Request{URL: fmt.Sprintf("http://h%d.example/", i)}
					b, err := r.MarshalBinary()
					if err != nil {
						t.Fatal(err)
					}
					msgs = append(msgs, broker.Message{Body: b})
				}
				if err := d.Broker.Publish(ctx, moving, msgs...); err != nil {
					t.Fatal(err)
				}
				if err := d.Broker.Publish(ctx, movingDead, broker.Message{Body: []byte(`{"reason":"gone","body":"eA=="}`)}); err != nil {
					t.Fatal(err)
				}
				if stored != 1 { // cut short after it stored the new count
					if err := engine.SetPartitions(ctx, d.Metadata, name, stored); err != nil {
						t.Fatal(err)
					}
					d.Close()
					if d, err = deployment.Open(ctx, cfg, engine.Config{Name: name}); err != nil {
						t.Fatal(err)
					}
					defer d.Close()
					if p, ok := d.Broker.(broker.Partitioned); !ok || p.Partitions() != stored {
						t.Fatalf("the deployment opened after the count was stored is not of %d partitions", stored)
					}
				}
				if err := d.PurgeAll(ctx, false); err != nil {
					t.Fatal(err)
				}
				checkTransitGone(ctx, t, cfg, name)
			})
		}
	}
}
