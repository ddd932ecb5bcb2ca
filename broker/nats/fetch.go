package nats

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawlhq/trawl/broker"
)

// waitExpiry is how long one waiting pull request stays with the server;
// nats.go renews it when it runs out, and the server sends heartbeats
// meanwhile (every half of it), so that a lost request is noticed.
const waitExpiry = 30 * time.Second

// delayBatch is how many delayed messages one pull request takes.
const delayBatch = 64

// oneShot bounds a pull request that should find a message at once (see
// take).
const oneShot = 100 * time.Millisecond

// errNoConsumer: the server has no consumer (or stream) for a pull request.
var errNoConsumer = errors.New("consumer not found")

// pullErr classifies an error of a pull request: the consumer or its
// stream missing becomes errNoConsumer.
func pullErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound),
		errors.Is(err, jetstream.ErrStreamNotFound), errors.Is(err, natsgo.ErrNoResponders),
		errors.Is(err, jetstream.ErrNoStreamResponse):
		return fmt.Errorf("%w: %w", errNoConsumer, err)
	}
	return err
}

// sortDeliveries orders ds by band, highest first, then stream sequence.
func sortDeliveries(ds []*delivery) {
	slices.SortFunc(ds, func(a, b *delivery) int {
		if c := cmp.Compare(b.band, a.band); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	})
}

// accept handles a message of consumer cons: a delayed message is moved
// or put off and nil returned; a band message becomes a delivery (nil if
// it was dead-lettered). sent: see admit.
func (b *Broker) accept(q *queue, cons int, m jetstream.Msg, sent time.Time) *delivery {
	if cons == q.delayIdx() {
		b.delayed(q, m)
		return nil
	}
	return b.admit(q, cons, m, sent)
}

// fetch asks consumer cons of q for up to n messages, with one pull
// request: those ready now (wait 0: a "no wait" request, answered at
// once), or waiting up to wait for the batch. It appends the deliveries
// to got and returns how many messages came.
func (b *Broker) fetch(q *queue, cons, n int, wait time.Duration, got *[]*delivery) (int, error) {
	var batch jetstream.MessageBatch
	var err error
	// A "no wait" request is answered at once: the server sent its
	// messages, and started their leases, after sent.
	sent := time.Now()
	if wait == 0 {
		batch, err = q.cons[cons].FetchNoWait(n)
	} else {
		sent = time.Time{}
		batch, err = q.cons[cons].Fetch(n, jetstream.FetchMaxWait(wait))
	}
	if err != nil {
		return 0, fmt.Errorf("pull request: %w", pullErr(err))
	}
	k := 0
	for m := range batch.Messages() {
		k++
		if d := b.accept(q, cons, m, sent); d != nil {
			*got = append(*got, d)
		}
	}
	if err := batch.Error(); err != nil {
		return k, fmt.Errorf("pull request: %w", pullErr(err))
	}
	return k, nil
}

// take pulls what q has now, without waiting: up to max messages, band by
// band from the highest, after moving the delayed messages that are due
// back to their bands. It returns the deliveries it got even with an
// error (the error then says why it got no more).
//
// One stream info request tells which subjects hold messages; bands that
// hold none are skipped. A band that holds some is asked with a "no wait"
// pull request. The server may answer it with "no messages" for a message
// it has stored and acknowledged to its publisher, because it tells its
// consumers about new messages asynchronously, and a "no wait" request
// trusts the consumer's count; taking from a lower band then would break
// priority order. So, if exact, when such a request brings nothing, the
// band's consumer is asked how many of its messages are in flight, and if
// fewer than the band holds, a pull request that waits (up to oneShot)
// collects the rest: a waiting request reads the stream itself. (A
// Consumer does without: its waiting requests catch such a message.)
func (b *Broker) take(q *queue, max int, exact bool) ([]*delivery, error) {
	// These requests are answered at once; they are not cut short by the
	// caller, so that what they bring is not lost.
	ctx, cancel := b.detached()
	defer cancel()
	info, err := q.stream.Info(ctx, jetstream.WithSubjectFilter(q.prefix+"*"))
	if err != nil {
		return nil, fmt.Errorf("stream info: %w", pullErr(err))
	}
	held := info.State.Subjects
	var got []*delivery
	if held[q.delay] > 0 {
		if _, err := b.fetch(q, q.delayIdx(), delayBatch, 0, &got); err != nil {
			return got, err
		}
	}
	for band := len(q.bands) - 1; band >= 0 && len(got) < max; band-- {
		stored := held[q.bands[band]]
		if stored == 0 {
			continue
		}
		n, err := b.fetch(q, band, max-len(got), 0, &got)
		if err != nil {
			return got, err
		}
		if n > 0 || !exact {
			continue
		}
		ci, err := q.cons[band].Info(ctx)
		if err != nil {
			return got, fmt.Errorf("consumer info: %w", pullErr(err))
		}
		if stored > uint64(ci.NumAckPending) {
			if _, err := b.fetch(q, band, max-len(got), oneShot, &got); err != nil {
				return got, err
			}
		}
	}
	return got, nil
}

