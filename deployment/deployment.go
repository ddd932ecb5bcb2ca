package deployment

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/memory"
	natsbroker "github.com/trawlhq/trawl/broker/nats"
	"github.com/trawlhq/trawl/broker/rabbitmq"
	redisbroker "github.com/trawlhq/trawl/broker/redis"
	"github.com/trawlhq/trawl/dedup"
	"github.com/trawlhq/trawl/dedup/local"
	dedupredis "github.com/trawlhq/trawl/dedup/redis"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/frontier"
	"github.com/trawlhq/trawl/internal/redislayout"
)

// Config names a deployment: where a crawl's state lives. The zero value
// is the default single-machine mode: an embedded NATS server and a local
// duplicate filter in ./.trawl/NAME. Each field is the command-line flag
// named in its comment, with the same default, so that a program and the
// trawl command given the same settings share a crawl.
type Config struct {
	// Broker is the frontier (--broker): "" (embedded, persistent, in
	// Dir), "memory" (this process only), "redis", "rabbitmq" or "nats".
	Broker string
	// Filter is the duplicate filter (--dedup): "" (local with the
	// embedded or in-memory broker, else set in Redis), "local" (one
	// worker only, kept in Dir), "set" or "bloom" (in Redis, shared).
	Filter string
	// Order is the queues' order (--order). 0 = broker.Priority.
	Order broker.Order
	// Dir holds local state (--data-dir): the embedded broker, the local
	// filter and the counters. "" = ./.trawl/NAME.
	Dir string
	// RedisURL is the Redis of a Redis deployment, and of the shared
	// filter, counters, settings and per-host limits of a RabbitMQ or
	// NATS one (--redis-url). "" = redis://127.0.0.1:6379/0. A URL with
	// addr= parameters names a Cluster.
	RedisURL string
	// StartURLsSet keeps Redis start URLs in a set instead of a list
	// (--start-urls-set).
	StartURLsSet bool
	// AMQPURL is RabbitMQ's URL, or several comma-separated (--amqp-url).
	// "" = amqp://guest:guest@127.0.0.1:5672/.
	AMQPURL string
	// AMQPManagementURL is RabbitMQ's management API, optional
	// (--amqp-management-url).
	AMQPManagementURL string
	// AMQPQueueType is "classic" (default) or "quorum" (--amqp-queue-type).
	AMQPQueueType string
	// AMQPNonDurable declares transient queues (--amqp-durable=false).
	AMQPNonDurable bool
	// AMQPRecreate redeclares a queue that exists with other arguments
	// (--amqp-recreate).
	AMQPRecreate bool
	// NATSURL is NATS's URL, or several comma-separated (--nats-url).
	// "" = nats://127.0.0.1:4222.
	NATSURL string
	// NATSDomain is the JetStream domain of the queues (--nats-domain).
	NATSDomain string
	// NATSReplicas is the replicas of the streams the crawl creates
	// (--nats-replicas). 0 = 1.
	NATSReplicas int
	// Partitions is the partition count of a new crawl's queues on NATS
	// and RabbitMQ (--partitions). A crawl that has stored settings is
	// opened with its own count whatever this says (the engine then
	// refuses a worker that insists on another). 0 = 1.
	Partitions int
	// TLS holds the CA and client certificate for every server named
	// (--tls-ca, --tls-cert, --tls-key). nil = the system's CAs.
	TLS *tls.Config
	// FilterCapacity sizes the Redis filters (--bloom-capacity).
	// 0 = 10,000,000.
	FilterCapacity uint
	// FilterFPRate is the Bloom filters' false-positive rate
	// (--bloom-fp-rate). 0 = 0.001 in Redis, 1e-6 locally.
	FilterFPRate float64
	// Admin, when set, opens the deployment for an administration command
	// (the trawl command's name: seed, stats, items, deadletter, purge)
	// rather than for a crawl: a broker that other processes cannot reach
	// is refused, and the default mode reaches the crawl running in Dir
	// through its server (purge refuses while one runs).
	Admin string
	// Flush says that the crawl is about to be emptied (trawl crawl
	// --flush): a damaged embedded store is then reset instead of refused.
	Flush bool
	// Stderr is where waits are said (another process holding Dir).
	// nil = os.Stderr.
	Stderr io.Writer
}

