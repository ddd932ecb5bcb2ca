package nats

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawlhq/trawl/broker"
)

// closeTimeout bounds giving back a closing broker's deliveries.
const closeTimeout = 10 * time.Second

// Broker is a JetStream-backed broker.Broker; it also implements
// broker.BatchAcker and broker.Metadata. A Broker
// stands for one worker: closing it closes its consumers and gives back
// its own unsettled deliveries. It is safe for concurrent use.
type Broker struct {
	cfg Config
	nc  *natsgo.Conn
	js  jetstream.JetStream
	api string // the JetStream API's subject prefix ("$JS.API." or a domain's)
	log *slog.Logger

	life context.Context // ends when Close begins
	stop context.CancelFunc

	opening sync.Mutex // serializes opening queues

	mu     sync.Mutex
	closed bool
	queues map[qkey]*queue
	// balanced names the queues whose partitions' leaders this broker
	// balanced (see balance).
	balanced map[string]bool
	meta     jetstream.KeyValue     // the metadata bucket, once opened (see kv)
	held     map[*delivery]struct{} // handed out, not settled
	active   sync.WaitGroup         // Publish and Receive calls and consumers' loops in progress

	turn atomic.Uint64 // which partition a take begins with (see takeAll)
}

var (
	_ broker.Broker        = (*Broker)(nil)
	_ broker.Delivery      = (*delivery)(nil)
	_ broker.BatchAcker    = (*Broker)(nil)
	_ broker.BatchExtender = (*Broker)(nil)
)

// qkey names one partition of a queue.
type qkey struct {
	name string
	part int
}

// queue is one partition of a queue this broker has opened: its streams and consumers
// exist, and the handles on them are here. It does not change once made.
type queue struct {
	names
	stream  jetstream.Stream     // the work stream
	cons    []jetstream.Consumer // as names.consumers
	created bool                 // this broker created the work stream
}

// New returns a broker on cfg.Conn. It checks that the server has
// JetStream enabled (in cfg.Domain, if set); queues are created on first
// use.
func New(ctx context.Context, cfg Config) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	opts := []jetstream.JetStreamOpt{
		jetstream.WithDefaultTimeout(cfg.Timeout),
		jetstream.WithPublishAsyncTimeout(cfg.Timeout),
	}
	var js jetstream.JetStream
	var err error
	if cfg.Domain != "" {
		js, err = jetstream.NewWithDomain(cfg.Conn, cfg.Domain, opts...)
	} else {
		js, err = jetstream.New(cfg.Conn, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("nats broker: connect: %w", err)
	}
	if _, err := js.AccountInfo(ctx); err != nil {
		where := "jetstream"
		if cfg.Domain != "" {
			where = fmt.Sprintf("jetstream domain %q", cfg.Domain)
		}
		return nil, fmt.Errorf("nats broker: connect: %s account info: %w", where, err)
	}
	b := &Broker{
		cfg:    cfg,
		nc:     cfg.Conn,
		js:     js,
		api:    apiPrefix(cfg.Domain),
		log:    cfg.Logger.With("backend", "nats"),
		queues: map[qkey]*queue{}, balanced: map[string]bool{},
		held: map[*delivery]struct{}{},
	}
	b.life, b.stop = context.WithCancel(context.WithoutCancel(ctx))
	b.log.Info("broker ready", "order", cfg.Order.String(), "bands", cfg.Bands, "partitions", cfg.Partitions,
		"lease", cfg.Lease, "max_deliveries", cfg.MaxDeliveries, "domain", cfg.Domain)
	return b, nil
}

func opErr(op, queue string, err error) error {
	return fmt.Errorf("nats broker: %s %q: %w", op, queue, err)
}

func invalid(op, queue, what string) error {
	return opErr(op, queue, fmt.Errorf("%w: %s", broker.ErrInvalid, what))
}

// check validates queue and tells whether b is closed.
func (b *Broker) check(op, queue string) error {
	if queue == "" {
		return invalid(op, queue, "empty queue name")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return opErr(op, queue, broker.ErrClosed)
	}
	return nil
}

// enter is check for calls that Close waits for; the caller calls
// b.active.Done when it returns.
func (b *Broker) enter(op, queue string) error {
	if queue == "" {
		return invalid(op, queue, "empty queue name")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return opErr(op, queue, broker.ErrClosed)
	}
	b.active.Add(1)
	return nil
}

// bound returns ctx bounded by the broker's Timeout.
func (b *Broker) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < b.cfg.Timeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, b.cfg.Timeout)
}

// detached returns a context for work that must finish even when the
// caller's context or the broker's life has ended (giving messages back),
// bounded by Timeout.
func (b *Broker) detached() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(b.life), b.cfg.Timeout)
}

// leaseEnd is when a lease that began at start counts as lost. It ends a
// little before the server's AckWait, which started when the server sent
// the message, a moment before start.
func (b *Broker) leaseEnd(start time.Time) time.Time {
	return start.Add(b.cfg.Lease - min(b.cfg.Lease/10, time.Second))
}

// Partitions is the number of partitions of every queue (see
// Config.Partitions).
func (b *Broker) Partitions() int { return b.cfg.Partitions }

