package deployment_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/trawlhq/trawl/deployment"
	"github.com/trawlhq/trawl/engine"
)

// TestMaxDeliveries: the brokers' delivery limit leaves room for every
// retry the engine makes plus a crash, and never falls below 5.
func TestMaxDeliveries(t *testing.T) {
	for _, c := range []struct{ retries, want int }{
		{0, 5},   // the engine's default, 3 retries
		{-1, 5},  // no retries
		{3, 5},   // 4 deliveries by failures, 1 for a crash
		{10, 12}, // 11 by failures, 1 for a crash
	} {
		if got := deployment.MaxDeliveries(engine.Config{MaxRetries: c.retries}); got != c.want {
			t.Errorf("MaxDeliveries(MaxRetries %d) = %d, want %d", c.retries, got, c.want)
		}
	}
}

// TestOpenConfigErrors: a configuration that cannot be opened is
// ErrConfig, before any server is dialled, and closes nothing twice.
func TestOpenConfigErrors(t *testing.T) {
	for _, cfg := range []deployment.Config{
		{Broker: "kafka"},
		{Broker: "memory", Filter: "bloom"},
		{Broker: "memory", Admin: "stats"},
		{Broker: "redis", RedisURL: "redis://127.0.0.1:x/0"},
	} {
		d, err := deployment.Open(context.Background(), cfg, engine.Config{})
		if !errors.Is(err, deployment.ErrConfig) {
			t.Errorf("Open(%+v) = %v; want ErrConfig", cfg, err)
		}
		if d != nil {
			t.Errorf("Open(%+v) returned a deployment with its error", cfg)
		}
	}
}

// TestOpenMemory: the in-memory deployment is one process's: not shared,
// no counters or limiter of its own, and Configure leaves what a crawl
// sets itself.
func TestOpenMemory(t *testing.T) {
	d, err := deployment.Open(context.Background(), deployment.Config{Broker: "memory"}, engine.Config{Name: "m"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Shared || d.Broker == nil || d.Filter == nil || d.Stats != nil || d.Limiter != nil || d.Starts != nil {
		t.Errorf("memory deployment: %+v; want a broker and filter of its own only", d)
	}
	if d.QueueName("m:requests") != "m:requests" {
		t.Errorf("QueueName renamed a memory queue: %q", d.QueueName("m:requests"))
	}
}

// TestOpenFilterRedisUnreachable: a shared broker's filter is in Redis by
// default; when that Redis cannot be reached, the error says so, how to
// name it and how to do without, not "--dedup=set" that the user never
// gave (RabbitMQ opens the filter first: no server needed).
func TestOpenFilterRedisUnreachable(t *testing.T) {
	for _, c := range []struct {
		filter string
		want   []string
	}{
		{"", []string{"duplicate filter of --broker=rabbitmq is in Redis", "the default", "--redis-url", "--dedup=local", "127.0.0.1:1"}},
		{"bloom", []string{"--dedup=bloom keeps the filter in Redis (--redis-url)", "127.0.0.1:1"}},
	} {
		cfg := deployment.Config{Broker: "rabbitmq", Filter: c.filter, RedisURL: "redis://127.0.0.1:1/0"}
		_, err := deployment.Open(t.Context(), cfg, engine.Config{Name: "f"})
		if err == nil {
			t.Fatalf("Open(%+v) with no Redis: no error", cfg)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Open(%+v) with no Redis: %q, want it to say %q", cfg, err, w)
			}
		}
	}
}
