package brokertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker"
)

// The promises of broker.Consumer.

// readAheadWindow is how long a consumer is left alone to read ahead more
// than it may, before the test looks. A correct consumer passes whatever
// the window; a wrong one is caught when it reads ahead within it.
const readAheadWindow = 300 * time.Millisecond

// longLease outlasts every wait of a test that must tell "at once" from
// "after the lease".
const longLease = 30 * time.Second

func (s *suite) consumerTests() []test {
	ts := []test{
		{"Consumer/Order", s.testConsumerOrder},
		{"Consumer/OrderInterleaved", s.testConsumerOrderInterleaved},
		{"Consumer/ReadAhead", s.testConsumerReadAhead},
		{"Consumer/Unsettled", s.testConsumerUnsettled},
		{"Consumer/Settle", s.testConsumerSettle},
		{"Consumer/LeaseExpiry", s.testConsumerLeaseExpiry},
		{"Consumer/Extend", s.testConsumerExtend},
		{"Consumer/Wakes", s.testConsumerWakes},
		{"Consumer/ContextCancel", s.testConsumerContextCancel},
		{"Consumer/CancelLosesNothing", s.testConsumerCancelLosesNothing},
		{"Consumer/Close", s.testConsumerClose},
		{"Consumer/BrokerClose", s.testConsumerBrokerClose},
		{"Consumer/Concurrent", s.testConsumerConcurrent},
		{"Consumer/Invalid", s.testConsumerInvalid},
	}
	// A restart is about the server, not the order mode: once is enough.
	if s.order == s.c.Orders[0] {
		ts = append(ts, test{"Consumer/Restart", s.testConsumerRestart})
	}
	return ts
}

// consume opens a consumer of q on b, closed when t ends.
func consume(t *testing.T, b broker.Broker, q string, prefetch int) broker.Consumer {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), prompt)
	defer cancel()
	c, err := b.Consume(ctx, q, prefetch)
	if err != nil {
		t.Fatalf("Consume(%q, %d): %v", q, prefetch, err)
	}
	if c == nil {
		t.Fatalf("Consume(%q, %d) returned a nil consumer and no error", q, prefetch)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("consumer of %q: Close: %v", q, err)
		}
	})
	return c
}

// next calls c.Next and checks what every Next promises: a delivery of q
// with an attempt from 1, or an error and no delivery. It fails the test if
// Next does not return within snappy of ctx's end, instead of hanging it.
func next(t *testing.T, ctx context.Context, c broker.Consumer, q string) (broker.Delivery, error) {
	t.Helper()
	r := awaitNext(t, nextAsync(ctx, c), ctx, q)
	if len(r.ds) == 0 {
		return nil, r.err
	}
	return r.ds[0], r.err
}

// nextAsync runs c.Next(ctx) in a goroutine.
func nextAsync(ctx context.Context, c broker.Consumer) <-chan result {
	ch := make(chan result, 1)
	go func() {
		d, err := c.Next(ctx)
		r := result{err: err, at: time.Now()}
		if d != nil {
			r.ds = []broker.Delivery{d}
		}
		ch <- r
	}()
	return ch
}

// awaitNext waits for a Next started with nextAsync(ctx, …), at most
// snappy past ctx's end, and checks its result.
func awaitNext(t *testing.T, ch <-chan result, ctx context.Context, q string) result {
	t.Helper()
	var r result
	select {
	case r = <-ch:
	case <-ctx.Done():
		select {
		case r = <-ch:
		case <-time.After(snappy):
			t.Fatalf("consumer of %q: Next still running %v after its context ended (%v)", q, snappy, context.Cause(ctx))
		}
	}
	if r.err != nil {
		if len(r.ds) != 0 {
			t.Errorf("consumer of %q: Next returned delivery %q with error %v", q, r.ds[0].Message().Body, r.err)
		}
		r.ds = nil
		return r
	}
	if len(r.ds) == 0 {
		t.Fatalf("consumer of %q: Next returned no delivery and no error", q)
	}
	d := r.ds[0]
	if d.Queue() != q {
		t.Errorf("delivery %q from a consumer: Queue() = %q, want %q", d.Message().Body, d.Queue(), q)
	}
	if d.Attempt() < 1 {
		t.Errorf("delivery %q from a consumer: Attempt() = %d, want >= 1", d.Message().Body, d.Attempt())
	}
	return r
}

