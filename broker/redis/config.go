package redis

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/broker"
)

// Defaults of Config's zero values.
const (
	DefaultLease         = 30 * time.Second
	DefaultMaxDeliveries = 5
	DefaultBlockTimeout  = time.Second
)

// Config configures a Broker. The zero value of each field but Client is
// its documented default.
type Config struct {
	// Client is the Redis connection: a *goredis.Client, a
	// *goredis.ClusterClient or a failover client. Required. The broker
	// never closes it. Each Receive waiting for messages holds one of its
	// pooled connections while it waits (at most BlockTimeout, and never
	// past the caller's deadline), and each open consumer (Consume) holds
	// one for as long as it is open: size its pool for those plus the
	// other traffic. go-redis closes an idle pooled connection only when
	// it hands it out again, most recently used first, so a pool keeps
	// what its busiest moment opened; with PoolFIFO and a short
	// ConnMaxIdleTime it shrinks once idle (trawl's CLI: 1.5s, and
	// PipelinePoolSize -1, so that an idle worker holds two connections).
	Client goredis.UniversalClient
	// Order is how queues order messages (default broker.Priority). All
	// brokers using a queue must agree on it; a queue written in another
	// mode fails with a WRONGTYPE error.
	Order broker.Order
	// Lease is how long a delivery stays with its consumer before it is
	// handed to another (0: DefaultLease); Delivery.Extend extends it.
	// Millisecond resolution.
	Lease time.Duration
	// MaxDeliveries is how many times a message is delivered before a
	// Nack or an expired lease moves it to the dead letters
	// (0: DefaultMaxDeliveries).
	MaxDeliveries int
	// BlockTimeout bounds one blocking wait of Receive on the server (0:
	// DefaultBlockTimeout). A waiting Receive looks at the queue again
	// after it, so it also bounds how late one notices a lease that ran
	// out on a queue nothing else happens to. Keep it below the client's
	// ReadTimeout (go-redis default 3s). A consumer waits up to the longer
	// of BlockTimeout and Lease (see Consume), with the read timeout its
	// wait needs.
	BlockTimeout time.Duration
	// Partitions splits every queue into that many partitions (0: 1, at
	// most broker.MaxPartitions), each with its keys under a hash tag of
	// its own (internal/redislayout.PartitionQueueKeys), so that a
	// crawl's queue spreads over the primaries of a Cluster. A message
	// goes to the partition of its Key (broker.PartitionOf). With one
	// partition the keys are those of a broker without partitions. All
	// brokers using a queue must agree on it.
	Partitions int
	// Logger receives lifecycle and warning logs (default: discarded).
	Logger *slog.Logger
}

// Validate reports every problem of c at once.
func (c Config) Validate() error {
	var errs []error
	if c.Client == nil {
		errs = append(errs, errors.New("nil Client"))
	}
	switch c.Order {
	case broker.Priority, broker.FIFO, broker.LIFO:
	default:
		errs = append(errs, fmt.Errorf("unknown Order %d", c.Order))
	}
	if c.Lease < 0 || (c.Lease > 0 && c.Lease < time.Millisecond) {
		errs = append(errs, fmt.Errorf("bad Lease %v: want 0 (default) or at least 1ms", c.Lease))
	}
	if c.MaxDeliveries < 0 {
		errs = append(errs, fmt.Errorf("MaxDeliveries %d: want 0 (default) or more", c.MaxDeliveries))
	}
	if c.BlockTimeout < 0 || (c.BlockTimeout > 0 && c.BlockTimeout < time.Millisecond) {
		errs = append(errs, fmt.Errorf("BlockTimeout %v: want 0 (default) or at least 1ms", c.BlockTimeout))
	}
	if c.Partitions < 0 || c.Partitions > broker.MaxPartitions {
		errs = append(errs, fmt.Errorf("Partitions %d: want 0 (one) to %d", c.Partitions, broker.MaxPartitions))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: redis broker config: %w", broker.ErrInvalid, err)
	}
	return nil
}

// withDefaults returns c with its zero values replaced by the defaults.
func (c Config) withDefaults() Config {
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.MaxDeliveries == 0 {
		c.MaxDeliveries = DefaultMaxDeliveries
	}
	if c.BlockTimeout == 0 {
		c.BlockTimeout = DefaultBlockTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Partitions = max(c.Partitions, 1)
	return c
}

// mode is how scripts name the order.
func (c Config) mode() string {
	switch c.Order {
	case broker.FIFO:
		return "f"
	case broker.LIFO:
		return "l"
	}
	return "p"
}
