package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trawlhq/trawl/broker"
)

// connWait bounds how long Next waits for a lost connection to come back
// before it returns an error saying so (the consumer stays open; the next
// call waits again).
const connWait = 5 * time.Second

// consumer is a broker.Consumer: one channel with basic.qos(prefetch) and
// one basic.consume on it, held for the consumer's life, and opened again
// on the new connection after a connection loss. The server pushes up to
// prefetch unacknowledged deliveries; a pump per subscription moves them
// into a buffer that Next takes from, so that read-ahead deliveries are
// known to Counts and to the presence reports (as held by this worker).
type consumer struct {
	b        *Broker
	queue    string
	prefetch int
	done     chan struct{} // closed by Close
	wake     chan struct{} // a pump has news for Next

	mu     sync.Mutex
	closed bool
	sub    *subscription // nil: subscribe on the next Next
}

// subscription is one basic.consume of a consumer, on one channel of one
// session.
type subscription struct {
	s    *session
	rc   *rchan
	tag  string
	msgs <-chan amqp.Delivery
	gone chan struct{} // closed when the pump has seen msgs close

	buf []amqp.Delivery // read ahead, not yet returned by Next; guarded by consumer.mu
}

// consume1 is Consume on one queue: it opens a consumer of queue that reads ahead at most prefetch
// deliveries (its channel's basic.qos, which also counts the deliveries
// returned by Next and not yet settled). It subscribes on the first Next.
func (b *Broker) consume1(ctx context.Context, queue string, prefetch int) (broker.Consumer, error) {
	if err := b.check("consume", queue); err != nil {
		return nil, err
	}
	if prefetch < 1 {
		return nil, opErr("consume", queue, fmt.Errorf("%w: prefetch %d < 1", broker.ErrInvalid, prefetch))
	}
	return &consumer{
		b: b, queue: queue, prefetch: min(prefetch, maxPrefetch),
		done: make(chan struct{}), wake: make(chan struct{}, 1),
	}, nil
}

// CountsUnsettled reports true: basic.qos counts the deliveries Next
// returned and that are not yet acknowledged, and RabbitMQ applies a
// channel's basic.qos to the consumers started after it only, so the
// window of a live consumer cannot grow with what its caller holds
// (global basic.qos could, but quorum queues refuse it and RabbitMQ
// deprecates it). A caller that holds deliveries unsettled asks Consume
// for a prefetch that covers them (broker.UnsettledCounter).
func (b *Broker) CountsUnsettled() bool { return true }

func (c *consumer) err(err error) error { return opErr("consume", c.queue, err) }

// Next returns the next delivery, subscribing first if need be.
func (c *consumer) Next(ctx context.Context) (broker.Delivery, error) {
	failures := 0
	for {
		d, gone, err := c.poll(ctx, &failures)
		switch {
		case err != nil:
			return nil, err
		case d != nil:
			return d, nil
		case gone == nil:
			continue
		}
		select {
		case <-c.wake:
		case <-gone:
		case <-ctx.Done():
		case <-c.done:
		case <-c.b.done:
		}
	}
}

// poll is one step of Next: a delivery, or none and the channel that
// closes when the subscription ends (the consumer's wake tells of new
// deliveries), or none and no channel to try again at once.
func (c *consumer) poll(ctx context.Context, failures *int) (broker.Delivery, <-chan struct{}, error) {
	select {
	case <-c.done:
		return nil, nil, c.err(broker.ErrClosed)
	case <-c.b.done:
		return nil, nil, c.err(broker.ErrClosed)
	default:
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, c.err(err)
	}
	c.mu.Lock()
	sub := c.sub
	if sub != nil && (sub.s.broken() || sub.rc.ch.IsClosed()) {
		// What it read ahead is void: the server gives it back.
		c.b.readAhead(c.queue, -len(sub.buf))
		sub.buf = nil
	}
	if sub != nil && len(sub.buf) > 0 {
		d := c.take(ctx, sub)
		c.mu.Unlock()
		return d, nil, nil
	}
	if sub != nil && isClosedChan(sub.gone) {
		// Its channel closed, or the server cancelled the consumer
		// (the queue was deleted): subscribe again.
		c.sub = nil
		c.mu.Unlock()
		sub.rc.closeWhenSettled()
		return nil, nil, nil
	}
	c.mu.Unlock()
	if sub == nil {
		if err := c.subscribe(ctx); err != nil {
			if !c.retry(ctx, failures, err) {
				return nil, nil, c.err(err)
			}
		}
		return nil, nil, nil
	}
	return nil, sub.gone, nil
}

// retry tells whether Next should try to subscribe again after err.
func (c *consumer) retry(ctx context.Context, failures *int, err error) bool {
	switch {
	case errors.Is(err, broker.ErrClosed), errors.Is(err, ErrQueueMismatch), ctx.Err() != nil:
		return false
	case errors.Is(err, errNoConnection):
		return false // said once; the next call waits again
	}
	*failures++
	return *failures < declareLimit
}

var errNoConnection = errors.New("no connection to the server")

