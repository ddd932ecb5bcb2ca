package main

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/trawlhq/trawl/broker"
	natsbroker "github.com/trawlhq/trawl/broker/nats"
	"github.com/trawlhq/trawl/broker/rabbitmq"
	"github.com/trawlhq/trawl/dedup/local"
)

// dataDir is --data-dir, by default ./.trawl/NAME.
func (o *options) dataDir() string {
	if o.dataDirFlag != "" {
		return o.dataDirFlag
	}
	return filepath.Join(".trawl", o.name)
}

// openEmbedded starts the default single-node setup: an embedded NATS
// server with JetStream file storage and the local Bloom filter, both in
// the data directory, so that running the same command again resumes. The
// counters are kept in the data directory too (stats.json). With
// advertise (a crawl), the server also listens on a loopback port with a
// token, recorded in the data directory, so that stats, seed and
// deadletter reach the running crawl. With empty (--flush, purge) the
// store is not checked: it is about to be emptied.
func (o *options) openEmbedded(ctx context.Context, b *backends, order broker.Order, advertise, empty bool) error {
	dir := o.dataDir()
	e, err := natsbroker.StartEmbedded(ctx, natsbroker.EmbeddedConfig{Dir: filepath.Join(dir, "nats"), Logger: o.log, Advertise: advertise})
	if err != nil {
		return fmt.Errorf("embedded broker in %s: %w", dir, err)
	}
	b.closes = append(b.closes, func() error { e.Shutdown(); return nil })
	// A store damaged since it was last closed is an error, never an
	// empty frontier ("already crawled"); --flush and purge empty it.
	if err := e.Verify(ctx); err != nil {
		if !empty {
			return fmt.Errorf("embedded broker in %s: %w", dir, err)
		}
		e.Reset()
	}
	if advertise {
		// Commands reaching this crawl open its queues as it does: a
		// broker's Lease sets the queue's AckWait.
		if err := writeBrokerSettings(dir, brokerSettings{Order: o.order, Lease: o.lease, MaxDeliveries: o.maxDeliveries()}); err != nil {
			return err
		}
	}
	nb, err := natsbroker.New(ctx, natsbroker.Config{Conn: e.Conn(), Order: order, Lease: o.lease, MaxDeliveries: o.maxDeliveries(), Logger: o.log})
	if err != nil {
		return err
	}
	b.broker = nb
	b.closes = append(b.closes, nb.Close)
	st := &fileStats{path: filepath.Join(dir, statsFile)}
	b.stats = st
	b.purges = append(b.purges, st.Purge)
	if o.dedup != "" && o.dedup != "local" {
		return o.sharedFilter(ctx, b)
	}
	f, err := local.New(local.Config{FPRate: o.bloomFPRate, Path: filepath.Join(dir, "dupefilter.bloom"), Logger: o.log})
	if err != nil {
		return fmt.Errorf("duplicate filter in %s: %w", dir, err)
	}
	b.filter = f
	b.closes = append(b.closes, f.Close)
	return nil
}

// openNATS connects to --nats-url.
func (o *options) openNATS(ctx context.Context, b *backends, order broker.Order) error {
	nc, err := natsbroker.Connect(ctx, o.natsURL, natsbroker.ConnectConfig{Name: "trawl " + o.name, TLS: o.tls.clone(), Logger: o.log})
	if err != nil {
		return err // it names the server, password redacted
	}
	b.closes = append(b.closes, func() error { nc.Close(); return nil })
	nb, err := natsbroker.New(ctx, natsbroker.Config{
		Conn: nc, Domain: o.natsDomain, Order: order, Lease: o.lease, MaxDeliveries: o.maxDeliveries(), Replicas: o.natsReplicas, Logger: o.log,
	})
	if err != nil {
		return err
	}
	b.broker, b.shared = nb, true
	b.closes = append(b.closes, nb.Close)
	return o.sharedFilter(ctx, b)
}

// openRabbitMQ connects to --amqp-url.
func (o *options) openRabbitMQ(ctx context.Context, b *backends, order broker.Order) error {
	if o.amqpManagementURL == "" && o.idleTimeout > 0 && o.idleTimeout < rabbitmq.MinIdleTimeout {
		o.log.Warn("--idle-timeout is shorter than RabbitMQ workers need to see each other's pages; the crawl may be found done too early",
			"idle_timeout", o.idleTimeout, "min", rabbitmq.MinIdleTimeout)
	}
	rb, err := rabbitmq.New(ctx, rabbitmq.Config{
		URL: o.amqpURL, ManagementURL: o.amqpManagementURL, TLS: o.tls.clone(), Name: "trawl " + o.name, Order: order, Lease: o.lease,
		QueueType: o.queueType(), NonDurable: !o.amqpDurable, Recreate: o.amqpRecreate, MaxDeliveries: o.maxDeliveries(), Logger: o.log,
	})
	if err != nil {
		return err
	}
	b.broker, b.shared = rb, true
	b.closes = append(b.closes, rb.Close)
	return o.sharedFilter(ctx, b)
}

// queueType is --amqp-queue-type, which setup checked.
func (o *options) queueType() rabbitmq.QueueType {
	qt, _ := rabbitmq.ParseQueueType(o.amqpQueueType)
	return qt
}

// sharedFilter opens the duplicate filter of a deployment whose broker is
// not Redis: set or bloom in Redis (--redis-url; the default is set), which
// also shares stats and per-host limits, or local, for one worker only,
// kept in the data directory.
func (o *options) sharedFilter(ctx context.Context, b *backends) error {
	if o.dedup == "local" {
		f, err := local.New(local.Config{FPRate: o.bloomFPRate, Path: filepath.Join(o.dataDir(), "dupefilter.bloom"), Logger: o.log})
		if err != nil {
			return err
		}
		b.filter = f
		b.closes = append(b.closes, f.Close)
		return nil
	}
	client, err := o.redisClient(ctx)
	if err != nil {
		return fmt.Errorf("--dedup=%s keeps the filter in Redis: %w", o.dedupOrSet(), err)
	}
	b.closes = append(b.closes, client.Close)
	return o.redisExtras(ctx, b, client, false)
}

func (o *options) dedupOrSet() string {
	if o.dedup == "" {
		return "set"
	}
	return o.dedup
}
