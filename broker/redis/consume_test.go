package redis_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/redis"
	"github.com/trawlhq/trawl/internal/integration"
)

// clientsInfo reads connected_clients and blocked_clients from INFO clients.
func clientsInfo(t *testing.T, c *goredis.Client) (connected, blocked int) {
	t.Helper()
	info, err := c.Info(t.Context(), "clients").Result()
	if err != nil {
		t.Fatalf("INFO clients: %v", err)
	}
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		n, _ := strconv.Atoi(v)
		switch k {
		case "connected_clients":
			connected = n
		case "blocked_clients":
			blocked = n
		}
	}
	return connected, blocked
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
	opt, err := goredis.ParseURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	client := goredis.NewClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	watch := goredis.NewClient(opt)
	t.Cleanup(func() { _ = watch.Close() })
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
