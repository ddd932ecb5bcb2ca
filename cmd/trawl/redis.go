package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/broker"
	redisbroker "github.com/trawlhq/trawl/broker/redis"
	"github.com/trawlhq/trawl/dedup"
	dedupredis "github.com/trawlhq/trawl/dedup/redis"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/redislayout"
)

// redisConnMaxIdle closes the pooled connections a worker no longer needs.
// go-redis has no reaper: it closes a connection idle for longer than
// ConnMaxIdleTime only when it hands it out, and by default it hands out
// the most recently used one, so connections a busy moment (or the
// start-up) opened stay open for good. A FIFO pool hands out the one idle
// longest instead: while a worker is busy every connection is used well
// within this; once it is idle, its commands (the feeder's look at the
// start URLs, every second) go through the oldest connection each time,
// and every connection but one is found idle for longer than this and
// closed. An idle worker so holds two connections: that one and its
// consumer's. A --redis-url that sets conn_max_idle_time keeps its own.
const redisConnMaxIdle = 1500 * time.Millisecond

// redisClient connects to --redis-url and checks that the server answers.
func (o *options) redisClient(ctx context.Context) (goredis.UniversalClient, error) {
	var (
		c    goredis.UniversalClient
		addr string
	)
	if strings.Contains(o.redisURL, "addr=") {
		// redis://host1:port?addr=host2:port&addr=host3:port: a Cluster.
		opt, err := goredis.ParseClusterURL(o.redisURL)
		if err != nil {
			return nil, usageError("--redis-url: %v", err)
		}
		opt.PoolSize = max(opt.PoolSize, o.concurrency+8)
		if opt.ConnMaxIdleTime == 0 {
			opt.PoolFIFO, opt.ConnMaxIdleTime = true, redisConnMaxIdle
		}
		o.tls.apply(opt.TLSConfig) // rediss://
		c, addr = goredis.NewClusterClient(opt), strings.Join(opt.Addrs, ",")
	} else {
		opt, err := goredis.ParseURL(o.redisURL)
		if err != nil {
			return nil, usageError("--redis-url: %v", err)
		}
		opt.PoolSize = max(opt.PoolSize, o.concurrency+8)
		if opt.ConnMaxIdleTime == 0 {
			opt.PoolFIFO, opt.ConnMaxIdleTime = true, redisConnMaxIdle
			// Pipelines on the same pool, not on a pool of their own
			// whose connections an idle worker never takes again.
			opt.PipelinePoolSize = -1
		}
		o.tls.apply(opt.TLSConfig) // rediss://
		c, addr = goredis.NewClient(opt), opt.Addr
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis at %s: %s", addr, redisReason(err))
	}
	return c, nil
}

// redisReason words a connection failure for one line.
func redisReason(err error) string {
	s := err.Error()
	switch {
	case strings.Contains(s, "WRONGPASS"), strings.Contains(s, "NOAUTH"), strings.Contains(s, "invalid password"):
		return "authentication failed (check the user and password in --redis-url): " + s
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer within 5s"
	}
	return "cannot connect: " + s
}

// openRedis opens the Redis broker, filter, start URLs, items and stats.
func (o *options) openRedis(ctx context.Context, b *backends, order broker.Order) error {
	client, err := o.redisClient(ctx)
	if err != nil {
		return err
	}
	b.closes = append(b.closes, client.Close)
	rb, err := redisbroker.New(ctx, redisbroker.Config{Client: client, Order: order, Lease: o.lease, MaxDeliveries: o.maxDeliveries(), Logger: o.log})
	if err != nil {
		return err
	}
	b.broker, b.shared = rb, true
	b.keys = redislayout.Of
	b.closes = append(b.closes, rb.Close)
	return o.redisExtras(ctx, b, client, true)
}

// redisExtras opens what a deployment keeps in Redis besides the broker:
// the duplicate filter, shared stats, per-host limits, the item list and,
// with starts, the start URLs.
func (o *options) redisExtras(ctx context.Context, b *backends, client goredis.UniversalClient, starts bool) error {
	if starts {
		s := redisbroker.NewStartURLs(client, o.name, o.startSet)
		b.starts = s
		b.purges = append(b.purges, s.Purge)
	}
	b.redis = client
	items := redisbroker.NewItems(client, o.name)
	stats := redisbroker.NewStats(client, o.name)
	b.items, b.stats = items, stats
	b.purges = append(b.purges, items.Purge, stats.Purge)
	limit, err := redisbroker.NewHostLimiter(redisbroker.LimiterConfig{
		Client: client, Crawl: o.name, PerHost: o.perHost, Delay: o.delay, Logger: o.log,
		AutoThrottle: o.autoThrottle(),
		// The slots of a worker that died come back within its lease.
		SlotTTL: max(o.lease, time.Second),
	})
	if err != nil {
		return err
	}
	b.limit = limit
	b.closes = append(b.closes, limit.Close)
	f, err := o.redisFilter(ctx, client)
	if err != nil {
		return err
	}
	b.filter = f
	b.closes = append(b.closes, f.Close)
	return nil
}