// Sentinel errors of Open and Purge.
var (
	// ErrConfig marks a Config that cannot be opened as given: a
	// configuration error, not a server's failure.
	ErrConfig = errors.New("bad deployment configuration")
	// ErrCrawlRunning is the error of a crawl, or of a purge, in a data
	// directory where a crawl runs.
	ErrCrawlRunning = errors.New("a crawl is running")
	// ErrWorkersLive is the error of a purge while workers run the crawl.
	ErrWorkersLive = errors.New("workers are running this crawl")
	// ErrNoCrawl is the error of an administration command on a data
	// directory that holds no crawl.
	ErrNoCrawl = errors.New("no crawl")
)

// configError is an error of ErrConfig whose message is its own.
type configError struct{ err error }

func (e configError) Error() string        { return e.err.Error() }
func (e configError) Unwrap() error        { return e.err }
func (e configError) Is(target error) bool { return target == ErrConfig }

// configErr returns an error of ErrConfig, formatted as fmt.Errorf.
func configErr(format string, a ...any) error {
	return configError{fmt.Errorf(format, a...)}
}

// MaxNATSReplicas is the most NATSReplicas may be.
const MaxNATSReplicas = natsbroker.MaxReplicas

// Deployment is an opened deployment: everything a crawl needs. Configure
// (or Crawler) hands it to an engine.Config; Close closes what Open
// opened.
type Deployment struct {
	// Frontier is the crawl's frontier over Broker and Filter: the
	// in-memory broker with its local filter claims and publishes under
	// one lock (frontier.Memory), a Redis broker with a Redis filter in
	// one script (frontier/redisfrontier); every other deployment
	// composes its broker and filter (frontier.Compose).
	Frontier frontier.Frontier
	// Broker is the frontier's queues.
	Broker broker.Broker
	// Filter is the duplicate filter.
	Filter dedup.Filter
	// Shared is whether other processes can join the crawl (every broker
	// but the in-memory one).
	Shared bool
	// Starts holds the start URLs outside the broker (Redis), or nil. It
	// is the concrete store, not an engine.StartSource, because the
	// deployment counts it and reads its dead letters too.
	Starts *redisbroker.StartURLs
	// Items is the deployment's item list (Redis: {NAME}:items), or nil.
	Items engine.Sink
	// Stats are the counters the crawl's workers share, or nil.
	Stats engine.SharedStats
	// Limiter is the per-host limit the crawl's workers share, or nil
	// (each worker then limits on its own).
	Limiter engine.HostLimiter
	// Metadata keeps the crawl's settings and its workers' presence, or
	// nil (RabbitMQ without Redis keeps none).
	Metadata broker.Metadata

	cfg   Config
	crawl engine.Config
	log   *slog.Logger
	redis goredis.UniversalClient   // the deployment's Redis, or nil
	keys  func(queue string) string // a queue's name as its broker shows it, or nil
	// reopen opens another broker on the deployment's servers with n
	// partitions (Redis, NATS and RabbitMQ), closed with the deployment; nil
	// for brokers that do not split their queues.
	reopen func(ctx context.Context, n int) (broker.Broker, error)
	// claims is the Redis broker's filter, partitioned with its queue
	// (each partition's claims under its tag), or nil.
	claims dedupredis.Claimer
	// made deletes the Redis filter Open made for a crawl that had none,
	// or is nil (see redisFilter).
	made   func(context.Context) error
	purges []func(context.Context) error
	closes []func() error
}

