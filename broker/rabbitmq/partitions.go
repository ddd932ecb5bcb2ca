package rabbitmq

import (
	"context"
	"errors"
	"strconv"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trawlhq/trawl/broker"
)

// The partitions of a queue (Config.Partitions) are AMQP queues of their
// own, each used as an unpartitioned queue is; the methods here spread a
// queue's operations over them.

var (
	_ broker.Partitioned      = (*Broker)(nil)
	_ broker.PartitionCounter = (*Broker)(nil)
)

// Partitions is the number of partitions of every queue (see
// Config.Partitions).
func (b *Broker) Partitions() int { return b.cfg.Partitions }

// partName is the AMQP queue of partition p of queue.
func partName(queue string, p int) string {
	if p == 0 {
		return queue
	}
	return queue + ":p" + strconv.Itoa(p)
}

// Publish adds msgs to queue, each to the partition of its Key, and
// returns once the server has confirmed every one of them. When the
// connection drops meanwhile, the messages not yet confirmed are published
// again after reconnecting (some may then be stored twice); when ctx ends
// first, some may have been stored.
func (b *Broker) Publish(ctx context.Context, queue string, msgs ...broker.Message) error {
	n := b.cfg.Partitions
	if n == 1 {
		return b.publish1(ctx, queue, msgs...)
	}
	if err := b.declareAll(ctx, queue); err != nil {
		return err
	}
	parts := make([][]broker.Message, n)
	for _, m := range msgs {
		p := broker.PartitionOf(m.Key, n)
		parts[p] = append(parts[p], m)
	}
	for p, ms := range parts {
		if len(ms) == 0 {
			continue
		}
		if err := b.publish1(ctx, partName(queue, p), ms...); err != nil {
			return err
		}
	}
	return nil
}

// declareAll declares the partitions of queue in order, once per
// session, so that RabbitMQ's balanced leader locator places them in turn
// (a partition declared when first used would go where the queues
// declared before it left room).
func (b *Broker) declareAll(ctx context.Context, queue string) error {
	s, err := b.session(ctx)
	if err != nil {
		_, err = b.failed(ctx, nil, err)
		return opErr("declare", queue, err)
	}
	for p := range b.cfg.Partitions {
		if err := s.ensure(partName(queue, p)); err != nil {
			if b.isClosed() { // Close closed the connection under it
				err = broker.ErrClosed
			}
			return opErr("declare", queue, err)
		}
	}
	return nil
}

// Receive asks every partition of queue for up to max messages at once
// and returns what the first to answer delivers (with what others
// delivered meanwhile, up to max; the rest is released), waiting until
// there is at least one. It consumes only while it runs, so messages it
// does not return stay in the queue for other consumers.
func (b *Broker) Receive(ctx context.Context, queue string, max int) ([]broker.Delivery, error) {
	n := b.cfg.Partitions
	if n == 1 || max < 1 {
		return b.receive1(ctx, queue, max)
	}
	if err := b.check("receive", queue); err != nil {
		return nil, err
	}
	if err := b.declareAll(ctx, queue); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		ds  []broker.Delivery
		err error
	}
	results := make(chan result, n)
	var wg sync.WaitGroup
	for p := range n {
		wg.Go(func() {
			ds, err := b.receive1(rctx, partName(queue, p), max)
			results <- result{ds, err}
		})
	}
	var got []broker.Delivery
	var firstErr error
	for range n {
		r := <-results
		cancel() // the first answer ends the others' waits
		got = append(got, r.ds...)
		if r.err != nil && firstErr == nil && !errors.Is(r.err, context.Canceled) {
			firstErr = r.err
		}
	}
	wg.Wait()
	if len(got) > max {
		for _, d := range got[max:] {
			_ = d.Release(context.WithoutCancel(ctx))
		}
		got = got[:max]
	}
	for _, d := range got {
		d.(*delivery).name = queue
	}
	if len(got) > 0 {
		return got, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, opErr("receive", queue, err)
	}
	return nil, firstErr
}

// Consume opens a consumer of queue that reads ahead at most prefetch
// deliveries (its channel's basic.qos, which also counts the deliveries
// returned by Next and not yet settled). It subscribes on the first Next.
// A partitioned queue's consumer is one consumer per partition, each
// with basic.qos(ceil(prefetch/N)) for N partitions, whose Next takes from
// the partitions in turn: a partition whose deliveries its caller holds
// unsettled (a slow host) holds up only itself, and the consumer holds at
// most prefetch+N-1 deliveries in all, at most ceil(prefetch/N) of one
// partition (broker.UnsettledCounter). A split it cannot rebalance: a
// live consumer's basic.qos cannot change (only cancelling and consuming
// again could), and a global basic.qos, one window for them all, is
// refused by quorum queues.
func (b *Broker) Consume(ctx context.Context, queue string, prefetch int) (broker.Consumer, error) {
	n := b.cfg.Partitions
	if n == 1 || prefetch < 1 {
		return b.consume1(ctx, queue, prefetch)
	}
	if err := b.declareAll(ctx, queue); err != nil {
		return nil, err
	}
	share := (prefetch + n - 1) / n
	pc := &partConsumer{b: b, queue: queue, wake: make(chan struct{}, 1), done: make(chan struct{})}
	for p := range n {
		c, err := b.consume1(ctx, partName(queue, p), share)
		if err != nil {
			pc.Close()
			return nil, err
		}
		sub := c.(*consumer)
		sub.wake = pc.wake // every partition's news wakes the one Next
		pc.subs = append(pc.subs, sub)
	}
	return pc, nil
}