// queue returns partition part of the named queue, creating its streams
// and consumers on first use.
func (b *Broker) queue(ctx context.Context, name string, part int) (*queue, error) {
	k := qkey{name, part}
	b.mu.Lock()
	q := b.queues[k]
	b.mu.Unlock()
	if q != nil {
		return q, nil
	}
	b.opening.Lock()
	defer b.opening.Unlock()
	b.mu.Lock()
	q = b.queues[k]
	b.mu.Unlock()
	if q != nil {
		return q, nil
	}
	q = &queue{names: namesFor(name, b.cfg.Bands, part)}
	octx, cancel := context.WithTimeout(ctx, 2*b.cfg.Timeout)
	defer cancel()
	created, err := b.open(octx, q)
	if err != nil {
		return nil, err
	}
	q.created = created
	b.mu.Lock()
	b.queues[k] = q
	b.mu.Unlock()
	return q, nil
}

// partitions returns every partition of the named queue, opening them. A
// broker that created one of them on a cluster balances their leaders.
func (b *Broker) partitions(ctx context.Context, name string) ([]*queue, error) {
	qs := make([]*queue, b.cfg.Partitions)
	created := false
	for p := range qs {
		q, err := b.queue(ctx, name, p)
		if err != nil {
			return nil, err
		}
		qs[p] = q
		created = created || q.created
	}
	if created && len(qs) > 1 && b.cfg.Replicas > 1 {
		b.mu.Lock()
		first := !b.balanced[name]
		b.balanced[name] = true
		b.mu.Unlock()
		if first {
			b.balance(ctx, qs)
		}
	}
	return qs, nil
}

// forget makes the next use of q's name open it again (after the server
// said its stream or consumers were missing).
func (b *Broker) forget(q *queue) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := qkey{q.queue, q.part}
	if b.queues[k] == q {
		delete(b.queues, k)
	}
}

// open creates q's streams and consumers, or checks the ones that exist.
// created says whether it created the work stream.
func (b *Broker) open(ctx context.Context, q *queue) (created bool, err error) {
	storage := jetstream.FileStorage
	if b.cfg.Storage == MemoryStorage {
		storage = jetstream.MemoryStorage
	}
	work := jetstream.StreamConfig{
		Name:        q.work,
		Description: "trawl queue " + q.queue,
		Subjects:    q.subjects(),
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     storage,
		Replicas:    b.cfg.Replicas,
	}
	s, err := b.js.CreateStream(ctx, work)
	created = err == nil
	if err != nil {
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return false, fmt.Errorf("create stream %s: %w", q.work, err)
		}
		if s, err = b.js.Stream(ctx, q.work); err != nil {
			return false, fmt.Errorf("stream %s: %w", q.work, err)
		}
		have := slices.Sorted(slices.Values(s.CachedInfo().Config.Subjects))
		want := slices.Sorted(slices.Values(work.Subjects))
		if !slices.Equal(have, want) {
			return false, fmt.Errorf("%w: stream %s has subjects %v, but this broker (%s order, %d bands) uses %v: "+
				"all brokers of a queue must agree on Order and Bands", broker.ErrInvalid, q.work, have, b.cfg.Order, b.cfg.Bands, want)
		}
	}
	q.stream = s
	dead := jetstream.StreamConfig{
		Name:        q.dead,
		Description: "trawl dead letters of " + q.queue,
		Subjects:    []string{q.grave},
		Retention:   jetstream.LimitsPolicy,
		Storage:     storage,
		Replicas:    b.cfg.Replicas,
	}
	if _, err := b.js.CreateStream(ctx, dead); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return false, fmt.Errorf("create stream %s: %w", q.dead, err)
	}
	for i, name := range q.consumers {
		filter := q.delay
		if i < len(q.bands) {
			filter = q.bands[i]
		}
		c, err := b.js.CreateOrUpdateConsumer(ctx, q.work, jetstream.ConsumerConfig{
			Durable:       name,
			Description:   "trawl consumer of " + q.queue,
			FilterSubject: filter,
			DeliverPolicy: jetstream.DeliverAllPolicy,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       b.cfg.Lease,
			MaxDeliver:    -1, // attempts are counted by the broker (see doc.go)
			MaxAckPending: -1,
		})
		if err != nil {
			return false, fmt.Errorf("create consumer %s > %s: %w", q.work, name, err)
		}
		q.cons = append(q.cons, c)
	}
	return created, nil
}

// message builds a message for subject with trawl's headers.
func message(subject string, body []byte, prio, attempts int) *natsgo.Msg {
	m := natsgo.NewMsg(subject)
	m.Data = body
	if prio != 0 {
		m.Header.Set(hdrPriority, strconv.Itoa(prio))
	}
	if attempts > 0 {
		m.Header.Set(hdrAttempts, strconv.Itoa(attempts))
	}
	return m
}

// headerInt reads an int header; absent or malformed: 0.
func headerInt(h natsgo.Header, key string) int {
	n, _ := strconv.Atoi(h.Get(key))
	return n
}