// nextOne returns the next delivery of c within wait.
func nextOne(t *testing.T, c broker.Consumer, q string, wait time.Duration) broker.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	d, err := next(t, ctx, c, q)
	if err != nil {
		t.Fatalf("consumer of %q: Next within %v: %v", q, wait, err)
	}
	return d
}

// nextNone checks that c delivers nothing for window.
func nextNone(t *testing.T, c broker.Consumer, q string, window time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), window)
	defer cancel()
	d, err := next(t, ctx, c, q)
	if d != nil {
		t.Fatalf("consumer of %q delivered %q (attempt %d), want nothing for %v", q, d.Message().Body, d.Attempt(), window)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("consumer of %q with nothing visible: Next: %v, want context.DeadlineExceeded", q, err)
	}
}

// orderModel checks deliveries of a consumer against the queue's order
// mode: a consumer may return a message before others that come first in
// that order only because it read it ahead, so no pending message is
// overtaken by more than prefetch others.
type orderModel struct {
	s        *suite
	prefetch int
	seq      int
	pending  []pending // in publish order
}

type pending struct {
	m         broker.Message
	seq       int
	overtaken int
}

func (o *orderModel) publish(msgs ...broker.Message) {
	for _, m := range msgs {
		o.seq++
		o.pending = append(o.pending, pending{m: m, seq: o.seq})
	}
}

// first reports whether a comes before b in the order mode.
func (o *orderModel) first(a, b pending) bool {
	switch o.s.order {
	case broker.Priority:
		if a.m.Priority != b.m.Priority {
			return a.m.Priority > b.m.Priority
		}
		return a.seq < b.seq
	case broker.LIFO:
		return a.seq > b.seq
	}
	return a.seq < b.seq
}

// took records that Next returned got (every body is unique).
func (o *orderModel) took(t *testing.T, got broker.Message, seed uint64) {
	t.Helper()
	i := slices.IndexFunc(o.pending, func(p pending) bool { return sameMessage(p.m, got) })
	if i < 0 {
		t.Fatalf("consumer delivered %s, which is not pending (delivered twice, or never published; seed %d)", fmtMsgs([]broker.Message{got}), seed)
	}
	g := o.pending[i]
	for j := range o.pending {
		p := &o.pending[j]
		if j == i || !o.first(*p, g) {
			continue
		}
		p.overtaken++
		if p.overtaken > o.prefetch {
			var rest []broker.Message
			for _, q := range o.pending {
				rest = append(rest, q.m)
			}
			t.Fatalf("%s order, consumer with prefetch %d (seed %d): %s was delivered before %s, which comes first and was published before; "+
				"%d messages overtook it, more than read-ahead explains. Pending: %s",
				o.s.order, o.prefetch, seed, fmtMsgs([]broker.Message{got}), fmtMsgs([]broker.Message{p.m}), p.overtaken, fmtMsgs(rest))
		}
	}
	o.pending = slices.Delete(o.pending, i, i+1)
}

// testConsumerOrder publishes interleaved priorities, then consumes them.
func (s *suite) testConsumerOrder(t *testing.T) {
	const prefetch = 3
	b := s.one(t, s.setup())
	q := queue(t)
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 2))
	ps := s.c.Priorities
	var msgs []broker.Message
	for range 4 {
		for _, i := range r.Perm(len(ps)) {
			msgs = append(msgs, msg(fmt.Sprintf("m%02d/p%d", len(msgs), ps[i]), ps[i]))
		}
	}
	publish(t, b, q, msgs...)
	model := &orderModel{s: s, prefetch: prefetch}
	model.publish(msgs...)
	c := consume(t, b, q, prefetch)
	for range msgs {
		d := nextOne(t, c, q, prompt)
		if d.Attempt() != 1 {
			t.Errorf("%q: Attempt() = %d, want 1", d.Message().Body, d.Attempt())
		}
		model.took(t, d.Message(), seed)
		ack(t, d)
	}
	nextNone(t, c, q, s.c.Lease)
	waitCounts(t, b, q, broker.Counts{})
}

