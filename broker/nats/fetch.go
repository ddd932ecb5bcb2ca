package nats

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
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
func (b *Broker) accept(q *queue, cons int, m *natsgo.Msg, sent time.Time) *delivery {
	if cons == q.delayIdx() {
		b.delayed(q, m)
		return nil
	}
	return b.admit(q, cons, m, sent)
}

// fetch asks consumer cons of q for up to n messages, with one pull
// request (see pull): those ready now (wait 0), or waiting up to wait for
// the batch. It appends the deliveries to got and returns how many
// messages came.
func (b *Broker) fetch(q *queue, cons, n int, wait time.Duration, got *[]*delivery) (int, error) {
	// The server sent the messages, and started their leases, after
	// sent: their leases are counted from then, not from their arrival,
	// which pull waits for however late it is (a message that came 5s
	// late under a 3s lease was handed out after the server gave it to
	// another worker: a page fetched twice). A waiting request (wait is
	// at most oneShot here) costs its messages at most wait of lease.
	sent := time.Now()
	ms, err := b.pull(q, cons, n, wait)
	for _, m := range ms {
		if d := b.accept(q, cons, m, sent); d != nil {
			*got = append(*got, d)
		}
	}
	if err != nil {
		return len(ms), fmt.Errorf("pull request: %w", pullErr(err))
	}
	return len(ms), nil
}

// apiPrefix is the JetStream API's subject prefix for domain ("" for none).
func apiPrefix(domain string) string {
	if domain == "" {
		return jetstream.DefaultAPIPrefix
	}
	return "$JS." + domain + ".API."
}

// pullRequest is the body of a JetStream pull request.
type pullRequest struct {
	Batch   int           `json:"batch"`
	Expires time.Duration `json:"expires,omitempty"`
	NoWait  bool          `json:"no_wait,omitempty"`
}

// pull sends one pull request to consumer cons of q for up to n messages:
// a "no wait" one (wait 0), answered at once, or one that waits up to
// wait for them. It returns the messages that came, with an error if the
// request failed.
//
// It reads the answer to its end: n messages, or the status that ends a
// request (no messages, request expired). (nats.go's Fetch stops
// listening a second after its request's expiry, at once for a "no wait"
// one, and drops what comes later: a server or a process held up that
// long has then sent messages to nobody, back only after their lease.)
// A request not ended after wait plus the broker's Timeout is stopped by
// draining its subscription: the server forgets a request once its inbox
// has no subscriber, and what it sent before that is still read.
func (b *Broker) pull(q *queue, cons, n int, wait time.Duration) ([]*natsgo.Msg, error) {
	req, err := json.Marshal(pullRequest{Batch: n, Expires: wait, NoWait: wait == 0})
	if err != nil {
		return nil, err
	}
	sub, err := b.nc.SubscribeSync(b.nc.NewInbox())
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }() // an error once drained
	subject := b.api + "CONSUMER.MSG.NEXT." + q.work + "." + q.consumers[cons]
	if err := b.nc.PublishRequest(subject, sub.Subject, req); err != nil {
		return nil, err
	}
	var ms []*natsgo.Msg
	deadline := time.Now().Add(wait + b.cfg.Timeout)
	draining := false
	for len(ms) < n {
		m, err := sub.NextMsg(max(time.Until(deadline), time.Millisecond))
		switch {
		case errors.Is(err, natsgo.ErrTimeout) && !draining:
			b.log.Warn("a pull request got no answer in time; stopping it", "queue", q.queue, "after", wait+b.cfg.Timeout)
			if err := sub.Drain(); err != nil {
				return ms, fmt.Errorf("drain: %w", err)
			}
			draining = true
			deadline = time.Now().Add(b.cfg.Timeout)
			continue
		case draining && errors.Is(err, natsgo.ErrBadSubscription):
			return ms, nil // drained: nothing more comes
		case errors.Is(err, natsgo.ErrTimeout):
			b.log.Warn("a pull request did not drain; messages sent to it come back after their lease", "queue", q.queue)
			return ms, err
		case err != nil:
			return ms, err
		}
		status := m.Header.Get("Status")
		if m.Reply != "" || status == "" {
			// A message: its reply subject acknowledges it. (The
			// server's statuses have none; a message's own Status
			// header is its publisher's.)
			ms = append(ms, m)
			continue
		}
		switch status {
		case "100": // a heartbeat
		case "404", "408": // no messages; the request expired
			return ms, nil
		case "503":
			return ms, natsgo.ErrNoResponders
		default:
			err := fmt.Errorf("status %s: %s", status, m.Header.Get("Description"))
			if strings.Contains(strings.ToLower(m.Header.Get("Description")), "consumer deleted") {
				err = fmt.Errorf("%w: %w", jetstream.ErrConsumerDeleted, err)
			}
			return ms, err
		}
	}
	return ms, nil
}

// meta is what trawl reads of a JetStream message's metadata.
type meta struct {
	seq       uint64    // stream sequence
	delivered uint64    // deliveries, this one included
	stored    time.Time // when the stream stored it
}

// metadata reads m's metadata from its reply subject, in either form:
//
//	$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<time>.<pending>
//	$JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<time>.<pending>[.<token>…]
func metadata(m *natsgo.Msg) (meta, error) {
	tokens := strings.Split(m.Reply, ".")
	if len(tokens) < 9 || tokens[0] != "$JS" || tokens[1] != "ACK" || (len(tokens) > 9 && len(tokens) < 11) {
		return meta{}, fmt.Errorf("reply subject %q is not a JetStream acknowledgement's", m.Reply)
	}
	f := tokens[4:9] // delivered, sseq, cseq, time, pending
	if len(tokens) >= 11 {
		f = tokens[6:11]
	}
	var n [4]uint64
	for i := range n {
		v, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return meta{}, fmt.Errorf("reply subject %q: %w", m.Reply, err)
		}
		n[i] = v
	}
	return meta{delivered: n[0], seq: n[1], stored: time.Unix(0, int64(n[3]))}, nil
}