// maxAttemptsHeader bounds the Trawl-Attempts header: far above any
// MaxDeliveries, far below an overflow when deliveries are added to it.
const maxAttemptsHeader = 1 << 20

// checkHeaders validates the trawl headers of a message read from the
// server: each, when present, must be a decimal integer within its bounds
// (priorities are clamped to the bands anyway, attempts and delays are
// not). It returns why a message fails, for its dead letter.
func checkHeaders(h natsgo.Header) error {
	for _, c := range []struct {
		key     string
		min, hi int64
	}{
		{hdrPriority, -1 << 31, 1<<31 - 1},
		{hdrAttempts, 0, maxAttemptsHeader},
		{hdrDelay, 0, int64(MaxDelay)},
	} {
		v := h.Get(c.key)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < c.min || n > c.hi {
			return fmt.Errorf("invalid %s header %.40q: want an integer from %d to %d", c.key, v, c.min, c.hi)
		}
	}
	return nil
}

// Publish adds msgs to queue, each to the band of its priority, and
// returns once JetStream has stored them all. Bodies are copied. A batch
// is published asynchronously and its acknowledgements awaited together.
func (b *Broker) Publish(ctx context.Context, queue string, msgs ...broker.Message) error {
	const op = "publish"
	if err := b.enter(op, queue); err != nil {
		return err
	}
	defer b.active.Done()
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return opErr(op, queue, err)
	}
	parts := make([][]broker.Message, b.cfg.Partitions)
	for _, m := range msgs {
		p := broker.PartitionOf(m.Key, b.cfg.Partitions)
		parts[p] = append(parts[p], m)
	}
	for p, msgs := range parts {
		if len(msgs) == 0 {
			continue
		}
		if err := b.publishTo(ctx, queue, p, msgs); err != nil {
			return opErr(op, queue, err)
		}
	}
	return nil
}

// publishTo publishes msgs to partition p of queue.
func (b *Broker) publishTo(ctx context.Context, queue string, p int, msgs []broker.Message) error {
	for retry := 0; ; retry++ {
		qs, err := b.partitions(ctx, queue)
		if err != nil {
			return err
		}
		q := qs[p]
		out := make([]*natsgo.Msg, len(msgs))
		for i, m := range msgs {
			out[i] = message(q.bands[bandOf(m.Priority, b.cfg.Bands)], bytes.Clone(m.Body), m.Priority, 0)
		}
		err = b.publish(ctx, q, out...)
		if errors.Is(err, jetstream.ErrNoStreamResponse) && retry == 0 {
			b.forget(q) // the stream was deleted under us
			continue
		}
		return err
	}
}

// publish publishes msgs to q's work stream (or dead stream, for dead
// letters) and waits for their acknowledgements.
func (b *Broker) publish(ctx context.Context, q *queue, msgs ...*natsgo.Msg) error {
	err := b.publishMsgs(ctx, q, msgs...)
	if errors.Is(err, natsgo.ErrMaxPayload) {
		// The message's fault, not the server's: the caller must not wait
		// for the server to take it.
		return fmt.Errorf("%w: %w", broker.ErrInvalid, err)
	}
	return err
}

// publishMsgs is publish without the wrapping of its errors.
func (b *Broker) publishMsgs(ctx context.Context, q *queue, msgs ...*natsgo.Msg) error {
	stream := q.work
	if msgs[0].Subject == q.grave {
		stream = q.dead
	}
	if len(msgs) == 1 {
		ctx, cancel := b.bound(ctx)
		defer cancel()
		_, err := b.js.PublishMsg(ctx, msgs[0], jetstream.WithExpectStream(stream))
		return err
	}
	futs := make([]jetstream.PubAckFuture, 0, len(msgs))
	for _, m := range msgs {
		f, err := b.js.PublishMsgAsync(m, jetstream.WithExpectStream(stream))
		if err != nil {
			return err
		}
		futs = append(futs, f)
	}
	for _, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-b.life.Done():
			return broker.ErrClosed
		}
	}
	return nil
}

// Receive waits until queue has a message, then leases and returns up to
// max of them: from the highest band that has any, then lower bands, in
// stream order within a band (see take). When there is none it waits with
// pull requests held by the server on every band (see wait), so that a
// Publish, a Nack, a Requeue, a delay that runs out or a lease that
// expires wakes it at once, without polling.
func (b *Broker) Receive(ctx context.Context, queue string, limit int) ([]broker.Delivery, error) {
	const op = "receive"
	if queue != "" && limit < 1 {
		return nil, invalid(op, queue, fmt.Sprintf("max %d < 1", limit))
	}
	if err := b.enter(op, queue); err != nil {
		return nil, err
	}
	defer b.active.Done()
	if err := ctx.Err(); err != nil {
		return nil, opErr(op, queue, err)
	}
	batch := 1
	if b.cfg.Order == broker.FIFO {
		batch = limit // one band: no other band to wait on
	}
	r := retrier{b: b, op: op, queue: queue}
	for {
		qs, err := b.partitions(ctx, queue)
		if errors.Is(err, broker.ErrInvalid) {
			return nil, opErr(op, queue, err)
		}
		if err != nil {
			if err := r.after(ctx, nil, err); err != nil {
				return nil, opErr(op, queue, err)
			}
			continue
		}
		ds, failed, err := b.receive(ctx, qs, limit, batch)
		if len(ds) > 0 {
			sortDeliveries(ds)
			if len(ds) > limit {
				b.putBack(ds[limit:])
				ds = ds[:limit]
			}
			return b.hand(op, queue, ds)
		}
		if err := r.after(ctx, failed, err); err != nil {
			return nil, opErr(op, queue, err)
		}
	}
}

