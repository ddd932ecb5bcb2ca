package brokertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker"
)

// result is what a Receive in a goroutine returned, and when.
type result struct {
	ds  []broker.Delivery
	err error
	at  time.Time
}

// receiveAsync runs Receive(q, max) in a goroutine bounded by wait and by
// the test's context.
func receiveAsync(t *testing.T, b broker.Broker, q string, max int, wait time.Duration) <-chan result {
	ch := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), wait)
		defer cancel()
		ds, err := b.Receive(ctx, q, max)
		ch <- result{ds, err, time.Now()}
	}()
	return ch
}

// expectWaiting checks that a call started with receiveAsync (what:
// "Receive") or nextAsync ("Next") is still waiting a little after it
// began (its queue has nothing visible).
func expectWaiting(t *testing.T, ch <-chan result, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s on a queue with nothing visible returned %q, %v; want it to wait", what, bodies(r.ds), r.err)
	case <-time.After(200 * time.Millisecond):
	}
}

// await waits for a Receive started with receiveAsync.
func await(t *testing.T, ch <-chan result, wait time.Duration, what string) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(wait):
		t.Fatalf("%s: Receive still waiting after %v", what, wait)
		return result{}
	}
}

func (s *suite) testRoundTrip(t *testing.T) {
	b := s.one(t, s.setup())
	q := queue(t)
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	big := make([]byte, 64<<10)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range big {
		big[i] = byte(r.Uint32())
	}
	bodies := [][]byte{
		nil,
		{},
		[]byte("hello"),
		all,
		[]byte("\x00\xff\xfe\xc3\x28 not utf-8 \r\n"),
		[]byte(`{"url":"https://example.com/p?a=1&b=2","meta":{"k":"v"}}`),
		big,
	}
	for i, body := range bodies {
		want := broker.Message{Body: body, Priority: s.c.Priorities[i%len(s.c.Priorities)]}
		publish(t, b, q, want)
		ctx, cancel := context.WithTimeout(t.Context(), prompt)
		ds, err := recv(t, ctx, b, q, 10)
		cancel()
		if err != nil {
			t.Fatalf("body %d: Receive: %v", i, err)
		}
		if len(ds) != 1 {
			t.Fatalf("body %d: Receive returned %d deliveries from a queue holding 1", i, len(ds))
		}
		d := ds[0]
		if got := d.Message(); !sameMessage(got, want) {
			t.Errorf("body %d: got %d bytes priority %d, want %d bytes priority %d (bytes equal: %v)",
				i, len(got.Body), got.Priority, len(want.Body), want.Priority, string(got.Body) == string(want.Body))
		}
		if d.Attempt() != 1 {
			t.Errorf("body %d: first delivery has Attempt() = %d, want 1", i, d.Attempt())
		}
		ack(t, d)
	}
	waitCounts(t, b, q, broker.Counts{})
}

func (s *suite) testBodiesAreCopied(t *testing.T) {
	b := s.one(t, s.setup())
	q := queue(t)
	body := []byte("original")
	publish(t, b, q, broker.Message{Body: body})
	copy(body, "mutated!")
	d := receiveOne(t, b, q, prompt)
	if got := string(d.Message().Body); got != "original" {
		t.Fatalf("delivered %q: the publisher changed a stored message through its slice after Publish returned", got)
	}
	copy(d.Message().Body, "MUTATED!")
	if err := d.Nack(t.Context(), 0); err != nil {
		t.Fatalf("Nack: %v", err)
	}
	d = receiveOne(t, b, q, prompt)
	if got := string(d.Message().Body); got != "original" {
		t.Fatalf("redelivered %q: a consumer changed a stored message through its delivery's body", got)
	}
	ack(t, d)
}

func (s *suite) testReceiveMax(t *testing.T) {
	b := s.one(t, s.setup())
	q := queue(t)
	p := s.c.Priorities[0]
	publish(t, b, q, msg("m0", p), msg("m1", p), msg("m2", p), msg("m3", p), msg("m4", p))
	got := receive(t, b, q, 1, 1, prompt) // recv checks len <= max
	ctx, cancel := context.WithTimeout(t.Context(), prompt)
	defer cancel()
	for len(got) < 5 {
		ds, err := recv(t, ctx, b, q, 2)
		if err != nil {
			t.Fatalf("Receive after %d of 5: %v", len(got), err)
		}
		got = append(got, ds...)
	}
	bs := bodies(got)
	slices.Sort(bs)
	if want := []string{"m0", "m1", "m2", "m3", "m4"}; !slices.Equal(bs, want) {
		t.Fatalf("received %q, want each of %q once", bs, want)
	}
	ack(t, got...)
}

// orderTest publishes interleaved priorities (rounds of every priority in
// a random order) in chunks of chunk messages (0: one call) and receives
// them max at a time, after all are published.
func (s *suite) orderTest(chunk, max int) func(t *testing.T) {
	return func(t *testing.T) {
		b := s.one(t, s.setup())
		q := queue(t)
		seed := rand.Uint64()
		r := rand.New(rand.NewPCG(seed, 0))
		ps := s.c.Priorities
		var msgs []broker.Message
		for range 4 {
			for _, i := range r.Perm(len(ps)) {
				msgs = append(msgs, msg(fmt.Sprintf("m%02d/p%d", len(msgs), ps[i]), ps[i]))
			}
		}
		if chunk == 0 {
			publish(t, b, q, msgs...)
		} else {
			for c := range slices.Chunk(msgs, chunk) {
				publish(t, b, q, c...)
			}
		}
		ds := receive(t, b, q, len(msgs), max, prompt)
		want := s.expectOrder(msgs)
		got := make([]broker.Message, len(ds))
		for i, d := range ds {
			got[i] = d.Message()
		}
		if !slices.EqualFunc(got, want, sameMessage) {
			t.Fatalf("%s order (seed %d):\n got %s\nwant %s", s.order, seed, fmtMsgs(got), fmtMsgs(want))
		}
		ack(t, ds...)
	}
}

func fmtMsgs(ms []broker.Message) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = string(m.Body)
		if !strings.Contains(parts[i], "/p") {
			parts[i] += fmt.Sprintf("/p%d", m.Priority)
		}
	}
	return strings.Join(parts, " ")
}

// testOrderInterleaved runs a random script of publishes and receives
// against a reference model of the order mode: whatever a Receive returns
// must be the head of the model's order at that moment.
func (s *suite) testOrderInterleaved(t *testing.T) {
	b := s.one(t, s.setup())
	q := queue(t)
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 1))
	ps := s.c.Priorities
	var pending []broker.Message // in publish order
	n := 0
	take := func(max int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), prompt)
		defer cancel()
		ds, err := recv(t, ctx, b, q, max)
		if err != nil {
			t.Fatalf("Receive with %d pending: %v (seed %d)", len(pending), err, seed)
		}
		want := s.expectOrder(pending)[:len(ds)]
		got := make([]broker.Message, len(ds))
		for i, d := range ds {
			got[i] = d.Message()
		}
		if !slices.EqualFunc(got, want, sameMessage) {
			t.Fatalf("%s order, interleaved (seed %d): pending %s\n got %s\nwant %s",
				s.order, seed, fmtMsgs(pending), fmtMsgs(got), fmtMsgs(want))
		}
		pending = slices.DeleteFunc(pending, func(m broker.Message) bool {
			return slices.ContainsFunc(got, func(g broker.Message) bool { return sameMessage(g, m) })
		})
		ack(t, ds...)
	}
	for range 40 {
		if len(pending) == 0 || r.IntN(2) == 0 {
			k := 1 + r.IntN(4)
			batch := make([]broker.Message, k)
			for i := range batch {
				p := ps[r.IntN(len(ps))]
				batch[i] = msg(fmt.Sprintf("m%02d/p%d", n, p), p)
				n++
			}
			publish(t, b, q, batch...)
			pending = append(pending, batch...)
		} else {
			take(1 + r.IntN(4))
		}
	}
	for len(pending) > 0 {
		take(1 + r.IntN(4))
	}
}

