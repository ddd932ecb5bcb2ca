package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/deployment"
	"github.com/trawlhq/trawl/engine"
)

// options are the flags shared by the commands.
type options struct {
	stdout, stderr io.Writer
	log            *slog.Logger

	broker, dedup, name, order       string
	redisURL, amqpURL, natsURL       string
	concurrency, perHost             int
	delay, idleTimeout, lease        time.Duration
	maxDepth, maxPages               int
	maxLinks, maxQueryValues         int    // --max-links, --max-query-values
	maxPagesPerHost                  int    // --max-pages-per-host
	partitions                       int    // --partitions
	partitionBy                      string // --partition-by
	allowDomains, extract            []string
	include, exclude                 []string
	out, dataDirFlag, metricsAddr    string
	outFormat                        string
	amqpDurable, amqpRecreate        bool
	amqpManagementURL, natsDomain    string
	natsReplicas                     int
	amqpQueueType                    string
	flush, allowPrivate, ignoreRobot bool
	overrideSettings, force          bool
	allowEmpty, errorItems           bool
	progressEvery                    time.Duration
	startSet                         bool
	logLevel, userAgent              string
	bloomCapacity                    uint
	bloomFPRate                      float64
	retryTimes                       int
	retryBackoff                     time.Duration
	failureTimeout                   time.Duration
	session                          session // headers, cookies, proxy, timeout
	sitemaps                         bool
	tls                              tlsOptions // --tls-ca, --tls-cert, --tls-key
	autothrottle                     bool
	throttle                         engine.AutoThrottle // --autothrottle-*
	configPath                       string              // --config, else TRAWL_CONFIG
	sources                          map[string]string   // flag name → fromFlag, fromFile, fromEnv
}

// addFlags registers every flag on fs: the root's scratch set, which
// gives every option its default whatever the command.
func (o *options) addFlags(fs *pflag.FlagSet) {
	o.addLogFlags(fs)
	o.addBackendFlags(fs)
	o.addCrawlFlags(fs)
}

// addLogFlags registers the flags of every command.
func (o *options) addLogFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.logLevel, "log-level", "warn", "log level: debug, info, warn or error")
}

