package broker

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Backends wrap them with %w; callers match with errors.Is.
var (
	// ErrClosed is returned by every operation on a closed broker, and by
	// settling a delivery of a closed broker.
	ErrClosed = errors.New("broker: closed")
	// ErrSettled is returned when a delivery is acknowledged, nacked or
	// rejected a second time.
	ErrSettled = errors.New("broker: delivery already settled")
	// ErrLeaseLost is returned when a delivery is settled or extended after
	// its lease expired and the message was given back to the queue (it may
	// already be with another consumer).
	ErrLeaseLost = errors.New("broker: lease lost")
	// ErrInvalid is returned for bad arguments (empty queue name, max < 1).
	ErrInvalid = errors.New("broker: invalid argument")
	// ErrNotFound is returned by Metadata.GetMeta for a key with no value.
	ErrNotFound = errors.New("broker: not found")
	// ErrExists is returned by Metadata.CreateMeta for a key that has a value.
	ErrExists = errors.New("broker: already exists")
)

// Message is what a broker carries: an opaque body and a priority.
// Higher priorities are delivered first (in Priority order); among equal
// priorities a queue keeps its order mode (FIFO or LIFO).
type Message struct {
	Body     []byte
	Priority int
	// Key chooses the partition of a broker whose queues are split (see
	// Partitioned, PartitionOf): a request's PartitionKey. Brokers
	// without partitions ignore it; it is not stored, and the Message of
	// a delivery has none.
	Key string
}

// Delivery is one message handed to one consumer under a lease. It must be
// settled exactly once with Ack, Nack or Reject. A delivery that is never
// settled comes back to the queue when its lease expires (or, on backends
// that track connections, when its consumer disconnects).
type Delivery interface {
	// Message returns the delivered message.
	Message() Message
	// Queue names the queue the delivery came from.
	Queue() string
	// Attempt is 1 on the first delivery of a message and grows with each
	// redelivery (nack or expired lease).
	Attempt() int
	// Ack removes the message for good. Call it only after the work the
	// message stood for is durable.
	Ack(ctx context.Context) error
	// Nack gives the message back for another attempt, visible again after
	// delay (0: at once). A message whose attempts reach the broker's
	// maximum goes to the dead-letter queue instead.
	Nack(ctx context.Context, delay time.Duration) error
	// Reject moves the message to the queue's dead-letter queue at once,
	// with a reason (an undecodable payload, say).
	Reject(ctx context.Context, reason string) error
	// Release gives the message back at once without counting this
	// delivery: the next delivery has the same Attempt, and Release never
	// dead-letters it. It is for work that could not be finished for a
	// reason that is not the message's (a backend refusing writes: a
	// Redis server out of memory, a full disk), so that a failing backend
	// spends no delivery attempt. It writes no more than Nack does, and
	// on Redis it succeeds where the server refuses writes that grow its
	// memory.
	Release(ctx context.Context) error
	// Extend extends the lease to d from now, while the work the delivery
	// stands for is still in progress. It never shortens a lease.
	Extend(ctx context.Context, d time.Duration) error
}

// Broker is a set of named work queues shared by any number of consumers.
// Delivery is at-least-once.
type Broker interface {
	// Publish adds messages to queue. It returns once the broker has taken
	// them (as durably as the backend is configured to).
	Publish(ctx context.Context, queue string, msgs ...Message) error
	// Receive blocks until at least one message of queue is available, then
	// leases and returns up to max of them, highest priority first. It
	// returns ctx.Err() (wrapped) when ctx ends first.
	Receive(ctx context.Context, queue string, max int) ([]Delivery, error)
	// Consume opens a long-lived consumer of queue that reads ahead at
	// most prefetch deliveries (prefetch >= 1). A worker opens one per
	// queue and keeps it for the crawl; Receive is for one-off takes
	// (tools, tests). ctx bounds the opening only: the consumer lives
	// until its Close or the broker's. On a closed broker, Consume (or the
	// first Next of what it returns) fails with an error wrapping
	// ErrClosed. See Consumer for its promises.
	Consume(ctx context.Context, queue string, prefetch int) (Consumer, error)
	// Purge empties queue: ready, in-flight and dead messages alike.
	Purge(ctx context.Context, queue string) error
	// Counter counts a queue: the engine uses it to tell when a crawl is
	// done across all workers.
	Counter
	// DeadLetters reads and requeues the queues' dead letters (trawl
	// deadletter).
	DeadLetters
	// Close stops the broker gracefully; deliveries not yet settled come
	// back to their queues (at once or after their lease). Close is
	// idempotent.
	Close() error
}

