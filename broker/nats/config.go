package nats

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/trawlhq/trawl/broker"
)

// Defaults of Config's zero values.
const (
	DefaultBands         = 5
	DefaultLease         = 30 * time.Second
	DefaultMaxDeliveries = 5
	DefaultTimeout       = 5 * time.Second
	// MaxBands is the largest number of priority bands.
	MaxBands = 16
	// MaxReplicas is the largest replication factor JetStream accepts.
	MaxReplicas = 5
	// MinLease is the shortest lease.
	MinLease = 10 * time.Millisecond
	// MaxDelay is the longest delay a Nack takes; longer delays are cut to
	// it. A delayed message whose Trawl-Delay header is above it (or is not
	// a non-negative number) was not written by trawl: it is dead-lettered
	// with the reason instead of being held for that long.
	MaxDelay = 24 * time.Hour
)

// Storage is where JetStream keeps a queue's streams.
type Storage int

const (
	// FileStorage keeps messages on disk: they survive a server restart. The default.
	FileStorage Storage = iota
	// MemoryStorage keeps messages in the server's memory only.
	MemoryStorage
)

// String returns "file" or "memory".
func (s Storage) String() string {
	switch s {
	case FileStorage:
		return "file"
	case MemoryStorage:
		return "memory"
	}
	return "storage(?)"
}

// Config configures a Broker. The zero value of each field but Conn is its
// documented default.
type Config struct {
	// Conn is the connection to the NATS server (see Connect, or
	// Embedded.Conn). Required. The broker never closes it; any number of
	// brokers may share it.
	Conn *natsgo.Conn
	// Order is broker.Priority (the default) or broker.FIFO. JetStream
	// streams are append-only logs consumed from the front: broker.LIFO is
	// not supported and fails Validate.
	Order broker.Order
	// Bands is the number of priority bands in Priority order
	// (0: DefaultBands; at most MaxBands). Band k holds the priorities
	// lo+k, where lo = -(Bands-1)/2, and the lowest and highest band also
	// hold every priority below and above: with five bands, ≤-2, -1, 0, 1
	// and ≥2. Ignored in FIFO order, which has one band. All brokers
	// using a queue must agree on Order and Bands.
	Bands int
	// Lease is the consumers' AckWait: how long a delivery stays with its
	// consumer before JetStream hands it to another (0: DefaultLease; at
	// least MinLease). The last broker to open a queue sets it on the
	// server; brokers sharing a queue should agree.
	Lease time.Duration
	// MaxDeliveries is how many times a message is delivered before a
	// Nack or an expired lease moves it to the dead letters
	// (0: DefaultMaxDeliveries).
	MaxDeliveries int
	// Storage is where new streams keep their messages (default
	// FileStorage). Existing streams keep theirs.
	Storage Storage
	// Replicas is the replication factor of the streams and of the
	// metadata bucket this broker creates on a JetStream cluster (0: 1; at
	// most MaxReplicas). Three keeps a queue whole, and serving, while one
	// server is down. Streams and a bucket that exist keep theirs.
	Replicas int
	// Partitions splits every queue into that many partitions, each a
	// work stream (and a dead-letter stream) of its own with its own
	// leader (see broker.Partitioned; 0: 1, today's single streams). A
	// message goes to the partition of its Key; consumers drain them all
	// in turn. On a cluster, a broker that creates a queue's streams with
	// Replicas > 1 moves their leaders so that each server leads as few
	// as it can. Every broker of a queue must have the same count (trawl
	// stores it with the crawl).
	Partitions int
	// Domain is the JetStream domain of the queues (a leaf node's or a
	// hub's JetStream, say); empty: the account's own. Every JetStream
	// request, and so every stream, consumer and the metadata bucket,
	// goes to that domain's API ($JS.<Domain>.API).
	Domain string
	// Timeout bounds one request to the server when the caller's context
	// has no earlier deadline (0: DefaultTimeout).
	Timeout time.Duration
	// Logger receives lifecycle and warning logs (default: discarded).
	Logger *slog.Logger
}

// Validate reports every problem of c at once, wrapping broker.ErrInvalid.
func (c Config) Validate() error {
	var errs []error
	if c.Conn == nil {
		errs = append(errs, errors.New("Conn is nil"))
	}
	switch c.Order {
	case broker.Priority, broker.FIFO:
	case broker.LIFO:
		errs = append(errs, errors.New("lifo Order is not supported (JetStream streams are consumed from the front)"))
	default:
		errs = append(errs, fmt.Errorf("unknown Order %d", c.Order))
	}
	if c.Bands < 0 || c.Bands > MaxBands {
		errs = append(errs, fmt.Errorf("bad Bands %d: want 0 (default) to %d", c.Bands, MaxBands))
	}
	if c.Lease < 0 || (c.Lease > 0 && c.Lease < MinLease) {
		errs = append(errs, fmt.Errorf("bad Lease %v: want 0 (default) or at least %v", c.Lease, MinLease))
	}
	if c.MaxDeliveries < 0 {
		errs = append(errs, fmt.Errorf("MaxDeliveries %d: want 0 (default) or more", c.MaxDeliveries))
	}
	if c.Partitions < 0 || c.Partitions > broker.MaxPartitions {
		errs = append(errs, fmt.Errorf("bad Partitions %d: want 0 (default) to %d", c.Partitions, broker.MaxPartitions))
	}
	switch c.Storage {
	case FileStorage, MemoryStorage:
	default:
		errs = append(errs, fmt.Errorf("unknown Storage %d", c.Storage))
	}
	if c.Replicas < 0 || c.Replicas > MaxReplicas {
		errs = append(errs, fmt.Errorf("bad Replicas %d: want 0 (default) to %d", c.Replicas, MaxReplicas))
	}
	if strings.ContainsAny(c.Domain, ".*> \t\r\n") {
		errs = append(errs, fmt.Errorf("bad Domain %q: want a single subject token (no '.', '*', '>' or spaces)", c.Domain))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("bad Timeout %v: want 0 (default) or more", c.Timeout))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: nats broker config: %w", broker.ErrInvalid, err)
	}
	return nil
}