// testConsumerOrderInterleaved runs a random script of publishes and Next
// calls against the order model: what the consumer read ahead may come
// first, nothing else.
func (s *suite) testConsumerOrderInterleaved(t *testing.T) {
	const prefetch = 2
	b := s.one(t, s.setup())
	q := queue(t)
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 3))
	ps := s.c.Priorities
	model := &orderModel{s: s, prefetch: prefetch}
	c := consume(t, b, q, prefetch)
	n := 0
	take := func() {
		t.Helper()
		d := nextOne(t, c, q, prompt)
		model.took(t, d.Message(), seed)
		ack(t, d)
	}
	for range 60 {
		if len(model.pending) == 0 || r.IntN(2) == 0 {
			k := 1 + r.IntN(4)
			batch := make([]broker.Message, k)
			for i := range batch {
				p := ps[r.IntN(len(ps))]
				batch[i] = msg(fmt.Sprintf("m%02d/p%d", n, p), p)
				n++
			}
			publish(t, b, q, batch...)
			model.publish(batch...)
			continue
		}
		for range min(1+r.IntN(4), len(model.pending)) {
			take()
		}
	}
	for len(model.pending) > 0 {
		take()
	}
	waitCounts(t, b, q, broker.Counts{})
}

// testConsumerReadAhead: a consumer with prefetch 3 that returned one
// delivery and is not read from again leaves all but 4 messages (3 if it
// counts the unsettled one) to another broker; closed, it gives back what
// it read ahead at once, and the delivery it returned can still be acked.
func (s *suite) testConsumerReadAhead(t *testing.T) {
	const n, prefetch = 20, 3
	bs := s.brokers(t, Setup{Order: s.order, Lease: longLease}, 2)
	a, other := bs[0], bs[1]
	q := queue(t)
	p := s.c.Priorities[0]
	msgs := make([]broker.Message, n)
	for i := range msgs {
		msgs[i] = msg(fmt.Sprintf("r%02d", i), p)
	}
	publish(t, a, q, msgs...)
	c := consume(t, a, q, prefetch)
	first := nextOne(t, c, q, prompt)
	poll(t, readAheadWindow) // room for a read-ahead beyond prefetch to show

	want := n - 1 - prefetch
	ctx, cancel := context.WithTimeout(t.Context(), prompt)
	var got []broker.Delivery
	for len(got) < want {
		ds, err := recv(t, ctx, other, q, want-len(got))
		if err != nil {
			cancel()
			t.Fatalf("a consumer with prefetch %d that returned one delivery left only %d of %d messages to another broker within %v "+
				"(it holds %d, more than 1 + prefetch): %v", prefetch, len(got), n, prompt, n-len(got), err)
		}
		got = append(got, ds...)
	}
	cancel()

	start := time.Now()
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	rest := n - 1 - len(got)
	ctx, cancel = context.WithTimeout(t.Context(), prompt)
	defer cancel()
	for taken := 0; taken < rest; {
		ds, err := recv(t, ctx, other, q, rest-taken)
		if err != nil {
			t.Fatalf("after Close, another broker got %d of the %d messages the consumer had read ahead within %v (lease %v): %v; "+
				"Close must give read-ahead back at once", taken, rest, time.Since(start), longLease, err)
		}
		got = append(got, ds...)
		taken += len(ds)
	}
	if err := first.Ack(t.Context()); err != nil {
		t.Fatalf("Ack of a delivery returned by Next, after the consumer's Close: %v", err)
	}
	all := append(bodies(got), string(first.Message().Body))
	slices.Sort(all)
	var wantAll []string
	for _, m := range msgs {
		wantAll = append(wantAll, string(m.Body))
	}
	if !slices.Equal(all, wantAll) {
		t.Fatalf("received %q, want each of %q once", all, wantAll)
	}
	ack(t, got...)
	waitCounts(t, other, q, broker.Counts{})
}