// addBackendFlags registers the flags that name a crawl and its broker and
// filter: those of every command that opens them.
func (o *options) addBackendFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.broker, "broker", "", "frontier: memory, redis, rabbitmq or nats (default: embedded single-node, no server)")
	fs.StringVar(&o.dedup, "dedup", "", "duplicate filter: local, set or bloom (default: local; set with --broker=redis; a crawl that has a filter in Redis uses it, as it was made)")
	fs.StringVar(&o.name, "name", "trawl", "crawl name; queues, keys and the folder .trawl/NAME derive from it (no / or \\)")
	fs.StringVar(&o.order, "order", "priority", "queue order: priority, fifo or lifo")
	fs.StringVar(&o.redisURL, "redis-url", "redis://127.0.0.1:6379/0", "Redis URL (redis:// or rediss://, user and password allowed)")
	fs.StringVar(&o.amqpURL, "amqp-url", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ URL (amqp:// or amqps://); the nodes of a cluster comma-separated, tried in turn")
	fs.StringVar(&o.natsURL, "nats-url", "nats://127.0.0.1:4222", "NATS URL(s), comma-separated")
	o.tls.addFlags(fs)
	fs.IntVar(&o.natsReplicas, "nats-replicas", 1, "NATS: replicas of the streams and settings bucket the crawl creates on a JetStream cluster (1 to 5; 3 keeps the crawl whole while one server is down); existing ones keep theirs")
	fs.StringVar(&o.natsDomain, "nats-domain", "", "JetStream domain of the queues, such as a hub's reached through a leaf node (default: the server's own)")
	fs.StringVar(&o.dataDirFlag, "data-dir", "", "folder for local state (default ./.trawl/NAME)")
	fs.StringVar(&o.amqpManagementURL, "amqp-management-url", "", "RabbitMQ management API for queue counts, optional (default: none, counts over AMQP; without credentials, the AMQP URL's)")
	fs.BoolVar(&o.amqpDurable, "amqp-durable", true, "RabbitMQ: durable queues and persistent messages")
	fs.StringVar(&o.amqpQueueType, "amqp-queue-type", "classic", "RabbitMQ: type of the queues the crawl declares: classic, or quorum (replicated across a cluster's nodes; no priorities before RabbitMQ 4, so with --order fifo)")
	fs.BoolVar(&o.startSet, "start-urls-set", false, "keep Redis start URLs in a set instead of a list")
	fs.UintVar(&o.bloomCapacity, "bloom-capacity", 0, "expected number of fingerprints: one per page with --broker=redis, about 3 per page elsewhere (its URL, its published and expanded marks); sizes a new Redis duplicate filter (default: 10,000,000; a crawl's filter keeps the sizes it was made with, which the crawl's other commands need not repeat; the local filter grows as needed)")
	fs.Float64Var(&o.bloomFPRate, "bloom-fp-rate", 0, "false-positive rate of Bloom filters (default: 0.001 for a new one in Redis; 1e-6 for the local filter, which grows with the crawl)")
}

// addHiddenCrawlFlags registers the crawl flags on fs hidden: accepted,
// so that one set of flags serves every command of a deployment, but not
// shown in the help of a command that does not use them.
func (o *options) addHiddenCrawlFlags(fs *pflag.FlagSet) {
	tmp := pflag.NewFlagSet("crawl", pflag.ContinueOnError)
	o.addCrawlFlags(tmp)
	tmp.VisitAll(func(f *pflag.Flag) {
		f.Hidden = true
		fs.AddFlag(f)
	})
}

// addCrawlFlags registers the flags of the commands that crawl (crawl and
// worker).
func (o *options) addCrawlFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.concurrency, "concurrency", 16, "pages processed at once by this worker")
	fs.IntVar(&o.perHost, "per-host", 8, "concurrent requests per host (with Redis, the cap of the whole crawl, across its workers)")
	fs.DurationVar(&o.delay, "delay", 0, "minimum delay between requests to one host (with Redis, across all workers)")
	fs.BoolVar(&o.autothrottle, "autothrottle", false, "adapt each host's delay to its latency, like Scrapy's AutoThrottle (never below --delay nor robots.txt's Crawl-delay; shared by the workers with Redis)")
	fs.Float64Var(&o.throttle.TargetConcurrency, "autothrottle-target-concurrency", 1, "--autothrottle: requests in progress per host the delay aims at (delay = latency / this, averaged)")
	fs.DurationVar(&o.throttle.StartDelay, "autothrottle-start-delay", engine.DefaultThrottleStartDelay, "--autothrottle: a host's delay until its first response")
	fs.DurationVar(&o.throttle.MaxDelay, "autothrottle-max-delay", engine.DefaultThrottleMaxDelay, "--autothrottle: the most a host's adapted delay may grow to")
	fs.IntVar(&o.maxDepth, "max-depth", engine.DefaultMaxDepth, "maximum link depth from the start URLs, a guard against URL traps (0: unlimited)")
	fs.IntVar(&o.maxPages, "max-pages", 0, "stop this worker after that many pages (0: unlimited)")
	fs.IntVar(&o.maxLinks, "max-links", engine.DefaultMaxLinks, "links followed per page, the first in document order; the others are counted (links/dropped) and logged")
	fs.IntVar(&o.maxQueryValues, "max-query-values", engine.DefaultMaxQueryValues, "URL-trap guard: new values followed of one query parameter along links that change only it (a session id handed on, ?sid=), per host; the others are counted (url/trap) and warned about (0: no guard)")
	fs.IntVar(&o.maxPagesPerHost, "max-pages-per-host", 0, "links of one host a worker follows, a page budget; the others are counted (scheduler/host_budget) and warned about (0: unlimited)")
	fs.IntVar(&o.partitions, "partitions", 1, "split the crawl's queues into this many partitions by a hash of each request's host (or domain, --partition-by), each a queue of the broker's own (Redis: a hash tag; NATS: a stream; RabbitMQ: a queue), so that the crawl spreads over a cluster's servers, and so that several workers share them out, each host fetched by one worker (use at least twice the workers); the memory broker and the embedded default refuse more than 1 (stored with the crawl; changed only by trawl repartition)")
	fs.StringVar(&o.partitionBy, "partition-by", "host", "what decides a request's partition: host, or domain (its registrable domain, so that a site's subdomains share one)")
	fs.StringArrayVar(&o.allowDomains, "allow-domain", nil, "domain links may lead to, with subdomains: a host name such as example.com, no scheme or wildcard (repeat the flag for more; default: the start URLs' hosts)")
	fs.StringArrayVar(&o.include, "include", nil, "follow only URLs matching this regular expression, taken whole (repeat the flag for more)")
	fs.StringArrayVar(&o.exclude, "exclude", nil, "do not follow URLs matching this regular expression, taken whole (repeat the flag for more)")
	fs.StringVar(&o.out, "out", "-", "items: - for stdout, a FILE (JSON Lines, or CSV when its name ends in .csv; appended to; --flush empties it; its folder must exist), redis for the Redis list {NAME}:items, or queue for the broker queue NAME:items (on Redis, that list); trawl items reads both")
	o.session.addFlags(fs)
	fs.BoolVar(&o.sitemaps, "sitemaps", false, "also crawl the URLs the sitemaps of each start URL's host list (robots.txt Sitemap: lines and /sitemap.xml; indexes followed, gzip read), through scope and the filter like links")
	fs.StringVar(&o.outFormat, "format", "", "items' format for a file or stdout: jsonl or csv (default: csv for an --out ending in .csv, else jsonl)")
	fs.DurationVar(&o.idleTimeout, "idle-timeout", 3*time.Second, "exit once the crawl has been idle this long (0: serve forever)")
	fs.BoolVar(&o.flush, "flush", false, "start clean: delete the crawl's frontier (its dead letters too), filter, stats and stored settings first (on Redis also its hosts' state and stored robots.txt files), and empty the --out file")
	fs.BoolVar(&o.allowEmpty, "allow-empty", false, "exit 0 when a crawl wrote no item (by default it exits 1 and says why; a worker says why and exits 0)")
	fs.DurationVar(&o.progressEvery, "progress-interval", 10*time.Second, "when stderr is not a terminal, log progress this often (0: never)")
	fs.DurationVar(&o.lease, "lease", 30*time.Second, "how long a delivery stays with a worker before another may take it")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus /metrics on this HOST:PORT (127.0.0.1:9090 keeps it local; :9090 serves every interface, and says so)")
	fs.StringArrayVar(&o.extract, "extract", nil, "add field NAME=SELECTOR to each page item: a CSS selector, taken whole (commas included), with ::text (default), ::attr(NAME) or ::html; one value per match (repeat the flag for more)")
	fs.BoolVar(&o.errorItems, "error-items", false, "also write an item for each page that fails for good (4xx, 5xx past the retries, unreachable): its status, error and referring page, to check a site for broken links")
	fs.BoolVar(&o.allowPrivate, "allow-private", false, "allow private, loopback and link-local addresses")
	fs.BoolVar(&o.ignoreRobot, "ignore-robots", false, "do not fetch or obey robots.txt")
	fs.BoolVar(&o.overrideSettings, "override-settings", false, "replace the crawl's stored settings ("+settingFlags(false)+") by the ones given here where they differ, instead of refusing to start; workers already running keep theirs")
	fs.StringVar(&o.userAgent, "user-agent", engine.DefaultUserAgent, "User-Agent header")
	fs.BoolVar(&o.amqpRecreate, "amqp-recreate", false, "RabbitMQ: delete and redeclare a queue that exists with other arguments (loses its messages)")
	fs.IntVar(&o.retryTimes, "retry-times", 3, "retries of a failed page (timeout, 5xx, 429, callback error) before it is dead-lettered")
	fs.DurationVar(&o.failureTimeout, "failure-timeout", time.Minute, "give up (exit 1, nothing acknowledged) once the broker, filter or sink has failed this long with no success (0: never)")
	fs.DurationVar(&o.retryBackoff, "retry-backoff", 500*time.Millisecond, "delay before the first retry, doubled for each later one (with jitter, at most 1m)")
}