func (s *suite) testNackKeepsPriority(t *testing.T) {
	ps := slices.Sorted(slices.Values(s.c.Priorities))
	if len(ps) < 2 {
		t.Skip("needs two priorities")
	}
	b := s.one(t, s.setup())
	q := queue(t)
	publish(t, b, q, msg("low", ps[0]), msg("high", ps[len(ps)-1]))
	d := receiveOne(t, b, q, prompt)
	if got := string(d.Message().Body); got != "high" {
		t.Fatalf("first delivery %q, want high", got)
	}
	if err := d.Nack(t.Context(), 0); err != nil {
		t.Fatalf("Nack: %v", err)
	}
	d = receiveOne(t, b, q, prompt)
	if got := string(d.Message().Body); got != "high" || d.Attempt() != 2 {
		t.Fatalf("after nacking high: got %q attempt %d, want high attempt 2 (a nacked message keeps its priority)", got, d.Attempt())
	}
	ack(t, d)
	d = receiveOne(t, b, q, prompt)
	if got := string(d.Message().Body); got != "low" {
		t.Fatalf("got %q, want low", got)
	}
	ack(t, d)
}

// testAckRemoves: acknowledged messages do not come back, even well past
// their lease. A test held up between Receive and the last Ack for about
// the lease loses the lease rightly (ErrLeaseLost): that voids the trial,
// which is run again with a longer lease (see trials).
func (s *suite) testAckRemoves(t *testing.T) {
	s.trials(t, "Ack", func(lease time.Duration) time.Duration {
		b := s.one(t, Setup{Order: s.order, Lease: lease})
		q := queue(t)
		p := s.c.Priorities[0]
		publish(t, b, q, msg("a", p), msg("b", p), msg("c", p))
		start := time.Now() // before any of the leases began
		ds := receive(t, b, q, 3, 3, prompt)
		for _, d := range ds {
			if err := d.Ack(t.Context()); err != nil {
				if w := time.Since(start); errors.Is(err, broker.ErrLeaseLost) && w > lease-lease/10 { // see extendTrial
					return w
				}
				t.Fatalf("Ack %q (attempt %d) %v after receiving began: %v", d.Message().Body, d.Attempt(), time.Since(start), err)
			}
		}
		expectNone(t, b, q, 3*lease) // well past the lease
		waitCounts(t, b, q, broker.Counts{})
		return 0
	})
}

// voidTrials is how many trials a test that a stall of the test itself
// voids runs at most: with the lease doubled each time, the last one's is
// 16 times the suite's.
const voidTrials = 5

// trials runs trial (what it tests: what) with the suite's lease, and
// again while a trial is void (it returns the stall of the test that
// voided it, longer than the lease it tried; 0 when it passed), each time
// with twice the lease of the one before: a loaded machine that holds the
// test up for longer than a short lease still gets a trial that says
// something. It fails after voidTrials void trials.
func (s *suite) trials(t *testing.T, what string, trial func(lease time.Duration) time.Duration) {
	t.Helper()
	lease := s.c.Lease
	for i := 1; ; i++ {
		stall := trial(lease)
		if stall == 0 {
			return
		}
		if i == voidTrials {
			t.Fatalf("in each of %d trials the test was held up for longer than the lease it tried (last %v of %v): too loaded a machine to test %s",
				voidTrials, stall, lease, what)
		}
		t.Logf("trial %d void: the test was held up for %v, longer than the lease of %v; trying again with %v", i, stall, lease, 2*lease)
		lease *= 2
	}
}

// testAckBatch: a broker.BatchAcker acknowledges a batch (of two queues)
// as if by Ack on each: every delivery is removed (none left in flight,
// with leases long enough not to run out meanwhile), one settled before
// makes the error wrap ErrSettled without keeping the others, and each is
// settled afterwards.
func (s *suite) testAckBatch(t *testing.T) {
	b := s.one(t, s.setup())
	ba, ok := b.(broker.BatchAcker)
	if !ok {
		t.Skip("broker does not implement broker.BatchAcker")
	}
	qa, qb := queue(t, "a"), queue(t, "b")
	p := s.c.Priorities[0]
	publish(t, b, qa, msg("a0", p), msg("a1", p), msg("a2", p), msg("a3", p))
	publish(t, b, qb, msg("b0", p), msg("b1", p))
	ds := append(receive(t, b, qa, 4, 4, prompt), receive(t, b, qb, 2, 2, prompt)...)
	if err := ba.AckBatch(t.Context()); err != nil {
		t.Fatalf("AckBatch of nothing: %v", err)
	}
	ack(t, ds[1])
	wantErr(t, "AckBatch with a delivery acknowledged before", ba.AckBatch(t.Context(), ds...), broker.ErrSettled)
	for i, d := range ds {
		wantErr(t, fmt.Sprintf("Ack of delivery %d after AckBatch", i), d.Ack(t.Context()), broker.ErrSettled)
	}
	waitCounts(t, b, qa, broker.Counts{})
	waitCounts(t, b, qb, broker.Counts{})
}

// testExtendBatch: a broker.BatchExtender extends a batch (of two queues)
// as Extend on each would, with an error per delivery: nil for those it
// extended, one wrapping ErrLeaseLost for a delivery whose lease ran out
// (the message went to another Receive), ErrSettled for one acknowledged
// before, each in its place. Extended every lease/4, the others stay
// leased for two leases (no other Receive gets them) and are then
// acknowledged. A stall of the test longer than the lease voids the
// trial, which is run again with a longer lease (see trials), as in
// testExtend.
func (s *suite) testExtendBatch(t *testing.T) {
	if _, ok := s.one(t, s.setup()).(broker.BatchExtender); !ok {
		t.Skip("broker does not implement broker.BatchExtender")
	}
	s.trials(t, "ExtendBatch", func(lease time.Duration) time.Duration {
		return s.extendBatchTrial(t, lease)
	})
}