// testConsumerUnsettled: deliveries returned by Next and not settled do
// not count against prefetch: a consumer with prefetch 2 that returned 2,
// none settled, returns a third at once. A broker.UnsettledCounter claims
// the opposite and is held to it: its consumer returns no more than its
// window of one partition (every message here is in one: no key), 2, or
// ceil(2/N) of N partitions, leaves every other message to another broker
// meanwhile, and once one of its deliveries is settled returns a message
// published since.
func (s *suite) testConsumerUnsettled(t *testing.T) {
	const n, prefetch = 10, 2
	bs := s.brokers(t, Setup{Order: s.order, Lease: longLease}, 2)
	a, other := bs[0], bs[1]
	q := queue(t)
	p := s.c.Priorities[0]
	msgs := make([]broker.Message, n)
	for i := range msgs {
		msgs[i] = msg(fmt.Sprintf("u%02d", i), p)
	}
	publish(t, a, q, msgs...)
	c := consume(t, a, q, prefetch)
	var held []broker.Delivery
	if uc, ok := a.(broker.UnsettledCounter); !ok || !uc.CountsUnsettled() {
		for range prefetch + 1 {
			held = append(held, nextOne(t, c, q, prompt))
		}
		ack(t, held...)
		return
	}
	window := prefetch
	if pb, ok := a.(broker.Partitioned); ok && pb.Partitions() > 1 {
		window = (prefetch + pb.Partitions() - 1) / pb.Partitions()
	}
	for range window {
		held = append(held, nextOne(t, c, q, prompt))
	}
	nextNone(t, c, q, readAheadWindow)
	want := n - window
	ctx, cancel := context.WithTimeout(t.Context(), prompt)
	var got []broker.Delivery
	for len(got) < want {
		ds, err := recv(t, ctx, other, q, want-len(got))
		if err != nil {
			cancel()
			t.Fatalf("a consumer with prefetch %d whose %d deliveries of one partition are unsettled (it counts them) left only %d of %d messages to another broker within %v: %v",
				prefetch, window, len(got), n, prompt, err)
		}
		got = append(got, ds...)
	}
	cancel()
	ack(t, got...)
	publish(t, a, q, msg("late", p))
	ack(t, held[0])
	d := nextOne(t, c, q, prompt)
	if string(d.Message().Body) != "late" {
		t.Errorf("after one of its deliveries was settled the consumer returned %q, want late", d.Message().Body)
	}
	ack(t, d)
	ack(t, held[1:]...)
}

// testConsumerSettle: deliveries from Next are acked, nacked (at once and
// with a delay, coming back through the consumer) and rejected like those
// from Receive.
func (s *suite) testConsumerSettle(t *testing.T) {
	b := s.one(t, Setup{Order: s.order, MaxDeliveries: 10})
	q := queue(t)
	p := s.c.Priorities[0]
	c := consume(t, b, q, 2)
	ctx := t.Context()

	publish(t, b, q, msg("acked", p))
	d := nextOne(t, c, q, prompt)
	if string(d.Message().Body) != "acked" || d.Attempt() != 1 {
		t.Fatalf("got %q attempt %d, want acked attempt 1", d.Message().Body, d.Attempt())
	}
	ack(t, d)
	wantErr(t, "Ack after Ack", d.Ack(ctx), broker.ErrSettled)

	publish(t, b, q, msg("nacked", p))
	d = nextOne(t, c, q, prompt)
	if err := d.Nack(ctx, 0); err != nil {
		t.Fatalf("Nack: %v", err)
	}
	wantErr(t, "Ack after Nack", d.Ack(ctx), broker.ErrSettled)
	d = nextOne(t, c, q, prompt)
	if string(d.Message().Body) != "nacked" || d.Attempt() != 2 {
		t.Fatalf("after Nack(0): got %q attempt %d, want nacked attempt 2", d.Message().Body, d.Attempt())
	}
	ack(t, d)

	delay := s.c.Lease
	publish(t, b, q, msg("delayed", p))
	d = nextOne(t, c, q, prompt)
	start := time.Now()
	if err := d.Nack(ctx, delay); err != nil {
		t.Fatalf("Nack(%v): %v", delay, err)
	}
	d = nextOne(t, c, q, delay+prompt)
	if el := time.Since(start); el < delay*3/4 {
		t.Errorf("a delivery nacked with a delay of %v came back through the consumer after %v", delay, el)
	}
	if string(d.Message().Body) != "delayed" || d.Attempt() != 2 {
		t.Fatalf("after Nack(%v): got %q attempt %d, want delayed attempt 2", delay, d.Message().Body, d.Attempt())
	}
	ack(t, d)

	publish(t, b, q, msg("rejected", p))
	d = nextOne(t, c, q, prompt)
	if err := d.Reject(ctx, "undecodable payload"); err != nil {
		t.Fatalf("Reject: %v", err)
	}
	wantErr(t, "Nack after Reject", d.Nack(ctx, 0), broker.ErrSettled)
	nextNone(t, c, q, s.c.Lease)
	waitCounts(t, b, q, broker.Counts{Dead: 1})
	s.expectDeadLetter(t, b, q, "rejected")
}