// withDefaults returns c with its zero values replaced by the defaults.
func (c Config) withDefaults() Config {
	if c.Bands == 0 {
		c.Bands = DefaultBands
	}
	if c.Order == broker.FIFO {
		c.Bands = 1
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.MaxDeliveries == 0 {
		c.MaxDeliveries = DefaultMaxDeliveries
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	c.Partitions = max(c.Partitions, 1)
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// BandPriorities returns one priority per band of c, lowest first: the
// priorities c orders exactly. With the default five bands, -2 … 2; in
// FIFO order, just 0.
func (c Config) BandPriorities() []int {
	c = c.withDefaults()
	lo, hi := bandRange(c.Bands)
	ps := make([]int, 0, c.Bands)
	for p := lo; p <= hi; p++ {
		ps = append(ps, p)
	}
	return ps
}

// ConnectConfig configures Connect. The zero value connects without
// credentials, with nats.go's defaults, and reconnects forever.
type ConnectConfig struct {
	// Name is the client name the server shows (default "trawl").
	Name string
	// CredsFile is a NATS credentials file (user JWT and NKey seed).
	CredsFile string
	// NKeyFile is a file holding an NKey seed.
	NKeyFile string
	// Token is an authentication token.
	Token string
	// User and Password authenticate with a user name and password.
	// (A URL may also carry them: nats://user:pass@host or nats://token@host.)
	User, Password string
	// TLS configures TLS connections, which are made for tls:// URLs and
	// to servers that require TLS (nil: verified against the system's
	// roots). It does not make TLS required: a tls:// URL does.
	TLS *tls.Config
	// RootCAs are PEM files of the certificate authorities to trust.
	RootCAs []string
	// CertFile and KeyFile are a client certificate and its key, PEM.
	CertFile, KeyFile string
	// ReconnectWait is the pause between reconnection attempts
	// (0: nats.go's default, 2s).
	ReconnectWait time.Duration
	// Logger receives disconnections and reconnections (default: discarded).
	Logger *slog.Logger
}

// Connect connects to the NATS servers listed in url, comma-separated
// (nats://host:4222, tls://host:4222, with credentials in the URL if
// wanted), and returns a connection for Config.Conn that reconnects
// forever once established. The first connection must succeed before
// ctx's deadline (or nats.go's 2s connect timeout). The caller closes it.
func Connect(ctx context.Context, url string, o ConnectConfig) (*natsgo.Conn, error) {
	if strings.TrimSpace(url) == "" {
		return nil, fmt.Errorf("%w: nats connect: empty url", broker.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("nats connect %s: %w", url, err)
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	name := o.Name
	if name == "" {
		name = "trawl"
	}
	opts := []natsgo.Option{
		natsgo.Name(name),
		natsgo.MaxReconnects(-1),
		natsgo.DisconnectErrHandler(func(_ *natsgo.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected, reconnecting", "error", err)
			}
		}),
		natsgo.ReconnectHandler(func(nc *natsgo.Conn) {
			log.Warn("nats reconnected", "server", nc.ConnectedUrlRedacted())
		}),
	}
	if dl, ok := ctx.Deadline(); ok {
		opts = append(opts, natsgo.Timeout(max(time.Until(dl), time.Millisecond)))
	}
	if o.ReconnectWait > 0 {
		opts = append(opts, natsgo.ReconnectWait(o.ReconnectWait))
	}
	if o.CredsFile != "" {
		opts = append(opts, natsgo.UserCredentials(o.CredsFile))
	}
	if o.NKeyFile != "" {
		opt, err := natsgo.NkeyOptionFromSeed(o.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("nats connect: nkey file %s: %w", o.NKeyFile, err)
		}
		opts = append(opts, opt)
	}
	if o.Token != "" {
		opts = append(opts, natsgo.Token(o.Token))
	}
	if o.User != "" || o.Password != "" {
		opts = append(opts, natsgo.UserInfo(o.User, o.Password))
	}
	if o.TLS != nil {
		// Not natsgo.Secure, which would require TLS of every server.
		cfg := o.TLS.Clone()
		opts = append(opts, func(no *natsgo.Options) error { no.TLSConfig = cfg; return nil })
	}
	if len(o.RootCAs) > 0 {
		opts = append(opts, natsgo.RootCAs(o.RootCAs...))
	}
	if o.CertFile != "" || o.KeyFile != "" {
		opts = append(opts, natsgo.ClientCert(o.CertFile, o.KeyFile))
	}
	nc, err := natsgo.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("nats connect %s: %w", redact(url), err)
	}
	return nc, nil
}

// redact removes credentials from the URLs in a comma-separated list.
func redact(url string) string {
	parts := strings.Split(url, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if at := strings.LastIndexByte(p, '@'); at >= 0 {
			scheme := ""
			if j := strings.Index(p, "://"); j >= 0 && j < at {
				scheme = p[:j+3]
			}
			p = scheme + "***@" + p[at+1:]
		}
		parts[i] = p
	}
	return strings.Join(parts, ",")
}
