package rabbitmq

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trawlhq/trawl/broker"
)

// queueStats is what the management API tells of one queue.
type queueStats struct {
	Name           string `json:"name"`
	Ready          int64  `json:"messages_ready"`
	Unacknowledged int64  `json:"messages_unacknowledged"`
}

// family lists queue q, its dead-letter queue and its delay queues, as
// the management API last saw them.
func (b *Broker) family(ctx context.Context, q string) ([]queueStats, error) {
	base := *b.mgmt
	user := base.User
	base.User = nil
	query := url.Values{
		"page":      {"1"},
		"page_size": {"500"},
		"name":      {familyPattern(q)},
		"use_regex": {"true"},
		"columns":   {"name,messages_ready,messages_unacknowledged"},
		// Totals straight from the queues, not the sampled statistics
		// (which are only as fresh as their retention granularity, 5s).
		"disable_stats":       {"true"},
		"enable_queue_totals": {"true"},
	}.Encode()
	addr := strings.TrimSuffix(base.String(), "/") + "/api/queues/" + url.PathEscape(b.vh) + "?" + query
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, addr, nil)
	if err != nil {
		return nil, err
	}
	if user != nil {
		pw, _ := user.Password()
		req.SetBasicAuth(user.Username(), pw)
	}
	resp, err := b.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("management API (Config.ManagementURL %s): %w", redact(b.mgmt), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("management API: read reply: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("management API (Config.ManagementURL %s): %s: %.200s", redact(b.mgmt), resp.Status, body)
	}
	var page struct {
		Items []queueStats `json:"items"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		return nil, fmt.Errorf("management API: decode reply: %w", err)
	}
	return page.Items, nil
}

// Counts counts queue from the management API's statistics, which cover
// every consumer of every process: Ready is the queue's ready messages
// plus those waiting in its delay queues, InFlight its unacknowledged
// ones, Dead the messages of its dead-letter queue. The statistics lag
// behind by the server's collect_statistics_interval (5s by default).
func (b *Broker) Counts(ctx context.Context, queue string) (broker.Counts, error) {
	if err := b.check("counts", queue); err != nil {
		return broker.Counts{}, err
	}
	qs, err := b.family(ctx, queue)
	if err != nil {
		if b.isClosed() {
			err = broker.ErrClosed
		}
		return broker.Counts{}, opErr("counts", queue, err)
	}
	var c broker.Counts
	for _, s := range qs {
		switch {
		case s.Name == queue:
			c.Ready += s.Ready
			c.InFlight += s.Unacknowledged
		case s.Name == deadQueue(queue):
			c.Dead += s.Ready + s.Unacknowledged
		default: // a delay queue
			c.Ready += s.Ready + s.Unacknowledged
		}
	}
	return c, nil
}

// Purge empties queue, its dead-letter queue and its delay queues, and
// drops the deliveries of queue this broker holds (their settlement fails
// with broker.ErrLeaseLost). Deliveries held by other processes are out of
// its reach: they come back when those settle them or go away.
func (b *Broker) Purge(ctx context.Context, queue string) error {
	if err := b.check("purge", queue); err != nil {
		return err
	}
	b.mu.Lock()
	var mine []*delivery
	for d := range b.out {
		if d.queue == queue && d.state == held {
			d.state = lost
			delete(b.out, d)
			mine = append(mine, d)
		}
	}
	b.mu.Unlock()
	for _, d := range mine {
		_ = d.ch.Ack(d.tag, false) // gone from the queue; a dead channel gives it back, and that is all we can do
	}
	names := []string{queue, deadQueue(queue)}
	qs, listErr := b.family(ctx, queue)
	for _, q := range qs {
		if q.Name != queue && q.Name != deadQueue(queue) {
			names = append(names, q.Name)
		}
	}
	s, err := b.session(ctx)
	if err != nil {
		_, err = b.failed(ctx, nil, err)
		return opErr("purge", queue, err)
	}
	for _, name := range names {
		err := s.side(func(ch *amqp.Channel) error {
			_, err := ch.QueuePurge(name, false)
			return err
		})
		if err != nil && !isNotFound(err) {
			_, err = b.failed(ctx, s, err)
			return opErr("purge", queue, fmt.Errorf("purge %q: %w", name, err))
		}
	}
	if listErr != nil {
		return opErr("purge", queue, fmt.Errorf("delay queues not purged: %w", listErr))
	}
	return nil
}

// DeadLetters returns up to max dead letters of queue, oldest first. It
// takes them from the dead-letter queue without acknowledging them and
// gives them back, in their places.
func (b *Broker) DeadLetters(ctx context.Context, queue string, max int) ([]broker.DeadLetter, error) {
	if err := b.check("dead letters", queue); err != nil {
		return nil, err
	}
	if max < 1 {
		return nil, opErr("dead letters", queue, fmt.Errorf("%w: max %d < 1", broker.ErrInvalid, max))
	}
	s, err := b.session(ctx)
	if err != nil {
		_, err = b.failed(ctx, nil, err)
		return nil, opErr("dead letters", queue, err)
	}
	var out []broker.DeadLetter
	err = s.side(func(ch *amqp.Channel) error {
		var last uint64
		defer func() {
			if last > 0 {
				_ = ch.Nack(last, true, true)
			}
		}()
		for len(out) < max {
			d, ok, err := ch.Get(deadQueue(queue), false)
			if err != nil || !ok {
				return err
			}
			last = d.DeliveryTag
			w := b.decode(&d)
			out = append(out, broker.DeadLetter{Message: w.msg, Reason: w.reason})
		}
		return nil
	})
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		_, err = b.failed(ctx, s, err)
		return nil, opErr("dead letters", queue, err)
	}
	return out, nil
}

// Requeue moves up to max dead letters of queue back to it, oldest first,
// as new messages (attempt 1). Each is published, confirmed, and only
// then removed from the dead-letter queue.
func (b *Broker) Requeue(ctx context.Context, queue string, max int) (int, error) {
	if err := b.check("requeue", queue); err != nil {
		return 0, err
	}
	if max < 1 {
		return 0, opErr("requeue", queue, fmt.Errorf("%w: max %d < 1", broker.ErrInvalid, max))
	}
	s, err := b.session(ctx)
	if err != nil {
		_, err = b.failed(ctx, nil, err)
		return 0, opErr("requeue", queue, err)
	}
	n := 0
	err = s.side(func(ch *amqp.Channel) error {
		var msgs []outgoing
		var last uint64
		for len(msgs) < max {
			d, ok, err := ch.Get(deadQueue(queue), false)
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			last = d.DeliveryTag
			w := b.decode(&d)
			msgs = append(msgs, outgoing{queue: queue, pub: b.publishing(wireMessage{msg: w.msg, attempt: 1})})
		}
		if len(msgs) == 0 {
			return nil
		}
		if err := s.ensure(queue); err != nil {
			return err
		}
		if _, err := s.send(ctx, msgs); err != nil {
			return err // closing the channel gives the dead letters back
		}
		n = len(msgs)
		return ch.Ack(last, true)
	})
	if isNotFound(err) {
		return 0, nil
	}
	if err != nil {
		_, err = b.failed(ctx, s, err)
		return n, opErr("requeue", queue, err)
	}
	return n, nil
}
