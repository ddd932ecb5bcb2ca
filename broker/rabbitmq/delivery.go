package rabbitmq

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/trawlhq/trawl/broker"
)

// state is where a delivery stands. Guarded by Broker.mu.
type state int

const (
	held     state = iota // leased to its consumer
	settling              // a Nack or Reject is publishing its copy
	settled               // acknowledged, nacked or rejected
	lost                  // lease expired, purged, connection or broker gone
)

// delivery is one message received on a channel of a session.
type delivery struct {
	b     *Broker
	s     *session
	rc    *rchan
	tag   uint64
	queue string // the AMQP queue it came from
	name  string // the queue its caller named, if not queue (a partitioned queue's)
	w     wireMessage

	// Guarded by b.mu.
	state    state
	deadline time.Time
}

// Message returns a copy of the delivered message.
func (d *delivery) Message() broker.Message {
	return broker.Message{Body: bytes.Clone(d.w.msg.Body), Priority: d.w.msg.Priority}
}

// Queue names the queue the delivery came from.
func (d *delivery) Queue() string {
	if d.name != "" {
		return d.name
	}
	return d.queue
}

// Attempt is 1 on the first delivery and one more on each redelivery.
func (d *delivery) Attempt() int { return d.w.attempt }

func (d *delivery) err(op string, err error) error {
	return opErr(op, d.queue, err)
}

// begin moves d from held to settling, or says why it cannot be settled.
func (d *delivery) begin(op string) error {
	b := d.b
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed:
		return d.err(op, broker.ErrClosed)
	case d.state == settling || d.state == settled:
		return d.err(op, broker.ErrSettled)
	case d.state == lost:
		return d.err(op, broker.ErrLeaseLost)
	case d.rc.ch.IsClosed():
		d.state = lost
		delete(b.out, d)
		return d.err(op, fmt.Errorf("%w: its channel closed", broker.ErrLeaseLost))
	}
	d.state = settling
	return nil
}

// end leaves the settling state for s.
func (d *delivery) end(s state) {
	b := d.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if d.state != settling {
		return // Close or a dropped connection overtook it
	}
	d.state = s
	if s != held {
		delete(b.out, d)
		b.touch(d.queue)
	}
}

// ack acknowledges d on its channel.
func (d *delivery) ack(op string) error {
	if err := d.rc.ack(d.tag); err != nil {
		d.end(lost)
		if d.b.isClosed() {
			return d.err(op, broker.ErrClosed)
		}
		return d.err(op, fmt.Errorf("%w: %v", broker.ErrLeaseLost, err))
	}
	d.end(settled)
	return nil
}

// Ack removes the message for good.
func (d *delivery) Ack(ctx context.Context) error {
	if err := d.begin("ack"); err != nil {
		return err
	}
	return d.ack("ack")
}

// Nack publishes the message again with the next attempt number (into the
// delay queue for delay, which hands it back when the delay is over) and
// acknowledges this delivery; on the last attempt it dead-letters the
// message instead.
func (d *delivery) Nack(ctx context.Context, delay time.Duration) error {
	if err := d.begin("nack"); err != nil {
		return err
	}
	w := d.w
	key := d.queue
	switch {
	case w.attempt >= d.b.cfg.MaxDeliveries:
		key = deadQueue(d.queue)
		w.reason = fmt.Sprintf("nacked on delivery %d of %d", w.attempt, d.b.cfg.MaxDeliveries)
	case delay > 0:
		w.attempt++
		delay = roundDelay(delay)
		if err := d.s.ensureDelay(d.queue, delay); err != nil {
			return d.failed("nack", err)
		}
		key = delayQueue(d.queue, delay)
		if err := d.b.announceDelay(ctx, d.s, key); err != nil {
			return d.failed("nack", err)
		}
	default:
		w.attempt++
	}
	return d.republish(ctx, "nack", key, w)
}

