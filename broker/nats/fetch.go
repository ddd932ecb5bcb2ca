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
// the broker renews it when it runs out (see waiting), and one left
// unanswered past it (a restarted server forgot it) is sent anew: no
// heartbeats are asked for.
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
//
// The answer comes on a channel of n plus a few (pullSlack): the server
// sends a request at most n messages and one status that ends it.
// (SubscribeSync's channel holds 64Ki messages: 512 KiB to allocate and
// clear for every pull request, a take's several per partition.)
func (b *Broker) pull(q *queue, cons, n int, wait time.Duration) ([]*natsgo.Msg, error) {
	req, err := json.Marshal(pullRequest{Batch: n, Expires: wait, NoWait: wait == 0})
	if err != nil {
		return nil, err
	}
	answers := make(chan *natsgo.Msg, n+pullSlack)
	sub, err := b.nc.ChanSubscribe(b.nc.NewInbox(), answers)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }() // an error once drained
	subject := b.api + "CONSUMER.MSG.NEXT." + q.work + "." + q.consumers[cons]
	if err := b.nc.PublishRequest(subject, sub.Subject, req); err != nil {
		return nil, err
	}
	var ms []*natsgo.Msg
	timer := time.NewTimer(wait + b.cfg.Timeout)
	defer timer.Stop()
	var drained <-chan natsgo.SubStatus // closed (or sent to) once a drain ends
	for len(ms) < n {
		var m *natsgo.Msg
		select {
		case m = <-answers:
		case <-drained:
			for {
				select {
				case m := <-answers: // sent before the drain: still read
					if isMessage(m) {
						ms = append(ms, m)
					}
				default:
					return ms, nil // drained: nothing more comes
				}
			}
		case <-timer.C:
			if drained != nil {
				b.log.Warn("a pull request did not drain; messages sent to it come back after their lease", "queue", q.queue)
				return ms, natsgo.ErrTimeout
			}
			b.log.Warn("a pull request got no answer in time; stopping it", "queue", q.queue, "after", wait+b.cfg.Timeout)
			drained = sub.StatusChanged(natsgo.SubscriptionClosed)
			if err := sub.Drain(); err != nil {
				return ms, fmt.Errorf("drain: %w", err)
			}
			timer.Reset(b.cfg.Timeout)
			continue
		}
		if isMessage(m) {
			ms = append(ms, m)
			continue
		}
		switch m.Header.Get("Status") {
		case "100": // a heartbeat
		case "404", "408": // no messages; the request expired
			return ms, nil
		case "503":
			return ms, natsgo.ErrNoResponders
		default:
			err := fmt.Errorf("status %s: %s", m.Header.Get("Status"), m.Header.Get("Description"))
			if strings.Contains(strings.ToLower(m.Header.Get("Description")), "consumer deleted") {
				err = fmt.Errorf("%w: %w", jetstream.ErrConsumerDeleted, err)
			}
			return ms, err
		}
	}
	return ms, nil
}

// pullSlack is the room an answer's channel has beyond the messages asked
// for: the server ends a request with one status at most, and a
// heartbeat or two are room to spare. (A channel subscription whose
// channel is full drops what comes: a message then comes back only after
// its lease.)
const pullSlack = 4

