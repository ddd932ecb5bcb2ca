package deployment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"time"

	"github.com/trawlhq/trawl/broker"
	redisbroker "github.com/trawlhq/trawl/broker/redis"
	dedupredis "github.com/trawlhq/trawl/dedup/redis"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/redislayout"
)

// repartitionBatch is how many messages one step of a repartition moves.
const repartitionBatch = 256

// Moved says what Repartition moved.
type Moved struct {
	From, To int // the partition counts
	Ready    int // queued requests (delayed ones included)
	Dead     int // dead letters
	// Unchanged says that the crawl had To partitions already, and no
	// repartition cut short had left messages on their way: nothing was
	// moved.
	Unchanged bool
}

// Repartition moves the queued requests and dead letters of a stopped
// crawl (no live worker) into m partitions, each to the partition of its
// host under the crawl's PartitionBy, and stores m as the crawl's
// partition count (trawl repartition). Redis, NATS and RabbitMQ.
//
// The Redis broker's filter is partitioned with its queue, and its claims
// cannot be moved by host (see dedup/redis.CopyClaims): before the count
// is stored, every new partition gets the claims of every old one, so
// that nothing claimed is fetched again; once the requests are in their
// new partitions, the old partitions' claims are deleted (from the
// filter's own keys, partition 0 of one, which hold the crawl's marks
// too, a set filter's claims but the marks; a Bloom filter's stay, see
// dedup/redis.DropPartitions). On Redis nothing else of the old count
// stays: the old partitions' keys and those of the queues it moved
// through are deleted, and every run ends by sweeping any key of another
// count (broker/redis.PurgeOtherPartitions): what a run cut short after
// the count was stored left, which the run that finishes it cannot tell
// from its count.
//
// It moves through two queues of one partition beside the crawl's,
// NAME:requests~repartition and NAME:requests~repartition-dead: first
// every request, then every dead letter (requeued, with its reason kept)
// out of the old partitions; then, with the new count stored, every dead
// letter into its new partition (published, taken and rejected with its
// reason) and every request. Each message is published where it goes
// before it is acknowledged where it was, so a repartition cut short (a
// crash, ^C) loses nothing: run again with the same count, it finishes
// the move (a message of the cut step may then be queued twice).
// Requests keep their priority and their Request.Retries; their delivery
// attempts start again.
func (d *Deployment) Repartition(ctx context.Context, m int) (Moved, error) {
	name := d.crawl.Name
	if d.reopen == nil {
		return Moved{}, configErr("repartition needs --broker=redis, nats or rabbitmq (the other brokers do not split their queues)")
	}
	if m < 1 || m > broker.MaxPartitions {
		return Moved{}, configErr("--partitions %d: want 1 to %d", m, broker.MaxPartitions)
	}
	if d.Metadata == nil {
		return Moved{}, configErr("repartition needs the crawl's stored settings: with RabbitMQ, give --redis-url")
	}
	n, err := engine.LiveWorkers(ctx, d.Metadata, name)
	if err != nil {
		return Moved{}, err
	}
	if n > 0 {
		return Moved{}, fmt.Errorf("repartition %s: %w: %d live %s (announced within the last %v); stop %s first, then run trawl repartition again",
			name, ErrWorkersLive, n, plural(int64(n), "worker"), engine.PresenceTTL, map[bool]string{true: "it", false: "them"}[n == 1])
	}
	s, err := engine.StoredSettings(ctx, d.Metadata, name)
	if errors.Is(err, broker.ErrNotFound) {
		return Moved{}, fmt.Errorf("repartition: %w %s (check --name)", ErrNoCrawl, name)
	}
	if err != nil {
		return Moved{}, fmt.Errorf("crawl %q: read settings: %w", name, err)
	}
	out := Moved{From: s.Partitions, To: m}
	q := engine.RequestsQueue(name)
	tmp, tmpDead := redislayout.RepartitionQueues(q)
	one, err := d.reopen(ctx, 1)
	if err != nil {
		return out, err
	}
	if out.From == m {
		// Nothing to move, unless a run to m was cut short after it
		// stored m: then it finishes that run's move.
		left, err := pending(ctx, one, tmp, tmpDead)
		if err != nil {
			return out, err
		}
		if left == 0 {
			out.Unchanged = true
			return out, d.endRepartition(ctx, one, out.From, m, tmp, tmpDead)
		}
	}
	keep := func(m broker.Message) (broker.Message, error) { return m, nil }

	// Out of the old partitions: the requests, then the dead letters.
	if _, err := d.drain(ctx, d.Broker, q, one, tmp, keep); err != nil {
		return out, err
	}
	reasons := map[string][]string{}
	for {
		ls, err := d.Broker.DeadLetters(ctx, q, repartitionBatch)
		if err != nil {
			return out, err
		}
		for _, l := range ls {
			reasons[string(l.Message.Body)] = append(reasons[string(l.Message.Body)], l.Reason)
		}
		n, err := d.Broker.Requeue(ctx, q, repartitionBatch)
		if err != nil {
			return out, err
		}
		if _, err := d.drain(ctx, d.Broker, q, one, tmpDead, func(msg broker.Message) (broker.Message, error) {
			rs := reasons[string(msg.Body)]
			reason := "dead letter (its reason was lost)"
			if len(rs) > 0 {
				reason, reasons[string(msg.Body)] = rs[0], rs[1:]
			}
			b, err := json.Marshal(deadRecord{Reason: reason, Body: msg.Body})
			return broker.Message{Body: b, Priority: msg.Priority}, err
		}); err != nil {
			return out, err
		}
		if n < repartitionBatch {
			break
		}
	}

	// Into the new ones. The old partitions the new count does not use
	// are empty now: drop them (RabbitMQ refuses a broker of fewer
	// partitions than its queue has; Redis keeps their id counters and
	// wake-up tokens otherwise).
	if dp, ok := d.Broker.(partitionDropper); ok {
		if err := dp.DropPartitions(ctx, q, m, out.From); err != nil {
			return out, err
		}
	}
	if d.claims != nil {
		if err := dedupredis.CopyClaims(ctx, d.claims, out.From, m); err != nil {
			return out, fmt.Errorf("repartition: %w", err)
		}
	}
	if err := engine.SetPartitions(ctx, d.Metadata, name, m); err != nil {
		return out, err
	}
	nb, err := d.reopen(ctx, m)
	if err != nil {
		return out, err
	}
	key := func(body []byte) string {
		var r engine.Request
		if r.UnmarshalBinary(body) != nil {
			return ""
		}
		u, err := url.Parse(r.URL)
		if err != nil {
			return ""
		}
		return broker.PartitionKey(u.Host, s.PartitionBy)
	}
	for {
		ds, err := take(ctx, d.stderr(), one, tmpDead)
		if err != nil || len(ds) == 0 {
			if err != nil {
				return out, err
			}
			break
		}
		for _, dd := range ds {
			var rec deadRecord
			if err := json.Unmarshal(dd.Message().Body, &rec); err != nil {
				return out, fmt.Errorf("repartition: a dead letter in %s: %w", tmpDead, err)
			}
			if err := nb.Publish(ctx, q, broker.Message{Body: rec.Body, Priority: dd.Message().Priority, Key: key(rec.Body)}); err != nil {
				return out, err
			}
			got, err := nb.Receive(ctx, q, 1)
			if err != nil {
				return out, err
			}
			if err := got[0].Reject(ctx, rec.Reason); err != nil {
				return out, err
			}
			if err := dd.Ack(ctx); err != nil {
				return out, err
			}
			out.Dead++
		}
	}
	out.Ready, err = d.drain(ctx, one, tmp, nb, q, func(msg broker.Message) (broker.Message, error) {
		msg.Key = key(msg.Body)
		return msg, nil
	})
	if err != nil {
		return out, err
	}
	return out, d.endRepartition(ctx, one, out.From, m, tmp, tmpDead)
}