// extendBatchTrial is one trial of testExtendBatch with leases of lease: 0
// when it passed, or the stall of the test, longer than nine tenths of the
// lease, in which a lease was lost.
func (s *suite) extendBatchTrial(t *testing.T, lease time.Duration) time.Duration {
	b := s.one(t, Setup{Order: s.order, Lease: lease})
	be := b.(broker.BatchExtender)
	ctx := t.Context()
	ql, qa, qb := queue(t, "lost"), queue(t, "a"), queue(t, "b")
	p := s.c.Priorities[0]
	if errs := be.ExtendBatch(ctx, lease); len(errs) != 0 {
		t.Fatalf("ExtendBatch of nothing: %v", errs)
	}
	publish(t, b, ql, msg("lost", p))
	lost := receiveOne(t, b, ql, prompt)
	ack(t, receiveOne(t, b, ql, 4*lease+prompt)) // lost's lease ran out: it came back
	publish(t, b, qa, msg("a0", p), msg("a1", p), msg("a2", p))
	publish(t, b, qb, msg("b0", p), msg("b1", p))
	renewed := time.Now() // the start of the call that last renewed the leases
	ds := append(receive(t, b, qa, 3, 3, prompt), receive(t, b, qb, 2, 2, prompt)...)
	// stalled is the stall that voids the trial when err is a lease lost
	// longer than nine tenths of the lease after the last renewal, or 0.
	stalled := func(err error) time.Duration {
		if w := time.Since(renewed); errors.Is(err, broker.ErrLeaseLost) && w > lease-lease/10 {
			settle(t, ds)
			return w
		}
		return 0
	}
	settled := ds[1]
	if err := settled.Ack(ctx); err != nil {
		if w := stalled(err); w > 0 {
			return w
		}
		t.Fatalf("Ack %q (attempt %d) %v after receiving began: %v", settled.Message().Body, settled.Attempt(), time.Since(renewed), err)
	}
	live := []broker.Delivery{ds[0], ds[2], ds[3], ds[4]}
	thief := receiveAsync(t, b, qa, 1, 2*lease+prompt)
	batch := []broker.Delivery{ds[0], lost, ds[2], settled, ds[3], ds[4]}
	tick := time.NewTicker(lease / 4)
	defer tick.Stop()
	for until := time.Now().Add(2 * lease); time.Now().Before(until); {
		call := time.Now()
		errs := be.ExtendBatch(ctx, lease, batch...)
		if len(errs) != len(batch) {
			t.Fatalf("ExtendBatch of %d deliveries returned %d errors, want one each", len(batch), len(errs))
		}
		for i, d := range batch {
			switch d {
			case lost:
				wantErr(t, "ExtendBatch: the delivery whose lease ran out", errs[i], broker.ErrLeaseLost)
			case settled:
				wantErr(t, "ExtendBatch: the delivery acknowledged before", errs[i], broker.ErrSettled)
			default:
				if errs[i] != nil {
					if w := stalled(errs[i]); w > 0 {
						return w
					}
					t.Fatalf("ExtendBatch: delivery %q, %v after the last renewal: %v", d.Message().Body, time.Since(renewed), errs[i])
				}
			}
		}
		batch = live
		renewed = call
		select {
		case <-tick.C:
		case r := <-thief:
			thief = nil
			if len(r.ds) > 0 {
				if w := r.at.Sub(renewed); w > lease {
					settle(t, r.ds)
					settle(t, ds)
					return w
				}
				t.Fatalf("a delivery whose lease ExtendBatch extended every %v went to another Receive %v after the last renewal (lease %v)",
					lease/4, r.at.Sub(renewed), lease)
			}
			if !errors.Is(r.err, context.DeadlineExceeded) {
				t.Fatalf("another Receive: %v, want context.DeadlineExceeded", r.err)
			}
		}
	}
	for _, d := range live {
		if err := d.Ack(ctx); err != nil {
			if w := stalled(err); w > 0 {
				return w
			}
			t.Fatalf("Ack of %q after two leases kept by ExtendBatch: %v", d.Message().Body, err)
		}
	}
	for _, q := range []string{ql, qa, qb} {
		waitCounts(t, b, q, broker.Counts{})
	}
	return 0
}

func (s *suite) testNackRequeues(t *testing.T) {
	b := s.one(t, s.setup())
	q := queue(t)
	want := msg("again", s.c.Priorities[len(s.c.Priorities)/2])
	publish(t, b, q, want)
	d := receiveOne(t, b, q, prompt)
	if d.Attempt() != 1 {
		t.Errorf("first delivery: Attempt() = %d, want 1", d.Attempt())
	}
	if err := d.Nack(t.Context(), 0); err != nil {
		t.Fatalf("Nack: %v", err)
	}
	d = receiveOne(t, b, q, prompt)
	if !sameMessage(d.Message(), want) || d.Attempt() != 2 {
		t.Fatalf("after Nack(0): got %q priority %d attempt %d, want %q priority %d attempt 2",
			d.Message().Body, d.Message().Priority, d.Attempt(), want.Body, want.Priority)
	}
	ack(t, d)
	waitCounts(t, b, q, broker.Counts{})
}

func (s *suite) testNackDelay(t *testing.T) {
	delay := s.c.Lease
	b := s.one(t, s.setup())
	q := queue(t)
	p := s.c.Priorities[0]
	publish(t, b, q, msg("delayed", p))
	d := receiveOne(t, b, q, prompt)
	start := time.Now()
	if err := d.Nack(t.Context(), delay); err != nil {
		t.Fatalf("Nack(%v): %v", delay, err)
	}
	publish(t, b, q, msg("other", p))
	other := receiveOne(t, b, q, prompt)
	if got := string(other.Message().Body); got != "other" {
		if el := time.Since(start); el < delay {
			t.Fatalf("got %q %v after Nack(%v), want other: a delayed message was visible early", got, el, delay)
		}
		t.Skipf("inconclusive: publishing and receiving took longer than the delay %v", delay)
	}
	ack(t, other)
	// A delayed message counts as ready, and as delayed, until its delay
	// ends; a test held up past the delay may find it due already.
	for deadline := time.Now().Add(prompt); ; poll(t, 10*time.Millisecond) {
		got, err := b.Counts(t.Context(), q)
		if err != nil {
			t.Fatalf("Counts(%q): %v", q, err)
		}
		if got == (broker.Counts{Ready: 1, Delayed: 1}) {
			break
		}
		if el := time.Since(start); el >= delay && got == (broker.Counts{Ready: 1}) {
			t.Skipf("inconclusive: the test was held up %v, past the delay %v, before it counted the delayed message", el, delay)
		}
		if time.Now().After(deadline) {
			t.Fatalf("Counts(%q) = %+v %v after Nack(%v), want %+v", q, got, time.Since(start), delay, broker.Counts{Ready: 1, Delayed: 1})
		}
	}
	d = nil
	if rest := delay/2 - time.Since(start); rest > 0 {
		ctx, cancel := context.WithTimeout(t.Context(), rest)
		ds, _ := bounded(t, ctx, b, q, 100)
		cancel()
		if el := time.Since(start); len(ds) > 0 && el < delay {
			t.Fatalf("Receive(%q) delivered %q %v after Nack(%v): a delayed message was visible early", q, bodies(ds), el, delay)
		} else if len(ds) > 0 {
			// A starved machine held this receive past the delay: what
			// came is due by now, and is checked below as if awaited.
			d = ds[0]
		}
	}
	if d == nil {
		d = receiveOne(t, b, q, delay+prompt)
	}
	if el := time.Since(start); el < delay*3/4 {
		t.Errorf("delayed message came back %v after Nack(%v)", el, delay)
	}
	if got := string(d.Message().Body); got != "delayed" || d.Attempt() != 2 {
		t.Errorf("got %q attempt %d, want delayed attempt 2", got, d.Attempt())
	}
	ack(t, d)
	waitCounts(t, b, q, broker.Counts{})
}