// Open opens the deployment cfg names for crawl, the crawl that will run
// on it (its Name, Concurrency, PerHost, Delay, AutoThrottle, Lease,
// MaxRetries, IdleTimeout and Logger are read). The limits that tie the
// packages together are set here, once: each broker's delivery limit is
// MaxDeliveries(crawl), so that no broker dead-letters a page the engine
// would still retry, and each broker's lease is the engine's.
func Open(ctx context.Context, cfg Config, crawl engine.Config) (*Deployment, error) {
	crawl.Name = cmp.Or(crawl.Name, "trawl")
	d := &Deployment{cfg: cfg, crawl: crawl, log: crawl.Logger}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	var err error
	switch {
	case cfg.Admin != "" && cfg.Broker == "":
		err = d.openDefault(ctx)
	case cfg.Broker == "":
		err = d.openEmbeddedWaiting(ctx)
	case cfg.Broker == "nats":
		err = d.openNATS(ctx)
	case cfg.Broker == "rabbitmq":
		err = d.openRabbitMQ(ctx)
	case cfg.Broker == "memory":
		var mb *memory.Broker
		mb, err = memory.New(memory.Config{Order: cfg.Order, Lease: d.lease(), MaxDeliveries: MaxDeliveries(crawl), Logger: crawl.Logger})
		if err != nil {
			err = configErr("%v", err)
			break
		}
		d.Broker = mb
		d.closes = append(d.closes, mb.Close)
	case cfg.Broker == "redis":
		err = d.openRedis(ctx)
	default:
		err = configErr("--broker %q: want memory, redis, rabbitmq or nats", cfg.Broker)
	}
	if err == nil && d.Filter == nil {
		err = d.memoryFilter()
	}
	if err == nil && cfg.Admin != "" && !d.Shared {
		err = configErr("%s needs a shared broker (--broker=redis, rabbitmq or nats); the in-memory broker lives only inside one crawl", cfg.Admin)
	}
	if err == nil && d.Metadata == nil {
		if m, ok := d.Broker.(broker.Metadata); ok {
			d.Metadata = m
		} else if d.redis != nil {
			// RabbitMQ keeps no values: the deployment's Redis does.
			d.Metadata = redisbroker.NewMeta(d.redis)
		}
	}
	if err == nil && cfg.Admin != "" && cfg.Admin != "seed" && cfg.Broker != "" {
		err = d.checkCrawl(ctx)
	}
	if err == nil {
		d.Frontier = d.frontier()
	}
	if err != nil {
		return nil, errors.Join(err, d.Close())
	}
	return d, nil
}

// checkCrawl returns an error wrapping ErrNoCrawl unless the crawl exists
// on the shared broker: its settings are stored (every seed and worker
// stores them), or something of it is there (start URLs pushed by hand,
// counters, queued or dead messages). RabbitMQ without Redis keeps no
// settings: there a crawl with empty queues cannot be told from none, and
// every crawl is taken to exist.
func (d *Deployment) checkCrawl(ctx context.Context) error {
	ok, err := d.crawlExists(ctx)
	if err != nil || ok {
		return err
	}
	return fmt.Errorf("%s: %w %s on %s (check --name; a crawl exists once seeded)", d.cfg.Admin, ErrNoCrawl, d.crawl.Name, d.cfg.Broker)
}

// crawlExists reports whether the crawl exists on the shared broker, as
// checkCrawl tells.
func (d *Deployment) crawlExists(ctx context.Context) (bool, error) {
	name := d.crawl.Name
	if d.Metadata == nil {
		return true, nil
	}
	switch _, err := engine.StoredSettings(ctx, d.Metadata, name); {
	case err == nil:
		return true, nil
	case !errors.Is(err, broker.ErrNotFound):
		return false, fmt.Errorf("crawl %q: read settings: %w", name, err)
	}
	if d.Stats != nil {
		s, err := d.Stats.Load(ctx)
		if err != nil {
			return false, err
		}
		for _, v := range s {
			if v != 0 {
				return true, nil
			}
		}
	}
	if d.Starts != nil {
		if n, err := d.Starts.PendingStarts(ctx); err != nil || n > 0 {
			return n > 0, err
		}
	}
	// The broker's queues, not what is kept beside them under the same
	// key (Redis's start URLs, counted above, and its item list): the
	// broker counted those as one of its queues, and a start-URL list
	// seeded between the two counts failed it with WRONGTYPE.
	queues := []string{engine.RequestsQueue(name)}
	if d.Starts == nil {
		queues = append(queues, engine.StartQueue(name))
	}
	if !d.ItemsInList() {
		queues = append(queues, engine.ItemsQueue(name))
	}
	for _, q := range queues {
		n, err := d.Broker.Counts(ctx, q)
		if err != nil || n.Ready+n.InFlight+n.Dead > 0 {
			return err == nil, err
		}
	}
	return false, nil
}

// awaitEvery is how often AwaitCrawl looks for the crawl.
const awaitEvery = 250 * time.Millisecond

