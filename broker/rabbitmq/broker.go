package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trawlhq/trawl/broker"
)

// Interfaces a Broker and its deliveries implement.
var (
	_ broker.Broker     = (*Broker)(nil)
	_ broker.Delivery   = (*delivery)(nil)
	_ broker.BatchAcker = (*Broker)(nil)
	_ broker.Consumer   = (*consumer)(nil)

	_ broker.UnsettledCounter = (*Broker)(nil)
)

// ErrQueueMismatch is returned when a queue exists with other arguments
// than the configuration declares (another x-max-priority, say) and
// Config.Recreate is not set. It matches broker.ErrInvalid too: retrying
// does not help.
var ErrQueueMismatch = fmt.Errorf("%w: queue exists with other arguments", broker.ErrInvalid)

// Broker is a broker.Broker on RabbitMQ. It is safe for concurrent use.
// Any number of Brokers, in any number of processes, may share queues.
type Broker struct {
	cfg  Config
	log  *slog.Logger
	mgmt *url.URL // management API base, with credentials
	vh   string   // vhost
	http *http.Client
	tags atomic.Uint64 // consumer tag sequence
	node atomic.Int32  // index in cfg.urls() of the node dial tries first
	bye  atomic.Bool   // Close has begun: no report but the farewell

	ctx  context.Context // the broker's lifetime; cancelled by Close
	stop context.CancelFunc
	done chan struct{} // closed by Close
	wg   sync.WaitGroup

	mu       sync.Mutex
	countGen uint64 // moved by touch
	closed   bool
	cur      *session               // live session; nil while reconnecting
	changed  chan struct{}          // closed and replaced when cur changes
	out      map[*delivery]struct{} // unsettled deliveries with their leases
	taken    map[string]uint64      // deliveries taken per queue, for presence reports
	ahead    map[string]int64       // deliveries read ahead by consumers, not yet returned by Next
	counted  map[string]counted     // recent Counts per queue (see countEvery)

	pres      *presence
	mgmtWarn  time.Time // last warning about the management API
	mgmtState string    // "": not tried; "ok"; "failing"
}

// New connects to cfg.URL and returns a Broker. Queues are declared on
// first use. The connection is restored automatically when it drops.
func New(ctx context.Context, cfg Config) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	mgmt, err := cfg.managementURL()
	if err != nil {
		return nil, fmt.Errorf("%w: rabbitmq broker config: ManagementURL: %w", broker.ErrInvalid, err)
	}
	uri, _ := amqp.ParseURI(cfg.urls()[0]) // Validate parsed it
	lctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	b := &Broker{
		cfg:     cfg,
		log:     cfg.Logger.With("backend", "rabbitmq"),
		mgmt:    mgmt,
		vh:      uri.Vhost,
		http:    &http.Client{Timeout: sideTimeout, Transport: &http.Transport{TLSClientConfig: cfg.TLS, Proxy: nil}},
		ctx:     lctx,
		stop:    stop,
		done:    make(chan struct{}),
		changed: make(chan struct{}),
		out:     map[*delivery]struct{}{},
		taken:   map[string]uint64{},
		ahead:   map[string]int64{},
		counted: map[string]counted{},
		pres:    newPresence(),
	}
	s, closed, err := b.dial(ctx)
	if err != nil {
		stop()
		return nil, fmt.Errorf("rabbitmq broker: connect: %w", err)
	}
	b.learnBoot(ctx, s)
	if err := b.subscribe(ctx, s); err != nil {
		_ = s.conn.Close()
		stop()
		b.wg.Wait()
		return nil, fmt.Errorf("rabbitmq broker: %s: %w", uri.Host, err)
	}
	b.cur = s
	b.wg.Add(3)
	go b.supervise(s, closed)
	go b.keepLeases()
	go b.reportLoop()
	if b.mgmt != nil {
		b.wg.Add(1)
		go b.checkManagement()
	}
	b.log.Info("broker ready", "order", cfg.Order.String(), "max_priority", cfg.MaxPriority,
		"durable", !cfg.NonDurable, "lease", cfg.Lease, "max_deliveries", cfg.MaxDeliveries)
	return b, nil
}

func opErr(op, queue string, err error) error {
	return fmt.Errorf("rabbitmq broker: %s %q: %w", op, queue, err)
}

// check validates queue and tells whether b is closed.
func (b *Broker) check(op, queue string) error {
	if queue == "" {
		return opErr(op, queue, fmt.Errorf("%w: empty queue name", broker.ErrInvalid))
	}
	if b.isClosed() {
		return opErr(op, queue, broker.ErrClosed)
	}
	return nil
}