// setup validates the shared flags.
func (o *options) setup() error {
	var errs []error
	switch o.broker {
	case "", "memory", "redis", "rabbitmq", "nats":
	default:
		errs = append(errs, fmt.Errorf("--broker %q: want memory, redis, rabbitmq or nats", o.broker))
	}
	switch o.dedup {
	case "", "local", "set", "bloom":
	default:
		errs = append(errs, fmt.Errorf("--dedup %q: want local, set or bloom", o.dedup))
	}
	if _, err := broker.ParseOrder(o.order); err != nil {
		errs = append(errs, fmt.Errorf("--order %q: want priority, fifo or lifo", o.order))
	}
	if o.partitions < 1 || o.partitions > broker.MaxPartitions {
		errs = append(errs, fmt.Errorf("--partitions %d: want 1 to %d", o.partitions, broker.MaxPartitions))
	}
	if _, err := broker.ParsePartitionBy(o.partitionBy); err != nil {
		errs = append(errs, fmt.Errorf("--partition-by %q: want host or domain", o.partitionBy))
	}
	if o.name == "" || strings.ContainsAny(o.name, " {}") {
		errs = append(errs, fmt.Errorf("--name %q: want a non-empty name without spaces or braces", o.name))
	}
	// 0 would be taken for the engine's default by each of these.
	for _, l := range []struct {
		flag string
		v    int
	}{{"--concurrency", o.concurrency}, {"--per-host", o.perHost}, {"--max-links", o.maxLinks}} {
		if l.v < 1 {
			errs = append(errs, fmt.Errorf("%s %d: want 1 or more", l.flag, l.v))
		}
	}
	for _, l := range []struct {
		flag string
		v    int64
	}{
		{"--max-depth", int64(o.maxDepth)}, {"--max-pages", int64(o.maxPages)},
		{"--max-query-values", int64(o.maxQueryValues)},
		{"--max-pages-per-host", int64(o.maxPagesPerHost)},
		{"--delay", int64(o.delay)}, {"--idle-timeout", int64(o.idleTimeout)},
		{"--progress-interval", int64(o.progressEvery)},
	} {
		if l.v < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative", l.flag))
		}
	}
	if t := o.throttle; !(t.TargetConcurrency > 0) || math.IsInf(t.TargetConcurrency, 0) {
		errs = append(errs, fmt.Errorf("--autothrottle-target-concurrency %v: want a number above 0", t.TargetConcurrency))
	}
	if t := o.throttle; t.StartDelay <= 0 || t.MaxDelay <= 0 || t.StartDelay > t.MaxDelay {
		errs = append(errs, fmt.Errorf("--autothrottle-start-delay %v, --autothrottle-max-delay %v: want 0 < start ≤ max", t.StartDelay, t.MaxDelay))
	}
	for _, u := range []struct{ flag, value, schemes string }{
		{"--redis-url", o.redisURL, "redis rediss unix"},
		{"--amqp-url", o.amqpURL, "amqp amqps"},
		{"--amqp-management-url", o.amqpManagementURL, "http https"},
		{"--nats-url", o.natsURL, "nats tls ws wss"},
	} {
		if err := checkURLs(u.flag, u.value, strings.Fields(u.schemes)); err != nil {
			errs = append(errs, err)
		}
	}
	switch o.amqpQueueType {
	case "classic":
	case "quorum":
		if o.broker == "rabbitmq" && o.order == "priority" {
			errs = append(errs, errors.New("--amqp-queue-type quorum: quorum queues have no priorities before RabbitMQ 4; add --order fifo"))
		}
	default:
		errs = append(errs, fmt.Errorf("--amqp-queue-type %q: want classic or quorum", o.amqpQueueType))
	}
	if o.natsReplicas < 1 || o.natsReplicas > deployment.MaxNATSReplicas {
		errs = append(errs, fmt.Errorf("--nats-replicas %d: want 1 to %d", o.natsReplicas, deployment.MaxNATSReplicas))
	}
	if o.retryTimes < 0 {
		errs = append(errs, fmt.Errorf("--retry-times %d: want 0 or more", o.retryTimes))
	}
	if o.failureTimeout < 0 {
		errs = append(errs, fmt.Errorf("--failure-timeout %v must not be negative", o.failureTimeout))
	}
	if o.lease <= 0 { // 0 would be taken for the brokers' default, 30s
		errs = append(errs, fmt.Errorf("--lease %v: want a positive duration", o.lease))
	}
	if o.retryBackoff <= 0 {
		errs = append(errs, fmt.Errorf("--retry-backoff %v: want a positive duration", o.retryBackoff))
	}
	if o.bloomFPRate < 0 || o.bloomFPRate >= 1 {
		errs = append(errs, fmt.Errorf("--bloom-fp-rate %v: want a rate between 0 and 1 (0: the filter's default)", o.bloomFPRate))
	}
	for _, e := range o.extract {
		name, sel, ok := strings.Cut(e, "=")
		if !ok || name == "" || sel == "" {
			errs = append(errs, fmt.Errorf("--extract %q: want NAME=SELECTOR", e))
		} else if err := (engine.Config{Extract: map[string]string{name: sel}}).Validate(); err != nil {
			errs = append(errs, fmt.Errorf("--extract: %w", err))
		}
	}
	errs = append(errs, o.checkValues()...)
	errs = append(errs, o.tls.check()...)
	errs = append(errs, o.checkOutput()...)
	errs = append(errs, o.session.check()...)
	if err := errors.Join(errs...); err != nil {
		return &exitError{code: 2, err: err}
	}
	l, err := newLogger(o.stderr, o.logLevel)
	if err != nil {
		return err
	}
	o.log = l
	return nil
}

