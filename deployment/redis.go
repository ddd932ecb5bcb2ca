package deployment

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/broker"
	redisbroker "github.com/trawlhq/trawl/broker/redis"
	"github.com/trawlhq/trawl/dedup"
	dedupredis "github.com/trawlhq/trawl/dedup/redis"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/frontier/redisfrontier"
	"github.com/trawlhq/trawl/internal/redislayout"
)

// redisConnMaxIdle closes the pooled connections a worker no longer needs.
// go-redis has no reaper: it closes a connection idle for longer than
// ConnMaxIdleTime only when it hands it out, and by default it hands out
// the most recently used one, so connections a busy moment (or the
// start-up) opened stay open for good. A FIFO pool hands out the one idle
// longest instead: while a worker is busy every connection is used well
// within this; once it is idle, its commands (the feeder's look at the
// start URLs, about every 1.2 s) go through the oldest connection each
// time, and every connection but one is found idle for longer than this
// and closed. An idle worker so holds two connections: that one and its
// consumer's. Two of its commands at once open a second pooled one, which
// goes within 2-6 s (its periodic jobs are jittered so that they meet by
// chance only; see engine's presenceJitter), and a worker starved past
// 0.3 s finds its one connection idle too long and dials again: now and
// then, under load. A --redis-url that sets conn_max_idle_time keeps its
// own.
const redisConnMaxIdle = 1500 * time.Millisecond

// redisClientName names a worker's pooled connections in CLIENT LIST
// (its consumers name theirs broker/redis.ConsumerClientName). It rides
// on the HELLO of each new connection, which go-redis (v9.23) follows
// with a CLIENT SETNAME of its own: a command per dial, none per use. A
// --redis-url that sets client_name keeps its own.
const redisClientName = "trawl"

// clusterReload is how often a Redis Cluster client reads the cluster's
// slots again while it is used, so that the workers follow a failover
// within about a second of it.
const clusterReload = time.Second

// clusterDialTimeout bounds a dial to a Redis Cluster node unless
// RedisURL sets dial_timeout: a primary that died answers none, and the
// workers retry it until they learn of its replica.
const clusterDialTimeout = time.Second

// defaultRedisURL is RedisURL's default.
const defaultRedisURL = "redis://127.0.0.1:6379/0"