// pending counts the messages in queues of b (ready, leased, dead).
func pending(ctx context.Context, b broker.Broker, queues ...string) (int64, error) {
	var n int64
	for _, q := range queues {
		c, err := b.Counts(ctx, q)
		if err != nil {
			return 0, fmt.Errorf("repartition: count %s: %w", q, err)
		}
		n += c.Ready + c.InFlight + c.Dead
	}
	return n, nil
}

// endRepartition ends a repartition from from to m partitions whose
// messages are all in their new partitions: it drops the queues of one
// (of broker one) it moved through, empty, and on Redis the old
// partitions' claims and any key of another count than m.
func (d *Deployment) endRepartition(ctx context.Context, one broker.Broker, from, m int, transit ...string) error {
	// On Redis, their id counters and wake-up tokens.
	if dp, ok := one.(partitionDropper); ok {
		for _, tq := range transit {
			if err := dp.DropPartitions(ctx, tq, 0, 1); err != nil {
				return err
			}
		}
	}
	if d.claims == nil {
		return nil
	}
	name := d.crawl.Name
	marks, err := engine.FilterMarks(ctx, d.Metadata, name)
	if err != nil {
		return fmt.Errorf("repartition: %w", err)
	}
	if err := dedupredis.DropPartitions(ctx, d.claims, from, m, marks...); err != nil {
		return fmt.Errorf("repartition: %w", err)
	}
	// What a run cut short after the count was stored left (the run that
	// finishes it sees the new count as the old), or a repartition made
	// before they cleaned up: the claims in the filter's own keys, and
	// every key of another count.
	if from != 1 && m > 1 {
		if err := dedupredis.DropPartitions(ctx, d.claims, 1, m, marks...); err != nil {
			return fmt.Errorf("repartition: %w", err)
		}
	}
	if _, err := redisbroker.PurgeOtherPartitions(ctx, d.redis, name, m); err != nil {
		return fmt.Errorf("repartition: %w", err)
	}
	return nil
}

