package rabbitmq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

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

// Counts counts queue: Ready is its ready messages plus those waiting in
// its delay queues, InFlight the deliveries that workers hold, Dead the
// messages of its dead-letter queue.
//
// With Config.ManagementURL it asks the management API, whose totals
// cover every consumer but lag by the server's
// collect_statistics_interval (5s by default). When the API fails (a
// 401, a refused connection) Counts says so in a warning naming the flag
// that fixes it (at once, then every 30s) and counts over AMQP instead.
//
// Over AMQP (the default, with a stock server) it combines passive
// declares, which give ready messages but not unacknowledged ones, with
// the reports every Broker publishes about its own deliveries (see
// presence.go):
//
//   - Ready: passive declares of the delay queues known for queue (those
//     found on the first count on each connection, among the few names
//     delaySteps allows, and those announced since), then of queue
//     itself. In that order a message cannot slip past both looks: it
//     leaves a delay queue only for queue, and moves otherwise only in
//     a worker's hands.
//   - InFlight: this Broker's own deliveries; plus, for every other
//     worker, the deliveries its last report holds, or 1 while its report
//     changed less than quietFor ago (it took or settled something, and
//     may have published what that message led to); plus, for a worker
//     silent for staleAfter, 1 as long as its connection is open (the
//     server is asked), with a warning; plus 1 for quietFor after a
//     worker that took from queue went away.
//
// Why an engine that sees Counts report nothing ready and nothing in
// flight over its whole idle timeout (--idle-timeout, 3s by default; it
// must exceed a report interval, reportEvery = 0.5s, plus the time a
// report takes to arrive and the engine's poll interval) can conclude that
// the crawl is done: a message of the crawl is always ready in some queue of
// the family, or held by one worker. A message held long enough to be in
// its holder's report is counted; one taken since is counted for quietFor
// once the next report (within reportEvery) arrives; so a message can
// hide from one count only if it was taken within a report interval
// before it, and then the counts of the next quietFor see the change. A
// message ready at a count is seen by it. A worker that dies (kill -9)
// takes nothing with it: its connection closes, the server puts its
// unacknowledged deliveries back into their queues, where they are ready,
// and its presence queue goes with the connection, which is how the
// others tell it is gone rather than silent. Delay queues hold delayed
// nacks under a TTL and dead-letter them back to queue; a worker
// announces a delay queue (and waits for the server to take the
// announcement) before the first message goes into it, and a new Broker
// looks for every delay queue name a queue can have, so none is missed.
// What this rule cannot see is a message published to the crawl's queues
// from outside (trawl seed) after the crawl was found done.
//
// Delayed counts the messages of queue's delay queues: one whose TTL ran
// out counts as delayed until the server moves it back to queue.
func (b *Broker) counts1(ctx context.Context, queue string) (broker.Counts, error) {
	if err := b.check("counts", queue); err != nil {
		return broker.Counts{}, err
	}
	b.mu.Lock()
	prev, gen := b.counted[queue], b.countGen
	b.mu.Unlock()
	if !prev.at.IsZero() && time.Since(prev.at) < countEvery {
		return prev.c, nil
	}
	c, err := b.count(ctx, queue)
	if err == nil {
		b.mu.Lock()
		if b.countGen == gen {
			b.counted[queue] = counted{c: c, at: time.Now()}
		}
		b.mu.Unlock()
	}
	return c, err
}

// countEvery is how long Counts answers from its last count of a queue,
// unless this Broker published, took or settled a message of the queue
// since: an idle worker's engine asks several times a second, and each
// count costs the server a passive declare per queue of the family (see
// Counts for why the completion rule still holds).
const countEvery = time.Second

// counted is a count and when it was made.
type counted struct {
	c  broker.Counts
	at time.Time
}

// touch forgets the counts of queue: this Broker changed it. b.mu is held.
func (b *Broker) touch(queue string) {
	delete(b.counted, queue)
	b.countGen++
}

// touched is touch for a caller that does not hold b.mu.
func (b *Broker) touched(queue string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.touch(queue)
}