func (s *suite) testReject(t *testing.T) {
	b := s.one(t, s.setup())
	q := queue(t)
	p := s.c.Priorities[len(s.c.Priorities)-1]
	publish(t, b, q, msg("one", p), msg("two", p))
	d := receiveOne(t, b, q, prompt)
	rejected := d.Message()
	if err := d.Reject(t.Context(), "undecodable payload"); err != nil {
		t.Fatalf("Reject: %v", err)
	}
	d = receiveOne(t, b, q, prompt)
	if sameMessage(d.Message(), rejected) {
		t.Fatalf("rejected message %q was delivered again", rejected.Body)
	}
	ack(t, d)
	expectNone(t, b, q, s.c.Lease)
	waitCounts(t, b, q, broker.Counts{Dead: 1})
	dls, err := b.DeadLetters(t.Context(), q, 10)
	if err != nil {
		t.Fatalf("DeadLetters: %v", err)
	}
	if len(dls) != 1 || !sameMessage(dls[0].Message, rejected) || dls[0].Reason != "undecodable payload" {
		t.Fatalf("DeadLetters = %+v, want the rejected %q with reason %q", dls, rejected.Body, "undecodable payload")
	}
	if n, err := b.Requeue(t.Context(), q, 10); n != 1 || err != nil {
		t.Fatalf("Requeue = %d, %v; want 1, nil", n, err)
	}
	waitCounts(t, b, q, broker.Counts{Ready: 1})
	d = receiveOne(t, b, q, prompt)
	if !sameMessage(d.Message(), rejected) {
		t.Fatalf("after Requeue got %q, want %q", d.Message().Body, rejected.Body)
	}
	ack(t, d)
	waitCounts(t, b, q, broker.Counts{})
}