func (b *Broker) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// failed turns the error of an operation on s into what the caller gets:
// ErrClosed once the broker is closed, ctx's error once ctx ended; retry
// reports whether the operation should be tried again on a new session.
func (b *Broker) failed(ctx context.Context, s *session, err error) (retry bool, _ error) {
	switch {
	case b.isClosed():
		return false, broker.ErrClosed
	case ctx.Err() != nil:
		return false, fmt.Errorf("%w (%v)", ctx.Err(), err)
	case s == nil:
		return false, err
	case s.broken():
		return true, err
	case isSoft(err):
		return false, err
	}
	t := time.NewTimer(brokenWait)
	defer t.Stop()
	select {
	case <-s.dead:
		return true, err
	case <-b.done:
		return false, broker.ErrClosed
	case <-ctx.Done():
		return false, fmt.Errorf("%w (%v)", ctx.Err(), err)
	case <-t.C:
		return false, err
	}
}

// publish1 is Publish on one queue: it adds msgs to queue and returns once the server has confirmed
// every one of them. When the connection drops meanwhile, the messages
// not yet confirmed are published again after reconnecting (some may then
// be stored twice); when ctx ends first, some may have been stored.
func (b *Broker) publish1(ctx context.Context, queue string, msgs ...broker.Message) error {
	if err := b.check("publish", queue); err != nil {
		return err
	}
	out := make([]outgoing, len(msgs))
	for i, m := range msgs {
		out[i] = outgoing{queue: queue, pub: b.publishing(wireMessage{msg: m, attempt: 1})}
	}
	defer b.touched(queue)
	rounds := 0
	for len(out) > 0 {
		s, err := b.session(ctx)
		if err != nil {
			_, err = b.failed(ctx, nil, err)
			return opErr("publish", queue, err)
		}
		if err = s.ensure(queue); err == nil {
			var left []int
			left, err = s.send(ctx, out)
			out = pick(out, left)
		}
		if err == nil {
			return nil
		}
		retry, err := b.failed(ctx, s, err)
		if !retry {
			// A channel that closed on a live connection is reopened;
			// try a few times.
			if rounds++; rounds >= resendLimit || errors.Is(err, broker.ErrClosed) || ctx.Err() != nil ||
				errors.Is(err, ErrQueueMismatch) {
				return opErr("publish", queue, err)
			}
			continue
		}
		b.log.Warn("publish interrupted by a connection loss; publishing again", "queue", queue, "left", len(out), "err", err)
	}
	return nil
}

// receive1 is Receive on one queue: it asks the server for up to max messages of queue (at most
// Config.Prefetch) and returns what it delivers, waiting until there is at
// least one. It consumes only while it runs, so messages it does not
// return stay in the queue for other consumers.
func (b *Broker) receive1(ctx context.Context, queue string, max int) ([]broker.Delivery, error) {
	if err := b.check("receive", queue); err != nil {
		return nil, err
	}
	if max < 1 {
		return nil, opErr("receive", queue, fmt.Errorf("%w: max %d < 1", broker.ErrInvalid, max))
	}
	n := b.cfg.prefetch(max)
	failures := 0
	for {
		if err := ctx.Err(); err != nil {
			return nil, opErr("receive", queue, err)
		}
		s, err := b.session(ctx)
		if err != nil {
			_, err = b.failed(ctx, nil, err)
			return nil, opErr("receive", queue, err)
		}
		var raw []amqp.Delivery
		var rc *rchan
		if err = s.ensure(queue); err == nil {
			raw, rc, err = s.consume(ctx, queue, n)
		}
		if err != nil {
			if isNotFound(err) {
				s.forget(queue) // deleted behind our back: declare it again
			}
			retry, err := b.failed(ctx, s, err)
			if !retry {
				if failures++; failures >= declareLimit || errors.Is(err, broker.ErrClosed) ||
					ctx.Err() != nil || errors.Is(err, ErrQueueMismatch) {
					return nil, opErr("receive", queue, err)
				}
			}
			continue
		}
		if b.isClosed() {
			// Close closed the connection: what came is void.
			return nil, opErr("receive", queue, broker.ErrClosed)
		}
		if ds := b.accept(ctx, s, rc, queue, raw); len(ds) > 0 {
			return ds, nil
		}
		if len(raw) > 0 && ctx.Err() != nil {
			return nil, opErr("receive", queue, ctx.Err())
		}
	}
}

// cancelWait bounds how long a Receive whose context ended waits for
// the server to confirm the cancellation of its consumer.
const cancelWait = time.Second