// count counts queue; see Counts.
func (b *Broker) count(ctx context.Context, queue string) (broker.Counts, error) {
	if b.mgmt != nil {
		c, err := b.countAPI(ctx, queue)
		if err == nil {
			b.managementWorks()
			return c, nil
		}
		if b.isClosed() {
			return broker.Counts{}, opErr("counts", queue, broker.ErrClosed)
		}
		if ctx.Err() != nil {
			return broker.Counts{}, opErr("counts", queue, err)
		}
		b.managementFails(err)
	}
	for {
		s, err := b.session(ctx)
		if err != nil {
			_, err = b.failed(ctx, nil, err)
			return broker.Counts{}, opErr("counts", queue, err)
		}
		c, err := b.countAMQP(ctx, s, queue)
		if err == nil {
			return c, nil
		}
		if errors.Is(err, errClosedWhileWaiting) {
			err = broker.ErrClosed
		}
		if retry, err := b.failed(ctx, s, err); !retry {
			return broker.Counts{}, opErr("counts", queue, err)
		}
	}
}

// countAPI counts queue from the management API's statistics.
func (b *Broker) countAPI(ctx context.Context, queue string) (broker.Counts, error) {
	qs, err := b.family(ctx, queue)
	if err != nil {
		return broker.Counts{}, err
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
			c.Delayed += s.Ready + s.Unacknowledged
		}
	}
	return c, nil
}

// mgmtWarnEvery bounds the warnings about a failing management API.
const mgmtWarnEvery = 30 * time.Second

// managementFails warns that the management API failed: at once the
// first time, then every mgmtWarnEvery.
func (b *Broker) managementFails(err error) {
	b.mu.Lock()
	warn := b.mgmtState != "failing" || time.Since(b.mgmtWarn) >= mgmtWarnEvery
	if warn {
		b.mgmtState, b.mgmtWarn = "failing", time.Now()
	}
	b.mu.Unlock()
	if warn {
		b.log.Warn("management API unusable; counting over AMQP instead (fix Config.ManagementURL, --amqp-management-url, or leave it out)",
			"management_url", redact(b.mgmt), "err", err)
	}
}

func (b *Broker) managementWorks() {
	b.mu.Lock()
	was := b.mgmtState
	b.mgmtState = "ok"
	b.mu.Unlock()
	if was == "failing" {
		b.log.Warn("management API works again", "management_url", redact(b.mgmt))
	}
}

// checkManagement tries the management API once at start, so that a
// wrong URL or credentials are reported at once, not when the crawl first
// looks idle.
func (b *Broker) checkManagement() {
	defer b.wg.Done()
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	if _, err := b.family(ctx, "trawl-check"); err != nil && !b.isClosed() {
		b.managementFails(err)
	}
}

// Purge empties queue, its dead-letter queue and its delay queues, and
// drops the deliveries of queue this broker holds (their settlement fails
// with broker.ErrLeaseLost). Deliveries held by other processes are out of
// its reach: they come back when those settle them or go away.
func (b *Broker) purge1(ctx context.Context, queue string) error {
	if err := b.check("purge", queue); err != nil {
		return err
	}
	defer b.touched(queue)
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
		_ = d.rc.ack(d.tag) // gone from the queue; a dead channel gives it back, and that is all we can do
	}
	names := []string{queue, deadQueue(queue)}
	for _, d := range delaySteps {
		names = append(names, delayQueue(queue, d))
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
	return nil
}

// DeadLetters returns up to max dead letters of queue, oldest first. It
// takes them from the dead-letter queue without acknowledging them and
// gives them back, in their places.
func (b *Broker) deadLetters1(ctx context.Context, queue string, max int) ([]broker.DeadLetter, error) {
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
func (b *Broker) requeue1(ctx context.Context, queue string, max int) (int, error) {
	if err := b.check("requeue", queue); err != nil {
		return 0, err
	}
	if max < 1 {
		return 0, opErr("requeue", queue, fmt.Errorf("%w: max %d < 1", broker.ErrInvalid, max))
	}
	defer b.touched(queue)
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