// receive takes up to limit deliveries of partitions qs, waiting for one
// if they have none; with an error, the partition that failed.
func (b *Broker) receive(ctx context.Context, qs []*queue, limit, batch int) ([]*delivery, *queue, error) {
	ds, failed, err := b.takeAll(qs, limit)
	if len(ds) > 0 || err != nil {
		return ds, failed, err
	}
	ds, failed, err = b.wait(ctx, qs, batch)
	if len(ds) > 0 && len(ds) < limit {
		more, _, _ := b.takeAll(qs, limit-len(ds))
		ds = append(ds, more...)
	}
	return ds, failed, err
}

// retrier paces the retries of a loop that pulls from a queue.
type retrier struct {
	b         *Broker
	op, queue string
	missing   bool          // the queue was opened again once
	pause     time.Duration // before the next try; 0 after a success
}

// after handles the outcome err of one try on q (nil: q could not be
// opened, err says why): it returns nil to try again, at once or after a
// pause, or the error that ends the loop (the broker closed, ctx ended).
// The server turning a pull request down (too many waiting, leadership
// change) or not answering (a restart, a network cut: the connection
// reconnects by itself) is retried with back-off until ctx ends, with a
// warning for the first failure of a run.
func (r *retrier) after(ctx context.Context, q *queue, err error) error {
	b := r.b
	switch {
	case err == nil:
		r.pause = 0
		return nil
	case errors.Is(err, broker.ErrClosed) || b.life.Err() != nil:
		return broker.ErrClosed
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, errNoConsumer) && !r.missing && q != nil:
		// The stream or consumers were deleted under us: open the
		// queue again, once.
		r.missing = true
		b.forget(q)
		return nil
	}
	if r.pause == 0 {
		b.log.Warn(r.op+" failed; retrying", "queue", r.queue, "error", err)
	}
	r.pause = min(max(2*r.pause, 50*time.Millisecond), time.Second)
	t := time.NewTimer(r.pause)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-b.life.Done():
		return broker.ErrClosed
	}
}

// hand registers ds as held by b and returns them; if b was closed
// meanwhile it gives them back instead.
func (b *Broker) hand(op, queue string, ds []*delivery) ([]broker.Delivery, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		b.unclaim(ds)
		return nil, opErr(op, queue, broker.ErrClosed)
	}
	out := make([]broker.Delivery, len(ds))
	for i, d := range ds {
		b.held[d] = struct{}{}
		out[i] = d
	}
	b.mu.Unlock()
	return out, nil
}

// admit turns a message pulled from band consumer cons into a delivery,
// or dead-letters it if it has been delivered more than MaxDeliveries
// times (its last lease expired) and returns nil. sent, if not zero, is
// when the request that brought m was sent: its lease is counted from
// then, not from now, so that a process held up between the server's
// sending and now cannot settle it after the server gave it to another.
func (b *Broker) admit(q *queue, cons int, m *natsgo.Msg, sent time.Time) *delivery {
	now := time.Now()
	leased := now
	if !sent.IsZero() {
		leased = sent
	}
	meta, err := metadata(m)
	if err != nil {
		b.log.Error("not a jetstream message; ignored", "queue", q.queue, "subject", m.Subject, "error", err)
		return nil
	}
	if !b.leaseEnd(leased).After(now) {
		// It came after its lease (a server or this process held up):
		// the server gives it to another, and settling it here could
		// settle that next delivery.
		b.log.Warn("a message came after its lease had run out; the server delivers it again",
			"queue", q.queue, "late", now.Sub(leased))
		return nil
	}
	// JetStream counts a delivery that never reached a client (sent to a
	// pull request whose subscriber had just left) as one. A message
	// cannot have been redelivered after an expired lease more often than
	// leases fit in its age (plus a slack: a restarted server restores
	// delivery times rounded down).
	delivered := int(meta.delivered)
	if delivered > 1 {
		age := max(now.Sub(meta.stored), 0) + min(b.cfg.Lease/2, time.Second)
		delivered = 1 + min(delivered-1, int(age/b.cfg.Lease))
	}
	if err := checkHeaders(m.Header); err != nil {
		b.buryForeign(q, m, err)
		return nil
	}
	d := &delivery{
		b:        b,
		q:        q,
		m:        m,
		prio:     headerInt(m.Header, hdrPriority),
		band:     cons,
		attempt:  headerInt(m.Header, hdrAttempts) + delivered,
		seq:      meta.seq,
		deadline: b.leaseEnd(leased),
	}
	if d.attempt > b.cfg.MaxDeliveries {
		ctx, cancel := b.detached()
		defer cancel()
		reason := fmt.Sprintf("lease expired after %d deliveries (max %d)", d.attempt-1, b.cfg.MaxDeliveries)
		if err := b.bury(ctx, d, reason); err != nil {
			b.log.Warn("dead-letter failed; the message comes back after its lease",
				"queue", q.queue, "attempt", d.attempt, "error", err)
		}
		return nil
	}
	return d
}

