package rabbitmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
const (
	bootQueue = "trawl.boot"
	hBoot     = "x-trawl-boot"
	// bootTries and bootRetry bound the reads of bootQueue while another
	// broker holds its message.
	bootTries = 100
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
	var id string
	err := s.side(func(ch *amqp.Channel) error {
		if _, err := ch.QueueDeclare(bootQueue, false, false, false, false, amqp.Table{
			"x-max-length": int32(1),
			"x-overflow":   "reject-publish",
		}); err != nil {
			return fmt.Errorf("declare %q: %w", bootQueue, err)
		}
		// Refused (basic.nack) when the queue already holds an id.
		_, _ = s.send(ctx, []outgoing{{queue: bootQueue, pub: amqp.Publishing{DeliveryMode: amqp.Transient, Body: []byte(offer)}}})
		// Another broker reading it at the same moment holds the message
		// for a round trip: the queue then looks empty.
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
	return id, err
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