func (s *suite) testDeadLetters(t *testing.T) {
	b := s.one(t, s.setup())
	q := queue(t)
	p := s.c.Priorities[0]
	publish(t, b, q, msg("d0", p), msg("d1", p), msg("d2", p))
	ds := receive(t, b, q, 3, 3, prompt)
	var order []string
	for _, d := range ds {
		body := string(d.Message().Body)
		if err := d.Reject(t.Context(), "reason "+body); err != nil {
			t.Fatalf("Reject %q: %v", body, err)
		}
		order = append(order, body)
	}
	waitCounts(t, b, q, broker.Counts{Dead: 3})
	check := func(max int, want []string) {
		t.Helper()
		dls, err := b.DeadLetters(t.Context(), q, max)
		if err != nil {
			t.Fatalf("DeadLetters(%d): %v", max, err)
		}
		var got []string
		for _, dl := range dls {
			got = append(got, string(dl.Message.Body))
			if dl.Reason != "reason "+string(dl.Message.Body) {
				t.Errorf("dead letter %q: reason %q, want %q", dl.Message.Body, dl.Reason, "reason "+string(dl.Message.Body))
			}
			if dl.Message.Priority != p {
				t.Errorf("dead letter %q: priority %d, want %d", dl.Message.Body, dl.Message.Priority, p)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("DeadLetters(%d) = %q, want %q (oldest first)", max, got, want)
		}
	}
	check(10, order)
	check(2, order[:2])
	check(10, order) // reading removes nothing
	if n, err := b.Requeue(t.Context(), q, 2); n != 2 || err != nil {
		t.Fatalf("Requeue(2) = %d, %v; want 2, nil", n, err)
	}
	waitCounts(t, b, q, broker.Counts{Ready: 2, Dead: 1})
	check(10, order[2:])
	ds = receive(t, b, q, 2, 2, prompt)
	got := bodies(ds)
	slices.Sort(got)
	if want := slices.Sorted(slices.Values(order[:2])); !slices.Equal(got, want) {
		t.Fatalf("after Requeue(2) received %q, want %q", got, want)
	}
	ack(t, ds...)
	if n, err := b.Requeue(t.Context(), q, 5); n != 1 || err != nil {
		t.Fatalf("Requeue(5) with one dead letter = %d, %v; want 1, nil", n, err)
	}
	if n, err := b.Requeue(t.Context(), q, 5); n != 0 || err != nil {
		t.Fatalf("Requeue(5) with no dead letters = %d, %v; want 0, nil", n, err)
	}
	check(10, nil)
	d := receiveOne(t, b, q, prompt)
	if got := string(d.Message().Body); got != order[2] {
		t.Fatalf("after Requeue(5) received %q, want %q", got, order[2])
	}
	ack(t, d)
	waitCounts(t, b, q, broker.Counts{})
	if dls, err := b.DeadLetters(t.Context(), queue(t, "unknown"), 10); len(dls) != 0 || err != nil {
		t.Fatalf("DeadLetters of an unknown queue = %v, %v; want none, nil", dls, err)
	}
}

func (s *suite) maxDeliveriesNack(max int) func(t *testing.T) {
	return func(t *testing.T) {
		b := s.one(t, Setup{Order: s.order, MaxDeliveries: max})
		q := queue(t)
		publish(t, b, q, msg("poison", s.c.Priorities[0]))
		for i := 1; i <= max; i++ {
			d := receiveOne(t, b, q, prompt)
			if d.Attempt() != i {
				t.Fatalf("delivery %d: Attempt() = %d", i, d.Attempt())
			}
			if err := d.Nack(t.Context(), 0); err != nil {
				t.Fatalf("Nack of attempt %d: %v", i, err)
			}
		}
		expectNone(t, b, q, s.c.Lease)
		waitCounts(t, b, q, broker.Counts{Dead: 1})
		s.expectDeadLetter(t, b, q, "poison")
	}
}

// testReleaseUncounted checks that Release gives a message back at once
// without spending a delivery: released more often than MaxDeliveries,
// the message is still delivered, with attempt 1, and never
// dead-lettered; a Nack after that counts from there.
func (s *suite) testReleaseUncounted(t *testing.T) {
	const max = 2
	b := s.one(t, Setup{Order: s.order, MaxDeliveries: max})
	q := queue(t)
	publish(t, b, q, msg("kept", s.c.Priorities[0]))
	for i := range 2 * max {
		d := receiveOne(t, b, q, prompt)
		if d.Attempt() != 1 || string(d.Message().Body) != "kept" {
			t.Fatalf("delivery after %d releases: %q, Attempt() = %d, want \"kept\", 1", i, d.Message().Body, d.Attempt())
		}
		if err := d.Release(t.Context()); err != nil {
			t.Fatalf("Release %d: %v", i+1, err)
		}
		if err := d.Release(t.Context()); !errors.Is(err, broker.ErrSettled) {
			t.Fatalf("second Release of one delivery: %v, want ErrSettled", err)
		}
	}
	d := receiveOne(t, b, q, prompt)
	if err := d.Nack(t.Context(), 0); err != nil {
		t.Fatalf("Nack: %v", err)
	}
	if d := receiveOne(t, b, q, prompt); d.Attempt() != 2 {
		t.Fatalf("delivery after a Nack: Attempt() = %d, want 2", d.Attempt())
	}
	waitCounts(t, b, q, broker.Counts{InFlight: 1})
}

// expectDeadLetter checks that body is q's only dead letter and says why.
func (s *suite) expectDeadLetter(t *testing.T, b broker.Broker, q, body string) {
	t.Helper()
	dls, err := b.DeadLetters(t.Context(), q, 10)
	if err != nil {
		t.Fatalf("DeadLetters: %v", err)
	}
	if len(dls) != 1 || string(dls[0].Message.Body) != body {
		t.Fatalf("DeadLetters = %+v, want just %q", dls, body)
	}
	if dls[0].Reason == "" {
		t.Errorf("dead letter %q has no reason", body)
	}
}

func (s *suite) testMaxDeliveriesLease(t *testing.T) {
	b := s.one(t, Setup{Order: s.order, Lease: s.c.Lease, MaxDeliveries: 2})
	q := queue(t)
	publish(t, b, q, msg("hang", s.c.Priorities[0]))
	d1 := receiveOne(t, b, q, prompt)
	d2 := receiveOne(t, b, q, s.leaseWait())
	if d2.Attempt() != 2 {
		t.Fatalf("redelivery after an expired lease: Attempt() = %d, want 2", d2.Attempt())
	}
	expectNone(t, b, q, 3*s.c.Lease)
	waitCounts(t, b, q, broker.Counts{Dead: 1})
	wantErr(t, "Ack of the first, expired delivery", d1.Ack(t.Context()), broker.ErrLeaseLost)
	wantErr(t, "Ack of the last, expired delivery", d2.Ack(t.Context()), broker.ErrLeaseLost)
	s.expectDeadLetter(t, b, q, "hang")
}

func (s *suite) testDoubleSettle(t *testing.T) {
	b := s.one(t, s.setup())
	q := queue(t)
	p := s.c.Priorities[0]
	publish(t, b, q, msg("a", p), msg("b", p), msg("c", p), msg("d", p))
	ds := receive(t, b, q, 4, 4, prompt)
	ctx := t.Context()
	extend := func(what string, d broker.Delivery) {
		t.Helper()
		wantErr(t, what, d.Extend(ctx, time.Minute), broker.ErrSettled)
	}

	acked := ds[0]
	if err := acked.Ack(ctx); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	wantErr(t, "Ack after Ack", acked.Ack(ctx), broker.ErrSettled)
	wantErr(t, "Nack after Ack", acked.Nack(ctx, 0), broker.ErrSettled)
	wantErr(t, "Reject after Ack", acked.Reject(ctx, "x"), broker.ErrSettled)
	extend("Extend after Ack", acked)

	nacked := ds[1]
	if err := nacked.Nack(ctx, 0); err != nil {
		t.Fatalf("Nack: %v", err)
	}
	wantErr(t, "Ack after Nack", nacked.Ack(ctx), broker.ErrSettled)
	extend("Extend after Nack", nacked)

	rejected := ds[2]
	if err := rejected.Reject(ctx, "x"); err != nil {
		t.Fatalf("Reject: %v", err)
	}
	wantErr(t, "Nack after Reject", rejected.Nack(ctx, 0), broker.ErrSettled)
	wantErr(t, "Reject after Reject", rejected.Reject(ctx, "x"), broker.ErrSettled)

	delayed := ds[3]
	if err := delayed.Nack(ctx, time.Minute); err != nil {
		t.Fatalf("Nack(1m): %v", err)
	}
	wantErr(t, "Reject after Nack(1m)", delayed.Reject(ctx, "x"), broker.ErrSettled)
	wantErr(t, "Ack after Nack(1m)", delayed.Ack(ctx), broker.ErrSettled)

	// The nacked message came back once, and the second Ack above did not
	// acknowledge it.
	d := receiveOne(t, b, q, prompt)
	if !sameMessage(d.Message(), nacked.Message()) || d.Attempt() != 2 {
		t.Fatalf("got %q attempt %d, want the nacked %q attempt 2", d.Message().Body, d.Attempt(), nacked.Message().Body)
	}
	ack(t, d)
	waitCounts(t, b, q, broker.Counts{Ready: 1, Dead: 1, Delayed: 1})
	if err := b.Purge(ctx, q); err != nil {
		t.Fatalf("Purge: %v", err)
	}
}

func (s *suite) testLeaseExpiry(t *testing.T) {
	b := s.one(t, Setup{Order: s.order, Lease: s.c.Lease, MaxDeliveries: 10})
	q := queue(t)
	want := msg("lost", s.c.Priorities[0])
	publish(t, b, q, want)
	start := time.Now()
	d1 := receiveOne(t, b, q, prompt)
	d2 := receiveOne(t, b, q, s.leaseWait())
	el := time.Since(start)
	if !sameMessage(d2.Message(), want) || d2.Attempt() != 2 {
		t.Fatalf("after the lease: got %q attempt %d, want %q attempt 2", d2.Message().Body, d2.Attempt(), want.Body)
	}
	if el < s.c.Lease/2 {
		t.Errorf("an unsettled delivery came back %v after it was received, before its lease of %v ran out", el, s.c.Lease)
	}
	ctx := t.Context()
	wantErr(t, "Ack of an expired delivery", d1.Ack(ctx), broker.ErrLeaseLost)
	wantErr(t, "Nack of an expired delivery", d1.Nack(ctx, 0), broker.ErrLeaseLost)
	wantErr(t, "Reject of an expired delivery", d1.Reject(ctx, "x"), broker.ErrLeaseLost)
	wantErr(t, "Extend of an expired delivery", d1.Extend(ctx, time.Minute), broker.ErrLeaseLost)
	ack(t, d2)
	expectNone(t, b, q, s.c.Lease)
	waitCounts(t, b, q, broker.Counts{})
}

// testExtend: a delivery whose lease is extended every lease/4 stays with
// its consumer for three leases while another consumer waits for it.
//
// The broker cannot be held to that when the test itself was held up: on a
// loaded machine the goroutine that extends may not run for longer than a
// lease, and the broker then rightly gives the delivery away. So the test
// measures each window from the start of the call that last renewed the
// lease (Receive, then each Extend) to the moment the lease was found lost.
// A loss within a window shorter than the lease is the broker's fault and
// fails the test; a longer window voids the trial, which is run again with
// twice the lease (see trials).
func (s *suite) testExtend(t *testing.T) {
	s.extend(t, func(t *testing.T, b broker.Broker, q string) broker.Delivery {
		return receiveOne(t, b, q, prompt)
	})
}

// extend runs the trials of testExtend with deliveries taken by take.
func (s *suite) extend(t *testing.T, take func(t *testing.T, b broker.Broker, q string) broker.Delivery) {
	s.trials(t, "Extend", func(lease time.Duration) time.Duration {
		return s.extendTrial(t, lease, take)
	})
}

// settle acknowledges the deliveries of a void trial as well as it can: the
// queue is the trial's own, so what is left in it does no harm.
func settle(t *testing.T, ds []broker.Delivery) {
	for _, d := range ds {
		_ = d.Ack(t.Context())
	}
}

// extendTrial is one trial of testExtend with leases of lease: 0 when it
// passed, or the window longer than nine tenths of the lease in which the
// lease was lost.
func (s *suite) extendTrial(t *testing.T, lease time.Duration, take func(t *testing.T, b broker.Broker, q string) broker.Delivery) time.Duration {
	bs := s.brokers(t, Setup{Order: s.order, Lease: lease}, 2)
	b, thief := bs[0], bs[1]
	q := queue(t)
	publish(t, b, q, msg("busy", s.c.Priorities[0]))
	renewed := time.Now() // the start of the call that last renewed the lease
	d := take(t, b, q)
	start := time.Now()
	until := start.Add(3 * lease)
	ch := receiveAsync(t, thief, q, 1, time.Until(until))
	tick := time.NewTicker(lease / 4)
	defer tick.Stop()
	for time.Now().Before(until) {
		call := time.Now()
		err := d.Extend(t.Context(), lease)
		if err != nil {
			// A backend may count a lease lost up to a tenth of it early
			// (a margin for the time its renewal takes to reach the
			// server): a stall that long voids the trial.
			if w := time.Since(renewed); errors.Is(err, broker.ErrLeaseLost) && w > lease-lease/10 {
				r := await(t, ch, prompt, "another consumer")
				settle(t, r.ds)
				return w
			}
			t.Fatalf("Extend %v after receiving, %v after the last renewal: %v", time.Since(start), time.Since(renewed), err)
		}
		renewed = call
		<-tick.C
	}
	r := await(t, ch, prompt, "another consumer")
	if len(r.ds) > 0 {
		if w := r.at.Sub(renewed); w > lease {
			settle(t, r.ds)
			return w
		}
		t.Fatalf("a delivery whose lease was extended every %v went to another consumer %v after it was received, %v after the last renewal (lease %v)",
			lease/4, r.at.Sub(start), r.at.Sub(renewed), lease)
	}
	if !errors.Is(r.err, context.DeadlineExceeded) {
		t.Fatalf("another consumer's Receive: %v, want context.DeadlineExceeded", r.err)
	}
	if err := d.Ack(t.Context()); err != nil {
		if w := time.Since(renewed); errors.Is(err, broker.ErrLeaseLost) && w > lease-lease/10 { // see above
			return w
		}
		t.Fatalf("Ack %v after the last renewal: %v", time.Since(renewed), err)
	}
	waitCounts(t, b, q, broker.Counts{})
	return 0
}

func (s *suite) testClosedConsumer(t *testing.T) {
	bs := s.brokers(t, s.short(), 2)
	a, b := bs[0], bs[1]
	q := queue(t)
	p := s.c.Priorities[0]
	publish(t, b, q, msg("x1", p), msg("x2", p))
	receive(t, a, q, 2, 2, prompt)
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	ds := receive(t, b, q, 2, 2, s.leaseWait())
	got := bodies(ds)
	slices.Sort(got)
	if !slices.Equal(got, []string{"x1", "x2"}) {
		t.Fatalf("after the consumer closed, got %q, want x1 and x2", got)
	}
	for _, d := range ds {
		if d.Attempt() != 2 {
			t.Errorf("%q: Attempt() = %d after its consumer closed, want 2", d.Message().Body, d.Attempt())
		}
	}
	ack(t, ds...)
	waitCounts(t, b, q, broker.Counts{})
}

func (s *suite) testConcurrentConsumers(t *testing.T) {
	const nBrokers = 3
	bs := s.brokers(t, Setup{Order: s.order, Lease: 30 * time.Second}, nBrokers)
	q := queue(t)
	takers := make([]taker, 6)
	for c := range takers {
		b, max := bs[c%nBrokers], 1+c%5
		takers[c] = func(ctx context.Context) ([]broker.Delivery, error) { return b.Receive(ctx, q, max) }
	}
	s.shareQueue(t, bs, q, "Receive", takers)
}

// taker takes deliveries from a queue: Receive, or a consumer's Next.
type taker func(ctx context.Context) ([]broker.Delivery, error)

// shareQueue has two of bs publish 200 messages to q, of every priority,
// while takers, each in its goroutine, take them (what names how:
// "Receive", "Next") and ack them, and checks that each message is taken
// once, at attempt 1, and that the takers return once their context ends.
func (s *suite) shareQueue(t *testing.T, bs []broker.Broker, q, what string, takers []taker) {
	t.Helper()
	const n = 200
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// The publishers' own context: the takers' ends once they took all n,
	// which may be before the last Publish has its confirmations.
	pctx, pcancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer pcancel()
	var (
		mu    sync.Mutex
		got   = map[string]int{}
		total atomic.Int64
		wg    sync.WaitGroup
	)
	for p := range 2 {
		wg.Go(func() {
			for i := 0; i < n/2; {
				k := min(1+i%7, n/2-i)
				msgs := make([]broker.Message, k)
				for j := range msgs {
					msgs[j] = msg(fmt.Sprintf("p%d-%03d", p, i+j), s.c.Priorities[(i+j)%len(s.c.Priorities)])
				}
				if err := bs[p].Publish(pctx, q, msgs...); err != nil {
					t.Errorf("publisher %d: Publish: %v", p, err)
					return
				}
				i += k
			}
		})
	}
	for c, take := range takers {
		wg.Go(func() {
			for ctx.Err() == nil {
				ds, err := take(ctx)
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("taker %d: %s: %v", c, what, err)
					}
					return
				}
				for _, d := range ds {
					mu.Lock()
					got[string(d.Message().Body)]++
					mu.Unlock()
					if d.Attempt() != 1 {
						t.Errorf("taker %d: %q has Attempt() = %d, want 1 (nothing was nacked or expired)", c, d.Message().Body, d.Attempt())
					}
					if err := d.Ack(t.Context()); err != nil {
						t.Errorf("taker %d: Ack %q: %v", c, d.Message().Body, err)
					}
					if total.Add(1) == n {
						cancel()
					}
				}
			}
		})
	}
	finished := make(chan struct{})
	go func() {
		wg.Wait()
		close(finished)
	}()
	select {
	case <-finished:
	case <-time.After(time.Until(deadlineOf(ctx)) + snappy):
		t.Fatalf("takers still in %s %v after their context ended", what, snappy)
	}
	var missing, dup []string
	for p := range 2 {
		for i := range n / 2 {
			body := fmt.Sprintf("p%d-%03d", p, i)
			switch got[body] {
			case 0:
				missing = append(missing, body)
			case 1:
			default:
				dup = append(dup, fmt.Sprintf("%s×%d", body, got[body]))
			}
		}
	}
	if len(missing) > 0 || len(dup) > 0 || len(got) != n {
		t.Fatalf("%d takers (%s) on %d brokers: %d distinct of %d messages; missing %q; taken more than once while leased %q",
			len(takers), what, len(bs), len(got), n, missing, dup)
	}
	waitCounts(t, bs[0], q, broker.Counts{})
}