// delayNakTolerance: a delayed message due within it goes back to its band
// now rather than being nacked for the rest (which the server would
// round up to its timer's tick anyway).
const delayNakTolerance = time.Millisecond

// maxDelayDeliveries bounds how often the delay consumer delivers one
// delayed copy before it goes back to its band whatever its rest: a guard
// against a server whose clock runs ahead of this machine's, which makes
// every rest look longer than it is. A copy is delivered again before its
// rest ends only when a delivery failed (see delayed), so this is never
// reached otherwise; a skew lengthens a delay at most this many times.
const maxDelayDeliveries = 8

// delayed handles a message of the delay consumer: one whose delay has run
// out goes back to its band; one still waiting is nacked for the rest of
// its delay, measured from when it was stored (by the server's clock, read
// with this machine's: a skew shortens or lengthens the delay, see
// maxDelayDeliveries).
//
// The rest is checked on every delivery, not only the first: the server
// also delivers a copy again before its nack's delay ends, counting one
// delivery more, when a delivery of it failed (sent to a pull request
// whose subscriber had just gone: nats-server's didNotDeliver puts it
// back for redelivery at once) or when a plain nak reached it. Moving
// such a copy back would hand out the message early.
func (b *Broker) delayed(q *queue, m *natsgo.Msg) {
	ctx, cancel := b.detached()
	defer cancel()
	meta, err := metadata(m)
	if err != nil {
		b.log.Error("not a jetstream message; ignored", "queue", q.queue, "subject", m.Subject, "error", err)
		return
	}
	h := m.Header
	if err := checkHeaders(h); err != nil {
		b.buryForeign(q, m, err)
		return
	}
	delay := time.Duration(headerInt(h, hdrDelay)) // within 0..MaxDelay
	rest := min(delay-time.Since(meta.stored), delay)
	if rest > delayNakTolerance && meta.delivered < maxDelayDeliveries {
		// JetStream's NakWithDelay, confirmed by the server.
		body := fmt.Appendf(nil, `-NAK {"delay":%d}`, int64(rest))
		if err := b.ackReq(ctx, m, body); err != nil {
			b.log.Warn("delay nack failed", "queue", q.queue, "error", err)
		}
		return
	}
	prio := headerInt(h, hdrPriority)
	copy := message(q.bands[bandOf(prio, b.cfg.Bands)], m.Data, prio, headerInt(h, hdrAttempts))
	if err := b.publish(ctx, q, copy); err != nil {
		b.log.Warn("moving a delayed message back failed; tried again later", "queue", q.queue, "error", err)
		return
	}
	if err := b.ack(ctx, m); err != nil {
		b.log.Warn("delayed message moved back but not acknowledged; it may be delivered twice",
			"queue", q.queue, "error", err)
	}
}

// buryForeign dead-letters m, a message of q whose headers fail
// checkHeaders (written by something other than trawl), with why as the
// reason, and logs it at Warn: the message is not handed out and not
// held, so that it cannot stall the crawl.
func (b *Broker) buryForeign(q *queue, m *natsgo.Msg, why error) {
	ctx, cancel := b.detached()
	defer cancel()
	b.log.Warn("message with invalid headers dead-lettered", "queue", q.queue, "subject", m.Subject, "reason", why)
	d := &delivery{b: b, q: q, m: m, prio: min(max(headerInt(m.Header, hdrPriority), -1<<31), 1<<31-1)}
	if err := b.bury(ctx, d, why.Error()); err != nil {
		b.log.Warn("dead-letter failed; the message comes back after its lease", "queue", q.queue, "error", err)
	}
}

// ackReq sends an acknowledgement (+ACK, a -NAK with a delay, +WPI) for
// m to its reply subject and waits for the server to confirm it. (A lease
// extended without the server's word could be counted on after the server
// gave the message away.)
func (b *Broker) ackReq(ctx context.Context, m *natsgo.Msg, body []byte) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	_, err := b.nc.RequestWithContext(ctx, m.Reply, body)
	if errors.Is(err, natsgo.ErrNoResponders) {
		// The consumer (or its stream) is gone, and the message with it.
		return fmt.Errorf("%w: %w", broker.ErrLeaseLost, err)
	}
	return err
}

// The bodies of acknowledgements: JetStream's ack, and its "in progress"
// that restarts a lease.
var (
	ackBody = []byte("+ACK")
	wpiBody = []byte("+WPI")
)

// ack acknowledges m (JetStream's DoubleAck: the server confirms it).
func (b *Broker) ack(ctx context.Context, m *natsgo.Msg) error {
	return b.ackReq(ctx, m, ackBody)
}