// consume runs one consumer with prefetch n on queue until it has a
// delivery or ctx ends, then cancels it and returns what arrived until
// the cancellation was confirmed (at most n).
func (s *session) consume(ctx context.Context, queue string, n int) ([]amqp.Delivery, *rchan, error) {
	rc, err := s.takeR()
	if err != nil {
		return nil, nil, err
	}
	if rc.qos != n {
		if err := rc.ch.Qos(n, 0, false); err != nil {
			s.putR(rc)
			return nil, nil, fmt.Errorf("set prefetch: %w", err)
		}
		rc.qos = n
	}
	tag := "trawl-" + strconv.FormatUint(s.b.tags.Add(1), 10)
	msgs, err := rc.ch.Consume(queue, tag, false, false, false, false, nil)
	if err != nil {
		s.putR(rc)
		return nil, nil, fmt.Errorf("consume: %w", err)
	}
	select {
	case d, ok := <-msgs:
		if !ok {
			s.putR(rc)
			return nil, nil, errors.New("channel closed while consuming")
		}
		got, err := s.cancel(rc, tag, msgs)
		return append([]amqp.Delivery{d}, got...), rc, err
	case <-ctx.Done():
	case <-s.b.done:
	}
	// Nothing came, and the caller has stopped waiting: cancel in the
	// background, so that a slow server cannot hold the caller; what
	// arrives meanwhile goes to the caller if it is still there, else
	// back to the queue.
	type result struct {
		got []amqp.Delivery
		err error
	}
	res := make(chan result, 1)
	var mu sync.Mutex
	abandoned := false
	s.b.mu.Lock()
	if s.b.closed {
		// Close has closed the connection, so this is quick; and Close
		// may already be waiting for the broker's goroutines.
		s.b.mu.Unlock()
		got, err := s.cancel(rc, tag, msgs)
		return got, rc, err
	}
	s.b.wg.Add(1) // Close waits for it
	s.b.mu.Unlock()
	go func() {
		defer s.b.wg.Done()
		got, err := s.cancel(rc, tag, msgs)
		mu.Lock()
		defer mu.Unlock()
		if !abandoned {
			res <- result{got, err}
			return
		}
		for _, d := range got {
			_ = rc.ch.Nack(d.DeliveryTag, false, true)
		}
	}()
	t := time.NewTimer(cancelWait)
	defer t.Stop()
	select {
	case r := <-res:
		return r.got, rc, r.err
	case <-t.C:
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case r := <-res:
		return r.got, rc, r.err
	default:
		abandoned = true
		return nil, nil, errors.New("the server did not confirm the cancellation of a consumer in time")
	}
}

// cancel cancels consumer tag, returns what it delivered until the server
// confirmed, and gives rc back to the pool.
func (s *session) cancel(rc *rchan, tag string, msgs <-chan amqp.Delivery) ([]amqp.Delivery, error) {
	defer s.putR(rc)
	if err := rc.ch.Cancel(tag, false); err != nil {
		// The channel is gone, and with it what it delivered: the
		// server gives those messages back.
		return nil, fmt.Errorf("cancel consumer: %w", err)
	}
	var got []amqp.Delivery
	for d := range msgs {
		got = append(got, d)
	}
	return got, nil
}

// accept turns what a Receive got into deliveries. A message the server
// redelivers (its consumer died, closed, or let its lease expire here) is
// first published again with its attempt one higher, or dead-lettered
// after MaxDeliveries, and its redelivery acknowledged: the count lives in
// a header, so it must be written into a new copy. Those copies come back
// through the queue.
func (b *Broker) accept(ctx context.Context, s *session, rc *rchan, queue string, raw []amqp.Delivery) []broker.Delivery {
	b.mu.Lock()
	b.taken[queue] += uint64(len(raw))
	b.touch(queue)
	b.mu.Unlock()
	var ds []broker.Delivery
	var again []redo
	var fresh []wireMessage
	var freshRaw []*amqp.Delivery
	for i := range raw {
		r := &raw[i]
		rc.took(r.DeliveryTag)
		w, re := b.triage(s, queue, r)
		if re != nil {
			again = append(again, *re)
			continue
		}
		fresh, freshRaw = append(fresh, w), append(freshRaw, r)
	}
	b.replace(ctx, s, rc, queue, again)
	for i, w := range fresh {
		d := b.register(s, rc, queue, freshRaw[i].DeliveryTag, w)
		if d == nil {
			return nil // closed
		}
		ds = append(ds, d)
	}
	return ds
}

// redo is a delivery to replace by a copy: w published to queue key, then
// the delivery (tag) acknowledged.
type redo struct {
	tag uint64
	key string
	w   wireMessage
}