// redisBroker reports whether the broker is Redis's, whose queue
// NAME:items is the item list {NAME}:items.
func (b *backends) redisBroker() bool {
	_, ok := b.broker.(*redisbroker.Broker)
	return ok && b.items != nil
}

// checkStarts fails if the Redis start URLs' key holds the other type
// than --start-urls-set says (a scrapy-redis user's SADD without it): a
// worker would find no start URL in it, for good.
func (o *options) checkStarts(ctx context.Context, b *backends) error {
	s, ok := b.starts.(*redisbroker.StartURLs)
	if !ok {
		return nil
	}
	return startsHint(s.Check(ctx), o.startSet)
}

// startsHint adds to an error of redisbroker.ErrStartsType the flag that
// chooses the start URLs' type.
func startsHint(err error, set bool) error {
	var te *redisbroker.StartsTypeError
	if !errors.As(err, &te) || (te.Have != "list" && te.Have != "set") {
		return err
	}
	if set {
		return fmt.Errorf("%w; without --start-urls-set, trawl reads a list", err)
	}
	return fmt.Errorf("%w; give every command of the crawl --start-urls-set to read a set", err)
}

// redisBloomFPRate is the false-positive rate of --dedup=bloom when
// --bloom-fp-rate is not given.
const redisBloomFPRate = 0.001

// redisFilter opens the duplicate filter --dedup names for a Redis
// deployment: the set (default) or the Bloom filter.
func (o *options) redisFilter(ctx context.Context, client goredis.UniversalClient) (dedup.Filter, error) {
	key := redislayout.FilterName(o.name)
	switch o.dedup {
	case "", "set":
		return dedupredis.NewSet(ctx, dedupredis.SetConfig{Client: client, Key: key, Capacity: o.bloomCapacity, Logger: o.log})
	case "bloom":
		return dedupredis.NewBloom(ctx, dedupredis.BloomConfig{Client: client, Key: key, Capacity: o.bloomCapacity, FPRate: cmp.Or(o.bloomFPRate, redisBloomFPRate), Logger: o.log})
	}
	return nil, usageError("--dedup=%s cannot be shared by the workers of a Redis crawl; use set or bloom", o.dedup)
}

// scrapyStarts counts the entries of NAME:start_urls, the key scrapy-redis
// feeds its spiders through, which trawl does not read: its start URLs
// are at {NAME}:start_urls, hash-tagged so that a crawl lives in one
// Redis Cluster slot.
func scrapyStarts(ctx context.Context, client goredis.UniversalClient, name string) (int64, error) {
	key := engine.StartQueue(name)
	t, err := client.Type(ctx, key).Result()
	if err != nil {
		return 0, err
	}
	switch t {
	case "list":
		return client.LLen(ctx, key).Result()
	case "set":
		return client.SCard(ctx, key).Result()
	case "zset":
		return client.ZCard(ctx, key).Result()
	}
	return 0, nil
}

// scrapyWarning is the warning about entries in NAME:start_urls.
func scrapyWarning(name string, n int64) string {
	entries := "entries"
	if n == 1 {
		entries = "entry"
	}
	return fmt.Sprintf("trawl: warning: %s holds %d %s that trawl never reads; trawl's start URLs are at %s (hash-tagged for Redis Cluster): redis-cli rpush '%s' URL, or trawl seed",
		engine.StartQueue(name), n, entries, redislayout.StartKeys(name).List, redislayout.StartKeys(name).List)
}

// watchScrapyStarts warns once, on w, when NAME:start_urls holds entries,
// looking at start, then half an interval later and every interval after
// that, until ctx ends. Its looks so fall between the worker's presence
// announcements, which also come every 5s from the start: looks at the
// same moment would each take a connection, and an idle worker holds two
// (see redisConnMaxIdle).
func watchScrapyStarts(ctx context.Context, client goredis.UniversalClient, name string, w io.Writer, every time.Duration) {
	t := time.NewTimer(every / 2)
	defer t.Stop()
	for {
		if n, err := scrapyStarts(ctx, client, name); err == nil && n > 0 {
			fmt.Fprintln(w, scrapyWarning(name, n))
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			t.Reset(every)
		}
	}
}
