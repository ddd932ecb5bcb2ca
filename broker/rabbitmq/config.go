package rabbitmq

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trawlhq/trawl/broker"
)

// Defaults of Config's zero values.
const (
	DefaultMaxPriority   = 10
	DefaultLease         = 30 * time.Second
	DefaultMaxDeliveries = 5
	DefaultName          = "trawl"
	// maxPrefetch is the largest prefetch count AMQP can express.
	maxPrefetch = 1<<16 - 1
)

// QueueType is the type of the queues a Broker declares.
type QueueType int

const (
	// Classic queues live on one node of a cluster (the default).
	Classic QueueType = iota
	// Quorum queues are replicated on the nodes of a cluster (Raft): a
	// message a publish confirmed is on a majority of them. The
	// delay queues dead-letter back at least once (x-dead-letter-strategy
	// at-least-once, which needs x-overflow reject-publish).
	Quorum
)

// String returns "classic" or "quorum".
func (q QueueType) String() string {
	switch q {
	case Classic:
		return "classic"
	case Quorum:
		return "quorum"
	}
	return "queuetype(" + strconv.Itoa(int(q)) + ")"
}

// ParseQueueType parses "classic" or "quorum".
func ParseQueueType(s string) (QueueType, error) {
	switch s {
	case "classic":
		return Classic, nil
	case "quorum":
		return Quorum, nil
	}
	return 0, fmt.Errorf("%w: queue type %q: want classic or quorum", broker.ErrInvalid, s)
}

// Config configures a Broker. The zero value of each field but URL is its
// documented default.
type Config struct {
	// URL is the server: amqp://user:password@host:port/vhost, or amqps://
	// for TLS. Required. The nodes of a cluster may be listed,
	// comma-separated: the broker connects to the first that answers and,
	// when its connection drops, tries them in turn from the one it had.
	URL string
	// QueueType is the type of the queues the broker declares: Classic
	// (the default) or Quorum, replicated across a cluster's nodes, which
	// survive the loss of a minority of them. Quorum queues are durable
	// and, in RabbitMQ 3.x, have no priorities: Quorum needs FIFO order.
	QueueType QueueType
	// TLS configures amqps:// connections (nil: the system roots, the
	// URL's host name).
	TLS *tls.Config
	// ManagementURL is the base URL of the server's management HTTP API
	// (http://user:password@host:15672; without credentials, the first
	// URL's are used). Optional: Counts asks the API when it is set and falls
	// back to counting over AMQP (with a warning) when the API fails.
	// Empty: Counts counts over AMQP alone, which works with a stock
	// server (no management plugin) and without its statistics' lag.
	ManagementURL string
	// Name names the broker's connection in the management UI
	// (default "trawl").
	Name string
	// Order is how queues order messages: broker.Priority (the default,
	// an x-max-priority queue) or broker.FIFO (a plain queue). broker.LIFO
	// is not supported: an AMQP queue delivers from its head only.
	Order broker.Order
	// MaxPriority is the queues' x-max-priority (0: DefaultMaxPriority;
	// at most 255, RabbitMQ advises 10 or less). Unused in FIFO mode.
	MaxPriority uint8
	// PriorityOffset is added to a message's priority before it is
	// clamped to 0..MaxPriority: with offset 5 and MaxPriority 10,
	// priorities -5..5 keep their order and anything beyond falls on 0 or
	// 10. The message's own priority travels in a header and comes back
	// unchanged.
	PriorityOffset int
	// NonDurable declares transient queues and publishes transient
	// messages: faster, but a server restart loses them. Default: durable
	// queues and persistent messages.
	NonDurable bool
	// Prefetch bounds how many messages one Receive asks the server for
	// (its AMQP prefetch count): Receive(ctx, q, max) takes at most
	// min(max, Prefetch). 0: max alone (at most 65535).
	Prefetch int
	// Lease is how long a delivery stays with its consumer before the
	// broker gives it back to the queue (0: DefaultLease); Delivery.Extend
	// extends it. It is kept by this process (AMQP has no
	// lease): RabbitMQ's own consumer_timeout (30 minutes by default)
	// still bounds a delivery, however often it is extended.
	Lease time.Duration
	// MaxDeliveries is how many times a message is delivered before it
	// goes to the dead-letter queue (0: DefaultMaxDeliveries).
	MaxDeliveries int
	// Partitions splits every queue Q into that many partitions, each an
	// AMQP queue of its own (with its own dead letters and delays): Q for
	// partition 0, Q+":p<N>" for partition N (see broker.Partitioned; 0:
	// 1, today's single queues). A message goes to the partition of its
	// Key; a consumer drains them all in turn. With Quorum queues, the
	// queues of a broker with partitions are declared with
	// x-queue-leader-locator=balanced, so that their leaders spread over
	// a cluster's nodes. Every broker of a queue must have the same count
	// (trawl stores it with the crawl).
	Partitions int
	// Recreate deletes a queue that exists with other arguments than this
	// configuration declares (another x-max-priority, durability, dead
	// letter settings) and declares it anew, losing its messages. Without
	// it such a queue is an error (ErrQueueMismatch).
	Recreate bool
	// Logger receives lifecycle and warning logs (default: discarded).
	Logger *slog.Logger
}