// deployment is the deployment the flags name; admin names the
// administration command that opens it ("" for a crawl).
func (o *options) deployment(admin string) deployment.Config {
	order, _ := broker.ParseOrder(o.order)
	return deployment.Config{
		Broker: o.broker, Filter: o.dedup, Order: order, Dir: o.dataDirFlag,
		RedisURL: o.redisURL, StartURLsSet: o.startSet,
		AMQPURL: o.amqpURL, AMQPManagementURL: o.amqpManagementURL, AMQPQueueType: o.amqpQueueType,
		AMQPNonDurable: !o.amqpDurable, AMQPRecreate: o.amqpRecreate,
		NATSURL: o.natsURL, NATSDomain: o.natsDomain, NATSReplicas: o.natsReplicas, Partitions: o.partitions,
		TLS:            o.tls.clone(),
		FilterCapacity: o.bloomCapacity, FilterFPRate: o.bloomFPRate,
		Admin: admin, Flush: o.flush, Stderr: o.stderr,
	}
}

// open opens the deployment the flags name, for the crawl they describe
// or for the administration command admin.
func (o *options) open(ctx context.Context, admin string) (*deployment.Deployment, error) {
	d, err := deployment.Open(ctx, o.deployment(admin), o.engineConfig())
	if errors.Is(err, deployment.ErrConfig) {
		return nil, &exitError{code: 2, err: err}
	}
	return d, err
}