// partConsumer is the consumer of a partitioned queue.
type partConsumer struct {
	b     *Broker
	queue string
	subs  []*consumer
	wake  chan struct{} // shared by subs
	done  chan struct{} // closed by Close
	next  int           // the partition Next asks first; Next is not concurrent
	once  sync.Once
}

// Next returns the next delivery of the first partition, from the one
// after the last delivery's, that has one.
func (pc *partConsumer) Next(ctx context.Context) (broker.Delivery, error) {
	failures := make([]int, len(pc.subs))
	for {
		wait := true
		for i := range pc.subs {
			k := (pc.next + i) % len(pc.subs)
			d, gone, err := pc.subs[k].poll(ctx, &failures[k])
			if err != nil {
				return nil, err // it names the partition's queue
			}
			if d != nil {
				pc.next = k + 1
				d.(*delivery).name = pc.queue
				return d, nil
			}
			wait = wait && gone != nil
		}
		if !wait {
			continue
		}
		select {
		case <-pc.wake:
		case <-ctx.Done():
		case <-pc.done:
		case <-pc.b.done:
		}
	}
}

// Close closes every partition's consumer.
func (pc *partConsumer) Close() error {
	var errs []error
	pc.once.Do(func() {
		close(pc.done)
		for _, c := range pc.subs {
			errs = append(errs, c.Close())
		}
	})
	return errors.Join(errs...)
}

// Counts counts queue, adding up its partitions.
func (b *Broker) Counts(ctx context.Context, queue string) (broker.Counts, error) {
	if b.cfg.Partitions == 1 {
		return b.counts1(ctx, queue)
	}
	parts, err := b.PartitionCounts(ctx, queue)
	return broker.SumCounts(parts), err
}

// PartitionCounts counts each partition of queue.
func (b *Broker) PartitionCounts(ctx context.Context, queue string) ([]broker.Counts, error) {
	out := make([]broker.Counts, b.cfg.Partitions)
	for p := range out {
		c, err := b.counts1(ctx, partName(queue, p))
		if err != nil {
			return nil, err
		}
		out[p] = c
	}
	return out, nil
}

// Purge empties every partition of queue.
func (b *Broker) Purge(ctx context.Context, queue string) error {
	for p := range b.cfg.Partitions {
		if err := b.purge1(ctx, partName(queue, p)); err != nil {
			return err
		}
	}
	return nil
}

// DeadLetters returns up to max dead letters of queue, partition by
// partition, without removing them.
func (b *Broker) DeadLetters(ctx context.Context, queue string, max int) ([]broker.DeadLetter, error) {
	if b.cfg.Partitions == 1 || max < 1 {
		return b.deadLetters1(ctx, queue, max)
	}
	var out []broker.DeadLetter
	for p := 0; p < b.cfg.Partitions && len(out) < max; p++ {
		ls, err := b.deadLetters1(ctx, partName(queue, p), max-len(out))
		if err != nil {
			return nil, err
		}
		out = append(out, ls...)
	}
	return out, nil
}

// Requeue moves up to max dead letters of queue back to their partitions
// and says how many moved.
func (b *Broker) Requeue(ctx context.Context, queue string, max int) (int, error) {
	if b.cfg.Partitions == 1 || max < 1 {
		return b.requeue1(ctx, queue, max)
	}
	moved := 0
	for p := 0; p < b.cfg.Partitions && moved < max; p++ {
		n, err := b.requeue1(ctx, partName(queue, p), max-moved)
		moved += n
		if err != nil {
			return moved, err
		}
	}
	return moved, nil
}

// DropPartitions deletes partitions from to to-1 of queue, and their dead
// letters, with whatever they hold (trawl repartition, once it has moved
// them to fewer partitions); from 0 deletes the whole queue (the queues a
// repartition moves through, once they are empty).
func (b *Broker) DropPartitions(ctx context.Context, queue string, from, to int) error {
	s, err := b.session(ctx)
	if err != nil {
		_, err = b.failed(ctx, nil, err)
		return opErr("drop partitions", queue, err)
	}
	for p := max(from, 0); p < to; p++ {
		for _, name := range []string{partName(queue, p), deadQueue(partName(queue, p))} {
			err := s.side(func(ch *amqp.Channel) error {
				_, err := ch.QueueDelete(name, false, false, false)
				return err
			})
			if err != nil && !isNotFound(err) {
				return opErr("drop partitions", queue, err)
			}
			s.forget(name)
		}
	}
	return nil
}