// AwaitCrawl returns once the crawl exists on the shared broker (as
// checkCrawl tells): a worker joins a crawl that trawl seed or trawl
// crawl began, and begins none itself (a worker given a mistyped --name
// stored that crawl's settings and marks, and said "nothing to do"). It
// waits for one up to wait, saying so on stderr, for workers started
// with, or just before, the command that seeds; past wait, the error
// wraps ErrNoCrawl. A worker that serves for ever (wait 0) is not kept
// waiting: it begins the crawl as before, since workers started before
// the seed join the crawl's roster from its first page only so; it says
// so on stderr.
func (d *Deployment) AwaitCrawl(ctx context.Context, wait time.Duration) error {
	name := d.crawl.Name
	t := time.NewTicker(awaitEvery)
	defer t.Stop()
	start := time.Now()
	for said := false; ; said = true {
		ok, err := d.crawlExists(ctx)
		if err != nil || ok {
			return err
		}
		if wait == 0 {
			fmt.Fprintf(d.stderr(), "trawl: no crawl %s on %s yet: this worker (--idle-timeout 0) begins it with its flags' settings, and serves what is seeded (check --name)\n", name, d.cfg.Broker)
			return nil
		}
		if time.Since(start) >= wait {
			err := fmt.Errorf("%w %s on %s (check --name): a worker joins a crawl that trawl seed or trawl crawl began; none did within --idle-timeout %v", ErrNoCrawl, name, d.cfg.Broker, wait)
			if d.made != nil {
				// The filter Open made for it: nothing of the crawl stays.
				if derr := d.made(ctx); derr != nil {
					err = fmt.Errorf("%w; deleting the duplicate filter made for it: %w", err, derr)
				}
			}
			return err
		}
		if !said {
			fmt.Fprintf(d.stderr(), "trawl: no crawl %s on %s yet: waiting up to --idle-timeout %v for trawl seed or trawl crawl to begin it (check --name)\n", name, d.cfg.Broker, wait)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
		}
	}
}

// DeadLetterCount counts the crawl's dead letters where they are kept:
// the broker's dead-letter queues of its requests and start URLs, and
// those of start URLs kept outside the broker (Redis's {NAME}:start_urls).
// A worker's own counter misses those the broker made (a message past its
// last delivery), other workers', and rejected start URLs. ok is false
// when counting failed.
func (d *Deployment) DeadLetterCount(ctx context.Context) (n int64, ok bool) {
	c, ok := d.Backlog(ctx)
	return c.Dead, ok
}

// Backlog counts the crawl's requests and start URLs where they are kept,
// the counts of both queues added up: those not done yet are Ready (due
// or, Delayed, waiting out a back-off) and InFlight (leased to workers:
// read ahead, held back for their hosts, or in progress). ok is false
// when counting failed.
func (d *Deployment) Backlog(ctx context.Context) (n broker.Counts, ok bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	name := d.crawl.Name
	for _, q := range []string{engine.RequestsQueue(name), engine.StartQueue(name)} {
		var c broker.Counter = d.Broker
		if q == engine.StartQueue(name) && d.Starts != nil {
			c = d.Starts
		}
		counts, err := c.Counts(ctx, q)
		if err != nil {
			d.log.Debug("counting a queue failed", "queue", q, "err", err)
			return broker.Counts{}, false
		}
		n.Ready += counts.Ready
		n.InFlight += counts.InFlight
		n.Dead += counts.Dead
		n.Delayed += counts.Delayed
	}
	return n, true
}

// memoryFilter opens the filter of the in-memory broker: local, in
// memory. The in-memory frontier does not survive the process, so neither
// may its filter: a resumed crawl would filter its own start URLs.
func (d *Deployment) memoryFilter() error {
	if d.cfg.Filter != "" && d.cfg.Filter != "local" {
		return configErr("--dedup=%s needs --broker=redis (or a Redis URL)", d.cfg.Filter)
	}
	return d.volatileFilter()
}

// volatileFilter opens a local filter kept in memory.
func (d *Deployment) volatileFilter() error {
	f, err := local.New(local.Config{FPRate: d.cfg.FilterFPRate})
	if err != nil {
		return err
	}
	d.Filter = f
	d.closes = append(d.closes, f.Close)
	return nil
}

