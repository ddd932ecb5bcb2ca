package broker

import (
	"context"
	"fmt"
	"hash/crc32"
	"net"
	"strings"

	"golang.org/x/net/publicsuffix"
)

// A crawl's queues may be split into partitions (trawl --partitions N), so
// that one crawl spreads over the servers of a broker cluster: a queue of
// a broker with N partitions is N queues of the backend (streams on NATS,
// queues on RabbitMQ), each with its own leader. A message goes to the
// partition of its Key (see PartitionOf); one without a Key to partition
// 0. A broker's consumers drain all the partitions of a queue, and its
// counts add them up. With one partition (the default) a broker's layout
// and names are those of a broker without partitions.
//
// The partition of a request is that of its host (or of its registrable
// domain, PartitionByDomain), so that one host's queue, filter entries and
// politeness state sit in one partition. PartitionKey and PartitionOf are
// the one definition of it: a crawl's stored messages depend on them, and
// they must not change between versions.

// MaxPartitions bounds a crawl's partition count.
const MaxPartitions = 256

// Partitioned is implemented by brokers whose queues are split into
// partitions.
type Partitioned interface {
	// Partitions is the number of partitions of every queue of the
	// broker: 1 when they are not split.
	Partitions() int
}

// PartitionBy says what a request's partition key is: its host, or its
// registrable domain.
type PartitionBy uint8

const (
	// PartitionByHost keys a request by its host name. The default.
	PartitionByHost PartitionBy = iota
	// PartitionByDomain keys a request by its registrable domain (the
	// public suffix and one label: "example.co.uk" for
	// "www.example.co.uk"), so that a site's subdomains share a
	// partition.
	PartitionByDomain
)

// String returns "host" or "domain".
func (p PartitionBy) String() string {
	switch p {
	case PartitionByHost:
		return "host"
	case PartitionByDomain:
		return "domain"
	}
	return "partition-by(?)"
}

// MarshalText returns String's text (how crawl settings store it).
func (p PartitionBy) MarshalText() ([]byte, error) {
	if p > PartitionByDomain {
		return nil, fmt.Errorf("%w: partition key %d", ErrInvalid, p)
	}
	return []byte(p.String()), nil
}

// UnmarshalText parses what MarshalText returns.
func (p *PartitionBy) UnmarshalText(b []byte) error {
	v, err := ParsePartitionBy(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// ParsePartitionBy parses "host" (or "") or "domain".
func ParsePartitionBy(s string) (PartitionBy, error) {
	switch s {
	case "", "host":
		return PartitionByHost, nil
	case "domain":
		return PartitionByDomain, nil
	}
	return 0, fmt.Errorf("%w: unknown partition key %q (want host or domain)", ErrInvalid, s)
}

// PartitionKey returns the partition key of a request to host (a URL's
// host, with or without a port): the host name in lower case without its
// port and trailing dot, or, by PartitionByDomain, its registrable domain
// (the host name itself when it has none: an IP address, localhost, a
// public suffix).
func PartitionKey(host string, by PartitionBy) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if by != PartitionByDomain || net.ParseIP(host) != nil {
		return host
	}
	if d, err := publicsuffix.EffectiveTLDPlusOne(host); err == nil {
		return d
	}
	return host
}

// PartitionOf returns the partition, from 0 to n-1, of a message with key
// among n partitions: the CRC-32 (IEEE) of the key modulo n. A message
// without a key, and any message when n <= 1, is in partition 0.
func PartitionOf(key string, n int) int {
	if n <= 1 || key == "" {
		return 0
	}
	return int(crc32.ChecksumIEEE([]byte(key)) % uint32(n))
}

// PartitionPreferrer is implemented by the consumers (see Broker.Consume)
// of a queue split into partitions (Partitioned) that can be told which
// partitions are this worker's own, so that each host of a crawl is
// fetched by one worker (its partition's) and not by all: one worker then
// dials and handshakes each host, keeps its robots.txt, and holds its
// politeness slots, as a distributed crawler assigns each host to one
// agent (Mercator, IRLbot, UbiCrawler).
//
// Prefer(own) makes the consumer lease from the partitions in own as it
// leases from all now, and from the others only when none of its own has
// messages (the last lease of each came back empty), its read-ahead has
// room, and that has lasted a moment while its caller waited in Next (a
// second on Redis and NATS): it steals work, so that no worker idles while any
// partition has some, and the partitions of a worker that died are taken
// by the idle others at once, without waiting for its announcement to
// expire. The moment matters: a worker's own partitions run dry all
// through a crawl (it leases what they get as it comes, into its
// workbench), and a consumer that stole whenever they were dry spread
// every host of a 3-worker test crawl over two workers. nil own, the
// default, makes every partition alike; numbers outside [0, Partitions)
// are ignored. An own that is not nil but names none of the queue's
// partitions (empty) makes the consumer a thief only: it has no
// partition of its own, so it takes from the others only as it steals,
// once its caller has waited in Next for the moment. It takes effect at
// the consumer's next lease: what it holds is kept. Prefer may be called
// from any goroutine, concurrently with Next and itself. The engine calls
// it with a balanced assignment of the partitions over the crawl's live
// workers (Roster): empty for a worker beyond the partitions' count (more
// workers than partitions), nil for one not yet among them. Redis and NATS consumers are; RabbitMQ's, whose per-partition
// subscriptions push under a fixed window, and the in-memory broker, which
// keeps one queue, are not.
type PartitionPreferrer interface {
	Prefer(own []int)
}

// PartitionCounter is implemented by brokers that count each partition
// of a queue (trawl stats shows them).
type PartitionCounter interface {
	// PartitionCounts returns the counts of each partition of queue, in
	// partition order; they add up to Counter's.
	PartitionCounts(ctx context.Context, queue string) ([]Counts, error)
}

// SumCounts adds up the counts of a queue's partitions.
func SumCounts(parts []Counts) Counts {
	var c Counts
	for _, p := range parts {
		c.Ready += p.Ready
		c.Delayed += p.Delayed
		c.InFlight += p.InFlight
		c.Dead += p.Dead
	}
	return c
}