// Validate reports every problem of c at once.
func (c Config) Validate() error {
	var errs []error
	if c.Partitions < 0 || c.Partitions > broker.MaxPartitions {
		errs = append(errs, fmt.Errorf("bad Partitions %d: want 0 (default) to %d", c.Partitions, broker.MaxPartitions))
	}
	if c.URL == "" {
		errs = append(errs, errors.New("URL is empty"))
	} else {
		for i, u := range c.urls() {
			if _, err := amqp.ParseURI(u); err != nil {
				errs = append(errs, fmt.Errorf("URL %d of %d: %w", i+1, len(c.urls()), err))
			}
		}
	}
	switch c.QueueType {
	case Classic:
	case Quorum:
		if c.Order == broker.Priority {
			errs = append(errs, errors.New("quorum queues have no priorities in RabbitMQ 3.x: use FIFO Order with QueueType Quorum"))
		}
		if c.NonDurable {
			errs = append(errs, errors.New("quorum queues are durable: NonDurable cannot be set with QueueType Quorum"))
		}
	default:
		errs = append(errs, fmt.Errorf("unknown QueueType %d", c.QueueType))
	}
	if c.ManagementURL != "" {
		if u, err := url.Parse(c.ManagementURL); err != nil {
			errs = append(errs, fmt.Errorf("ManagementURL: %w", err))
		} else if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
			errs = append(errs, fmt.Errorf("ManagementURL %q: want http://host:port or https://host:port", redact(u)))
		}
	}
	switch c.Order {
	case broker.Priority, broker.FIFO:
	case broker.LIFO:
		errs = append(errs, errors.New("lifo Order is not supported: an AMQP queue delivers from its head only"))
	default:
		errs = append(errs, fmt.Errorf("unknown Order %d", c.Order))
	}
	if c.Prefetch < 0 || c.Prefetch > maxPrefetch {
		errs = append(errs, fmt.Errorf("bad Prefetch %d: want 0 (default) to %d", c.Prefetch, maxPrefetch))
	}
	if c.Lease < 0 || (c.Lease > 0 && c.Lease < 10*time.Millisecond) {
		errs = append(errs, fmt.Errorf("bad Lease %v: want 0 (default) or at least 10ms", c.Lease))
	}
	if c.MaxDeliveries < 0 {
		errs = append(errs, fmt.Errorf("MaxDeliveries %d: want 0 (default) or more", c.MaxDeliveries))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: rabbitmq broker config: %w", broker.ErrInvalid, err)
	}
	return nil
}

// withDefaults returns c with its zero values replaced by the defaults.
func (c Config) withDefaults() Config {
	c.Partitions = max(c.Partitions, 1)
	if c.MaxPriority == 0 {
		c.MaxPriority = DefaultMaxPriority
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.MaxDeliveries == 0 {
		c.MaxDeliveries = DefaultMaxDeliveries
	}
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// urls returns the URLs URL lists.
func (c Config) urls() []string {
	us := strings.Split(c.URL, ",")
	for i, u := range us {
		us[i] = strings.TrimSpace(u)
	}
	return us
}

// amqpPriority maps a message priority into the queue's range:
// p+PriorityOffset clamped to 0..MaxPriority. The mapping never reverses
// two priorities; those beyond the range share its ends.
func (c Config) amqpPriority(p int) uint8 {
	if c.Order != broker.Priority {
		return 0
	}
	v := int64(p) + int64(c.PriorityOffset)
	return uint8(min(max(v, 0), int64(c.MaxPriority)))
}

// prefetch is the prefetch count of a Receive asking for max messages.
func (c Config) prefetch(max int) int {
	n := min(max, maxPrefetch)
	if c.Prefetch > 0 {
		n = min(n, c.Prefetch)
	}
	return n
}

// managementURL returns the management API's base URL, nil if not
// configured. A URL without credentials takes the AMQP URL's.
func (c Config) managementURL() (*url.URL, error) {
	if c.ManagementURL == "" {
		return nil, nil
	}
	u, err := url.Parse(strings.TrimSuffix(c.ManagementURL, "/"))
	if err != nil {
		return nil, err
	}
	if u.User == nil {
		uri, err := amqp.ParseURI(c.urls()[0])
		if err != nil {
			return nil, err
		}
		u.User = url.UserPassword(uri.Username, uri.Password)
	}
	return u, nil
}

// redact returns u as a string without its password.
func redact(u *url.URL) string {
	if u == nil {
		return ""
	}
	return u.Redacted()
}