// openPartitioned opens the deployment's shared broker, one that splits
// its queues into partitions (Redis, NATS, RabbitMQ), with open, at the
// partition count stored with the crawl in meta, or cfg.Partitions (at
// least 1) for a crawl without settings; and keeps open for Repartition
// (reopen). meta nil is the broker's own metadata, where it keeps some
// (NATS): open then opens it at cfg.Partitions first, and again at the
// stored count if that is another. A broker without metadata of its own
// (RabbitMQ without Redis) stays at cfg.Partitions.
func openPartitioned[B broker.Broker](ctx context.Context, d *Deployment, meta broker.Metadata, open func(ctx context.Context, partitions int) (B, error)) error {
	n := max(d.cfg.Partitions, 1)
	var b broker.Broker
	if meta == nil {
		first, err := open(ctx, n)
		if err != nil {
			return err
		}
		b = first
		meta, _ = b.(broker.Metadata)
	}
	if meta != nil {
		s, err := engine.StoredSettings(ctx, meta, d.crawl.Name)
		switch {
		case err == nil && s.Partitions != n:
			n = s.Partitions
			if b != nil {
				b.Close() // of the wrong count: opened again below
				b = nil
			}
		case err != nil && !errors.Is(err, broker.ErrNotFound):
			if b != nil {
				b.Close()
			}
			return fmt.Errorf("crawl %q: read settings: %w", d.crawl.Name, err)
		}
	}
	if b == nil {
		opened, err := open(ctx, n)
		if err != nil {
			return err
		}
		b = opened
	}
	d.Broker, d.Shared = b, true
	d.closes = append(d.closes, b.Close)
	d.reopen = func(ctx context.Context, n int) (broker.Broker, error) {
		b, err := open(ctx, n)
		if err != nil {
			return nil, err
		}
		d.closes = append(d.closes, b.Close)
		return b, nil
	}
	return nil
}

// MaxDeliveries is the brokers' delivery limit for crawl: the engine
// retries a page crawl.MaxRetries times (0: 3), so a message is delivered
// up to MaxRetries+1 times by failures alone; one more delivery is allowed
// for a crash (an expired lease), and never fewer than the brokers'
// default of 5. So the broker never dead-letters a page the engine would
// still retry.
func MaxDeliveries(crawl engine.Config) int {
	retries := crawl.MaxRetries
	switch {
	case retries == 0:
		retries = 3
	case retries < 0:
		retries = 0
	}
	return max(5, retries+2)
}

// lease is the engine's lease, which the brokers take as theirs.
func (d *Deployment) lease() time.Duration {
	return cmp.Or(d.crawl.Lease, 30*time.Second)
}

// dir is Config.Dir, by default ./.trawl/NAME.
func (d *Deployment) dir() string {
	if d.cfg.Dir != "" {
		return d.cfg.Dir
	}
	return filepath.Join(".trawl", d.crawl.Name)
}

// stderr is where waits are said.
func (d *Deployment) stderr() io.Writer {
	if d.cfg.Stderr != nil {
		return d.cfg.Stderr
	}
	return os.Stderr
}

// Configure sets what the deployment provides on cfg where cfg leaves it
// unset: the start URLs, the shared per-host limits and counters, and the
// crawl's stored settings.
func (d *Deployment) Configure(cfg *engine.Config) {
	if cfg.Starts == nil && d.Starts != nil { // a nil *StartURLs is no source
		cfg.Starts = d.Starts
	}
	if cfg.Limiter == nil {
		cfg.Limiter = d.Limiter
	}
	if cfg.SharedStats == nil {
		cfg.SharedStats = d.Stats
	}
	if cfg.Metadata == nil {
		cfg.Metadata = d.Metadata
	}
}

// frontier returns the frontier over the deployment's broker and filter:
// on Redis (both stores Redis) claim and publish in one script (see
// redisFrontier).
func (d *Deployment) frontier() frontier.Frontier {
	if cf, ok := d.Filter.(frontier.CheckingFilter); ok && d.cfg.Broker == "memory" {
		return frontier.NewMemory(d.Broker, cf)
	}
	if fr := d.redisFrontier(); fr != nil {
		return fr
	}
	return frontier.Compose(d.Broker, d.Filter, engine.ComposeConfig(d.crawl))
}

// Crawler returns a crawler of cfg on the deployment's frontier (see
// Configure).
func (d *Deployment) Crawler(cfg engine.Config) (*engine.Crawler, error) {
	d.Configure(&cfg)
	return engine.NewOn(d.Frontier, cfg)
}

// QueueName returns queue's name as the broker shows it: on Redis, its key
// ("{books}:requests" for "books:requests").
func (d *Deployment) QueueName(queue string) string {
	if d.keys == nil {
		return queue
	}
	return d.keys(queue)
}

// Close closes what Open opened, last first.
func (d *Deployment) Close() error {
	var errs []error
	for i := len(d.closes) - 1; i >= 0; i-- {
		errs = append(errs, d.closes[i]())
	}
	d.closes = nil
	return errors.Join(errs...)
}

