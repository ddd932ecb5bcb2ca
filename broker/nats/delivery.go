package nats

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/trawlhq/trawl/broker"
)

// dstate is where a delivery stands; guarded by its broker's mu.
type dstate int

const (
	leased    dstate = iota // handed out, unsettled
	settled                 // Ack, Nack or Reject was called
	lost                    // the lease ran out
	closedOut               // its broker closed and gave it back
)

// delivery is one message pulled from a band consumer.
type delivery struct {
	b       *Broker
	q       *queue
	m       *natsgo.Msg // as pulled; its reply subject acknowledges it
	prio    int
	band    int
	attempt int
	seq     uint64 // stream sequence

	deadline time.Time // guarded by b.mu
	state    dstate    // guarded by b.mu
}

// Message returns a copy of the delivered message.
func (d *delivery) Message() broker.Message {
	return broker.Message{Body: bytes.Clone(d.m.Data), Priority: d.prio}
}

// Queue names the queue the delivery came from.
func (d *delivery) Queue() string { return d.q.queue }

// Attempt is 1 on the first delivery and grows with every Nack, expired
// lease and Close that gave the message back.
func (d *delivery) Attempt() int { return d.attempt }

// claim checks that d may still be settled, by an operation op, and if
// so marks it settled.
func (d *delivery) claim(op string) error {
	b := d.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := d.usable(op); err != nil {
		return err
	}
	d.state = settled
	delete(b.held, d)
	return nil
}

// usable checks that d is leased and its lease has not run out; b.mu held.
func (d *delivery) usable(op string) error {
	b := d.b
	if b.closed {
		return opErr(op, d.q.queue, broker.ErrClosed)
	}
	switch d.state {
	case settled:
		return opErr(op, d.q.queue, broker.ErrSettled)
	case lost:
		return opErr(op, d.q.queue, broker.ErrLeaseLost)
	}
	if !time.Now().Before(d.deadline) {
		d.state = lost
		delete(b.held, d)
		return opErr(op, d.q.queue, broker.ErrLeaseLost)
	}
	return nil
}

// Ack acknowledges the message, and waits for the server to confirm it.
func (d *delivery) Ack(ctx context.Context) error {
	const op = "ack"
	if err := d.claim(op); err != nil {
		return err
	}
	if err := d.b.ack(ctx, d.m); err != nil {
		return opErr(op, d.q.queue, err)
	}
	return nil
}

// AckBatch acknowledges ds, deliveries of b, as Ack does each, with the
// acknowledgements sent together and their confirmations awaited
// together (see confirmAll): one round trip for the batch rather than
// one per delivery. The error names the first that failed; the others
// are acknowledged all the same.
func (b *Broker) AckBatch(ctx context.Context, ds ...broker.Delivery) error {
	const op = "ack batch"
	own := make([]*delivery, len(ds))
	for i, bd := range ds {
		d, ok := bd.(*delivery)
		if !ok || d.b != b {
			return invalid(op, bd.Queue(), fmt.Sprintf("delivery %d is not of this broker", i))
		}
		own[i] = d
	}
	var first error
	sent := make([]*delivery, 0, len(own))
	for _, d := range own {
		if err := d.claim("ack"); err != nil {
			first = cmp.Or(first, err)
			continue
		}
		sent = append(sent, d)
	}
	for i, err := range b.confirmAll(ctx, sent, ackBody) {
		if err != nil {
			first = cmp.Or(first, opErr("ack", sent[i].q.queue, err))
		}
	}
	return first
}

// ExtendBatch tells the server that the work of each of ds, deliveries of
// b, is still in progress, as Extend does each, with the +WPI requests
// sent together and their confirmations awaited together (see
// confirmAll). It implements broker.BatchExtender; like Extend, it
// restarts each lease at Config.Lease whatever dur.
func (b *Broker) ExtendBatch(ctx context.Context, dur time.Duration, ds ...broker.Delivery) []error {
	const op = "extend"
	errs := make([]error, len(ds))
	own := make([]*delivery, 0, len(ds))
	idx := make([]int, 0, len(ds))
	b.mu.Lock()
	for i, bd := range ds {
		d, ok := bd.(*delivery)
		switch {
		case !ok || d.b != b:
			errs[i] = invalid(op, bd.Queue(), "delivery of another broker")
		case dur <= 0:
			errs[i] = invalid(op, d.q.queue, fmt.Sprintf("duration %v", dur))
		default:
			if errs[i] = d.usable(op); errs[i] == nil {
				own = append(own, d)
				idx = append(idx, i)
			}
		}
	}
	b.mu.Unlock()
	sent := time.Now()
	res := b.confirmAll(ctx, own, wpiBody)
	b.mu.Lock()
	for j, d := range own {
		if err := res[j]; err != nil {
			errs[idx[j]] = opErr(op, d.q.queue, err)
		} else if d.state == leased {
			d.deadline = b.leaseEnd(sent)
		}
	}
	b.mu.Unlock()
	return errs
}

// Nack gives the message back: at once to the end of its band, or after
// delay (at most MaxDelay) through the queue's delay subject; to the dead
// letters instead if this was its last allowed delivery.
func (d *delivery) Nack(ctx context.Context, delay time.Duration) error {
	const op = "nack"
	if err := d.claim(op); err != nil {
		return err
	}
	b := d.b
	var err error
	switch {
	case d.attempt >= b.cfg.MaxDeliveries:
		err = b.bury(ctx, d, fmt.Sprintf("nacked after %d deliveries (max %d)", d.attempt, b.cfg.MaxDeliveries))
	case delay <= 0:
		err = b.requeue(ctx, d, d.attempt)
	default:
		err = b.postpone(ctx, d, delay)
	}
	if err != nil {
		return opErr(op, d.q.queue, err)
	}
	return nil
}

// Release gives the message back at once to the end of its band, its
// delivery not counted: the copy carries the attempts before this one.
func (d *delivery) Release(ctx context.Context) error {
	const op = "release"
	if err := d.claim(op); err != nil {
		return err
	}
	if err := d.b.requeue(ctx, d, d.attempt-1); err != nil {
		return opErr(op, d.q.queue, err)
	}
	return nil
}

// Reject moves the message to the dead letters with reason (line breaks
// become spaces).
func (d *delivery) Reject(ctx context.Context, reason string) error {
	const op = "reject"
	if err := d.claim(op); err != nil {
		return err
	}
	if err := d.b.bury(ctx, d, reason); err != nil {
		return opErr(op, d.q.queue, err)
	}
	return nil
}

// Extend tells the server the work is still in progress (JetStream's
// +WPI), which restarts the lease: it runs for Config.Lease from now,
// whatever dur (JetStream has no per-message deadline), so call it more
// often than every Lease.
func (d *delivery) Extend(ctx context.Context, dur time.Duration) error {
	const op = "extend"
	if dur <= 0 {
		return invalid(op, d.q.queue, fmt.Sprintf("duration %v", dur))
	}
	b := d.b
	b.mu.Lock()
	err := d.usable(op)
	b.mu.Unlock()
	if err != nil {
		return err
	}
	sent := time.Now()
	if err := b.ackReq(ctx, d.m, wpiBody); err != nil {
		return opErr(op, d.q.queue, err)
	}
	b.mu.Lock()
	if d.state == leased {
		d.deadline = b.leaseEnd(sent)
	}
	b.mu.Unlock()
	return nil
}