// take pulls what q has now, without waiting: up to limit messages, band by
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
// priority order. So, when such a request brings nothing, or fewer than
// asked while a lower band holds messages, the band's consumer is asked how many of its messages are in flight, and then the
// stream how many the band holds (in this order, so that an ack between
// the two cannot look like a new message); if the band holds more, a pull
// request that waits (up to oneShot) for that many collects them: a
// waiting request reads the stream itself.
func (b *Broker) take(q *queue, limit int) ([]*delivery, error) {
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
	for band := len(q.bands) - 1; band >= 0 && len(got) < limit; band-- {
		stored := held[q.bands[band]]
		if stored == 0 {
			continue
		}
		asked := limit - len(got)
		n, err := b.fetch(q, band, asked, 0, &got)
		if err != nil {
			return got, err
		}
		if n == asked || (n > 0 && !heldBelow(q, held, band)) {
			continue
		}
		ci, err := q.cons[band].Info(ctx)
		if err != nil {
			return got, fmt.Errorf("consumer info: %w", pullErr(err))
		}
		info, err := q.stream.Info(ctx, jetstream.WithSubjectFilter(q.bands[band]))
		if err != nil {
			return got, fmt.Errorf("stream info: %w", pullErr(err))
		}
		stored = info.State.Subjects[q.bands[band]]
		if inFlight := uint64(max(ci.NumAckPending, 0)); stored > inFlight {
			k := int(min(stored-inFlight, uint64(limit-len(got))))
			if _, err := b.fetch(q, band, k, oneShot, &got); err != nil {
				return got, err
			}
		}
	}
	return got, nil
}

// takeAll is take on every partition qs, in turn from the one after the
// partition the previous takeAll began with, each given an even share of
// what is left of limit (a partition that has less leaves the rest to the
// next ones): no partition waits for another's backlog. It returns the
// deliveries it got, and with an error the partition that failed.
func (b *Broker) takeAll(qs []*queue, limit int) ([]*delivery, *queue, error) {
	if len(qs) == 1 {
		ds, err := b.take(qs[0], limit)
		return ds, qs[0], err
	}
	start := int(b.turn.Add(1) % uint64(len(qs)))
	var got []*delivery
	for i := range qs {
		left := limit - len(got)
		if left <= 0 {
			break
		}
		q := qs[(start+i)%len(qs)]
		share := (left + len(qs) - i - 1) / (len(qs) - i)
		ds, err := b.take(q, share)
		got = append(got, ds...)
		if err != nil {
			return got, q, err
		}
	}
	return got, nil, nil
}

// heldBelow tells whether a band of q below band holds messages.
func heldBelow(q *queue, held map[string]uint64, band int) bool {
	for _, subj := range q.bands[:band] {
		if held[subj] > 0 {
			return true
		}
	}
	return false
}

// coreMsg is m, pulled by nats.go, as the core message it came as.
func coreMsg(m jetstream.Msg) *natsgo.Msg {
	return &natsgo.Msg{Subject: m.Subject(), Reply: m.Reply(), Header: m.Headers(), Data: m.Data()}
}

// arrival is a message, or an error, from one of wait's pulls.
type arrival struct {
	q    *queue
	cons int
	m    jetstream.Msg
	err  error
}

// wait keeps a waiting pull request open on every band of every partition qs (for batch
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
// it take a message for nobody, back only after its lease.) With an
// error it returns the partition whose request failed.
func (b *Broker) wait(ctx context.Context, qs []*queue, batch int) ([]*delivery, *queue, error) {
	// gctx ends the readers: after the drain, or if it does not finish.
	gctx, stopReaders := context.WithCancel(context.WithoutCancel(ctx))
	defer stopReaders()
	arrivals := make(chan arrival)
	var its []jetstream.MessagesContext
	readers := 0
	readerDone := make(chan struct{})
	var opened error
	var failedQ *queue
	type pullOn struct {
		q    *queue
		cons int
	}
	var pulls []pullOn
	for _, q := range qs {
		for i := range q.cons {
			pulls = append(pulls, pullOn{q, i})
		}
	}
	for _, pl := range pulls {
		q, i, c := pl.q, pl.cons, pl.q.cons[pl.cons]
		n := batch
		if i == q.delayIdx() {
			n = delayBatch
		}
		it, err := c.Messages(jetstream.PullMaxMessages(n), jetstream.PullExpiry(waitExpiry))
		if err != nil {
			opened = fmt.Errorf("pull: %w", pullErr(err))
			failedQ = q
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
				case arrivals <- arrival{q: q, cons: i, m: m, err: err}:
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
					failedQ = a.q
				}
				stop()
				continue
			}
			if d := b.accept(a.q, a.cons, coreMsg(a.m), time.Time{}); d != nil {
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
			b.log.Warn("pull requests did not drain; messages sent to them come back after their lease", "queue", qs[0].queue)
			stopReaders()
			timeout = make(chan time.Time) // never again
		}
	}
	switch {
	case b.life.Err() != nil:
		b.unclaim(got)
		return nil, nil, broker.ErrClosed
	case ctx.Err() != nil:
		b.unclaim(got)
		return nil, nil, ctx.Err()
	case len(got) > 0:
		return got, nil, nil
	case failed != nil:
		return nil, failedQ, failed
	}
	return nil, nil, nil
}
