package deployment

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/trawlhq/trawl/broker"
	natsbroker "github.com/trawlhq/trawl/broker/nats"
	"github.com/trawlhq/trawl/broker/rabbitmq"
	redisbroker "github.com/trawlhq/trawl/broker/redis"
	"github.com/trawlhq/trawl/dedup/local"
)

// Default URLs of the brokers.
const (
	defaultAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"
	defaultNATSURL = "nats://127.0.0.1:4222"
)

// openEmbedded starts the default single-node setup: an embedded NATS
// server with JetStream file storage and the local Bloom filter, both in
// the data directory, so that running the same command again resumes. The
// counters are kept in the data directory too (stats.json). With
// advertise (a crawl), the server also listens on a loopback port with a
// token, recorded in the data directory, so that stats, seed and
// deadletter reach the running crawl. With empty (Flush, purge) the
// store is not checked: it is about to be emptied.
func (d *Deployment) openEmbedded(ctx context.Context, advertise, empty bool) error {
	dir := d.dir()
	e, err := natsbroker.StartEmbedded(ctx, natsbroker.EmbeddedConfig{Dir: filepath.Join(dir, "nats"), Logger: d.crawl.Logger, Advertise: advertise})
	if err != nil {
		return fmt.Errorf("embedded broker in %s: %w", dir, err)
	}
	d.closes = append(d.closes, func() error { e.Shutdown(); return nil })
	// A store damaged since it was last closed is an error, never an
	// empty frontier ("already crawled"); Flush and purge empty it.
	if err := e.Verify(ctx); err != nil {
		if !empty {
			return fmt.Errorf("embedded broker in %s: %w", dir, err)
		}
		e.Reset()
	}
	if advertise {
		// Commands reaching this crawl open its queues as it does: a
		// broker's Lease sets the queue's AckWait.
		if err := writeBrokerSettings(dir, brokerSettings{Order: d.cfg.Order.String(), Lease: d.lease(), MaxDeliveries: MaxDeliveries(d.crawl)}); err != nil {
			return err
		}
	}
	nb, err := natsbroker.New(ctx, natsbroker.Config{Conn: e.Conn(), Order: d.cfg.Order, Lease: d.lease(), MaxDeliveries: MaxDeliveries(d.crawl), Logger: d.crawl.Logger})
	if err != nil {
		return err
	}
	d.Broker = nb
	d.closes = append(d.closes, nb.Close)
	st := &fileStats{path: filepath.Join(dir, statsFile)}
	d.Stats = st
	d.purges = append(d.purges, st.Purge)
	if d.cfg.Filter != "" && d.cfg.Filter != "local" {
		return d.sharedFilter(ctx)
	}
	return d.localFilter()
}

// localFilter opens the local filter kept in the data directory.
func (d *Deployment) localFilter() error {
	dir := d.dir()
	f, err := local.New(local.Config{FPRate: d.cfg.FilterFPRate, Path: filepath.Join(dir, "dupefilter.bloom"), Logger: d.crawl.Logger})
	if err != nil {
		return fmt.Errorf("duplicate filter in %s: %w", dir, err)
	}
	d.Filter = f
	d.closes = append(d.closes, f.Close)
	return nil
}

// openNATS connects to NATSURL.
func (d *Deployment) openNATS(ctx context.Context) error {
	nc, err := natsbroker.Connect(ctx, urlOr(d.cfg.NATSURL, defaultNATSURL), natsbroker.ConnectConfig{Name: "trawl " + d.crawl.Name, TLS: d.tlsClone(), Logger: d.crawl.Logger})
	if err != nil {
		return err // it names the server, password redacted
	}
	d.closes = append(d.closes, func() error { nc.Close(); return nil })
	cfg := natsbroker.Config{
		Conn: nc, Domain: d.cfg.NATSDomain, Order: d.cfg.Order, Lease: d.lease(), MaxDeliveries: MaxDeliveries(d.crawl), Replicas: d.cfg.NATSReplicas,
		Logger: d.crawl.Logger,
	}
	// The crawl's settings are in the broker's bucket.
	err = openPartitioned(ctx, d, nil, func(ctx context.Context, n int) (*natsbroker.Broker, error) {
		cfg := cfg
		cfg.Partitions = n
		return natsbroker.New(ctx, cfg)
	})
	if err != nil {
		return err
	}
	return d.sharedFilter(ctx)
}

// openRabbitMQ connects to AMQPURL.
func (d *Deployment) openRabbitMQ(ctx context.Context) error {
	qt, err := d.queueType()
	if err != nil {
		return err
	}
	if idle := d.crawl.IdleTimeout; d.cfg.AMQPManagementURL == "" && idle > 0 && idle < rabbitmq.MinIdleTimeout {
		d.log.Warn("--idle-timeout is shorter than RabbitMQ workers need to see each other's pages; the crawl may be found done too early",
			"idle_timeout", idle, "min", rabbitmq.MinIdleTimeout)
	}
	// The filter first: its Redis keeps the crawl's settings, and a crawl
	// that has them gets a broker of its partition count.
	if err := d.sharedFilter(ctx); err != nil {
		return err
	}
	var meta broker.Metadata
	if d.redis != nil {
		meta = redisbroker.NewMeta(d.redis)
	}
	cfg := rabbitmq.Config{
		URL: urlOr(d.cfg.AMQPURL, defaultAMQPURL), ManagementURL: d.cfg.AMQPManagementURL, TLS: d.tlsClone(), Name: "trawl " + d.crawl.Name, Order: d.cfg.Order, Lease: d.lease(),
		QueueType: qt, NonDurable: d.cfg.AMQPNonDurable, Recreate: d.cfg.AMQPRecreate, MaxDeliveries: MaxDeliveries(d.crawl), Logger: d.crawl.Logger,
	}
	return openPartitioned(ctx, d, meta, func(ctx context.Context, n int) (*rabbitmq.Broker, error) {
		cfg := cfg
		cfg.Partitions = n
		return rabbitmq.New(ctx, cfg)
	})
}

// sharedFilter opens the duplicate filter of a deployment whose broker is
// not Redis: set or bloom in Redis (RedisURL; the default is set), which
// also shares stats and per-host limits, or local, for one worker only,
// kept in the data directory.
func (d *Deployment) sharedFilter(ctx context.Context) error {
	if d.cfg.Filter == "local" {
		return d.localFilter()
	}
	client, err := d.redisClient(ctx)
	if err != nil {
		if d.cfg.Filter == "" { // not asked for: say why Redis, and how to do without
			return fmt.Errorf("the duplicate filter of --broker=%s is in Redis (--dedup=set, the default; give --redis-url, or --dedup=local for a single worker): %w", d.cfg.Broker, err)
		}
		return fmt.Errorf("--dedup=%s keeps the filter in Redis (--redis-url): %w", d.cfg.Filter, err)
	}
	d.closes = append(d.closes, client.Close)
	return d.redisExtras(ctx, client, false)
}