// testConsumerLeaseExpiry: a delivery from Next that is not settled comes
// back after its lease, through the same consumer.
func (s *suite) testConsumerLeaseExpiry(t *testing.T) {
	b := s.one(t, Setup{Order: s.order, Lease: s.c.Lease, MaxDeliveries: 10})
	q := queue(t)
	want := msg("lost", s.c.Priorities[0])
	c := consume(t, b, q, 1)
	publish(t, b, q, want)
	start := time.Now()
	d1 := nextOne(t, c, q, prompt)
	d2 := nextOne(t, c, q, s.leaseWait())
	el := time.Since(start)
	if !sameMessage(d2.Message(), want) || d2.Attempt() != 2 {
		t.Fatalf("after the lease: got %q attempt %d, want %q attempt 2", d2.Message().Body, d2.Attempt(), want.Body)
	}
	if el < s.c.Lease/2 {
		t.Errorf("an unsettled delivery came back %v after Next returned it, before its lease of %v ran out", el, s.c.Lease)
	}
	wantErr(t, "Ack of an expired delivery", d1.Ack(t.Context()), broker.ErrLeaseLost)
	ack(t, d2)
	nextNone(t, c, q, s.c.Lease)
	waitCounts(t, b, q, broker.Counts{})
}

// testConsumerExtend is testExtend with the delivery taken by a consumer.
func (s *suite) testConsumerExtend(t *testing.T) {
	s.extend(t, func(t *testing.T, b broker.Broker, q string) broker.Delivery {
		return nextOne(t, consume(t, b, q, 1), q, prompt)
	})
}