// triage decodes r and tells whether it must be replaced by a copy
// before it is handed out: a redelivery counts as an attempt (see
// countsRedelivery), and a message past MaxDeliveries is dead-lettered.
func (b *Broker) triage(s *session, queue string, r *amqp.Delivery) (wireMessage, *redo) {
	w := b.decode(r)
	switch {
	case r.Redelivered && b.countsRedelivery(s, r):
		w.attempt++
	case r.Redelivered:
		// Flagged by a server restart, not by a consumer that took it:
		// stamped anew, attempt kept.
	case w.attempt <= b.cfg.MaxDeliveries:
		return w, nil
	}
	key := queue
	if w.attempt > b.cfg.MaxDeliveries {
		key = deadQueue(queue)
		w.attempt--
		w.reason = fmt.Sprintf("delivered %d times (max %d); the last delivery was not settled", w.attempt, b.cfg.MaxDeliveries)
		b.log.Warn("message dead-lettered after too many deliveries", "queue", queue, "attempt", w.attempt)
	}
	return w, &redo{tag: r.DeliveryTag, key: key, w: w}
}

// replace publishes the copies rs stand for on s, waits for their
// confirms, then acknowledges the deliveries they replace on rc; a
// delivery whose copy was not confirmed goes back as it is (nacked with
// requeue) and is counted again by whoever gets it.
func (b *Broker) replace(ctx context.Context, s *session, rc *rchan, queue string, rs []redo) {
	if len(rs) == 0 {
		return
	}
	out := make([]outgoing, len(rs))
	for i, r := range rs {
		out[i] = outgoing{queue: r.key, pub: b.publishing(r.w)}
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sideTimeout)
	left, err := s.send(sctx, out)
	cancel()
	if err != nil {
		b.log.Warn("could not republish redelivered messages", "queue", queue, "err", err)
	}
	unsent := map[int]bool{}
	for _, i := range left {
		unsent[i] = true
	}
	// In one write; settled after it, since the last settlement of a
	// closed Consumer's channel closes it, a round trip that must not wait
	// behind the write.
	tags := make([]uint64, len(rs))
	_ = rc.wire.gather(func() error {
		for i, r := range rs {
			if unsent[i] {
				_ = rc.ch.Nack(r.tag, false, true)
			} else {
				_ = rc.ch.Ack(r.tag, false)
			}
			tags[i] = r.tag
		}
		return nil
	})
	rc.settled(tags...)
}

// register makes a delivery of tag on rc, leased from now, or returns
// nil if the broker is closed.
func (b *Broker) register(s *session, rc *rchan, queue string, tag uint64, w wireMessage) *delivery {
	d := &delivery{b: b, s: s, rc: rc, tag: tag, queue: queue, w: w, deadline: time.Now().Add(b.cfg.Lease)}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.out[d] = struct{}{}
	b.touch(queue)
	return d
}

// byeTimeout bounds the farewell report of Close.
const byeTimeout = time.Second

// Close closes the connection and stops the broker. The server gives the
// deliveries not settled back to their queues, where they count as
// delivered (the next delivery has the next Attempt). Close is idempotent.
func (b *Broker) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	s := b.cur
	b.mu.Unlock()
	if s != nil && !s.broken() && !b.bye.Swap(true) {
		// Tell the others at once, rather than by falling silent.
		ctx, cancel := context.WithTimeout(b.ctx, byeTimeout)
		if err := b.report(ctx, s, false, true); err != nil {
			b.log.Debug("farewell report failed", "err", err)
		}
		cancel()
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	s = b.cur
	b.cur = nil
	for d := range b.out {
		d.state = lost
	}
	b.out = nil
	close(b.done)
	b.notify()
	b.mu.Unlock()
	b.stop()
	var err error
	if s != nil {
		if e := s.conn.Close(); e != nil && !errors.Is(e, amqp.ErrClosed) {
			err = fmt.Errorf("rabbitmq broker: close: %w", e)
		}
	}
	b.wg.Wait()
	b.http.CloseIdleConnections()
	b.log.Info("broker closed")
	return err
}

// keepLeases gives back the deliveries whose lease ran out: it nacks them
// with requeue, so the server redelivers them (to any consumer), and their
// settlement here fails with broker.ErrLeaseLost.
func (b *Broker) keepLeases() {
	defer b.wg.Done()
	tick := min(max(b.cfg.Lease/10, 10*time.Millisecond), time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-b.done:
			return
		case <-t.C:
		}
		now := time.Now()
		var expired []*delivery
		b.mu.Lock()
		for d := range b.out {
			if d.state == held && now.After(d.deadline) {
				d.state = lost
				delete(b.out, d)
				b.touch(d.queue)
				expired = append(expired, d)
			}
		}
		b.mu.Unlock()
		for _, d := range expired {
			b.log.Warn("lease expired; message given back", "queue", d.queue, "attempt", d.w.attempt)
			if err := d.rc.nack(d.tag); err != nil {
				b.log.Debug("give back expired delivery", "queue", d.queue, "err", err)
			}
		}
	}
}
