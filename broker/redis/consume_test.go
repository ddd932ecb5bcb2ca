package redis_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/brokertest"
	"github.com/trawlhq/trawl/broker/redis"
	"github.com/trawlhq/trawl/internal/integration"
)

// clientsInfo reads connected_clients and blocked_clients from INFO clients.
func clientsInfo(t *testing.T, c *goredis.Client) (connected, blocked int) {
	t.Helper()
	m := integration.RedisInfo(t, c, "clients")
	return int(m["connected_clients"]), int(m["blocked_clients"])
}

// waitBlocked polls until the server counts want blocked clients.
func waitBlocked(t *testing.T, c *goredis.Client, want int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		_, got := clientsInfo(t, c)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("blocked_clients = %d after %v, want %d", got, within, want)
		}
		time.Sleep(10 * time.Millisecond) // polling an observable condition
	}
}

// TestConsumerLeavesNoBlockedCommand: a consumer of an empty queue blocks
// on a connection of its own; Close (of the consumer, or of the broker)
// ends that wait at once, not after BlockTimeout, and the consumer's
// connection goes back to the pool.
func TestConsumerLeavesNoBlockedCommand(t *testing.T) {
	srv := integration.RedisContainer(t)
	client, watch := srv.Client(t), srv.Client(t)
	const block = 10 * time.Second // far longer than the waits below
	b := newBroker(t, client, redis.Config{BlockTimeout: block})
	q := integration.Name(t) + ":requests"

	for _, closeBroker := range []bool{false, true} {
		c, err := b.Consume(t.Context(), q, 4)
		if err != nil {
			t.Fatalf("Consume: %v", err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		next := make(chan error, 1)
		go func() {
			_, err := c.Next(ctx)
			next <- err
		}()
		waitBlocked(t, watch, 1, 5*time.Second)
		start := time.Now()
		if closeBroker {
			err = b.Close()
		} else {
			err = c.Close()
		}
		if err != nil {
			t.Fatalf("Close (broker %v): %v", closeBroker, err)
		}
		if el := time.Since(start); el > 2*time.Second {
			t.Errorf("Close (broker %v) took %v with a BLPOP of %v under way", closeBroker, el, block)
		}
		waitBlocked(t, watch, 0, 2*time.Second)
		select {
		case err := <-next:
			if !errors.Is(err, broker.ErrClosed) {
				t.Errorf("Next waiting at Close (broker %v): %v, want ErrClosed", closeBroker, err)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("Next still waiting 2s after Close (broker %v)", closeBroker)
		}
		cancel()
	}
}

// TestConsumerReadAheadLease: deliveries a consumer reads ahead while its
// worker is busy for longer than the lease keep their leases: another
// worker (whose Receive gives back expired leases) takes none of them, and
// each comes out of Next once, at attempt 1, and its Ack holds. A consumer
// that let read-ahead leases run out handed them to other workers and
// counted each expiry as a delivery (MaxDeliveries of them dead-letter a
// message never processed).
func TestConsumerReadAheadLease(t *testing.T) {
	client := integration.RedisClient(t)
	// Long enough that the consumer's renewals run in time on a loaded
	// machine; the read-ahead still waits three leases.
	const lease = 2 * time.Second
	a := newBroker(t, client, redis.Config{Lease: lease})
	other := newBroker(t, client, redis.Config{Lease: lease})
	ctx := t.Context()
	q := integration.Name(t) + ":requests"
	want := []string{"m0", "m1", "m2"}
	for _, body := range want {
		if err := a.Publish(ctx, q, broker.Message{Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := a.Consume(ctx, q, len(want))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	nctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	first, err := c.Next(nctx)
	cancel()
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	// The read-ahead is in: the queue has nothing ready.
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := a.Counts(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if n.Ready == 0 && n.InFlight == int64(len(want)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("counts %+v 5s after Next, want the other %d read ahead", n, len(want)-1)
		}
		time.Sleep(10 * time.Millisecond) // polling an observable condition
	}
	// The worker holds first for three leases, extending it; another
	// worker asks for work all along.
	e := first
	waiting := make(chan error, 1)
	go func() {
		rctx, cancel := context.WithTimeout(ctx, 3*lease)
		defer cancel()
		ds, err := other.Receive(rctx, q, 1)
		if err == nil {
			var got []string
			for _, d := range ds {
				got = append(got, fmt.Sprintf("%s/%d", d.Message().Body, d.Attempt()))
			}
			err = fmt.Errorf("received %q", got)
		}
		waiting <- err
	}()
	tick := time.NewTicker(lease / 4)
	defer tick.Stop()
	for end := time.Now().Add(3 * lease); time.Now().Before(end); <-tick.C {
		if err := e.Extend(ctx, lease); err != nil {
			t.Fatalf("Extend: %v", err)
		}
	}
	if err := <-waiting; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("another worker while the read-ahead waited three leases: %v, want nothing", err)
	}
	got := []broker.Delivery{first}
	for range len(want) - 1 {
		nctx, cancel := context.WithTimeout(ctx, time.Second)
		d, err := c.Next(nctx)
		cancel()
		if err != nil {
			t.Fatalf("Next after three leases: %v", err)
		}
		got = append(got, d)
	}
	for i, d := range got {
		if string(d.Message().Body) != want[i] || d.Attempt() != 1 {
			t.Errorf("Next %d: %s attempt %d, want %s attempt 1", i, d.Message().Body, d.Attempt(), want[i])
		}
		if err := d.Ack(ctx); err != nil {
			t.Errorf("Ack of %s, read ahead for three leases: %v", d.Message().Body, err)
		}
	}
	if n, err := a.Counts(ctx, q); err != nil || n != (broker.Counts{}) {
		t.Errorf("counts after the acks: %+v, %v; want none", n, err)
	}
}

// TestConsumersPreferTheirPartitions: two consumers of a queue of two
// partitions, each preferring one, draining a backlog in both at once:
// each takes its own partition's messages, and Prefer, called from other
// goroutines all along (with the same shares, nil and numbers out of
// range), races with nothing (run with -race); every message comes once.
func TestConsumersPreferTheirPartitions(t *testing.T) {
	c := integration.RedisClient(t)
	b := newBroker(t, c, redis.Config{Partitions: 2, Lease: time.Minute})
	q := integration.Name(t) + ":requests"
	keys := [2]string{brokertest.KeyIn(t, 0, 2), brokertest.KeyIn(t, 1, 2)}
	const each = 300
	var msgs []broker.Message
	for i := range each {
		for p, k := range keys {
			msgs = append(msgs, broker.Message{Body: fmt.Appendf(nil, "%d/%d", p, i), Key: k})
		}
	}
	if err := b.Publish(t.Context(), q, msgs...); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var (
		mu    sync.Mutex
		seen  = map[string]int{}
		taken [2][2]int // by consumer, by partition
		wg    sync.WaitGroup
	)
	stop := make(chan struct{})
	for w := range 2 {
		cons, err := b.Consume(ctx, q, 8)
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close()
		pp := cons.(broker.PartitionPreferrer)
		pp.Prefer([]int{w})
		wg.Go(func() { // Prefer from another goroutine, all along
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				pp.Prefer([]int{w, 7, -1})
				runtime.Gosched()
			}
		})
		wg.Go(func() {
			for {
				d, err := cons.Next(ctx)
				if err != nil {
					return
				}
				body := string(d.Message().Body)
				mu.Lock()
				seen[body]++
				taken[w][body[0]-'0']++
				done := len(seen) == len(msgs)
				mu.Unlock()
				if err := d.Ack(ctx); err != nil {
					t.Errorf("Ack: %v", err)
				}
				if done {
					cancel()
				}
			}
		})
	}
	<-ctx.Done()
	close(stop)
	wg.Wait()
	if len(seen) != len(msgs) {
		t.Fatalf("%d of %d messages delivered in a minute", len(seen), len(msgs))
	}
	for body, n := range seen {
		if n > 1 {
			t.Errorf("%s delivered %d times", body, n)
		}
	}
	t.Logf("taken by consumer and partition: %v", taken)
	for w := range 2 {
		if other := taken[w][1-w]; other > each/10 {
			t.Errorf("consumer %d, preferring partition %d, took %d of the other's %d messages (all taken: %v); want at most %d", w, w, other, each, taken, each/10)
		}
	}
}

// TestConsumerStealsForAWaitingNext: a consumer told to prefer partition 0
// while its Next already waits (the engine's share comes once the worker
// sees the others, with a Next pending) still takes what is published to
// partition 1 alone, after the second it waits before stealing. (Before,
// only a Next that began waiting after Prefer counted as waiting: this
// one waited until partition 0 got a message.)
func TestConsumerStealsForAWaitingNext(t *testing.T) {
	c := integration.RedisClient(t)
	b := newBroker(t, c, redis.Config{Partitions: 2, Lease: time.Minute})
	q := integration.Name(t) + ":requests"
	cons, err := b.Consume(t.Context(), q, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	got := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		close(started)
		d, err := cons.Next(ctx)
		if err == nil {
			err = d.Ack(ctx)
		}
		got <- err
	}()
	<-started
	cons.(broker.PartitionPreferrer).Prefer([]int{0})
	if err := b.Publish(t.Context(), q, broker.Message{Body: []byte("p1"), Key: brokertest.KeyIn(t, 1, 2)}); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("Next, preferring partition 0, with a message in partition 1 alone: %v", err)
	}
}

// TestConsumerLoopsWakeForWork: a consumer of 8 partitions that prefers
// one, whose Next waits for each message as a crawling worker's does,
// wakes the loops of the partitions it does not prefer only to steal, not
// at each change of its read-ahead: they woke at every page taken, every
// lease, every Next that began to wait (about 28 wake-ups a message, at
// 7 such loops), to find that they may not steal, and a worker of four
// paid the Go scheduler's wake-ups for it on every page.
func TestConsumerLoopsWakeForWork(t *testing.T) {
	c := integration.RedisClient(t)
	const parts, rounds = 8, 100
	b := newBroker(t, c, redis.Config{Partitions: parts, Lease: time.Minute})
	q := integration.Name(t) + ":requests"
	cons, err := b.Consume(t.Context(), q, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	cons.(broker.PartitionPreferrer).Prefer([]int{0})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	key := brokertest.KeyIn(t, 0, parts)
	took := make(chan error)
	go func() {
		for range rounds {
			d, err := cons.Next(ctx)
			if err == nil {
				err = d.Ack(ctx)
			}
			took <- err
		}
	}()
	for i := range rounds {
		if err := b.Publish(ctx, q, broker.Message{Body: fmt.Appendf(nil, "m%d", i), Key: key}); err != nil {
			t.Fatal(err)
		}
		if err := <-took; err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	wakes := redis.LoopWakes(cons)
	t.Logf("%d loop wake-ups for %d messages", wakes, rounds)
	if wakes >= rounds {
		t.Errorf("the consumer's loops woke %d times for %d messages of its own partition; want fewer than one a message", wakes, rounds)
	}
}