// testConsumerWakes: a consumer opened once delivers what is published
// later, each time promptly; the context given to Consume bounds only the
// opening.
func (s *suite) testConsumerWakes(t *testing.T) {
	bs := s.brokers(t, s.setup(), 2)
	waiter, other := bs[0], bs[1]
	q := queue(t)
	p := s.c.Priorities[0]
	ctx, cancel := context.WithTimeout(t.Context(), prompt)
	c, err := waiter.Consume(ctx, q, 2)
	cancel()
	if err != nil {
		t.Fatalf("Consume: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	for i := range 3 {
		body := fmt.Sprintf("wake%d", i)
		nctx, ncancel := context.WithTimeout(t.Context(), wakeWait)
		ch := nextAsync(nctx, c)
		expectWaiting(t, ch, "Next")
		sent := time.Now()
		publish(t, other, q, msg(body, p))
		r := awaitNext(t, ch, nctx, q)
		ncancel()
		if r.err != nil || string(r.ds[0].Message().Body) != body {
			t.Fatalf("round %d: waiting Next after a Publish by another broker: %q, %v; want %s (the context given to Consume ended after it returned)",
				i, bodies(r.ds), r.err, body)
		}
		if lag := r.at.Sub(sent); lag > wakeLag {
			t.Errorf("round %d: a waiting Next took %v to see a Publish by another broker", i, lag)
		}
		ack(t, r.ds...)
	}
}

func (s *suite) testConsumerContextCancel(t *testing.T) {
	b := s.one(t, s.setup())
	q := queue(t)
	c := consume(t, b, q, 2)
	const after = 200 * time.Millisecond

	ctx, cancel := context.WithTimeout(t.Context(), after)
	start := time.Now()
	_, err := next(t, ctx, c, q)
	el := time.Since(start)
	cancel()
	wantErr(t, "Next past its deadline", err, context.DeadlineExceeded)
	if el > after+snappy {
		t.Errorf("Next returned %v after it began, its deadline was %v", el, after)
	}

	ctx, cancel = context.WithCancel(t.Context())
	timer := time.AfterFunc(after, cancel)
	_, err = next(t, ctx, c, q)
	timer.Stop()
	cancel()
	wantErr(t, "Next cancelled while waiting", err, context.Canceled)

	ctx, cancel = context.WithCancel(t.Context())
	cancel()
	_, err = next(t, ctx, c, q)
	wantErr(t, "Next with a cancelled context", err, context.Canceled)

	// The consumer still works, and nothing was leased by the cancelled calls.
	publish(t, b, q, msg("after", s.c.Priorities[0]))
	d := nextOne(t, c, q, prompt)
	if string(d.Message().Body) != "after" || d.Attempt() != 1 {
		t.Errorf("after cancelled Nexts: got %q attempt %d, want after attempt 1", d.Message().Body, d.Attempt())
	}
	ack(t, d)
}

// testConsumerCancelLosesNothing races the cancellation of a waiting Next
// with a Publish: what Next did not return, the consumer returns later, at
// once, not after a lease.
func (s *suite) testConsumerCancelLosesNothing(t *testing.T) {
	const rounds = 20
	bs := s.brokers(t, Setup{Order: s.order, Lease: longLease}, 2)
	cons, pub := bs[0], bs[1]
	q := queue(t)
	p := s.c.Priorities[0]
	c := consume(t, cons, q, 2)
	got := map[string]int{}
	count := func(ds []broker.Delivery) {
		for _, d := range ds {
			got[string(d.Message().Body)]++
		}
		ack(t, ds...)
	}
	for i := range rounds {
		ctx, cancel := context.WithCancel(t.Context())
		ch := nextAsync(ctx, c)
		pubErr := make(chan error, 1)
		go func() { pubErr <- pub.Publish(t.Context(), q, msg(fmt.Sprintf("m%02d", i), p)) }()
		if i%2 == 0 {
			cancel()
		}
		if err := <-pubErr; err != nil {
			cancel()
			t.Fatalf("Publish: %v", err)
		}
		cancel()
		r := awaitNext(t, ch, ctx, q)
		if r.err != nil && !errors.Is(r.err, context.Canceled) {
			t.Fatalf("cancelled Next: %v, want context.Canceled", r.err)
		}
		count(r.ds)
	}
	received := 0
	for _, n := range got {
		received += n
	}
	for range rounds - received {
		count([]broker.Delivery{nextOne(t, c, q, prompt)})
	}
	for i := range rounds {
		if body := fmt.Sprintf("m%02d", i); got[body] != 1 {
			t.Errorf("%s received %d times, want once", body, got[body])
		}
	}
	nextNone(t, c, q, s.c.Lease)
}

// testConsumerClose: Close ends a waiting Next and every later one with
// ErrClosed, is idempotent, and leaves other consumers of the broker
// working.
func (s *suite) testConsumerClose(t *testing.T) {
	b := s.one(t, s.setup())
	q := queue(t)
	p := s.c.Priorities[0]
	c := consume(t, b, q, 2)
	keep := consume(t, b, q, 2)
	closeEndsNext(t, c, q, "Close", c.Close)
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v, want nil", err)
	}

	publish(t, b, q, msg("kept", p))
	d := nextOne(t, keep, q, prompt)
	if string(d.Message().Body) != "kept" || d.Attempt() != 1 {
		t.Fatalf("another consumer of the same broker got %q attempt %d, want kept attempt 1", d.Message().Body, d.Attempt())
	}
	ack(t, d)
}

