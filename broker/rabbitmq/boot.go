package rabbitmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The server's incarnation. RabbitMQ flags a message as redelivered when
// a consumer let it go unsettled, and also, after a restart (a crash
// above all), messages that no consumer may have held: the flag then
// says nothing about the message. So that a server restart does not
// cost every message an attempt (and, after MaxDeliveries restarts, send
// the whole crawl to the dead letters), every message carries the id of
// the server's incarnation it was stamped in (header hBoot), and a
// redelivery counts as an attempt only when the message was stamped in
// the current one; otherwise the message is stamped anew with its
// attempt unchanged. A worker that crashes on a message every time still
// sends it to the dead letters: at most one of its redeliveries per
// server restart goes uncounted.
//
// The incarnation's id is the body of the one message of bootQueue, a
// transient queue (gone when the server restarts) that holds at most one
// message and refuses more: on each connection a broker offers a random
// id, and reads the id that the queue holds, its own or an earlier one.
// It does so holding bootLock, an exclusive queue (one connection at a
// time; gone with the connection that held it): x-max-length counts only
// ready messages, so an offer made while another broker read the id (the
// message then unacknowledged) was accepted, and two ids coexisted, each
// broker believing its own (a redelivery then went uncounted).
const (
	bootQueue = "trawl.boot"
	bootLock  = "trawl.boot.lock"
	hBoot     = "x-trawl-boot"
	// bootTries and bootRetry bound the waits for bootLock and the reads
	// of bootQueue.
	bootTries = 250
	bootRetry = 20 * time.Millisecond
)

// learnBoot sets s.boot to the server's incarnation; on failure it logs
// and leaves it empty (every redelivery then counts).
func (b *Broker) learnBoot(ctx context.Context, s *session) {
	id, err := s.boot0(ctx)
	if err != nil {
		b.log.Warn("cannot tell the server's incarnation; a server restart will count as a delivery attempt of the messages it flags as redelivered", "err", err)
		return
	}
	s.boot = id
}

func (s *session) boot0(ctx context.Context) (string, error) {
	var raw [8]byte
	_, _ = rand.Read(raw[:])
	offer := hex.EncodeToString(raw[:])
	for try := 0; ; try++ {
		id, locked, err := s.bootOnce(ctx, offer)
		if !locked {
			return id, err
		}
		if try == bootTries {
			return "", fmt.Errorf("%q stayed locked", bootLock)
		}
		t := time.NewTimer(bootRetry)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return "", ctx.Err()
		}
	}
}

// bootOnce reads the incarnation's id under bootLock; locked reports that
// another connection held the lock.
func (s *session) bootOnce(ctx context.Context, offer string) (id string, locked bool, err error) {
	err = s.side(func(ch *amqp.Channel) error {
		if _, err := ch.QueueDeclare(bootLock, false, true, true, false, nil); err != nil {
			var ae *amqp.Error
			if errors.As(err, &ae) && ae.Code == amqp.ResourceLocked {
				locked = true
				return nil
			}
			return fmt.Errorf("declare %q: %w", bootLock, err)
		}
		defer func() { _, _ = ch.QueueDelete(bootLock, false, false, false) }()
		if _, err := ch.QueueDeclare(bootQueue, false, false, false, false, amqp.Table{
			"x-max-length": int32(1),
			"x-overflow":   "reject-publish",
		}); err != nil {
			return fmt.Errorf("declare %q: %w", bootQueue, err)
		}
		// Refused (basic.nack) when the queue already holds an id.
		_, _ = s.send(ctx, []outgoing{{queue: bootQueue, pub: amqp.Publishing{DeliveryMode: amqp.Transient, Body: []byte(offer)}}})
		// The queue holds the id now; a read may still find it empty for
		// a moment, while the last holder's requeue is on its way.
		for try := 0; ; try++ {
			d, ok, err := ch.Get(bootQueue, false)
			if err != nil {
				return fmt.Errorf("read %q: %w", bootQueue, err)
			}
			if ok {
				id = string(d.Body)
				return ch.Nack(d.DeliveryTag, false, true)
			}
			if try == bootTries {
				return fmt.Errorf("%q stayed empty", bootQueue)
			}
			t := time.NewTimer(bootRetry)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
	})
	return id, locked, err
}

// countsRedelivery tells whether the redelivered flag of r stands for a
// delivery to a consumer that did not settle it (see learnBoot).
func (b *Broker) countsRedelivery(s *session, r *amqp.Delivery) bool {
	if s.boot == "" {
		return true
	}
	id, _ := r.Headers[hBoot].(string)
	return id == s.boot
}