// confirmAll sends body (ackBody, wpiBody) to the reply subject of each
// of ds's messages and waits for the server to confirm each, as ackReq
// does one; it returns an error per delivery. The requests go out
// together with their replies to one subscription of its own, so that a
// batch costs the connection a few writes and one waiting goroutine, not
// a request each: one ack a page, and thousands of +WPI every third of a
// lease, each a round trip, were most of what the broker cost a worker.
func (b *Broker) confirmAll(ctx context.Context, ds []*delivery, body []byte) []error {
	errs := make([]error, len(ds))
	switch len(ds) {
	case 0:
		return errs
	case 1:
		errs[0] = b.ackReq(ctx, ds[0].m, body)
		return errs
	}
	ctx, cancel := b.bound(ctx)
	defer cancel()
	inbox := b.nc.NewInbox()
	// A channel for the replies, one each (SubscribeSync's would hold
	// 64Ki of them: 512 KiB a batch to allocate and clear).
	replies := make(chan *natsgo.Msg, len(ds))
	sub, err := b.nc.ChanSubscribe(inbox+".*", replies)
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	defer func() { _ = sub.Unsubscribe() }()
	waiting := make([]bool, len(ds))
	pending := 0
	prefix := inbox + "."
	for i, d := range ds {
		if err := b.nc.PublishRequest(d.m.Reply, prefix+strconv.Itoa(i), body); err != nil {
			errs[i] = err
			continue
		}
		waiting[i] = true
		pending++
	}
	for pending > 0 {
		var r *natsgo.Msg
		select {
		case r = <-replies:
		case <-ctx.Done():
			for i, w := range waiting {
				if w {
					errs[i] = ctx.Err()
				}
			}
			return errs
		}
		i, perr := strconv.Atoi(strings.TrimPrefix(r.Subject, prefix))
		if perr != nil || i < 0 || i >= len(ds) || !waiting[i] {
			continue
		}
		waiting[i] = false
		pending--
		if len(r.Data) == 0 && r.Header.Get("Status") == "503" {
			// No responders: the consumer (or its stream) is gone, and
			// the message with it.
			errs[i] = fmt.Errorf("%w: %w", broker.ErrLeaseLost, natsgo.ErrNoResponders)
		}
	}
	return errs
}

// requeue publishes a copy of d's message to its band, counting attempts
// deliveries so far, and acknowledges d: the message is ready again.
func (b *Broker) requeue(ctx context.Context, d *delivery, attempts int) error {
	if err := b.publish(ctx, d.q, message(d.q.bands[d.band], d.m.Data, d.prio, attempts)); err != nil {
		return err
	}
	return b.ack(ctx, d.m)
}

// postpone publishes a copy of d's message to the delay subject and
// acknowledges d.
func (b *Broker) postpone(ctx context.Context, d *delivery, delay time.Duration) error {
	delay = min(delay, MaxDelay)
	m := message(d.q.delay, d.m.Data, d.prio, d.attempt)
	m.Header.Set(hdrDelay, strconv.FormatInt(int64(delay), 10))
	if err := b.publish(ctx, d.q, m); err != nil {
		return err
	}
	return b.ack(ctx, d.m)
}

// bury publishes d's message to the dead letters with reason and
// acknowledges d.
func (b *Broker) bury(ctx context.Context, d *delivery, reason string) error {
	m := message(d.q.grave, d.m.Data, d.prio, 0)
	m.Header.Set(hdrReason, oneLine(reason))
	var id [12]byte
	_, _ = rand.Read(id[:])
	m.Header.Set(hdrDeadID, hex.EncodeToString(id[:]))
	if meta, err := metadata(d.m); err == nil {
		// One dead letter per message, even when it is buried twice: an
		// ack that came too late (its lease ran out under load) gets it
		// delivered again, past MaxDeliveries, and buried again. The
		// dead stream's duplicate window drops the second publish. The
		// stored time keeps the id unique if the stream is made again.
		m.Header.Set(natsgo.MsgIdHdr, fmt.Sprintf("bury-%s-%d-%d", d.q.work, meta.seq, meta.stored.UnixNano()))
	}
	if err := b.publish(ctx, d.q, m); err != nil {
		return err
	}
	b.log.Debug("dead-lettered", "queue", d.q.queue, "attempt", d.attempt, "reason", reason)
	return b.ack(ctx, d.m)
}

// oneLine makes s fit a header value.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, s)
}

// unclaim gives back deliveries that were pulled but never handed to the
// caller (a Receive or wait cut short, a consumer's read-ahead at Close)
// as copies, without counting the delivery: the next one has the same
// attempt. A copy goes to the end of its band.
func (b *Broker) unclaim(ds []*delivery) {
	b.giveBack(ds, func(ctx context.Context, d *delivery) error { return b.requeue(ctx, d, d.attempt-1) })
}

// putBack gives back deliveries that a wait brought beyond what its caller
// can take (one came per band, more than the caller's max or read-ahead
// room) with a nak that the server confirms before the caller pulls
// again. JetStream delivers a consumer's nakked messages before its
// others, so each keeps its place in its band, where unclaim's copy would
// be overtaken by every message of its band published before it was
// given back. JetStream counts the nak as a delivery, which Attempt
// discounts while the message is younger than a lease (see admit): one
// delivered again later than that counts an attempt more.
func (b *Broker) putBack(ds []*delivery) {
	b.giveBack(ds, func(ctx context.Context, d *delivery) error { return b.ackReq(ctx, d.m, []byte("-NAK")) })
}

