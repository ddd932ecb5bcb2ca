package memory

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/trawlhq/trawl/broker"
)

// Defaults applied to zero fields of Config.
const (
	DefaultLease         = 30 * time.Second
	DefaultMaxDeliveries = 5
)

// Config configures a Store. The zero value is ready to use: priority
// order, 30s leases, five deliveries before dead-lettering, no logging.
type Config struct {
	// Order is how every queue of the store orders its messages.
	// Zero: broker.Priority.
	Order broker.Order
	// Lease is how long a delivery stays with its consumer before its
	// message is given back to the queue. Zero: DefaultLease.
	Lease time.Duration
	// MaxDeliveries is how many times a message is delivered before a
	// nack or an expired lease sends it to the dead-letter queue instead.
	// Zero: DefaultMaxDeliveries.
	MaxDeliveries int
	// Logger receives lifecycle and warning records. Nil: discard.
	Logger *slog.Logger
}

// Validate reports every problem of c at once, each wrapping
// broker.ErrInvalid.
func (c Config) Validate() error {
	var errs []error
	switch c.Order {
	case broker.Priority, broker.FIFO, broker.LIFO:
	default:
		errs = append(errs, fmt.Errorf("memory broker: config: unknown order %d: %w", int(c.Order), broker.ErrInvalid))
	}
	if c.Lease < 0 {
		errs = append(errs, fmt.Errorf("memory broker: config: negative lease %v: %w", c.Lease, broker.ErrInvalid))
	}
	if c.MaxDeliveries < 0 {
		errs = append(errs, fmt.Errorf("memory broker: config: negative max deliveries %d: %w", c.MaxDeliveries, broker.ErrInvalid))
	}
	return errors.Join(errs...)
}

// Store holds the queues shared by the Brokers connected to it. It is safe
// for concurrent use, owns no goroutines and needs no closing.
type Store struct {
	order         broker.Order
	lease         int64 // nanoseconds
	maxDeliveries int
	log           *slog.Logger
	epoch         time.Time

	mu     sync.Mutex
	queues map[string]*queue
	seq    uint64 // publish sequence, store-wide

	meta    map[string]map[string][]byte // crawl -> key -> value (Metadata)
	workers map[string]map[string]int64  // crawl -> worker id -> announced until (now())
}