// closeEndsNext checks that close (what: the consumer's Close or its
// broker's) ends a Next waiting on c, of the empty queue q, with
// ErrClosed at once, and every later Next too.
func closeEndsNext(t *testing.T, c broker.Consumer, q, what string, close func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ch := nextAsync(ctx, c)
	expectWaiting(t, ch, "Next")
	if err := close(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	select {
	case r := <-ch:
		if len(r.ds) > 0 {
			t.Fatalf("Next waiting at %s returned %q", what, bodies(r.ds))
		}
		wantErr(t, "Next waiting at "+what, r.err, broker.ErrClosed)
	case <-time.After(snappy):
		t.Fatalf("Next still waiting %v after %s", snappy, what)
	}
	_, err := next(t, ctx, c, q)
	wantErr(t, "Next after "+what, err, broker.ErrClosed)
}

// testConsumerBrokerClose: closing the broker ends its consumers' Next
// with ErrClosed, and Consume on a closed broker fails.
func (s *suite) testConsumerBrokerClose(t *testing.T) {
	b := s.one(t, s.setup())
	q := queue(t)
	c := consume(t, b, q, 2)
	closeEndsNext(t, c, q, "the broker's Close", b.Close)
	if err := c.Close(); err != nil {
		t.Errorf("Close of a consumer of a closed broker: %v, want nil", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	// Consume on a closed broker fails: at once, or at the first Next.
	c2, err := b.Consume(ctx, q, 1)
	if err == nil {
		if c2 == nil {
			t.Fatal("Consume on a closed broker returned a nil consumer and no error")
		}
		_, err = next(t, ctx, c2, q)
		if cerr := c2.Close(); cerr != nil {
			t.Errorf("Close of a consumer opened on a closed broker: %v, want nil", cerr)
		}
	}
	wantErr(t, "Consume on a closed broker (or its first Next)", err, broker.ErrClosed)
}

// testConsumerConcurrent: consumers of several brokers with several
// prefetches share a queue being published to; each message is delivered
// once.
func (s *suite) testConsumerConcurrent(t *testing.T) {
	const nBrokers = 3
	bs := s.brokers(t, Setup{Order: s.order, Lease: longLease}, nBrokers)
	q := queue(t)
	takers := make([]taker, 5)
	for i := range takers {
		c := consume(t, bs[i%nBrokers], q, 1+i%4)
		takers[i] = func(ctx context.Context) ([]broker.Delivery, error) {
			d, err := c.Next(ctx)
			if err != nil {
				return nil, err
			}
			return []broker.Delivery{d}, nil
		}
	}
	s.shareQueue(t, bs, q, "Next", takers)
}

func (s *suite) testConsumerInvalid(t *testing.T) {
	b := s.one(t, s.setup())
	q := queue(t)
	ctx, cancel := context.WithTimeout(t.Context(), prompt)
	defer cancel()
	for _, tc := range []struct {
		q        string
		prefetch int
	}{{"", 1}, {q, 0}, {q, -1}} {
		c, err := b.Consume(ctx, tc.q, tc.prefetch)
		wantErr(t, fmt.Sprintf("Consume(%q, %d)", tc.q, tc.prefetch), err, broker.ErrInvalid)
		if c != nil {
			t.Errorf("Consume(%q, %d) returned a consumer with its error", tc.q, tc.prefetch)
			_ = c.Close()
		}
	}
	publish(t, b, q, msg("kept", s.c.Priorities[0]))
	d := receiveOne(t, b, q, prompt)
	if string(d.Message().Body) != "kept" || d.Attempt() != 1 {
		t.Fatalf("after invalid Consume calls got %q attempt %d, want kept attempt 1", d.Message().Body, d.Attempt())
	}
	ack(t, d)
}

// restartWait bounds how long a backend may take to serve again after its
// server restarted.
const restartWait = 30 * time.Second

// testConsumerRestart: a consumer open across a restart of the server
// delivers what is published after it, without being reopened.
func (s *suite) testConsumerRestart(t *testing.T) {
	if s.c.Restartable == nil {
		t.Skip("Config.Restartable is nil: the backend offers no server the suite may restart")
	}
	srv := s.c.Restartable(t)
	b := srv.New(t, s.setup())
	q := queue(t)
	p := s.c.Priorities[0]
	c := consume(t, b, q, 2)
	publish(t, b, q, msg("before", p))
	ack(t, nextOne(t, c, q, prompt))

	srv.Restart(t)
	restarted := time.Now()
	deadline := restarted.Add(restartWait)
	for {
		err := b.Publish(t.Context(), q, msg("after", p))
		if err == nil {
			break
		}
		if errors.Is(err, broker.ErrClosed) || time.Now().After(deadline) {
			t.Fatalf("Publish %v after the server restarted: %v", time.Since(restarted), err)
		}
		poll(t, 100*time.Millisecond)
	}
	for {
		ctx, cancel := context.WithDeadline(t.Context(), deadline)
		d, err := next(t, ctx, c, q)
		cancel()
		if err == nil {
			if string(d.Message().Body) != "after" {
				t.Fatalf("after the restart the consumer delivered %q attempt %d, want after", d.Message().Body, d.Attempt())
			}
			ack(t, d)
			return
		}
		if errors.Is(err, broker.ErrClosed) || time.Now().After(deadline) {
			t.Fatalf("a consumer open across a restart of the server: Next %v after the restart: %v; want it to deliver again without being reopened",
				time.Since(restarted), err)
		}
		t.Logf("Next %v after the restart: %v (a connection error is allowed; trying again)", time.Since(restarted), err)
		poll(t, 100*time.Millisecond)
	}
}