// giveBack gives ds back with back, each. One whose lease has run out is
// left to the server, which delivers it again (settling it now could
// settle that next delivery).
func (b *Broker) giveBack(ds []*delivery, back func(context.Context, *delivery) error) {
	ctx, cancel := b.detached()
	defer cancel()
	for _, d := range ds {
		b.mu.Lock()
		lost := !time.Now().Before(d.deadline)
		b.mu.Unlock()
		if lost {
			b.log.Debug("a delivery given back had lost its lease; the server delivers it again", "queue", d.q.queue)
			continue
		}
		if err := back(ctx, d); err != nil {
			b.log.Warn("giving back a message failed; it comes back after its lease",
				"queue", d.q.queue, "error", err)
		}
	}
}

// Close closes the broker: waiting Receives and its consumers' Next
// return broker.ErrClosed, what its consumers read ahead goes back
// (uncounted), the deliveries it handed out and that are still unsettled go back to their
// queues at once (counted as a delivery; to the dead letters if that was
// their last), and every later call returns broker.ErrClosed. The
// connection stays open. Close is idempotent; it returns nil.
func (b *Broker) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	var ds []*delivery
	now := time.Now()
	for d := range b.held {
		if now.Before(d.deadline) {
			ds = append(ds, d)
		}
		d.state = closedOut
	}
	b.held = nil
	b.mu.Unlock()

	// Shutdown order: end the life (wakes waiting Receives, Publishes and
	// consumers' loops), wait for them (they give back what they pulled),
	// give back what the caller holds.
	b.stop()
	b.active.Wait()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(b.life), closeTimeout)
	defer cancel()
	for _, d := range ds {
		var err error
		if d.attempt >= b.cfg.MaxDeliveries {
			err = b.bury(ctx, d, fmt.Sprintf("unsettled at close after %d deliveries (max %d)", d.attempt, b.cfg.MaxDeliveries))
		} else {
			err = b.requeue(ctx, d, d.attempt)
		}
		if err != nil {
			b.log.Warn("giving back a delivery at close failed; it comes back after its lease",
				"queue", d.q.queue, "error", err)
		}
	}
	b.log.Info("broker closed", "given_back", len(ds))
	return nil
}

// Counts counts queue: Ready is the band consumers' pending messages plus
// the delayed ones (the delay consumer's, pending or held until due; also
// counted as Delayed), InFlight their delivered and unacknowledged ones (a
// lease that expired counts until the message is delivered again), Dead the
// messages of the dead-letter stream. It creates nothing: an unknown queue
// counts zero.
func (b *Broker) Counts(ctx context.Context, queue string) (broker.Counts, error) {
	parts, err := b.PartitionCounts(ctx, queue)
	return broker.SumCounts(parts), err
}

// PartitionCounts counts each partition of queue, as Counts does the
// whole queue (see broker.PartitionCounter).
func (b *Broker) PartitionCounts(ctx context.Context, queue string) ([]broker.Counts, error) {
	const op = "counts"
	if err := b.check(op, queue); err != nil {
		return nil, err
	}
	out := make([]broker.Counts, b.cfg.Partitions)
	for p := range out {
		c, err := b.count(ctx, namesFor(queue, b.cfg.Bands, p))
		if err != nil {
			return nil, opErr(op, queue, err)
		}
		out[p] = c
	}
	return out, nil
}

// count counts one partition: its work stream's subjects first, then the
// consumers of those that hold messages (a work-queue stream keeps a
// message until it is acknowledged, so a subject that holds none has none
// pending or in flight), then its dead-letter stream. A partition with
// one band in use costs 3 requests, an empty one 2, where asking every
// consumer cost 2 + bands (an idle worker counts every pollInterval).
func (b *Broker) count(ctx context.Context, n names) (broker.Counts, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	var c broker.Counts
	st, err := b.streamHeld(ctx, n.work, n.prefix+"*")
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
	case err != nil:
		return broker.Counts{}, err
	default:
		for i, name := range n.consumers {
			subject := n.delay
			if i < len(n.bands) {
				subject = n.bands[i]
			}
			if st.Subjects[subject] == 0 {
				continue
			}
			cons, err := b.js.Consumer(ctx, n.work, name)
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				break
			}
			if errors.Is(err, jetstream.ErrConsumerNotFound) {
				continue
			}
			if err != nil {
				return broker.Counts{}, err
			}
			info := cons.CachedInfo()
			if i == n.delayIdx() {
				c.Delayed = int64(info.NumPending) + int64(info.NumAckPending)
				c.Ready += c.Delayed
			} else {
				c.Ready += int64(info.NumPending)
				c.InFlight += int64(info.NumAckPending)
			}
		}
	}
	dead, err := b.streamHeld(ctx, n.dead, "")
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
	case err != nil:
		return broker.Counts{}, err
	default:
		c.Dead = int64(dead.Msgs)
	}
	return c, nil
}