// Release publishes the message again with this delivery's attempt
// number, so that the next delivery has the same, and acknowledges this
// delivery.
func (d *delivery) Release(ctx context.Context) error {
	if err := d.begin("release"); err != nil {
		return err
	}
	return d.republish(ctx, "release", d.queue, d.w)
}

// Reject moves the message to the dead-letter queue with reason.
func (d *delivery) Reject(ctx context.Context, reason string) error {
	if err := d.begin("reject"); err != nil {
		return err
	}
	w := d.w
	w.reason = reason
	if w.reason == "" {
		w.reason = "rejected"
	}
	return d.republish(ctx, "reject", deadQueue(d.queue), w)
}

// republish publishes w to queue key, waits for the confirm, then
// acknowledges d: the message is never in neither place.
func (d *delivery) republish(ctx context.Context, op, key string, w wireMessage) error {
	if _, err := d.s.send(ctx, []outgoing{{queue: key, pub: d.b.publishing(w)}}); err != nil {
		return d.failed(op, err)
	}
	return d.ack(op)
}

// failed ends a settlement whose copy could not be published: the
// delivery stays held unless its connection or the broker is gone.
func (d *delivery) failed(op string, err error) error {
	switch {
	case d.b.isClosed():
		d.end(lost)
		return d.err(op, broker.ErrClosed)
	case d.s.broken() || d.rc.ch.IsClosed():
		d.end(lost)
		return d.err(op, fmt.Errorf("%w: connection lost: %v", broker.ErrLeaseLost, err))
	}
	d.end(held)
	return d.err(op, err)
}

// Extend moves the lease's end to dur from now.
func (d *delivery) Extend(ctx context.Context, dur time.Duration) error {
	b := d.b
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed:
		return d.err("extend", broker.ErrClosed)
	case d.state == settling || d.state == settled:
		return d.err("extend", broker.ErrSettled)
	case d.state == lost:
		return d.err("extend", broker.ErrLeaseLost)
	case d.rc.ch.IsClosed():
		d.state = lost
		delete(b.out, d)
		return d.err("extend", fmt.Errorf("%w: its channel closed", broker.ErrLeaseLost))
	}
	d.deadline = time.Now().Add(dur)
	return nil
}

// AckBatch acknowledges ds as Ack would each, in fewer frames: the
// deliveries of one channel whose tags form a run with no other unsettled
// delivery of that channel below its end are acknowledged with one
// basic.ack (multiple=true); the others with one frame each. Acks are
// frames the server does not answer, so this saves frames and the
// server's work per frame, not round trips. The error names the first
// delivery that could not be acknowledged; the others are acknowledged.
func (b *Broker) AckBatch(ctx context.Context, ds ...broker.Delivery) error {
	var first error
	fail := func(err error) {
		if first == nil {
			first = err
		}
	}
	byChan := map[*rchan][]*delivery{}
	var order []*rchan
	for _, bd := range ds {
		d, ok := bd.(*delivery)
		if !ok || d.b != b {
			fail(fmt.Errorf("rabbitmq broker: ack batch: %w: a delivery of another broker (%T)", broker.ErrInvalid, bd))
			continue
		}
		if err := d.begin("ack"); err != nil {
			fail(err)
			continue
		}
		if byChan[d.rc] == nil {
			order = append(order, d.rc)
		}
		byChan[d.rc] = append(byChan[d.rc], d)
	}
	for _, rc := range order {
		dd := byChan[rc]
		tags := make([]uint64, len(dd))
		for i, d := range dd {
			tags[i] = d.tag
		}
		err := rc.ackBatch(tags)
		for _, d := range dd {
			if err == nil {
				d.end(settled)
				continue
			}
			d.end(lost)
			if b.isClosed() {
				fail(d.err("ack", broker.ErrClosed))
			} else {
				fail(d.err("ack", fmt.Errorf("%w: %v", broker.ErrLeaseLost, err)))
			}
		}
	}
	return first
}