func (s *suite) testReceiveWakes(t *testing.T) {
	bs := s.brokers(t, s.setup(), 2)
	waiter, other := bs[0], bs[1]
	q := queue(t)
	p := s.c.Priorities[0]

	ch := receiveAsync(t, waiter, q, 5, wakeWait)
	expectWaiting(t, ch, "Receive")
	sent := time.Now()
	publish(t, other, q, msg("wake", p))
	r := await(t, ch, wakeWait, "woken by Publish")
	if r.err != nil || len(r.ds) != 1 || string(r.ds[0].Message().Body) != "wake" {
		t.Fatalf("waiting Receive after a Publish by another broker: %q, %v; want wake", bodies(r.ds), r.err)
	}
	if lag := r.at.Sub(sent); lag > wakeLag {
		t.Errorf("a waiting Receive took %v to see a Publish by another broker", lag)
	}
	ack(t, r.ds...)

	publish(t, other, q, msg("again", p))
	d := receiveOne(t, other, q, prompt)
	ch = receiveAsync(t, waiter, q, 5, wakeWait)
	expectWaiting(t, ch, "Receive")
	sent = time.Now()
	if err := d.Nack(t.Context(), 0); err != nil {
		t.Fatalf("Nack: %v", err)
	}
	r = await(t, ch, wakeWait, "woken by Nack")
	if r.err != nil || len(r.ds) != 1 || string(r.ds[0].Message().Body) != "again" || r.ds[0].Attempt() != 2 {
		t.Fatalf("waiting Receive after a Nack by another broker: %q attempts %v, %v; want again attempt 2", bodies(r.ds), attempts(r.ds), r.err)
	}
	if lag := r.at.Sub(sent); lag > wakeLag {
		t.Errorf("a waiting Receive took %v to see a Nack by another broker", lag)
	}
	ack(t, r.ds...)

	publish(t, other, q, msg("dead", p))
	d = receiveOne(t, other, q, prompt)
	if err := d.Reject(t.Context(), "x"); err != nil {
		t.Fatalf("Reject: %v", err)
	}
	waitCounts(t, other, q, broker.Counts{Dead: 1})
	ch = receiveAsync(t, waiter, q, 5, wakeWait)
	expectWaiting(t, ch, "Receive")
	sent = time.Now()
	if n, err := other.Requeue(t.Context(), q, 1); n != 1 || err != nil {
		t.Fatalf("Requeue = %d, %v; want 1, nil", n, err)
	}
	r = await(t, ch, wakeWait, "woken by Requeue")
	if r.err != nil || len(r.ds) != 1 || string(r.ds[0].Message().Body) != "dead" {
		t.Fatalf("waiting Receive after a Requeue by another broker: %q, %v; want dead", bodies(r.ds), r.err)
	}
	if lag := r.at.Sub(sent); lag > wakeLag {
		t.Errorf("a waiting Receive took %v to see a Requeue by another broker", lag)
	}
	ack(t, r.ds...)
}