// Purge deletes every message of queue: ready, delayed, in flight and
// dead. Deliveries of purged messages that are still held are
// acknowledged as no-ops; they never come back.
func (b *Broker) Purge(ctx context.Context, queue string) error {
	const op = "purge"
	if err := b.check(op, queue); err != nil {
		return err
	}
	var streams []string
	for p := range b.cfg.Partitions {
		n := namesFor(queue, b.cfg.Bands, p)
		streams = append(streams, n.work, n.dead)
	}
	for _, name := range streams {
		s, err := b.js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err == nil {
			err = s.Purge(ctx)
		}
		if err != nil {
			return opErr(op, queue, err)
		}
	}
	return nil
}

// deadStream returns the dead-letter stream of queue, or nil if it does
// not exist.
func (b *Broker) deadStream(ctx context.Context, n names) (jetstream.Stream, error) {
	s, err := b.js.Stream(ctx, n.dead)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	return s, err
}

// eachDead calls fn with up to max dead letters of n, oldest first,
// until fn returns false.
func eachDead(ctx context.Context, s jetstream.Stream, n names, max int, fn func(*jetstream.RawStreamMsg) error) error {
	seq := s.CachedInfo().State.FirstSeq
	for range max {
		raw, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(n.grave))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(raw); err != nil {
			return err
		}
		seq = raw.Sequence + 1
	}
	return nil
}

func deadLetter(raw *jetstream.RawStreamMsg) broker.DeadLetter {
	return broker.DeadLetter{
		Message: broker.Message{Body: raw.Data, Priority: headerInt(natsgo.Header(raw.Header), hdrPriority)},
		Reason:  raw.Header.Get(hdrReason),
	}
}

// DeadLetters returns up to max dead letters of queue, oldest first,
// without removing them.
func (b *Broker) DeadLetters(ctx context.Context, queue string, max int) ([]broker.DeadLetter, error) {
	const op = "dead letters"
	if err := b.check(op, queue); err != nil {
		return nil, err
	}
	if max < 1 {
		return nil, invalid(op, queue, fmt.Sprintf("max %d < 1", max))
	}
	var out []broker.DeadLetter
	for p := 0; p < b.cfg.Partitions && len(out) < max; p++ {
		n := namesFor(queue, b.cfg.Bands, p)
		s, err := b.deadStream(ctx, n)
		if err != nil {
			return nil, opErr(op, queue, err)
		}
		if s == nil {
			continue
		}
		err = eachDead(ctx, s, n, max-len(out), func(raw *jetstream.RawStreamMsg) error {
			out = append(out, deadLetter(raw))
			return nil
		})
		if err != nil {
			return nil, opErr(op, queue, err)
		}
	}
	return out, nil
}

// Requeue moves up to max dead letters of queue, oldest first, back to its
// bands as new messages (attempts start again from 1). Each is published
// before it is deleted from the dead letters, with its dead-letter id as
// JetStream message id, so that two Requeues racing over one dead letter
// publish it once (within the stream's two-minute duplicate window).
func (b *Broker) Requeue(ctx context.Context, queue string, max int) (int, error) {
	const op = "requeue"
	if err := b.enter(op, queue); err != nil {
		return 0, err
	}
	defer b.active.Done()
	if max < 1 {
		return 0, invalid(op, queue, fmt.Sprintf("max %d < 1", max))
	}
	moved := 0
	for p := 0; p < b.cfg.Partitions && moved < max; p++ {
		n, err := b.requeue1(ctx, queue, p, max-moved)
		moved += n
		if err != nil {
			return moved, opErr(op, queue, err)
		}
	}
	return moved, nil
}

// requeue1 is Requeue on partition p of queue.
func (b *Broker) requeue1(ctx context.Context, queue string, p, max int) (int, error) {
	n := namesFor(queue, b.cfg.Bands, p)
	s, err := b.deadStream(ctx, n)
	if err != nil || s == nil {
		return 0, err
	}
	qs, err := b.partitions(ctx, queue)
	if err != nil {
		return 0, err
	}
	q := qs[p]
	moved := 0
	err = eachDead(ctx, s, n, max, func(raw *jetstream.RawStreamMsg) error {
		dl := deadLetter(raw)
		m := message(q.bands[bandOf(dl.Message.Priority, b.cfg.Bands)], dl.Message.Body, dl.Message.Priority, 0)
		id := raw.Header.Get(hdrDeadID)
		if id == "" {
			id = fmt.Sprintf("%s-%d", q.dead, raw.Sequence)
		}
		pctx, cancel := b.bound(ctx)
		_, err := b.js.PublishMsg(pctx, m, jetstream.WithExpectStream(q.work), jetstream.WithMsgID(id))
		cancel()
		if err != nil {
			return err
		}
		switch err := s.DeleteMsg(ctx, raw.Sequence); {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			// Another Requeue took it; our publish was a duplicate.
		case err != nil:
			return err
		default:
			moved++
		}
		return nil
	})
	return moved, err
}