// arrival is a message, or an error, from one of wait's pulls.
type arrival struct {
	cons int
	m    jetstream.Msg
	err  error
}

// wait keeps a waiting pull request open on every band of q (for batch
// messages each; nats.go renews them as they expire) and on the delay
// consumer, and returns as soon as a band message comes: a Publish, Nack,
// Requeue, expiring delay or lease wakes it at once, with no polling.
// Delayed messages are handled as they come. Once a band message has
// come, it stops the requests and returns it with every message they
// brought meanwhile (possibly more than batch: the caller gives back what
// it does not want). When ctx ends or the broker closes first, it gives
// back (uncounted) what came and returns the reason.
//
// Stopping drains the requests' subscriptions: the server forgets a pull
// request as soon as its inbox has no subscriber, and every message it
// sent before that is still read. (Abandoning a request instead would let
// it take a message for nobody, back only after its lease.)
func (b *Broker) wait(ctx context.Context, q *queue, batch int) ([]*delivery, error) {
	// gctx ends the readers: after the drain, or if it does not finish.
	gctx, stopReaders := context.WithCancel(context.WithoutCancel(ctx))
	defer stopReaders()
	arrivals := make(chan arrival)
	its := make([]jetstream.MessagesContext, 0, len(q.cons))
	readers := 0
	readerDone := make(chan struct{})
	var opened error
	for i, c := range q.cons {
		n := batch
		if i == q.delayIdx() {
			n = delayBatch
		}
		it, err := c.Messages(jetstream.PullMaxMessages(n), jetstream.PullExpiry(waitExpiry))
		if err != nil {
			opened = fmt.Errorf("pull: %w", pullErr(err))
			break
		}
		its = append(its, it)
		readers++
		go func() {
			defer func() { readerDone <- struct{}{} }()
			// A band's reader reads no more than its one request's
			// batch: asking nats.go for another message would send a
			// new request, and bring a message only to be given back.
			for left := n; i == q.delayIdx() || left > 0; left-- {
				m, err := it.Next(jetstream.NextContext(gctx))
				if gctx.Err() != nil {
					return
				}
				select {
				case arrivals <- arrival{cons: i, m: m, err: err}:
				case <-gctx.Done():
					// Only once the drain timed out: the message comes
					// back after its lease.
					return
				}
				if err != nil {
					return
				}
			}
		}()
	}
	var got []*delivery
	failed := opened
	stopped := opened != nil
	stop := func() {
		if !stopped {
			stopped = true
			for _, it := range its {
				it.Drain()
			}
		}
	}
	if stopped {
		for _, it := range its {
			it.Drain()
		}
	}
	var timeout <-chan time.Time
	for readers > 0 {
		if stopped && timeout == nil {
			t := time.NewTimer(b.cfg.Timeout)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case a := <-arrivals:
			if a.err != nil {
				if errors.Is(a.err, jetstream.ErrMsgIteratorClosed) && stopped {
					continue // drained
				}
				if failed == nil && !stopped {
					failed = fmt.Errorf("pull: %w", pullErr(a.err))
				}
				stop()
				continue
			}
			if d := b.accept(q, a.cons, a.m, time.Time{}); d != nil {
				got = append(got, d)
				stop()
			}
		case <-readerDone:
			readers--
		case <-ctx.Done():
			stop()
		case <-b.life.Done():
			stop()
		case <-timeout:
			b.log.Warn("pull requests did not drain; messages sent to them come back after their lease", "queue", q.queue)
			stopReaders()
			timeout = make(chan time.Time) // never again
		}
	}
	switch {
	case b.life.Err() != nil:
		b.unclaim(got)
		return nil, broker.ErrClosed
	case ctx.Err() != nil:
		b.unclaim(got)
		return nil, ctx.Err()
	case len(got) > 0:
		return got, nil
	case failed != nil:
		return nil, failed
	}
	return nil, nil
}