func (s *suite) testContextCancel(t *testing.T) {
	b := s.one(t, s.setup())
	q := queue(t)
	const after = 200 * time.Millisecond

	ctx, cancel := context.WithTimeout(t.Context(), after)
	start := time.Now()
	_, err := recv(t, ctx, b, q, 1)
	el := time.Since(start)
	cancel()
	wantErr(t, "Receive past its deadline", err, context.DeadlineExceeded)
	if el > after+snappy {
		t.Errorf("Receive returned %v after it began, its deadline was %v", el, after)
	}

	ctx, cancel = context.WithCancel(t.Context())
	timer := time.AfterFunc(after, cancel)
	start = time.Now()
	_, err = recv(t, ctx, b, q, 1)
	el = time.Since(start)
	timer.Stop()
	cancel()
	wantErr(t, "Receive cancelled while waiting", err, context.Canceled)
	if el > after+snappy {
		t.Errorf("Receive returned %v after it began, it was cancelled after %v", el, after)
	}

	ctx, cancel = context.WithCancel(t.Context())
	cancel()
	_, err = recv(t, ctx, b, q, 1)
	wantErr(t, "Receive with a cancelled context", err, context.Canceled)

	// Nothing was leased by the cancelled calls.
	publish(t, b, q, msg("after", s.c.Priorities[0]))
	d := receiveOne(t, b, q, prompt)
	if d.Attempt() != 1 {
		t.Errorf("first delivery after cancelled Receives: Attempt() = %d, want 1", d.Attempt())
	}
	ack(t, d)
}

// testCancelLosesNothing races the cancellation of a waiting Receive with
// a Publish: whatever the Receive did not return must still be there at
// once, not after a lease.
func (s *suite) testCancelLosesNothing(t *testing.T) {
	const rounds = 20
	bs := s.brokers(t, s.setup(), 2)
	cons, pub := bs[0], bs[1]
	q := queue(t)
	p := s.c.Priorities[0]
	got := map[string]int{}
	count := func(ds []broker.Delivery) {
		for _, d := range ds {
			got[string(d.Message().Body)]++
		}
		ack(t, ds...)
	}
	for i := range rounds {
		ctx, cancel := context.WithCancel(t.Context())
		ch := make(chan result, 1)
		go func() {
			ds, err := cons.Receive(ctx, q, 1)
			ch <- result{ds: ds, err: err}
		}()
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
		r := await(t, ch, prompt, "cancelled")
		if r.err != nil && !errors.Is(r.err, context.Canceled) {
			t.Fatalf("cancelled Receive: %v, want context.Canceled", r.err)
		}
		if r.err == nil && len(r.ds) == 0 {
			t.Fatalf("Receive returned no deliveries and no error")
		}
		count(r.ds)
	}
	received := 0
	for _, c := range got {
		received += c
	}
	count(receive(t, cons, q, rounds-received, rounds, prompt))
	for i := range rounds {
		if body := fmt.Sprintf("m%02d", i); got[body] != 1 {
			t.Errorf("%s received %d times, want once", body, got[body])
		}
	}
	expectNone(t, cons, q, s.c.Lease)
}

func (s *suite) testClosed(t *testing.T) {
	bs := s.brokers(t, s.short(), 2)
	b, other := bs[0], bs[1]
	q, empty := queue(t), queue(t, "empty")
	p := s.c.Priorities[0]
	publish(t, b, q, msg("m1", p), msg("m2", p), msg("m3", p))
	ds := receive(t, b, q, 3, 3, prompt)

	ch := receiveAsync(t, b, empty, 1, 10*time.Second)
	expectWaiting(t, ch, "Receive")
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	r := await(t, ch, snappy, "Close")
	wantErr(t, "Receive waiting when Close was called", r.err, broker.ErrClosed)
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v, want nil", err)
	}

	ctx := t.Context()
	wantErr(t, "Publish on a closed broker", b.Publish(ctx, q, msg("late", p)), broker.ErrClosed)
	rctx, cancel := context.WithTimeout(ctx, prompt)
	got, err := bounded(t, rctx, b, q, 1)
	cancel()
	if len(got) > 0 {
		t.Errorf("Receive on a closed broker delivered %q", bodies(got))
	}
	wantErr(t, "Receive on a closed broker", err, broker.ErrClosed)
	wantErr(t, "Ack on a closed broker", ds[0].Ack(ctx), broker.ErrClosed)
	wantErr(t, "Nack on a closed broker", ds[1].Nack(ctx, 0), broker.ErrClosed)
	wantErr(t, "Reject on a closed broker", ds[2].Reject(ctx, "x"), broker.ErrClosed)
	wantErr(t, "Extend on a closed broker", ds[0].Extend(ctx, time.Minute), broker.ErrClosed)
	_, err = b.Counts(ctx, q)
	wantErr(t, "Counts on a closed broker", err, broker.ErrClosed)
	wantErr(t, "Purge on a closed broker", b.Purge(ctx, q), broker.ErrClosed)
	_, err = b.DeadLetters(ctx, q, 1)
	wantErr(t, "DeadLetters on a closed broker", err, broker.ErrClosed)
	_, err = b.Requeue(ctx, q, 1)
	wantErr(t, "Requeue on a closed broker", err, broker.ErrClosed)

	// Closing b closed nothing else: the other broker works, and gets b's
	// unsettled messages back (at once, or when their leases run out).
	publish(t, other, q, msg("m4", p))
	all := receive(t, other, q, 4, 4, s.leaseWait())
	gotBodies := bodies(all)
	slices.Sort(gotBodies)
	if want := []string{"m1", "m2", "m3", "m4"}; !slices.Equal(gotBodies, want) {
		t.Fatalf("other broker received %q, want %q", gotBodies, want)
	}
	ack(t, all...)
	waitCounts(t, other, q, broker.Counts{})
}

func (s *suite) testInvalid(t *testing.T) {
	b := s.one(t, s.setup())
	q := queue(t)
	p := s.c.Priorities[0]
	ctx, cancel := context.WithTimeout(t.Context(), prompt)
	defer cancel()
	wantErr(t, `Publish("")`, b.Publish(ctx, "", msg("x", p)), broker.ErrInvalid)
	_, err := bounded(t, ctx, b, "", 1)
	wantErr(t, `Receive("", 1)`, err, broker.ErrInvalid)
	publish(t, b, q, msg("kept", p)) // so that a bad max cannot wait
	for _, max := range []int{0, -1} {
		ds, err := bounded(t, ctx, b, q, max)
		wantErr(t, fmt.Sprintf("Receive(q, %d)", max), err, broker.ErrInvalid)
		if len(ds) > 0 {
			t.Fatalf("Receive(q, %d) delivered %q", max, bodies(ds))
		}
	}
	_, err = b.Counts(ctx, "")
	wantErr(t, `Counts("")`, err, broker.ErrInvalid)
	wantErr(t, `Purge("")`, b.Purge(ctx, ""), broker.ErrInvalid)
	_, err = b.DeadLetters(ctx, "", 1)
	wantErr(t, `DeadLetters("", 1)`, err, broker.ErrInvalid)
	_, err = b.DeadLetters(ctx, q, 0)
	wantErr(t, `DeadLetters(q, 0)`, err, broker.ErrInvalid)
	_, err = b.Requeue(ctx, "", 1)
	wantErr(t, `Requeue("", 1)`, err, broker.ErrInvalid)
	_, err = b.Requeue(ctx, q, 0)
	wantErr(t, `Requeue(q, 0)`, err, broker.ErrInvalid)
	d := receiveOne(t, b, q, prompt)
	if string(d.Message().Body) != "kept" || d.Attempt() != 1 {
		t.Fatalf("after invalid calls got %q attempt %d, want kept attempt 1", d.Message().Body, d.Attempt())
	}
	ack(t, d)
}