// redisClient connects to RedisURL and checks that the server answers.
func (d *Deployment) redisClient(ctx context.Context) (goredis.UniversalClient, error) {
	var (
		c    goredis.UniversalClient
		addr string
	)
	redisURL := urlOr(d.cfg.RedisURL, defaultRedisURL)
	// A consumer holds a connection per partition of its queue (see
	// broker/redis.Consume): room for the most a crawl may have, which
	// costs nothing unused (the pool is a cap).
	pool := cmp.Or(d.crawl.Concurrency, 16) + 8 + broker.MaxPartitions
	if strings.Contains(redisURL, "addr=") {
		// redis://host1:port?addr=host2:port&addr=host3:port: a Cluster.
		opt, err := goredis.ParseClusterURL(redisURL)
		if err != nil {
			return nil, configErr("--redis-url: %v", err)
		}
		opt.PoolSize = max(opt.PoolSize, pool)
		opt.ClientName = cmp.Or(opt.ClientName, redisClientName)
		if opt.ConnMaxIdleTime == 0 {
			opt.PoolFIFO, opt.ConnMaxIdleTime = true, redisConnMaxIdle
		}
		// go-redis learns which node serves a slot again only every
		// ClusterStateReloadInterval (60s) unless a node answers MOVED,
		// which a dead primary never does: the workers would dial it for
		// a minute after its replica took over.
		opt.ClusterStateReloadInterval = clusterReload
		if opt.DialTimeout == 0 && opt.DialerRetries == 0 {
			// A dead node answers no dial: each try to it costs the
			// timeout, and go-redis tries five times by default.
			opt.DialTimeout, opt.DialerRetries = clusterDialTimeout, 1
		}
		d.applyTLS(opt.TLSConfig) // rediss://
		c, addr = goredis.NewClusterClient(opt), strings.Join(opt.Addrs, ",")
	} else {
		opt, err := goredis.ParseURL(redisURL)
		if err != nil {
			return nil, configErr("--redis-url: %v", err)
		}
		opt.PoolSize = max(opt.PoolSize, pool)
		opt.ClientName = cmp.Or(opt.ClientName, redisClientName)
		if opt.ConnMaxIdleTime == 0 {
			opt.PoolFIFO, opt.ConnMaxIdleTime = true, redisConnMaxIdle
			// Pipelines on the same pool, not on a pool of their own
			// whose connections an idle worker never takes again.
			opt.PipelinePoolSize = -1
		}
		d.applyTLS(opt.TLSConfig) // rediss://
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
func (d *Deployment) openRedis(ctx context.Context) error {
	client, err := d.redisClient(ctx)
	if err != nil {
		return err
	}
	d.closes = append(d.closes, client.Close)
	cfg := redisbroker.Config{Client: client, Order: d.cfg.Order, Lease: d.lease(), MaxDeliveries: MaxDeliveries(d.crawl), Logger: d.crawl.Logger}
	err = openPartitioned(ctx, d, redisbroker.NewMeta(client), func(ctx context.Context, n int) (*redisbroker.Broker, error) {
		cfg := cfg
		cfg.Partitions = n
		return redisbroker.New(ctx, cfg)
	})
	if err != nil {
		return err
	}
	d.keys = redislayout.Of
	if err := d.redisExtras(ctx, client, true); err != nil {
		return err
	}
	if f, ok := d.Filter.(dedupredis.Claimer); ok {
		// The filter's claims are partitioned with the queue
		// (redisfrontier), and a repartition copies them.
		d.claims = f
		// The partitions' filters (their claims) go with the crawl's.
		if parts := d.Broker.(broker.Partitioned).Partitions(); parts > 1 {
			for p := range parts {
				d.purges = append(d.purges, f.Partition(p, parts).Purge)
			}
		}
	}
	return nil
}

// redisExtras opens what a deployment keeps in Redis besides the broker:
// the duplicate filter, shared stats, per-host limits, the item list and,
// with starts, the start URLs.
func (d *Deployment) redisExtras(ctx context.Context, client goredis.UniversalClient, starts bool) error {
	name := d.crawl.Name
	if starts {
		s := redisbroker.NewStartURLs(client, name, d.cfg.StartURLsSet)
		d.Starts = s
		d.purges = append(d.purges, s.Purge)
	}
	d.redis = client
	items := redisbroker.NewItems(client, name)
	stats := redisbroker.NewStats(client, name)
	d.Items, d.Stats = items, stats
	d.purges = append(d.purges, items.Purge, stats.Purge)
	limit, err := redisbroker.NewHostLimiter(redisbroker.LimiterConfig{
		Client: client, Crawl: name, PerHost: cmp.Or(d.crawl.PerHost, 8), Delay: d.crawl.Delay, Logger: d.crawl.Logger,
		AutoThrottle: d.crawl.AutoThrottle,
		// The slots of a worker that died come back within its lease.
		SlotTTL: max(d.lease(), time.Second),
	})
	if err != nil {
		return err
	}
	d.Limiter = limit
	d.closes = append(d.closes, limit.Close)
	d.purges = append(d.purges, limit.Purge)
	f, err := d.redisFilter(ctx, client)
	if err != nil {
		return err
	}
	if f == nil {
		return d.volatileFilter() // a stand-in: the crawl has no filter
	}
	d.Filter = f
	d.closes = append(d.closes, f.Close)
	return nil
}

// redisBloomFPRate is the false-positive rate of --dedup=bloom when
// --bloom-fp-rate is not given.
const redisBloomFPRate = 0.001

// redisFilter opens the duplicate filter of a Redis deployment: the
// crawl's own, as it was made, where it has one (dedup/redis.Stored), so
// that a command joining a crawl needs neither its --dedup nor its Bloom
// sizes; else the one --dedup names, set (default) or bloom. A --dedup,
// --bloom-capacity or --bloom-fp-rate that the crawl's filter does not
// match is an error. A command on a crawl that must exist (every
// administration command but seed) makes none: nil, and redisExtras gives
// it an empty one in memory (a mistyped --name left a filter's layout behind,
// which refused a later seed of that name with another --dedup). A
// filter made here is recorded (made) for a worker that finds no crawl
// to join to delete (see AwaitCrawl).
func (d *Deployment) redisFilter(ctx context.Context, client goredis.UniversalClient) (dedup.Filter, error) {
	key := redislayout.FilterName(d.crawl.Name)
	switch d.cfg.Filter {
	case "", "set", "bloom":
	case "local":
		return nil, configErr("--dedup=local cannot be shared by the workers of a Redis crawl; use set or bloom")
	default:
		return nil, configErr("--dedup %q: want local, set or bloom", d.cfg.Filter)
	}
	f, err := dedupredis.Stored(ctx, client, key)
	if err == nil {
		return f, d.checkStoredFilter(f)
	}
	if !errors.Is(err, dedupredis.ErrNoFilter) {
		return nil, err
	}
	if d.cfg.Admin != "" && d.cfg.Admin != "seed" {
		return nil, nil
	}
	capacity := cmp.Or(d.cfg.FilterCapacity, defaultFilterCapacity)
	var made dedupredis.Claimer
	if d.cfg.Filter == "bloom" {
		made, err = dedupredis.NewBloom(ctx, dedupredis.BloomConfig{Client: client, Key: key, Capacity: capacity, FPRate: cmp.Or(d.cfg.FilterFPRate, redisBloomFPRate), Logger: d.crawl.Logger})
	} else {
		made, err = dedupredis.NewSet(ctx, dedupredis.SetConfig{Client: client, Key: key, Capacity: capacity, Logger: d.crawl.Logger})
	}
	if err != nil {
		return nil, err
	}
	d.made = func(ctx context.Context) error {
		var errs []error
		if pb, ok := d.Broker.(broker.Partitioned); ok && d.claims != nil && pb.Partitions() > 1 {
			// The Redis broker's filter is partitioned with its queue.
			parts := pb.Partitions()
			for p := range parts {
				errs = append(errs, made.Partition(p, parts).Purge(ctx))
			}
		}
		errs = append(errs, made.Purge(ctx), dedupredis.DropLayout(ctx, client, key))
		return errors.Join(errs...)
	}
	return made, nil
}

// checkStoredFilter fails when --dedup, --bloom-capacity or
// --bloom-fp-rate ask for another filter than f, the crawl's (opened from
// its stored layout, which it logs). A set's
// capacity only sizes a new one: it is never in conflict.
func (d *Deployment) checkStoredFilter(f dedupredis.Claimer) error {
	b, bloom := f.(*dedupredis.Bloom)
	kind := map[bool]string{true: "bloom", false: "set"}[bloom]
	d.log.Info("duplicate filter opened as the crawl made it", "backend", "redis", "filter", kind, "key", f.Key())
	if d.cfg.Filter != "" && d.cfg.Filter != kind {
		return configErr("--dedup=%s: crawl %s's duplicate filter is a %s filter (%s); leave --dedup out, or purge the crawl to start another",
			d.cfg.Filter, d.crawl.Name, kind, redislayout.FilterKeys(f.Key()).Meta)
	}
	if !bloom || d.cfg.FilterCapacity == 0 && d.cfg.FilterFPRate == 0 {
		return nil
	}
	capacity, rate := cmp.Or(d.cfg.FilterCapacity, defaultFilterCapacity), cmp.Or(d.cfg.FilterFPRate, redisBloomFPRate)
	wm, wk := dedupredis.BloomParams(capacity, rate)
	if m, k := b.Params(); m != wm || k != wk {
		return configErr("--bloom-capacity/--bloom-fp-rate: capacity %d at rate %v makes a Bloom filter of %d bits and %d hashes, but crawl %s's was made with %d bits and %d hashes; leave them out to use it",
			capacity, rate, wm, wk, d.crawl.Name, m, k)
	}
	return nil
}

// defaultFilterCapacity is FilterCapacity's default.
const defaultFilterCapacity = 10_000_000

// MisplacedStarts counts the entries of NAME:start_urls in the
// deployment's Redis, the key scrapy-redis feeds its spiders through,
// which trawl does not read (see StartsWarning); 0 where start URLs are
// not kept in Redis.
func (d *Deployment) MisplacedStarts(ctx context.Context) (int64, error) {
	if d.redis == nil || d.Starts == nil {
		return 0, nil
	}
	return scrapyStarts(ctx, d.redis, d.crawl.Name)
}

// WatchMisplacedStarts writes StartsWarning once, on w, when
// NAME:start_urls holds entries, looking at start and then about every
// interval, until ctx ends. It returns at once
// where start URLs are not kept in Redis.
func (d *Deployment) WatchMisplacedStarts(ctx context.Context, w io.Writer, every time.Duration) {
	if d.redis == nil || d.Starts == nil {
		return
	}
	watchScrapyStarts(ctx, d.redis, d.crawl.Name, w, every)
}

// StartsWarning is the warning about n entries in NAME:start_urls.
func (d *Deployment) StartsWarning(n int64) string { return scrapyWarning(d.crawl.Name, n) }

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
// looking at start and then about every interval (less a random
// twentieth), until ctx ends. The jitter keeps its looks off the beat of
// the worker's other periodic jobs (its feeder's grid, started with the
// crawl): looks at the same moment would each take a connection, and an
// idle worker holds two (see redisConnMaxIdle and engine's presenceJitter).
func watchScrapyStarts(ctx context.Context, client goredis.UniversalClient, name string, w io.Writer, every time.Duration) {
	t := time.NewTimer(every - rand.N(every/20+1))
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
			t.Reset(every - rand.N(every/20+1))
		}
	}
}