// Purge deletes the crawl's queues (those a repartition cut short left
// on its way too), filter, items, counters and settings.
// It refuses while workers of the crawl are running (a purge under them
// restarts the crawl from its start URLs: every page fetched again),
// unless force.
func (d *Deployment) Purge(ctx context.Context, force bool) error {
	name := d.crawl.Name
	if d.Metadata != nil {
		n, err := engine.LiveWorkers(ctx, d.Metadata, name)
		switch {
		case err != nil && !force:
			return fmt.Errorf("purge: %w (--force purges anyway)", err)
		case n > 0 && !force:
			return fmt.Errorf("purge %s: %w: %d live %s (announced within the last %v); stop %s first, or purge anyway with trawl purge --force (the running workers then crawl the whole site again)",
				name, ErrWorkersLive, n, plural(int64(n), "worker"), engine.PresenceTTL, map[bool]string{true: "it", false: "them"}[n == 1])
		case n > 0:
			d.log.Warn("purging while workers run (--force): they will crawl the whole site again", "crawl", name, "workers", n)
		}
	} else if d.Shared {
		d.log.Warn("this deployment cannot tell whether workers of the crawl run (RabbitMQ without Redis): purging anyway", "crawl", name)
	}
	for _, q := range []string{engine.RequestsQueue(name), engine.StartQueue(name)} {
		if err := d.Broker.Purge(ctx, q); err != nil {
			return fmt.Errorf("purge %s: %w", q, err)
		}
	}
	// What a repartition cut short left on its way, in the queues of one
	// partition it moves through: a later repartition would move it into
	// the crawl started again.
	if dp, ok := d.Broker.(partitionDropper); ok {
		moving, movingDead := redislayout.RepartitionQueues(engine.RequestsQueue(name))
		for _, q := range []string{moving, movingDead} {
			if err := dp.DropPartitions(ctx, q, 0, 1); err != nil {
				return fmt.Errorf("purge %s: %w", q, err)
			}
		}
	}
	if err := d.Filter.Purge(ctx); err != nil {
		return fmt.Errorf("purge filter: %w", err)
	}
	for _, purge := range d.purges {
		if err := purge(ctx); err != nil {
			return err
		}
	}
	if d.Metadata != nil {
		if err := engine.PurgeSettings(ctx, d.Metadata, name); err != nil {
			return err
		}
	}
	return nil
}

// PurgeAll is Purge, and on Redis also every other key of the crawl
// (trawl purge): the items queue, dead letters, leases.
func (d *Deployment) PurgeAll(ctx context.Context, force bool) error {
	if err := d.Purge(ctx, force); err != nil {
		return err
	}
	if d.redis != nil {
		if _, err := redisbroker.PurgeCrawl(ctx, d.redis, d.crawl.Name); err != nil {
			return err
		}
	}
	return nil
}

// DeadLetters is where queue's dead letters are kept: start URLs kept
// outside the broker (Redis) keep their own, so that a requeue puts them
// back where they came from, as they came in; else the broker.
func (d *Deployment) DeadLetters(queue string) broker.DeadLetters {
	if d.Starts != nil && queue == engine.StartQueue(d.crawl.Name) {
		return d.Starts
	}
	return d.Broker
}

// queueType is Config.AMQPQueueType.
func (d *Deployment) queueType() (rabbitmq.QueueType, error) {
	qt, err := rabbitmq.ParseQueueType(cmp.Or(d.cfg.AMQPQueueType, "classic"))
	if err != nil {
		return qt, configErr("--amqp-queue-type %q: want classic or quorum", d.cfg.AMQPQueueType)
	}
	return qt, nil
}

// applyTLS sets the CA and client certificate of cfg.TLS on c, a client
// library's configuration for a TLS URL, keeping its server name.
func (d *Deployment) applyTLS(c *tls.Config) {
	t := d.cfg.TLS
	if t == nil || c == nil {
		return
	}
	if t.RootCAs != nil {
		c.RootCAs = t.RootCAs
	}
	if len(t.Certificates) > 0 {
		c.Certificates = t.Certificates
	}
}

// tlsClone returns a configuration of cfg.TLS for one client, nil without
// one (the library's default: the system's CAs).
func (d *Deployment) tlsClone() *tls.Config {
	if d.cfg.TLS == nil {
		return nil
	}
	return d.cfg.TLS.Clone()
}

func plural(n int64, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// urlOr returns s, or def when s is empty.
func urlOr(s, def string) string {
	if strings.TrimSpace(s) == "" {
		return def
	}
	return s
}