// isMessage tells a message of a stream from the server's status of a
// pull request: a message's reply subject acknowledges it. (The server's
// statuses have none; a message's own Status header is its publisher's.)
func isMessage(m *natsgo.Msg) bool {
	return m.Reply != "" || m.Header.Get("Status") == ""
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
// back to their bands. held is what q's stream held a moment ago, by
// subject (see holdings); bands that held nothing are skipped. floor is
// the lowest band that held messages in any partition the caller takes
// from. It returns the deliveries it got even with an error (the error
// then says why it got no more).
//
// A band that holds messages is asked with a "no wait" pull request. The
// server may answer it with "no messages" for a message it has stored and
// acknowledged to its publisher, because it tells its consumers about new
// messages asynchronously, and a "no wait" request trusts the consumer's
// count; taking from a lower band then would break priority order. So,
// when such a request brings fewer than asked while a lower band (floor)
// holds messages, the band's consumer is asked how many of its messages
// are in flight, and then the stream how many the band holds (in this
// order, so that an ack between the two cannot look like a new message);
// if the band holds more, a pull request that waits (up to oneShot) for
// that many collects them: a waiting request reads the stream itself.
// With no lower band held, nothing of lower priority is taken instead: a
// message not yet told to the consumer is the next take's (or, if none
// came, the wait's), and a band whose messages are all in flight, as a
// crawl's mostly are, costs its "no wait" request only, not three round
// trips.
func (b *Broker) take(q *queue, held map[string]uint64, floor, limit int) ([]*delivery, error) {
	// These requests are answered at once; they are not cut short by the
	// caller, so that what they bring is not lost.
	ctx, cancel := b.detached()
	defer cancel()
	var got []*delivery
	if held[q.delay] > 0 {
		if _, err := b.fetch(q, q.delayIdx(), delayBatch, 0, &got); err != nil {
			return got, err
		}
	}
	for band := len(q.bands) - 1; band >= 0 && len(got) < limit; band-- {
		if held[q.bands[band]] == 0 {
			continue
		}
		asked := limit - len(got)
		n, err := b.fetch(q, band, asked, 0, &got)
		if err != nil {
			return got, err
		}
		if n == asked || band <= floor {
			continue
		}
		ci, err := q.cons[band].Info(ctx)
		if err != nil {
			return got, fmt.Errorf("consumer info: %w", pullErr(err))
		}
		st, err := b.streamHeld(ctx, q.work, q.bands[band])
		if err != nil {
			return got, fmt.Errorf("stream info: %w", pullErr(err))
		}
		stored := st.Subjects[q.bands[band]]
		if inFlight := uint64(max(ci.NumAckPending, 0)); stored > inFlight {
			k := int(min(stored-inFlight, uint64(limit-len(got))))
			if _, err := b.fetch(q, band, k, oneShot, &got); err != nil {
				return got, err
			}
		}
	}
	return got, nil
}

// holdings asks q's stream how many messages each of its subjects holds
// (one stream info request).
func (b *Broker) holdings(q *queue) (map[string]uint64, error) {
	ctx, cancel := b.detached()
	defer cancel()
	st, err := b.streamHeld(ctx, q.work, q.prefix+"*")
	if err != nil {
		return nil, fmt.Errorf("stream info: %w", pullErr(err))
	}
	return st.Subjects, nil
}

// streamTally is what trawl reads of a stream's state.
type streamTally struct {
	Msgs     uint64            `json:"messages"`
	Subjects map[string]uint64 `json:"subjects"` // of those the request's filter matched
}

// streamHeld asks stream for its state, with the messages each subject
// that filter matches holds ("": none): one stream info request, of which
// only the state is read (jetstream's Info decodes the configuration and
// the cluster too, most of a take's and a count's CPU). A stream that does
// not exist is jetstream.ErrStreamNotFound. (The server pages the subjects
// beyond 100,000; a queue has at most MaxBands+1.)
func (b *Broker) streamHeld(ctx context.Context, stream, filter string) (streamTally, error) {
	var req []byte
	if filter != "" {
		var err error
		if req, err = json.Marshal(map[string]string{"subjects_filter": filter}); err != nil {
			return streamTally{}, err
		}
	}
	m, err := b.nc.RequestWithContext(ctx, b.api+"STREAM.INFO."+stream, req)
	if err != nil {
		return streamTally{}, err
	}
	var resp struct {
		Error *jetstream.APIError `json:"error"`
		State streamTally         `json:"state"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return streamTally{}, fmt.Errorf("stream info of %s: %w", stream, err)
	}
	switch {
	case resp.Error == nil:
		return resp.State, nil
	case resp.Error.ErrorCode == jetstream.JSErrCodeStreamNotFound:
		return streamTally{}, jetstream.ErrStreamNotFound
	}
	return streamTally{}, resp.Error
}

// takeAll is take on every partition qs, in turn from the one after the
// partition the previous takeAll began with, each given an even share of
// what is left of limit (a partition that has less leaves the rest to the
// next ones): no partition waits for another's backlog. It first asks
// every partition what it holds, so that each take knows the lowest band
// held in any of them. It returns the deliveries it got, and with an
// error the partition that failed.
func (b *Broker) takeAll(qs []*queue, limit int) ([]*delivery, *queue, error) {
	start := 0
	if len(qs) > 1 {
		start = int(b.turn.Add(1) % uint64(len(qs)))
	}
	helds := make([]map[string]uint64, len(qs))
	floor := -1 // below every band: none held
	for i := range qs {
		q := qs[(start+i)%len(qs)]
		held, err := b.holdings(q)
		if err != nil {
			return nil, q, err
		}
		helds[i] = held
		for band, subj := range q.bands {
			if held[subj] > 0 {
				if floor < 0 || band < floor {
					floor = band
				}
				break
			}
		}
	}
	var got []*delivery
	for i := range qs {
		left := limit - len(got)
		if left <= 0 {
			break
		}
		q := qs[(start+i)%len(qs)]
		share := (left + len(qs) - i - 1) / (len(qs) - i)
		ds, err := b.take(q, helds[i], floor, share)
		got = append(got, ds...)
		if err != nil {
			return got, q, err
		}
	}
	return got, nil, nil
}

// waitPull is one of a waiting's pull requests: on consumer cons of q,
// for up to n messages at a time.
type waitPull struct {
	q    *queue
	cons int
	n    int
	open bool      // sent, and not yet ended or filled
	left int       // messages still to come on the request sent last
	sent time.Time // when the request was sent last
}

// wait keeps a waiting pull request open on every band of every partition
// qs (for batch messages each) and on their delay consumers, and returns
// as soon as a band message comes: a Publish, Nack, Requeue, expiring
// delay or lease wakes it at once, with no polling. Delayed messages are
// handled as they come. Once a band message has come, it stops the
// requests and returns it with every message they brought meanwhile
// (possibly more than batch: the caller gives back what it does not
// want). When ctx ends or the broker closes first, it gives back
// (uncounted) what came and returns the reason. With an error it returns
// the partition whose request failed. (A consumer keeps its requests
// open from one wait to the next instead: see waiting.)
func (b *Broker) wait(ctx context.Context, qs []*queue, batch int) ([]*delivery, *queue, error) {
	for {
		w, err := b.openWaiting(qs, batch)
		if err != nil {
			return nil, qs[0], err
		}
		got, failedQ, failed, again := w.wait(ctx, nil)
		got = append(got, w.stop()...)
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
		case !again:
			return nil, nil, nil
		}
	}
}

// waiting is a set of waiting pull requests, one on every band and delay
// consumer of some partitions (for batch messages a band), that share one
// subscription, on a wildcard inbox, each with a reply subject of its
// own: they are published without waiting for an answer, and stopping
// them is one drain, so that what a wait costs the client (a
// subscription, its reader, the round trips of starting and stopping)
// does not grow with bands × partitions. (nats.go's Messages would be a
// subscription, a reader and heartbeat timers per band and per partition,
// each drained on its own.)
//
// A request is sent when a wait begins unless it is still open with the
// server: one that brought its batch is sent again at the next wait, not
// at once, so that the messages the requests may still bring are never
// more than pending says (a consumer counts them against its read-ahead).
// A request is renewed when it expires (every waitExpiry); one left
// unanswered past its expiry by Timeout (a restarted server forgets
// waiting requests), a reconnection or a consumer's change of leader
// make wait report again: the requests must be sent anew, on a new
// subscription. Delayed messages are handled as they come, and the delay
// consumer's request sent again once it brought its batch.
//
// Stopping drains the subscription: the server forgets a pull request as
// soon as its inbox has no subscriber, and every message it sent before
// that is still read. (Abandoning a request instead would let it take a
// message for nobody, back only after its lease.)
//
// A waiting is used by one goroutine at a time.
type waiting struct {
	b       *Broker
	qs      []*queue
	pulls   []*waitPull
	index   map[string]int // "<stream> <consumer>": its request in pulls
	inbox   string
	answers chan *natsgo.Msg
	sub     *natsgo.Subscription
	closed  <-chan natsgo.SubStatus // the subscription has ended (drained, or the connection closed)
	status  chan natsgo.Status      // the connection's reconnections and its closing

	// idle is when its owner last stopped reading answers (a wait
	// returned): what it reads later came after that, at the latest
	// (see handle); zero while a wait reads.
	idle time.Time

	got     []*delivery
	failedQ *queue
	failed  error
	again   bool
	stopped bool
	gone    bool // the subscription could not be drained (the connection closed)
	drained <-chan time.Time
}

// openWaiting makes the requests of a waiting on partitions qs, for batch
// messages a band, on a new subscription; none is sent yet.
func (b *Broker) openWaiting(qs []*queue, batch int) (*waiting, error) {
	w := &waiting{b: b, qs: qs, index: map[string]int{}, inbox: b.nc.NewInbox()}
	room := 0
	for _, q := range qs {
		for i, name := range q.consumers {
			n := batch
			if i == q.delayIdx() {
				n = delayBatch
			}
			w.index[q.work+" "+name] = len(w.pulls)
			w.pulls = append(w.pulls, &waitPull{q: q, cons: i, n: n})
			room += n + pullSlack
		}
	}
	// The channel has room for every request's batch and its end
	// (pullSlack each), which is all a request can have outstanding: one
	// is sent again only once its batch or its end was read.
	w.answers = make(chan *natsgo.Msg, room)
	sub, err := b.nc.ChanSubscribe(w.inbox+".*", w.answers)
	if err != nil {
		return nil, fmt.Errorf("pull: %w", err)
	}
	w.sub = sub
	w.closed = sub.StatusChanged(natsgo.SubscriptionClosed)
	w.status = b.nc.StatusChanged(natsgo.CONNECTED, natsgo.CLOSED)
	return w, nil
}

// pending is how many band messages the open requests may still bring.
func (w *waiting) pending() int {
	n := 0
	for _, p := range w.pulls {
		if p.open && p.cons != p.q.delayIdx() {
			n += p.left
		}
	}
	return n
}

// bands is how many band requests w has.
func (w *waiting) bands() int {
	n := 0
	for _, q := range w.qs {
		n += len(q.bands)
	}
	return n
}

// same tells whether w waits on exactly the partitions qs.
func (w *waiting) same(qs []*queue) bool {
	return slices.Equal(w.qs, qs)
}

func (w *waiting) send(i int) error {
	p := w.pulls[i]
	req, err := json.Marshal(pullRequest{Batch: p.n, Expires: waitExpiry})
	if err != nil {
		return err
	}
	p.open, p.left, p.sent = true, p.n, time.Now()
	subject := w.b.api + "CONSUMER.MSG.NEXT." + p.q.work + "." + p.q.consumers[p.cons]
	return w.b.nc.PublishRequest(subject, w.inbox+"."+strconv.Itoa(i), req)
}

// stopping drains the subscription, once.
func (w *waiting) stopping() {
	if w.stopped {
		return
	}
	w.stopped = true
	w.drained = time.After(w.b.cfg.Timeout)
	if err := w.sub.Drain(); err != nil {
		w.gone = true
	}
}

func (w *waiting) fail(p *waitPull, err error) {
	if !w.stopped {
		w.failed, w.failedQ = fmt.Errorf("pull: %w", pullErr(err)), p.q
		w.stopping()
	}
}

// handle takes one thing the subscription brought; a band message becomes
// a delivery in w.got. One read while no wait was reading is leased from
// when the last wait returned (it came after that): a message that waited
// in the channel is not counted on for longer than the server leased it.
func (w *waiting) handle(m *natsgo.Msg) {
	if !isMessage(m) {
		// The server's status for the request that m's subject names.
		i, err := strconv.Atoi(strings.TrimPrefix(m.Subject, w.inbox+"."))
		if err != nil || i < 0 || i >= len(w.pulls) || w.stopped {
			return
		}
		p := w.pulls[i]
		status, desc := m.Header.Get("Status"), m.Header.Get("Description")
		switch {
		case status == "100": // a heartbeat
		case status == "404" || status == "408": // expired: renew it
			if err := w.send(i); err != nil {
				w.fail(p, err)
			}
		case status == "503":
			w.fail(p, natsgo.ErrNoResponders)
		case status == "409" && strings.Contains(strings.ToLower(desc), "leadership change"):
			w.again = true
			w.stopping()
		case strings.Contains(strings.ToLower(desc), "consumer deleted"):
			w.fail(p, fmt.Errorf("%w: status %s: %s", jetstream.ErrConsumerDeleted, status, desc))
		default:
			w.fail(p, fmt.Errorf("status %s: %s", status, desc))
		}
		return
	}
	i, ok := w.index[ackStreamConsumer(m.Reply)]
	if !ok {
		w.b.log.Warn("a message came for none of a wait's pull requests; it comes back after its lease",
			"queue", w.qs[0].queue, "reply", m.Reply)
		return
	}
	p := w.pulls[i]
	if p.left--; p.left <= 0 {
		p.open = false
	}
	if d := w.b.accept(p.q, p.cons, m, w.idle); d != nil {
		w.got = append(w.got, d)
	}
	if !p.open && p.cons == p.q.delayIdx() && !w.stopped {
		if err := w.send(i); err != nil {
			w.fail(p, err)
		}
	}
}

// came returns what came and was handled, and forgets it.
func (w *waiting) came() []*delivery {
	got := w.got
	w.got = nil
	return got
}

// takeFired takes what the bands whose requests brought their message
// since they were sent hold now, without waiting ("no wait" pull
// requests): up to limit, highest band first, each band an even share of
// what is left. The other bands have nothing the server could give: their
// requests wait on them. A band that brought fewer than asked has no more,
// and its request is sent again. So a take after a wait costs a pull
// request a band that had messages, not a stream info a partition and a
// pull request a band that holds some (in flight, as a crawl's mostly
// are). With an error it returns the partition that failed.
func (w *waiting) takeFired(limit int) ([]*delivery, *queue, error) {
	var fired []int
	for i, p := range w.pulls {
		if !p.open && p.cons != p.q.delayIdx() {
			fired = append(fired, i)
		}
	}
	slices.SortStableFunc(fired, func(a, b int) int { return cmp.Compare(w.pulls[b].cons, w.pulls[a].cons) })
	var got []*delivery
	for k, i := range fired {
		left := limit - len(got)
		if left <= 0 || w.stopped {
			break
		}
		p := w.pulls[i]
		share := (left + len(fired) - k - 1) / (len(fired) - k)
		n, err := w.b.fetch(p.q, p.cons, share, 0, &got)
		if err != nil {
			return got, p.q, err
		}
		if n < share {
			if err := w.send(i); err != nil {
				w.fail(p, err)
				return got, p.q, w.failed
			}
		}
	}
	return got, nil, nil
}

// poll handles what the subscription brought, without waiting, and
// returns the deliveries that came.
func (w *waiting) poll() []*delivery {
	for !w.gone {
		select {
		case m := <-w.answers:
			w.handle(m)
			continue
		default:
		}
		break
	}
	return w.came()
}

// wait sends the requests not open, then waits until a band message
// comes, ctx ends, the broker closes, cut is closed or sent to, or the
// requests fail (failed, and the partition failedQ) or must be sent anew
// (again); the last two stop it. It returns the deliveries that came.
// The requests stay open otherwise: stop ends them.
func (w *waiting) wait(ctx context.Context, cut <-chan struct{}) (got []*delivery, failedQ *queue, failed error, again bool) {
	w.idle = time.Time{}
	defer func() { w.idle = time.Now() }()
	for i, p := range w.pulls {
		if !p.open && !w.stopped {
			if err := w.send(i); err != nil {
				w.fail(p, err)
			}
		}
	}
	done, closing := ctx.Done(), w.b.life.Done()
	lost := time.NewTicker(waitExpiry / 2)
	defer lost.Stop()
	for !w.gone {
		if len(w.got) > 0 && !w.stopped {
			return w.came(), nil, nil, false
		}
		select {
		case <-w.closed: // drained
			for len(w.answers) > 0 {
				w.handle(<-w.answers) // sent before the drain: still read
			}
			w.gone = true
			return w.came(), w.failedQ, w.failed, w.again
		case m := <-w.answers:
			w.handle(m)
		case <-lost.C:
			for _, p := range w.pulls {
				if !w.stopped && p.open && time.Since(p.sent) > waitExpiry+w.b.cfg.Timeout {
					w.b.log.Warn("a pull request went unanswered past its expiry (the server restarted?); sending them again",
						"queue", p.q.queue, "stream", p.q.work)
					w.again = true
					w.stopping()
				}
			}
		case st := <-w.status:
			switch {
			case st == natsgo.CLOSED:
				w.fail(w.pulls[0], natsgo.ErrConnectionClosed)
			case !w.stopped: // reconnected
				w.again = true
				w.stopping()
			}
		case <-cut:
			return w.came(), nil, nil, false
		case <-done:
			return w.came(), nil, nil, false
		case <-closing:
			return w.came(), nil, nil, false
		case <-w.drained:
			w.b.log.Warn("pull requests did not drain; messages sent to them come back after their lease", "queue", w.qs[0].queue)
			w.gone = true
			return w.came(), w.failedQ, w.failed, w.again
		}
	}
	// The connection closed: what it brought is lost with it.
	return w.came(), w.failedQ, w.failed, w.again
}

// stop ends the requests (a drain) and returns the deliveries they
// brought, read to the drain's end.
func (w *waiting) stop() []*delivery {
	defer w.b.nc.RemoveStatusListener(w.status)
	defer func() { _ = w.sub.Unsubscribe() }() // an error once drained
	w.stopping()
	for !w.gone {
		select {
		case <-w.closed:
			for len(w.answers) > 0 {
				w.handle(<-w.answers)
			}
			w.gone = true
		case m := <-w.answers:
			w.handle(m)
		case <-w.drained:
			w.b.log.Warn("pull requests did not drain; messages sent to them come back after their lease", "queue", w.qs[0].queue)
			w.gone = true
		}
	}
	return w.came()
}

// ackStreamConsumer is "<stream> <consumer>" of an acknowledgement
// subject (see metadata), or "".
func ackStreamConsumer(reply string) string {
	tokens := strings.Split(reply, ".")
	switch {
	case len(tokens) < 9 || tokens[0] != "$JS" || tokens[1] != "ACK":
		return ""
	case len(tokens) >= 11:
		return tokens[4] + " " + tokens[5]
	}
	return tokens[2] + " " + tokens[3]
}