// settingFlags lists the flags of the settings stored with a crawl
// (engine.SettingNames), "--allow-domain, --allow-private, …"; those
// that --override-settings cannot change (engine.FixedSettings) only if
// fixed.
func settingFlags(fixed bool) string {
	var out []string
	for _, n := range engine.SettingNames {
		if fixed || !slices.Contains(engine.FixedSettings, n) {
			out = append(out, "--"+n)
		}
	}
	return strings.Join(out, ", ")
}

// adopt names the crawl settings whose flags were not given: the worker
// takes those from the crawl (see engine.Config.Adopt). The settings are
// named as their flags.
func adopt(fs *pflag.FlagSet) []string {
	var out []string
	for _, n := range engine.SettingNames {
		if f := fs.Lookup(n); f == nil || !f.Changed {
			out = append(out, n)
		}
	}
	return out
}

// autoThrottle is the --autothrottle configuration, or nil.
func (o *options) autoThrottle() *engine.AutoThrottle {
	if !o.autothrottle {
		return nil
	}
	a := o.throttle
	return &a
}

// engineConfig builds the crawl configuration from the flags.
func (o *options) engineConfig() engine.Config {
	cfg := engine.Config{
		Name:        o.name,
		Concurrency: o.concurrency,
		PerHost:     o.perHost,
		Delay:       o.delay,
		MaxDepth:    cmp.Or(o.maxDepth, -1), // 0 here is unlimited, -1 for the engine
		MaxPages:    o.maxPages,
		MaxLinks:    o.maxLinks,
		// 0 here is no guard, -1 for the engine
		MaxQueryValues:  cmp.Or(o.maxQueryValues, -1),
		MaxPagesPerHost: o.maxPagesPerHost,
		Partitions:      o.partitions,
		AllowedDomains:  o.allowDomains,
		Include:         o.include,
		Exclude:         o.exclude,
		IdleTimeout:     o.idleTimeout,
		Lease:           o.lease,
		IgnoreRobots:    o.ignoreRobot,
		ErrorItems:      o.errorItems,
		MaxRetries:      o.retryTimes,
		RetryBackoff:    o.retryBackoff,
		FailureTimeout:  o.failureTimeout,
		Fetch:           engine.FetchConfig{UserAgent: o.userAgent, AllowPrivate: o.allowPrivate, Logger: o.log},
		Logger:          o.log,
	}
	o.session.apply(&cfg.Fetch)
	cfg.PartitionBy, _ = broker.ParsePartitionBy(o.partitionBy) // checked by setup
	cfg.Sitemaps = o.sitemaps
	cfg.AutoThrottle = o.autoThrottle()
	if o.retryTimes == 0 {
		cfg.MaxRetries = -1 // engine.Config's 0 means the default
	}
	if o.failureTimeout == 0 {
		cfg.FailureTimeout = -1 // never give up
	}
	if len(o.extract) > 0 {
		cfg.Extract = make(map[string]string, len(o.extract))
		for _, e := range o.extract {
			name, sel, _ := strings.Cut(e, "=")
			cfg.Extract[name] = sel
		}
	}
	return cfg
}