// NewStore returns an empty store configured by cfg, or cfg's problems.
func NewStore(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Store{
		order:         cfg.Order,
		lease:         int64(cfg.Lease),
		maxDeliveries: cfg.MaxDeliveries,
		log:           cfg.Logger,
		epoch:         time.Now(),
		queues:        make(map[string]*queue),
	}
	if s.lease == 0 {
		s.lease = int64(DefaultLease)
	}
	if s.maxDeliveries == 0 {
		s.maxDeliveries = DefaultMaxDeliveries
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.log = s.log.With("backend", "memory")
	return s, nil
}

// Connect returns a new handle on the store. Each handle is one consumer:
// closing it gives back its own unsettled deliveries and leaves the other
// handles working.
func (s *Store) Connect() *Broker {
	return &Broker{s: s, done: make(chan struct{})}
}

// New returns a handle on a new store of its own: NewStore, then Connect.
func New(cfg Config) (*Broker, error) {
	s, err := NewStore(cfg)
	if err != nil {
		return nil, err
	}
	return s.Connect(), nil
}

// now is the store's monotonic clock in nanoseconds.
func (s *Store) now() int64 { return int64(time.Since(s.epoch)) }

// queueFor returns the named queue, creating it. s.mu must be held.
func (s *Store) queueFor(name string) *queue {
	q := s.queues[name]
	if q == nil {
		q = &queue{name: name, ready: readyHeap{order: s.order}}
		s.queues[name] = q
	}
	return q
}

// Broker is one handle on a Store; it implements broker.Broker and
// broker.Metadata.
type Broker struct {
	s      *Store
	closed bool          // guarded by s.mu
	done   chan struct{} // closed by Close; wakes waiting Receives
}

var (
	_ broker.Broker   = (*Broker)(nil)
	_ broker.Delivery = (*delivery)(nil)
)

func invalid(op, queue, what string) error {
	return fmt.Errorf("memory broker: %s %q: %w: %s", op, queue, broker.ErrInvalid, what)
}

func closedErr(op, queue string) error {
	return fmt.Errorf("memory broker: %s %q: %w", op, queue, broker.ErrClosed)
}

// Publish adds msgs to queue, in order. Bodies are copied. ctx is not
// consulted: Publish never blocks.
func (b *Broker) Publish(_ context.Context, queue string, msgs ...broker.Message) error {
	if queue == "" {
		return invalid("publish", queue, "empty queue name")
	}
	ms := make([]*message, len(msgs))
	for i, msg := range msgs {
		ms[i] = &message{body: bytes.Clone(msg.Body), prio: msg.Priority, idx: -1}
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.closed {
		return closedErr("publish", queue)
	}
	q := s.queueFor(queue)
	for _, m := range ms {
		s.seq++
		m.seq = s.seq
		q.ready.push(m)
	}
	if len(ms) > 0 {
		q.signal()
	}
	return nil
}

// Receive waits until queue has a visible message, then leases and returns
// up to max of them in the store's order. It returns ctx.Err() (wrapped) if
// ctx is done before or while waiting, and broker.ErrClosed if b is or gets
// closed.
func (b *Broker) Receive(ctx context.Context, queue string, max int) ([]broker.Delivery, error) {
	if queue == "" {
		return nil, invalid("receive", queue, "empty queue name")
	}
	if max < 1 {
		return nil, invalid("receive", queue, fmt.Sprintf("max %d < 1", max))
	}
	return b.receive(ctx, queue, max, nil)
}

// receive is Receive, and Next of consumer c when c is not nil: c's Close
// ends the wait too.
func (b *Broker) receive(ctx context.Context, queue string, max int, c *consumer) ([]broker.Delivery, error) {
	s := b.s
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	var cdone chan struct{}
	if c != nil {
		cdone = c.done
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("memory broker: receive %q: %w", queue, err)
		}
		s.mu.Lock()
		if b.closed || c != nil && c.closed {
			s.mu.Unlock()
			return nil, closedErr("receive", queue)
		}
		q := s.queueFor(queue)
		now := s.now()
		q.expire(s, now)
		if q.ready.len() > 0 {
			ds := q.take(b, now, max)
			s.mu.Unlock()
			return ds, nil
		}
		if q.wait == nil {
			q.wait = make(chan struct{})
		}
		wake := q.wait
		next, ok := q.nextDue()
		s.mu.Unlock()

		var tick <-chan time.Time
		if ok {
			d := time.Duration(next - now)
			if timer == nil {
				timer = time.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			tick = timer.C
		}
		select {
		case <-wake:
		case <-tick:
		case <-b.done:
		case <-cdone:
		case <-ctx.Done():
		}
	}
}

// Close closes the handle: its unsettled deliveries go back to their queues
// at once (or to the dead-letter queue if they had used up their
// deliveries), its waiting Receives return broker.ErrClosed, and every later
// call on it or its deliveries returns broker.ErrClosed. Close is
// idempotent and always returns nil.
func (b *Broker) Close() error {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	close(b.done)
	n := 0
	var mine []*message
	for _, q := range s.queues {
		mine = mine[:0]
		for _, m := range q.leased.items {
			if m.owner == b {
				mine = append(mine, m)
			}
		}
		for _, m := range mine {
			q.leased.remove(m.idx)
			q.giveBack(s, m, "consumer closed")
		}
		n += len(mine)
	}
	s.log.Info("memory broker handle closed", "requeued", n)
	return nil
}

// Counts counts queue. An unknown queue counts zero.
func (b *Broker) Counts(_ context.Context, queue string) (broker.Counts, error) {
	if queue == "" {
		return broker.Counts{}, invalid("count", queue, "empty queue name")
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.closed {
		return broker.Counts{}, closedErr("count", queue)
	}
	q := s.queues[queue]
	if q == nil {
		return broker.Counts{}, nil
	}
	q.expire(s, s.now())
	return broker.Counts{
		Ready:    int64(q.ready.len() + q.delayed.len()),
		InFlight: int64(q.leased.len()),
		Dead:     int64(len(q.dead)),
		Delayed:  int64(q.delayed.len()),
	}, nil
}

// Purge empties queue: ready, delayed, in-flight and dead messages. Settling
// or extending a delivery of a purged message returns broker.ErrLeaseLost.
func (b *Broker) Purge(_ context.Context, queue string) error {
	if queue == "" {
		return invalid("purge", queue, "empty queue name")
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.closed {
		return closedErr("purge", queue)
	}
	q := s.queues[queue]
	if q == nil {
		return nil
	}
	n := q.ready.len() + q.delayed.len() + q.leased.len() + len(q.dead)
	for _, h := range [][]*message{q.ready.items, q.delayed.items, q.leased.items} {
		for _, m := range h {
			m.state, m.owner = gone, nil
		}
	}
	q.ready.items, q.delayed.items, q.leased.items, q.dead = nil, nil, nil, nil
	s.log.Info("memory broker queue purged", "queue", queue, "messages", n)
	return nil
}

// DeadLetters returns up to max dead letters of queue, oldest first,
// without removing them.
func (b *Broker) DeadLetters(_ context.Context, queue string, max int) ([]broker.DeadLetter, error) {
	if queue == "" {
		return nil, invalid("read dead letters of", queue, "empty queue name")
	}
	if max < 1 {
		return nil, invalid("read dead letters of", queue, fmt.Sprintf("max %d < 1", max))
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.closed {
		return nil, closedErr("read dead letters of", queue)
	}
	q := s.queues[queue]
	if q == nil {
		return nil, nil
	}
	q.expire(s, s.now())
	n := min(max, len(q.dead))
	out := make([]broker.DeadLetter, n)
	for i, dl := range q.dead[:n] {
		out[i] = broker.DeadLetter{
			Message: broker.Message{Body: bytes.Clone(dl.m.body), Priority: dl.m.prio},
			Reason:  dl.reason,
		}
	}
	return out, nil
}

// Requeue moves up to max dead letters of queue, oldest first, back to the
// queue as if published anew: a new sequence number and a fresh count of
// deliveries (the next delivery is Attempt 1).
func (b *Broker) Requeue(_ context.Context, queue string, max int) (int, error) {
	if queue == "" {
		return 0, invalid("requeue dead letters of", queue, "empty queue name")
	}
	if max < 1 {
		return 0, invalid("requeue dead letters of", queue, fmt.Sprintf("max %d < 1", max))
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.closed {
		return 0, closedErr("requeue dead letters of", queue)
	}
	q := s.queues[queue]
	if q == nil {
		return 0, nil
	}
	q.expire(s, s.now())
	n := min(max, len(q.dead))
	for _, dl := range q.dead[:n] {
		m := dl.m
		s.seq++
		m.seq, m.attempt, m.state = s.seq, 0, ready
		q.ready.push(m)
	}
	clear(q.dead[:n])
	q.dead = q.dead[n:]
	if n > 0 {
		q.signal()
		s.log.Info("memory broker dead letters requeued", "queue", queue, "messages", n)
	}
	return n, nil
}