// partitionDropper is implemented by brokers that can delete what a queue
// of n partitions keeps that one of m partitions does not use, with
// whatever it holds: NATS and RabbitMQ, partitions m to n-1 (each a stream
// or queue named by its number); Redis, the keys of each partition of n
// whose tag none of m's has. m = 0 deletes the whole queue.
type partitionDropper interface {
	DropPartitions(ctx context.Context, queue string, m, n int) error
}

// deadRecord is a dead letter on its way between partitions.
type deadRecord struct {
	Reason string `json:"reason"`
	Body   []byte `json:"body"`
}

// take receives up to a batch of queue's messages, or none once it holds
// none (it waits for delayed and leased ones to come back, saying so).
func take(ctx context.Context, w io.Writer, b broker.Broker, queue string) ([]broker.Delivery, error) {
	for said := false; ; {
		c, err := b.Counts(ctx, queue)
		if err != nil {
			return nil, err
		}
		if c.Ready+c.InFlight == 0 {
			return nil, nil
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ds, err := b.Receive(rctx, queue, repartitionBatch)
		cancel()
		if len(ds) > 0 {
			return ds, nil
		}
		if err != nil && ctx.Err() != nil {
			return nil, err
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return nil, err
		}
		if !said {
			said = true
			fmt.Fprintf(w, "trawl: repartition: waiting for %s's %d delayed and %d leased messages to come back\n", queue, c.Delayed, c.InFlight)
		}
	}
}

// drain moves every message of queue sq of src to queue dq of dst, each
// as conv makes it, publishing a batch before it acknowledges it, and
// says how many it moved.
func (d *Deployment) drain(ctx context.Context, src broker.Broker, sq string, dst broker.Broker, dq string, conv func(broker.Message) (broker.Message, error)) (int, error) {
	moved := 0
	for {
		ds, err := take(ctx, d.stderr(), src, sq)
		if err != nil || len(ds) == 0 {
			return moved, err
		}
		msgs := make([]broker.Message, len(ds))
		for i, dd := range ds {
			if msgs[i], err = conv(dd.Message()); err != nil {
				return moved, err
			}
		}
		if err := dst.Publish(ctx, dq, msgs...); err != nil {
			return moved, fmt.Errorf("repartition: publish to %s: %w", dq, err)
		}
		for _, dd := range ds {
			if err := dd.Ack(ctx); err != nil {
				return moved, fmt.Errorf("repartition: acknowledge in %s: %w", sq, err)
			}
		}
		moved += len(ds)
	}
}