// ItemsInList reports whether the crawl's items queue NAME:items is the
// Redis item list Items (a Redis broker): a crawl's items have one format
// in Redis, which trawl items reads.
func (d *Deployment) ItemsInList() bool {
	_, ok := d.Broker.(*redisbroker.Broker)
	return ok && d.Items != nil
}

// ItemQueue is the sink of the crawl's items queue NAME:items (trawl
// crawl --out queue, read by trawl items): on a Redis broker the item
// list Items, elsewhere the broker's queue.
func (d *Deployment) ItemQueue() engine.Sink {
	if d.ItemsInList() {
		return d.Items
	}
	return engine.QueueSink{Broker: d.Broker, Queue: engine.ItemsQueue(d.crawl.Name)}
}

// CheckStarts fails if the Redis start URLs' key holds the other type
// than StartURLsSet says (a scrapy-redis user's SADD without it): a
// worker would find no start URL in it, for good.
func (d *Deployment) CheckStarts(ctx context.Context) error {
	if d.Starts == nil {
		return nil
	}
	return d.StartsHint(d.Starts.Check(ctx))
}

// StartsHint adds to an error of the start URLs' key type (from Seed, say)
// the flag that chooses the start URLs' type; other errors it returns as
// they are.
func (d *Deployment) StartsHint(err error) error {
	var te *redisbroker.StartsTypeError
	if !errors.As(err, &te) || (te.Have != "list" && te.Have != "set") {
		return err
	}
	if d.cfg.StartURLsSet {
		return fmt.Errorf("%w; without --start-urls-set, trawl reads a list", err)
	}
	return fmt.Errorf("%w; give every command of the crawl --start-urls-set to read a set", err)
}

// redisFrontier returns the Redis frontier when the broker and the filter
// are Redis (--broker=redis with --dedup=set or bloom): the crawl's queue
// and filter share its slot on one server, so one script claims a page's
// links and publishes the new ones (frontier/redisfrontier), with no
// marks. Else nil.
func (d *Deployment) redisFrontier() *redisfrontier.Frontier {
	b, ok := d.Broker.(*redisbroker.Broker)
	if !ok {
		return nil
	}
	f, ok := d.Filter.(dedupredis.Claimer)
	if !ok {
		return nil
	}
	return redisfrontier.New(b, f)
}