// Consumer is a long-lived subscription to one queue, opened once with
// Broker.Consume, that keeps deliveries flowing with the backend's native
// mechanism (RabbitMQ basic.consume under basic.qos, a JetStream pull
// consumer, blocking pops on Redis) instead of a request per poll.
//
// Its promises, checked by broker/brokertest:
//   - Next returns deliveries in the queue's order (priority first), except
//     that read-ahead may reorder up to prefetch deliveries.
//   - At most prefetch deliveries are read ahead (leased to the consumer
//     but not yet returned by Next); the rest of the queue stays available
//     to other consumers. Deliveries returned by Next and not yet settled
//     do not count: a consumer with prefetch N that returned N deliveries,
//     none settled, still returns the next one. A broker that is an
//     UnsettledCounter says that its consumers count them instead.
//   - A delivery returned by Next is leased, settled and extended exactly
//     like one returned by Receive.
//   - Next returns an error wrapping ctx.Err() when ctx ends first, and one
//     wrapping ErrClosed once the consumer or its broker is closed. A
//     connection error (a broker restart) may be returned; the consumer
//     stays open and, once the broker is back, Next delivers again
//     (including messages published after the restart) without reopening.
//   - A consumer delivers what is published (or nacked, or comes back
//     from an expired lease) while it is open, promptly, for as long as
//     it is open.
//   - Close stops delivery and gives read-ahead deliveries back at once
//     (not after their lease); deliveries already returned by Next stay
//     valid and can still be settled. Close is idempotent and returns nil
//     when the consumer or its broker is already closed.
//   - A Next cancelled by its ctx loses nothing: what it did not return
//     the consumer returns later.
//
// Next must not be called from two goroutines at once.
type Consumer interface {
	// Next returns the next delivery, waiting until one is available.
	Next(ctx context.Context) (Delivery, error)
	// Close stops the consumer; see the type's promises.
	Close() error
}

// UnsettledCounter is implemented by brokers whose consumers count the
// deliveries returned by Next and not yet settled against their prefetch
// (RabbitMQ's basic.qos counts every unacknowledged delivery of a
// consumer, and a live consumer's count cannot be changed): such a
// consumer holds at most prefetch deliveries, read ahead or returned and
// unsettled, and returns no more until some are settled. A caller that
// keeps up to n deliveries unsettled while it reads on, and wants up to
// prefetch read ahead, asks Consume for prefetch + n. A consumer of a
// queue of N partitions (Partitioned) counts each partition apart, with a
// window of ceil(prefetch/N): it holds at most that many deliveries of
// one partition and prefetch+N-1 in all. It is optional
// because only RabbitMQ's consumers count so; a broker that is not one
// keeps returned deliveries out of its prefetch, as Consumer promises.
type UnsettledCounter interface {
	// CountsUnsettled reports whether the broker's consumers count
	// unsettled deliveries against their prefetch.
	CountsUnsettled() bool
}

// BatchAcker is implemented by brokers that acknowledge many deliveries in
// fewer round trips than one per delivery (Redis, RabbitMQ, NATS). Every
// delivery must come from this broker; the batch is acknowledged as if by
// Ack on each, and the error names the first that failed. It is optional
// because a broker without round trips (the in-memory one) saves nothing
// by it: the engine acknowledges one by one there.
type BatchAcker interface {
	AckBatch(ctx context.Context, ds ...Delivery) error
}

// BatchExtender is implemented by brokers that extend many leases in fewer
// round trips than one per delivery (Redis: one script call per queue
// partition). ExtendBatch extends the lease of each of ds, deliveries of
// this broker, to d from now, as Extend(ctx, d) on each would, and returns
// one error per delivery, in the order of ds (nil where the lease was
// extended): one wrapping ErrLeaseLost where the lease ran out,
// ErrSettled where the delivery was settled (before or while it was
// extended), ErrClosed once the broker is closed, ErrInvalid for a
// delivery of another broker. The engine extends the leases of what a
// worker holds (thousands of deliveries) through it. It is optional like
// BatchAcker: elsewhere the engine extends one delivery at a time.
type BatchExtender interface {
	ExtendBatch(ctx context.Context, d time.Duration, ds ...Delivery) []error
}

// Order is how a queue orders messages of equal priority.
type Order int

const (
	// Priority orders by priority, highest first, FIFO among equals. The default.
	Priority Order = iota
	// FIFO ignores priorities: first in, first out.
	FIFO
	// LIFO ignores priorities: last in, first out.
	LIFO
)

// String returns "priority", "fifo" or "lifo".
func (o Order) String() string {
	switch o {
	case Priority:
		return "priority"
	case FIFO:
		return "fifo"
	case LIFO:
		return "lifo"
	}
	return "order(?)"
}

// ParseOrder parses "priority", "fifo" or "lifo".
func ParseOrder(s string) (Order, error) {
	switch s {
	case "", "priority":
		return Priority, nil
	case "fifo":
		return FIFO, nil
	case "lifo":
		return LIFO, nil
	}
	return 0, fmt.Errorf("%w: unknown queue order %q (want priority, fifo or lifo)", ErrInvalid, s)
}