func (s *suite) testCounts(t *testing.T) {
	b := s.one(t, s.setup())
	q := queue(t)
	if got, err := b.Counts(t.Context(), queue(t, "unknown")); got != (broker.Counts{}) || err != nil {
		t.Fatalf("Counts of an unknown queue = %+v, %v; want zero, nil", got, err)
	}
	p := s.c.Priorities[0]
	publish(t, b, q, msg("c1", p), msg("c2", p), msg("c3", p))
	waitCounts(t, b, q, broker.Counts{Ready: 3})
	ds := receive(t, b, q, 2, 2, prompt)
	waitCounts(t, b, q, broker.Counts{Ready: 1, InFlight: 2})
	ack(t, ds[0])
	waitCounts(t, b, q, broker.Counts{Ready: 1, InFlight: 1})
	if err := ds[1].Nack(t.Context(), 0); err != nil {
		t.Fatalf("Nack: %v", err)
	}
	waitCounts(t, b, q, broker.Counts{Ready: 2})
	ds = receive(t, b, q, 2, 2, prompt)
	waitCounts(t, b, q, broker.Counts{InFlight: 2})
	if err := ds[0].Reject(t.Context(), "x"); err != nil {
		t.Fatalf("Reject: %v", err)
	}
	waitCounts(t, b, q, broker.Counts{InFlight: 1, Dead: 1})
	if err := ds[1].Nack(t.Context(), time.Minute); err != nil {
		t.Fatalf("Nack(1m): %v", err)
	}
	waitCounts(t, b, q, broker.Counts{Ready: 1, Dead: 1, Delayed: 1}) // delayed counts as ready, and as delayed
	if err := b.Purge(t.Context(), q); err != nil {
		t.Fatalf("Purge: %v", err)
	}
	waitCounts(t, b, q, broker.Counts{})
}

// keepLeased extends the leases of ds by lease, every lease/4, until the
// returned stop is called.
func keepLeased(t *testing.T, lease time.Duration, ds ...broker.Delivery) (stop func()) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(lease / 4)
		defer tick.Stop()
		for {
			for _, d := range ds {
				if err := d.Extend(ctx, lease); err != nil && ctx.Err() == nil {
					t.Errorf("Extend: %v", err)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop) // a test that fails before stop still ends the goroutine
	return stop
}

func (s *suite) testPurge(t *testing.T) {
	b := s.one(t, s.short())
	q := queue(t)
	p := s.c.Priorities[0]
	publish(t, b, q, msg("p0", p), msg("p1", p), msg("p2", p), msg("p3", p), msg("p4", p))
	ds := receive(t, b, q, 4, 4, prompt)
	if err := ds[2].Reject(t.Context(), "x"); err != nil {
		t.Fatalf("Reject: %v", err)
	}
	if err := ds[3].Nack(t.Context(), time.Minute); err != nil {
		t.Fatalf("Nack(1m): %v", err)
	}
	// Ready: one, plus one delayed; in flight: ds[0], ds[1]; dead: one.
	// ds[0] and ds[1] stay in flight however long the counts take to show
	// them (a management API's statistics lag; a lease is short here);
	// their leases run out again from the purge on.
	keep := keepLeased(t, s.c.Lease, ds[0], ds[1])
	waitCounts(t, b, q, broker.Counts{Ready: 2, InFlight: 2, Dead: 1, Delayed: 1})
	keep()
	if err := b.Purge(t.Context(), q); err != nil {
		t.Fatalf("Purge: %v", err)
	}
	waitCounts(t, b, q, broker.Counts{})
	if err := ds[0].Ack(t.Context()); err != nil && !errors.Is(err, broker.ErrLeaseLost) {
		t.Errorf("Ack of a purged in-flight message: %v, want nil or ErrLeaseLost", err)
	}
	// ds[1] stays unsettled: it must not come back when its lease runs out.
	expectNone(t, b, q, 3*s.c.Lease)
	waitCounts(t, b, q, broker.Counts{})
	if dls, err := b.DeadLetters(t.Context(), q, 10); len(dls) != 0 || err != nil {
		t.Fatalf("DeadLetters after Purge = %+v, %v; want none", dls, err)
	}
	publish(t, b, q, msg("fresh", p))
	d := receiveOne(t, b, q, prompt)
	if string(d.Message().Body) != "fresh" || d.Attempt() != 1 {
		t.Fatalf("after Purge got %q attempt %d, want fresh attempt 1", d.Message().Body, d.Attempt())
	}
	ack(t, d)
	if err := b.Purge(t.Context(), queue(t, "unknown")); err != nil {
		t.Fatalf("Purge of an unknown queue: %v", err)
	}
}

func (s *suite) testIndependentQueues(t *testing.T) {
	b := s.one(t, s.setup())
	qa := queue(t, "a.example.com")
	qb := qa + "2"
	p := s.c.Priorities[0]
	publish(t, b, qa, msg("a0", p))
	publish(t, b, qb, msg("b0", p))
	publish(t, b, qa, msg("a1", p), msg("a2", p))
	publish(t, b, qb, msg("b1", p))
	waitCounts(t, b, qa, broker.Counts{Ready: 3})
	waitCounts(t, b, qb, broker.Counts{Ready: 2})
	as := receive(t, b, qa, 3, 3, prompt)
	for _, d := range as {
		if !strings.HasPrefix(string(d.Message().Body), "a") {
			t.Fatalf("queue %q delivered %q", qa, d.Message().Body)
		}
	}
	if err := as[0].Reject(t.Context(), "x"); err != nil {
		t.Fatalf("Reject: %v", err)
	}
	ack(t, as[1:]...)
	expectNone(t, b, qa, s.c.Lease)
	bs := receive(t, b, qb, 2, 2, prompt)
	if got := slices.Sorted(slices.Values(bodies(bs))); !slices.Equal(got, []string{"b0", "b1"}) {
		t.Fatalf("queue %q delivered %q, want b0 and b1", qb, got)
	}
	waitCounts(t, b, qa, broker.Counts{Dead: 1})
	waitCounts(t, b, qb, broker.Counts{InFlight: 2})
	if dls, err := b.DeadLetters(t.Context(), qb, 10); len(dls) != 0 || err != nil {
		t.Fatalf("DeadLetters(%q) = %+v, %v; the dead letter was %q's", qb, dls, err, qa)
	}
	if err := b.Purge(t.Context(), qa); err != nil {
		t.Fatalf("Purge: %v", err)
	}
	waitCounts(t, b, qa, broker.Counts{})
	waitCounts(t, b, qb, broker.Counts{InFlight: 2})
	ack(t, bs...)
	waitCounts(t, b, qb, broker.Counts{})
}

func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}
