package nats

import (
	"cmp"
	"context"
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

// waitExpiry bounds how long one pull request waits on the server; a
// waiting Receive sends new ones after it.
const waitExpiry = 10 * time.Second

// delayBatch is how many delayed messages one pull request takes.
const delayBatch = 64

var (
	// errNoConsumer: the server has no consumer for a pull request.
	errNoConsumer = errors.New("consumer not found")
	// errRefused: the server turned a pull request down.
	errRefused = errors.New("pull request refused")
)

// puller sends pull requests for one Receive call and collects the
// replies, on one subscription to a wildcard inbox: request k gets the
// reply subject inbox.k, so every reply, message or status, says which
// request it answers.
//
// Why not nats.go's Fetch: a pull request the server still holds when the
// caller gives up would later take a message for nobody, and the message
// would only come back after its lease. A puller gives up by draining its
// subscription: the server forgets the requests as soon as the inbox has
// no subscriber, and every message it sent before that is still read and
// given back at once.
type puller struct {
	b      *Broker
	q      *queue
	inbox  string
	sub    *natsgo.Subscription
	n      int
	reqs   map[string]*request // open requests by inbox token
	byCons map[int]string      // open request of each consumer
}

// request is one open pull request.
type request struct {
	cons      int // index into names.consumers
	want, got int
	// at is when a request the server answers at once (no_wait, no
	// expires) was sent, zero for others: the server sent its messages,
	// and started their leases, after it.
	at time.Time
}

// reply is a message or a final status for a request.
type reply struct {
	cons   int
	msg    *natsgo.Msg // nil for a status
	status int
	desc   string
	done   bool      // the request is over
	at     time.Time // the request's at
}

// send asks consumer cons for up to batch messages. noWait: the server
// answers at once (with the messages there are, then "404 No Messages"
// if fewer than batch), or with expires, as soon as it has any message,
// or after expires; otherwise it holds the request for up to expires.
func (p *puller) send(cons, batch int, noWait bool, expires time.Duration) error {
	if p.sub == nil {
		p.inbox = p.b.nc.NewInbox()
		sub, err := p.b.nc.SubscribeSync(p.inbox + ".*")
		if err != nil {
			return fmt.Errorf("subscribe: %w", err)
		}
		p.sub, p.reqs, p.byCons = sub, map[string]*request{}, map[int]string{}
	}
	p.n++
	tok := strconv.Itoa(p.n)
	var body []byte
	switch {
	case noWait && expires > 0:
		body = fmt.Appendf(nil, `{"batch":%d,"no_wait":true,"expires":%d}`, batch, int64(expires))
	case noWait:
		body = fmt.Appendf(nil, `{"batch":%d,"no_wait":true}`, batch)
	default:
		body = fmt.Appendf(nil, `{"batch":%d,"expires":%d}`, batch, int64(expires))
	}
	var at time.Time
	if noWait && expires <= 0 {
		at = time.Now()
	}
	if err := p.b.nc.PublishRequest(p.q.next[cons], p.inbox+"."+tok, body); err != nil {
		return fmt.Errorf("pull request: %w", err)
	}
	p.reqs[tok] = &request{cons: cons, want: batch, at: at}
	p.byCons[cons] = tok
	return nil
}

// next returns the next reply, waiting until ctx ends. Heartbeats and
// replies to forgotten requests are skipped.
func (p *puller) next(ctx context.Context) (reply, error) {
	for {
		m, err := p.sub.NextMsgWithContext(ctx)
		if err != nil {
			return reply{}, err
		}
		if r, ok := p.classify(m); ok {
			return r, nil
		}
	}
}

// classify matches m with its request: a status by its subject (the
// request's reply subject), a message by the consumer its metadata names
// (JetStream delivers it under its own subject; a puller has at most one
// open request per consumer).
func (p *puller) classify(m *natsgo.Msg) (reply, bool) {
	code := status(m)
	if code == 100 { // idle heartbeat
		return reply{}, false
	}
	if code != 0 {
		tok := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
		req := p.reqs[tok]
		if req == nil {
			return reply{}, false // a request already over
		}
		p.end(tok, req)
		return reply{cons: req.cons, status: code, desc: m.Header.Get("Description"), done: true}, true
	}
	meta, err := m.Metadata()
	if err != nil {
		p.b.log.Error("not a jetstream message; ignored", "queue", p.q.queue, "subject", m.Subject, "error", err)
		return reply{}, false
	}
	cons := slices.Index(p.q.consumers, meta.Consumer)
	if cons < 0 {
		p.b.log.Error("message of an unknown consumer; ignored", "queue", p.q.queue, "consumer", meta.Consumer)
		return reply{}, false
	}
	tok, ok := p.byCons[cons]
	if !ok {
		// No request open (it should not happen): handled all the same.
		return reply{cons: cons, msg: m}, true
	}
	req := p.reqs[tok]
	req.got++
	done := req.got >= req.want
	if done {
		p.end(tok, req)
	}
	return reply{cons: cons, msg: m, done: done, at: req.at}, true
}

// end forgets the request tok.
func (p *puller) end(tok string, req *request) {
	delete(p.reqs, tok)
	if p.byCons[req.cons] == tok {
		delete(p.byCons, req.cons)
	}
}

// status is the status code of a JetStream status message, 0 for a
// message.
func status(m *natsgo.Msg) int {
	if len(m.Data) > 0 || m.Header == nil {
		return 0
	}
	code, _ := strconv.Atoi(m.Header.Get("Status"))
	return code
}

// drain ends the subscription and returns the messages the server sent
// for the open requests before it forgot them.
func (p *puller) drain() []reply {
	if p.sub == nil {
		return nil
	}
	sub := p.sub
	p.sub = nil
	if len(p.reqs) == 0 {
		_ = sub.Unsubscribe()
		return nil
	}
	if err := sub.Drain(); err != nil {
		_ = sub.Unsubscribe()
		return nil
	}
	var out []reply
	for {
		// NextMsg fails once the drain is complete (the subscription is
		// closed), or after Timeout if the server does not answer.
		m, err := sub.NextMsg(p.b.cfg.Timeout)
		if err != nil {
			if errors.Is(err, natsgo.ErrTimeout) {
				_ = sub.Unsubscribe()
				p.b.log.Warn("pull subscription did not drain; messages sent to it come back after their lease",
					"queue", p.q.queue)
			}
			break
		}
		if r, ok := p.classify(m); ok && r.msg != nil {
			out = append(out, r)
		}
	}
	p.reqs, p.byCons = nil, nil
	return out
}

// close ends the puller, giving back whatever its open requests brought.
func (p *puller) close() {
	var ds []*delivery
	for _, r := range p.drain() {
		if d := p.accept(r); d != nil {
			ds = append(ds, d)
		}
	}
	p.b.unclaim(ds)
}

// accept handles a message reply: a delayed message is moved or put off,
// a band message becomes a delivery (nil if it was dead-lettered).
func (p *puller) accept(r reply) *delivery {
	if r.cons == p.q.delayIdx() {
		p.b.delayed(p.q, r.msg)
		return nil
	}
	return p.b.admit(p.q, r.cons, r.msg, r.at)
}

// failure turns a final status other than 404 and 408 into an error.
func failure(r reply) error {
	switch r.status {
	case 404, 408:
		return nil
	case 503:
		return errNoConsumer
	}
	return fmt.Errorf("%w: %d %s", errRefused, r.status, r.desc)
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

// oneShot bounds a pull request that should find a message at once (see
// take).
const oneShot = 100 * time.Millisecond

// take pulls what the queue has now, without waiting: up to max messages,
// band by band from the highest. With delays, it first moves the delayed
// messages that are due back to their bands.
//
// One stream info request tells which subjects hold messages; bands that
// hold none are skipped. A band that holds some is asked with a "no wait"
// pull request. The server may answer it with "no messages" for a message
// it has stored and acknowledged to its publisher, because it tells its
// consumers about new messages asynchronously, and a "no wait" request
// trusts the consumer's count; taking from a lower band then would break
// priority order. So when such a request brings nothing, the band's
// consumer is asked how many of its messages are in flight, and if fewer
// than the band holds, a pull request that waits (up to oneShot, and
// answers as soon as it has a message) collects the rest: a waiting
// request reads the stream itself.
func (p *puller) take(ctx context.Context, max int, delays bool) ([]*delivery, error) {
	// These requests are answered at once; they are not cut short by ctx,
	// so that what they bring is not lost.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.b.cfg.Timeout+oneShot)
	defer cancel()
	var got []*delivery
	fail := func(err error) ([]*delivery, error) {
		for _, r := range p.drain() {
			if d := p.accept(r); d != nil {
				got = append(got, d)
			}
		}
		if len(got) > 0 {
			sortDeliveries(got)
			return got, nil
		}
		return nil, err
	}
	info, err := p.q.stream.Info(rctx, jetstream.WithSubjectFilter(p.q.prefix+"*"))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, errNoConsumer
	}
	if err != nil {
		return nil, fmt.Errorf("stream info: %w", err)
	}
	held := info.State.Subjects
	// pull sends one request and collects its replies; it returns how
	// many messages came.
	pull := func(cons, batch int, expires time.Duration) (int, error) {
		if err := p.send(cons, batch, true, expires); err != nil {
			return 0, err
		}
		n := 0
		for {
			r, err := p.next(rctx)
			if err != nil {
				return n, err
			}
			if r.msg != nil {
				n++
				if d := p.accept(r); d != nil {
					got = append(got, d)
				}
			} else if err := failure(r); err != nil {
				if errors.Is(err, errNoConsumer) {
					return n, err
				}
				p.b.log.Debug("pull request refused", "queue", p.q.queue, "error", err)
			}
			if r.done {
				return n, nil
			}
		}
	}
	if delays && held[p.q.delay] > 0 {
		if _, err := pull(p.q.delayIdx(), delayBatch, 0); err != nil {
			return fail(err)
		}
	}
	for band := len(p.q.bands) - 1; band >= 0 && len(got) < max; band-- {
		stored := held[p.q.bands[band]]
		if stored == 0 {
			continue
		}
		n, err := pull(band, max-len(got), 0)
		if err != nil {
			return fail(err)
		}
		if n > 0 {
			continue
		}
		ci, err := p.q.cons[band].Info(rctx)
		if err != nil {
			return fail(fmt.Errorf("consumer info: %w", err))
		}
		if stored > uint64(ci.NumAckPending) {
			if _, err := pull(band, max-len(got), oneShot); err != nil {
				return fail(err)
			}
		}
	}
	return got, nil
}

// wait sends a pull request that the server holds to every band (one
// message each; max in FIFO order, which has one band) and to the delay
// consumer, and waits for the first message. It then stops the requests,
// collects what they brought, tops it up to max from the bands, and gives
// back what is beyond max. It returns no deliveries and no error when its
// requests ran out or the connection was renewed: the caller tries again.
func (p *puller) wait(ctx context.Context, max int) ([]*delivery, error) {
	b := p.b
	expires := waitExpiry
	if dl, ok := ctx.Deadline(); ok {
		expires = min(expires, time.Until(dl))
	}
	if expires <= time.Millisecond {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-b.life.Done():
			return nil, broker.ErrClosed
		}
	}
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, expires+b.cfg.Timeout)
	defer cancel()
	stop := context.AfterFunc(b.currentEpoch(), cancel)
	defer stop()

	batch := 1
	if b.cfg.Order == broker.FIFO {
		batch = max
	}
	var failed error
	for cons := range p.q.consumers {
		n := batch
		if cons == p.q.delayIdx() {
			n = delayBatch
		}
		if err := p.send(cons, n, false, expires); err != nil {
			failed = err
			break
		}
	}
	var got []*delivery
	for failed == nil && len(got) == 0 && len(p.reqs) > 0 {
		r, err := p.next(rctx)
		if err != nil {
			break
		}
		if r.msg == nil {
			failed = failure(r)
			continue
		}
		if d := p.accept(r); d != nil {
			got = append(got, d)
			break
		}
		if left := expires - time.Since(start); r.done && left > time.Millisecond {
			// A delayed message was handled, or a message dead-lettered:
			// keep a request open on that consumer.
			n := batch
			if r.cons == p.q.delayIdx() {
				n = delayBatch
			}
			if err := p.send(r.cons, n, false, left); err != nil {
				failed = err
			}
		}
	}
	for _, r := range p.drain() {
		if d := p.accept(r); d != nil {
			got = append(got, d)
		}
	}
	if len(got) == 0 {
		switch {
		case b.isClosed():
			return nil, broker.ErrClosed
		case ctx.Err() != nil:
			return nil, ctx.Err()
		}
		return nil, failed
	}
	if len(got) < max {
		more, _ := p.take(ctx, max-len(got), false)
		got = append(got, more...)
	}
	sortDeliveries(got)
	if len(got) > max {
		b.unclaim(got[max:])
		got = got[:max]
	}
	return got, nil
}