// subscribe opens a channel on the live session (waiting up to connWait
// for one), sets its prefetch and starts consuming.
func (c *consumer) subscribe(ctx context.Context) error {
	b := c.b
	wctx, cancel := context.WithTimeout(ctx, connWait)
	s, err := b.session(wctx)
	cancel()
	if err != nil {
		if errors.Is(err, broker.ErrClosed) || ctx.Err() != nil {
			_, err = b.failed(ctx, nil, err)
			return err
		}
		return fmt.Errorf("%w after %v (the broker reconnects by itself; see its warnings): %w", errNoConnection, connWait, err)
	}
	var rc *rchan
	var msgs <-chan amqp.Delivery
	tag := "trawl-" + strconv.FormatUint(b.tags.Add(1), 10)
	err = s.ensure(c.queue)
	if err == nil {
		var ch *amqp.Channel
		if ch, err = s.conn.Channel(); err != nil {
			err = fmt.Errorf("open channel: %w", err)
		} else {
			rc = newRchan(s, ch)
		}
	}
	if err == nil {
		if err = rc.ch.Qos(c.prefetch, 0, false); err != nil {
			err = fmt.Errorf("set prefetch: %w", err)
		}
	}
	if err == nil {
		if msgs, err = rc.ch.Consume(c.queue, tag, false, false, false, false, nil); err != nil {
			err = fmt.Errorf("consume: %w", err)
		}
	}
	if err != nil {
		if rc != nil {
			_ = rc.ch.Close()
		}
		if isNotFound(err) {
			s.forget(c.queue) // deleted behind our back: declare it again
		}
		if retry, ferr := b.failed(ctx, s, err); retry {
			return nil // a new connection: the caller subscribes again
		} else {
			return ferr
		}
	}
	sub := &subscription{s: s, rc: rc, tag: tag, msgs: msgs, gone: make(chan struct{})}
	c.mu.Lock()
	defer c.mu.Unlock()
	b.mu.Lock()
	closed := b.closed
	if !closed && !c.closed {
		b.wg.Add(1) // Close waits for the pump; closing the connection ends it
	}
	b.mu.Unlock()
	if closed || c.closed {
		_ = rc.ch.Close()
		return broker.ErrClosed
	}
	c.sub = sub
	go c.pump(sub)
	return nil
}

// pump moves the deliveries of sub into its buffer until the server
// stops sending (a cancel, a closed channel or connection).
func (c *consumer) pump(sub *subscription) {
	defer c.b.wg.Done()
	defer func() {
		close(sub.gone)
		c.signal()
	}()
	for r := range sub.msgs {
		sub.rc.took(r.DeliveryTag)
		c.b.readAhead(c.queue, 1)
		c.mu.Lock()
		sub.buf = append(sub.buf, r)
		c.mu.Unlock()
		c.signal()
	}
}

func (c *consumer) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// take returns the first delivery of sub's buffer that needs no
// replacing, after replacing the redeliveries before it in one round trip
// (see Broker.triage); nil if there were only those. c.mu is held.
func (c *consumer) take(ctx context.Context, sub *subscription) broker.Delivery {
	b := c.b
	var again []redo
	var fresh *amqp.Delivery
	var w wireMessage
	n := 0
	for n < len(sub.buf) && fresh == nil {
		r := &sub.buf[n]
		n++
		var re *redo
		if w, re = b.triage(sub.s, c.queue, r); re != nil {
			again = append(again, *re)
		} else {
			fresh = r
		}
	}
	sub.buf = sub.buf[n:]
	b.readAhead(c.queue, -n)
	b.replace(ctx, sub.s, sub.rc, c.queue, again)
	if fresh == nil {
		return nil
	}
	if d := b.register(sub.s, sub.rc, c.queue, fresh.DeliveryTag, w); d != nil {
		return d
	}
	return nil
}

// Close cancels the consumer (basic.cancel), gives back what it read
// ahead at once, and closes its channel once the deliveries Next returned
// are settled (or its connection or the broker closes).
//
// What it read ahead goes back as copies with the same attempt, published
// and confirmed before the read-ahead deliveries are acknowledged (a nack
// with requeue would flag them as redelivered, and the next consumer
// would count an attempt for a message nobody worked on): they join the
// end of their priority level. A copy the server does not confirm is
// nacked with requeue instead.
func (c *consumer) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.done)
	sub := c.sub
	c.sub = nil
	c.mu.Unlock()
	if sub == nil {
		return nil
	}
	var err error
	if !sub.rc.ch.IsClosed() {
		if e := sub.rc.ch.Cancel(sub.tag, false); e != nil && !c.b.isClosed() && !sub.s.broken() {
			err = c.err(fmt.Errorf("cancel: %w", e))
		}
	}
	<-sub.gone // the server sends nothing more after cancel-ok
	c.mu.Lock()
	raws := sub.buf
	sub.buf = nil
	c.mu.Unlock()
	c.b.readAhead(c.queue, -len(raws))
	if len(raws) > 0 && !sub.s.broken() && !sub.rc.ch.IsClosed() {
		rs := make([]redo, len(raws))
		for i := range raws {
			w, re := c.b.triage(sub.s, c.queue, &raws[i])
			if re == nil {
				re = &redo{tag: raws[i].DeliveryTag, key: c.queue, w: w}
			}
			rs[i] = *re
		}
		ctx, cancel := context.WithTimeout(c.b.ctx, sideTimeout)
		c.b.replace(ctx, sub.s, sub.rc, c.queue, rs)
		cancel()
	}
	sub.rc.closeWhenSettled()
	return err
}

// readAhead adds n to the deliveries of queue read ahead by consumers
// (n < 0: taken out of a buffer); n > 0 counts them as taken too, for the
// presence reports.
func (b *Broker) readAhead(queue string, n int) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ahead[queue] += int64(n)
	b.touch(queue)
	if n > 0 {
		b.taken[queue] += uint64(n)
	}
}

func isClosedChan(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
