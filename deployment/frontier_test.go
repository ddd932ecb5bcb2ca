package deployment_test

import (
	"context"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/deployment"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/frontier"
	"github.com/trawlhq/trawl/frontier/frontiertest"
	"github.com/trawlhq/trawl/frontier/redisfrontier"
	"github.com/trawlhq/trawl/internal/integration"
)

func TestMain(m *testing.M) { integration.Main(m) }

// frontierSuite runs the frontier suite on the frontier deployment.Open
// makes of cfg, with the deployment's own broker and filter, composed
// again through the suite's faults (cfg names no memory broker: that one
// is frontier.Memory, see TestFrontierMemory).
func frontierSuite(t *testing.T, cfg func(t *testing.T) deployment.Config) {
	t.Parallel()
	frontiertest.Run(t, frontiertest.Harness{Faulty: true, SamePageRaces: true,
		New: func(t *testing.T, crawl string, faults *frontiertest.Faults) frontier.Frontier {
			d := openFrontier(t, cfg(t), crawl)
			if _, ok := d.Frontier.(*frontier.Composed); !ok {
				t.Fatalf("deployment.Open made a %T, want a *frontier.Composed", d.Frontier)
			}
			return frontier.Compose(faults.Broker(d.Broker), faults.Filter(d.Filter), frontier.ComposeConfig{ClaimWait: 2 * time.Second})
		}})
}

// openFrontier opens the deployment cfg for crawl, closed when t ends.
func openFrontier(t *testing.T, cfg deployment.Config, crawl string) *deployment.Deployment {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	d, err := deployment.Open(ctx, cfg, engine.Config{Name: crawl})
	if err != nil {
		t.Fatalf("deployment.Open: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return d
}

// The in-memory deployment's frontier claims and publishes under one
// lock: the suite holds it to publishing a page's links once even when
// workers expand the page at the same moment.
func TestFrontierMemory(t *testing.T) {
	frontiertest.Run(t, frontiertest.Harness{Faulty: true,
		New: func(t *testing.T, crawl string, faults *frontiertest.Faults) frontier.Frontier {
			d := openFrontier(t, deployment.Config{Broker: "memory"}, crawl)
			if _, ok := d.Frontier.(*frontier.Memory); !ok {
				t.Fatalf("deployment.Open made a %T, want a *frontier.Memory", d.Frontier)
			}
			return frontier.NewMemory(faults.Broker(d.Broker), faults.Filter(d.Filter).(frontier.CheckingFilter))
		}})
}

// The embedded default: an embedded NATS server and a local filter, in a
// data directory of its own.
func TestFrontierEmbedded(t *testing.T) {
	frontierSuite(t, func(t *testing.T) deployment.Config { return deployment.Config{Dir: t.TempDir()} })
}

// NATS with the Redis set filter, on real servers.
func TestFrontierNATSRedis(t *testing.T) {
	frontierSuite(t, func(t *testing.T) deployment.Config {
		return deployment.Config{Broker: "nats", NATSURL: integration.NATS(t), Filter: "set", RedisURL: integration.Redis(t)}
	})
}

// RabbitMQ with the Redis Bloom filter, on real servers.
func TestFrontierRabbitMQRedis(t *testing.T) {
	frontierSuite(t, func(t *testing.T) deployment.Config {
		return deployment.Config{Broker: "rabbitmq", AMQPURL: integration.RabbitMQ(t), Filter: "bloom", RedisURL: integration.Redis(t)}
	})
}

// Redis with --partitions 3: deployment.Open makes the Redis frontier on
// a broker of three partitions, and the suite holds on it.
func TestFrontierRedisPartitioned(t *testing.T) {
	frontiertest.Run(t, frontiertest.Harness{
		New: func(t *testing.T, crawl string, _ *frontiertest.Faults) frontier.Frontier {
			d := openFrontier(t, deployment.Config{Broker: "redis", RedisURL: integration.Redis(t), Filter: "set", Partitions: 3}, crawl)
			if _, ok := d.Frontier.(*redisfrontier.Frontier); !ok {
				t.Fatalf("deployment.Open made a %T, want a *redisfrontier.Frontier", d.Frontier)
			}
			if p, ok := d.Broker.(broker.Partitioned); !ok || p.Partitions() != 3 {
				t.Fatalf("deployment.Open made a broker of %v partitions, want 3", p)
			}
			return d.Frontier
		}})
}