// Counts describes a queue at one moment.
type Counts struct {
	Ready    int64 // waiting to be delivered (including delayed ones)
	InFlight int64 // delivered, not yet settled
	Dead     int64 // in the dead-letter queue
	// Delayed are those of Ready not yet due (a retry's back-off, a nack
	// with a delay): counted in Ready too, so that Ready+InFlight still
	// says whether work is left.
	Delayed int64
}

// Counter counts queues. Every Broker is one; a store of start URLs kept
// outside the broker (Redis's {NAME}:start_urls) is one too, for its
// queue.
type Counter interface {
	// Counts returns queue's counts at one moment.
	Counts(ctx context.Context, queue string) (Counts, error)
}

// DeadLetter is a message in a dead-letter queue.
type DeadLetter struct {
	Message Message
	Reason  string
}

// DeadLetters reads and requeues dead-letter queues (trawl deadletter).
// Every Broker is one; a store of start URLs kept outside the broker
// (Redis's {NAME}:start_urls) keeps its own, so that a requeue puts them
// back where they came from.
type DeadLetters interface {
	// DeadLetters returns up to max dead letters of queue, oldest first,
	// without removing them.
	DeadLetters(ctx context.Context, queue string, max int) ([]DeadLetter, error)
	// Requeue moves up to max dead letters back to queue and says how many moved.
	Requeue(ctx context.Context, queue string, max int) (int, error)
}

// Metadata is implemented by brokers (and other stores of a deployment)
// that keep a few small values with a crawl, next to its queues: the
// crawl's settings (see engine.Settings). It is an optional interface,
// found by type assertion, rather than a message in a queue: a value that
// every worker reads when it joins, that one worker may replace, and that
// purging the crawl deletes, is a key-value record on every backend (a
// Redis hash, a NATS KV bucket, a map in memory), whereas a queue message
// is consumed by whoever reads it first. Values are at most a few KiB.
// The memory, Redis and NATS brokers are one; RabbitMQ keeps no values,
// so a RabbitMQ deployment keeps them in its Redis (redis.Meta), or not at
// all. The store that keeps a crawl's values also keeps its workers'
// announcements (Presence).
type Metadata interface {
	// GetMeta returns the value of key in crawl, or an error wrapping
	// ErrNotFound.
	GetMeta(ctx context.Context, crawl, key string) ([]byte, error)
	// SetMeta stores value under key in crawl, replacing any value.
	SetMeta(ctx context.Context, crawl, key string, value []byte) error
	// CreateMeta stores value under key in crawl if the key has none, and
	// returns an error wrapping ErrExists otherwise: of several workers
	// joining at once, exactly one creates the value.
	CreateMeta(ctx context.Context, crawl, key string, value []byte) error
	// PurgeMeta deletes every value of crawl.
	PurgeMeta(ctx context.Context, crawl string) error
	Presence
}

// Presence is where the workers of a crawl announce themselves, so that a
// command that would spoil a running crawl (trawl purge) can tell whether
// one runs. Every Metadata is one.
type Presence interface {
	// Announce says that worker id works on crawl, for ttl from now; a
	// worker announces again well within ttl for as long as it runs.
	Announce(ctx context.Context, crawl, id string, ttl time.Duration) error
	// Leave withdraws worker id's announcement at once.
	Leave(ctx context.Context, crawl, id string) error
	// Live counts the workers of crawl whose announcement has not expired.
	Live(ctx context.Context, crawl string) (int, error)
}

// Roster is implemented by Presence stores that can list the workers
// announced in a crawl (Redis, NATS, memory), so that they can share out
// its partitions (PartitionPreferrer).
type Roster interface {
	// Members returns the ids of crawl's workers whose announcement has
	// not expired (those Live counts), sorted: every worker reading it at
	// one moment sees the same list.
	Members(ctx context.Context, crawl string) ([]string, error)
}

// Incarnations is implemented by stores whose server can restart with less
// than it had: a Redis server without persistence restarts empty, one that
// persists by snapshots rolls back to its last one. Incarnation returns an
// identifier of the server's current run (Redis: the run_id of INFO server),
// which changes whenever the server restarted, or "" when the store cannot
// tell (a Redis Cluster). The engine compares it before it relies on what it
// remembers of the crawl's shared state (see engine.ErrStateLost). It is
// cheap enough to call before every acknowledgement: it asks the server only
// when a connection was opened since it last asked, as a restart forces.
// It is optional because only Redis restarts with less: the in-memory
// broker dies with its crawl, and NATS JetStream and RabbitMQ keep what
// they acknowledged.
type Incarnations interface {
	Incarnation(ctx context.Context) (string, error)
}
