package brokertest

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker"
)

// Setup is what a subtest asks of the backend.
type Setup struct {
	Order         broker.Order  // queue order mode
	Lease         time.Duration // lease / ack timeout; 0 = backend default
	MaxDeliveries int           // attempts before dead-letter; 0 = backend default
}

// Config describes the backend under test.
type Config struct {
	// New returns a broker connected to the backend. Brokers returned by New
	// within the same test (same t) share one backend and see the same
	// queues, like workers of one crawl; New registers their cleanup with
	// t.Cleanup. Within one test every call gets the same Setup. Queue names
	// are chosen by the suite, unique per subtest, so backends may share one
	// server across subtests; they are made of lower-case letters, digits,
	// '-', '.' and ':'. New is called from parallel subtests.
	New func(t *testing.T, s Setup) broker.Broker
	// Orders lists the order modes the backend supports; nil means all three.
	Orders []broker.Order
	// Priorities lists distinct priority values the backend orders exactly
	// (a banded backend lists one value per band); nil means {-5, 0, 1, 2, 10}.
	Priorities []int
	// Lease is the shortest lease the backend supports, used by redelivery
	// tests; 0 = 500ms.
	Lease time.Duration
	// Restartable, if not nil, returns a server of t's own that the suite
	// may restart, to check that a consumer open across a restart delivers
	// again without being reopened. A server shared with other subtests
	// cannot be restarted under them, hence a server per call. Nil skips
	// that test (it says so).
	Restartable func(t *testing.T) Server
}

// Server is a backend server of one test's own (see Config.Restartable).
type Server struct {
	// New is Config.New on this server.
	New func(t *testing.T, s Setup) broker.Broker
	// Restart stops the server and starts it again at the same address,
	// returning once it serves; queues and messages survive as they survive
	// a graceful restart of the backend. It fails t if it cannot.
	Restart func(t *testing.T)
}

// Run runs the conformance suite against the backend c describes.
func Run(t *testing.T, c Config) {
	t.Helper()
	if c.New == nil {
		t.Fatal("brokertest: Config.New is nil")
	}
	if c.Orders == nil {
		c.Orders = []broker.Order{broker.Priority, broker.FIFO, broker.LIFO}
	}
	if c.Priorities == nil {
		c.Priorities = []int{-5, 0, 1, 2, 10}
	}
	if c.Lease == 0 {
		c.Lease = 500 * time.Millisecond
	}
	if c.Lease < 0 {
		t.Fatalf("brokertest: negative Config.Lease %v", c.Lease)
	}
	if len(c.Priorities) == 0 {
		t.Fatal("brokertest: Config.Priorities is empty")
	}
	seen := map[int]bool{}
	for _, p := range c.Priorities {
		if seen[p] {
			t.Fatalf("brokertest: Config.Priorities lists %d twice", p)
		}
		seen[p] = true
	}
	for _, o := range c.Orders {
		s := &suite{c: c, order: o}
		t.Run(o.String(), func(t *testing.T) {
			t.Parallel()
			for _, tc := range s.tests() {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.fn(t)
				})
			}
		})
	}
}

// Bounds on waiting. Nothing sleeps for these: they only bound waits that
// end as soon as the awaited thing happens.
const (
	prompt = 5 * time.Second // for what is due at once
	snappy = 2 * time.Second // how late a call may return after its context ended

	// A call that waits on an empty queue and must be woken by another
	// broker's Publish, Nack or Requeue waits up to wakeWait, and fails
	// if it took more than wakeLag to return: far less than wakeWait, so
	// a call that slept through the wake-up and ran out its wait fails,
	// while a loaded machine (CI running the race detector beside
	// containers: one NATS wake-up took 2.8 s) does not.
	wakeWait = 60 * time.Second
	wakeLag  = 10 * time.Second
)

// suite is the suite for one order mode.
type suite struct {
	c     Config
	order broker.Order
}

type test struct {
	name string
	fn   func(t *testing.T)
}

// leaseWait bounds the wait for a redelivery after a lease of s.c.Lease.
func (s *suite) leaseWait() time.Duration { return 4*s.c.Lease + prompt }

// setup is the default Setup of a subtest: the suite's order, backend
// defaults otherwise.
func (s *suite) setup() Setup { return Setup{Order: s.order} }

// short is the setup with the shortest lease.
func (s *suite) short() Setup { return Setup{Order: s.order, Lease: s.c.Lease} }

// brokers returns n brokers of one backend.
func (s *suite) brokers(t *testing.T, st Setup, n int) []broker.Broker {
	t.Helper()
	bs := make([]broker.Broker, n)
	for i := range bs {
		bs[i] = s.c.New(t, st)
		if bs[i] == nil {
			t.Fatal("Config.New returned nil")
		}
	}
	return bs
}

func (s *suite) one(t *testing.T, st Setup) broker.Broker {
	t.Helper()
	return s.brokers(t, st, 1)[0]
}

// queue returns a fresh queue name for t: bt-<random>-<test>[-suffix]:q.
func queue(t *testing.T, suffix ...string) string {
	name := t.Name()
	if i := strings.IndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	var sb strings.Builder
	dash := false
	for _, r := range strings.ToLower(name) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			sb.WriteRune(r)
			dash = false
		} else if !dash {
			sb.WriteByte('-')
			dash = true
		}
	}
	n := strings.Trim(sb.String(), "-")
	if len(n) > 48 {
		n = n[:48]
	}
	q := fmt.Sprintf("bt-%08x-%s", rand.Uint32(), n)
	for _, s := range suffix {
		q += "-" + s
	}
	return q + ":q"
}

func msg(body string, prio int) broker.Message {
	return broker.Message{Body: []byte(body), Priority: prio}
}

func publish(t *testing.T, b broker.Broker, q string, msgs ...broker.Message) {
	t.Helper()
	if err := b.Publish(t.Context(), q, msgs...); err != nil {
		t.Fatalf("Publish(%q, %d messages): %v", q, len(msgs), err)
	}
}

// recv calls Receive and checks what every Receive promises: up to max
// deliveries, at least one unless there is an error, of queue q, with
// attempts from 1.
func recv(t *testing.T, ctx context.Context, b broker.Broker, q string, max int) ([]broker.Delivery, error) {
	t.Helper()
	ds, err := bounded(t, ctx, b, q, max)
	if err != nil {
		if len(ds) != 0 {
			t.Errorf("Receive(%q) returned %d deliveries with error %v", q, len(ds), err)
		}
		return nil, err
	}
	if len(ds) == 0 {
		t.Errorf("Receive(%q, %d) returned no deliveries and no error", q, max)
	}
	if len(ds) > max {
		t.Errorf("Receive(%q, %d) returned %d deliveries, more than max", q, max, len(ds))
	}
	for _, d := range ds {
		if d.Queue() != q {
			t.Errorf("delivery %q: Queue() = %q, want %q", d.Message().Body, d.Queue(), q)
		}
		if d.Attempt() < 1 {
			t.Errorf("delivery %q: Attempt() = %d, want >= 1", d.Message().Body, d.Attempt())
		}
	}
	return ds, nil
}

// bounded calls Receive and fails the test if Receive does not return
// within snappy of ctx's end, instead of hanging it.
func bounded(t *testing.T, ctx context.Context, b broker.Broker, q string, max int) ([]broker.Delivery, error) {
	t.Helper()
	type res struct {
		ds  []broker.Delivery
		err error
	}
	ch := make(chan res, 1)
	go func() {
		ds, err := b.Receive(ctx, q, max)
		ch <- res{ds, err}
	}()
	select {
	case r := <-ch:
		return r.ds, r.err
	case <-ctx.Done():
	}
	select {
	case r := <-ch:
		return r.ds, r.err
	case <-time.After(snappy):
		t.Fatalf("Receive(%q) still running %v after its context ended (%v)", q, snappy, context.Cause(ctx))
		return nil, nil
	}
}

// receive collects exactly n deliveries of q, asking for at most max at a
// time, each Receive within wait: the bound is on each message being due,
// not on the pace of n calls in a row, which a loaded machine slows (20
// one-message Receives on three NATS partitions, each dearer with more
// messages in flight, took over 5 s together at load 10-24).
func receive(t *testing.T, b broker.Broker, q string, n, max int, wait time.Duration) []broker.Delivery {
	t.Helper()
	var out []broker.Delivery
	for len(out) < n {
		ctx, cancel := context.WithTimeout(t.Context(), wait)
		ds, err := recv(t, ctx, b, q, min(max, n-len(out)))
		cancel()
		if err != nil {
			t.Fatalf("Receive(%q): got %d of %d messages, then none within %v: %v", q, len(out), n, wait, err)
		}
		out = append(out, ds...)
	}
	return out
}

func receiveOne(t *testing.T, b broker.Broker, q string, wait time.Duration) broker.Delivery {
	t.Helper()
	return receive(t, b, q, 1, 1, wait)[0]
}

// expectNone checks that q delivers nothing for window.
func expectNone(t *testing.T, b broker.Broker, q string, window time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), window)
	defer cancel()
	ds, err := bounded(t, ctx, b, q, 100)
	if len(ds) > 0 {
		t.Fatalf("Receive(%q) delivered %q (attempts %v), want nothing for %v", q, bodies(ds), attempts(ds), window)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Receive(%q) on a queue with nothing visible: err = %v, want context.DeadlineExceeded", q, err)
	}
}

func bodies(ds []broker.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = string(d.Message().Body)
	}
	return out
}

func attempts(ds []broker.Delivery) []int {
	out := make([]int, len(ds))
	for i, d := range ds {
		out[i] = d.Attempt()
	}
	return out
}

func ack(t *testing.T, ds ...broker.Delivery) {
	t.Helper()
	for _, d := range ds {
		if err := d.Ack(t.Context()); err != nil {
			t.Fatalf("Ack %q (attempt %d): %v", d.Message().Body, d.Attempt(), err)
		}
	}
}

func sameMessage(a, b broker.Message) bool {
	return bytes.Equal(a.Body, b.Body) && a.Priority == b.Priority
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: err = %v, want %v", what, err, want)
	}
}

// waitCounts waits until b counts q as want. Counts may lag (a server's
// statistics), so it polls, within prompt.
func waitCounts(t *testing.T, b broker.Broker, q string, want broker.Counts) {
	t.Helper()
	deadline := time.Now().Add(prompt)
	for {
		got, err := b.Counts(t.Context(), q)
		if err != nil {
			t.Fatalf("Counts(%q): %v", q, err)
		}
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Counts(%q) = %+v, want %+v", q, got, want)
		}
		poll(t, 10*time.Millisecond)
	}
}

// poll pauses between two looks at an observable condition.
func poll(t *testing.T, d time.Duration) {
	select {
	case <-time.After(d):
	case <-t.Context().Done():
	}
}

// expectOrder is the order in which s's mode delivers msgs published in
// that order into an empty queue.
func (s *suite) expectOrder(msgs []broker.Message) []broker.Message {
	out := slices.Clone(msgs)
	switch s.order {
	case broker.Priority:
		slices.SortStableFunc(out, func(a, b broker.Message) int { return cmp.Compare(b.Priority, a.Priority) })
	case broker.LIFO:
		slices.Reverse(out)
	}
	return out
}

func (s *suite) tests() []test {
	ts := []test{
		{"RoundTrip", s.testRoundTrip},
		{"BodiesAreCopied", s.testBodiesAreCopied},
		{"ReceiveMax", s.testReceiveMax},
		{"Order/OneCall", s.orderTest(0, 1000)},
		{"Order/OneCallPerMessage", s.orderTest(1, 1)},
		{"Order/Chunks", s.orderTest(3, 4)},
		{"Order/InterleavedWithReceive", s.testOrderInterleaved},
		{"AckRemoves", s.testAckRemoves},
		{"AckBatch", s.testAckBatch},
		{"ExtendBatch", s.testExtendBatch},
		{"NackRequeues", s.testNackRequeues},
		{"NackDelay", s.testNackDelay},
		{"Reject", s.testReject},
		{"ReleaseUncounted", s.testReleaseUncounted},
		{"DeadLetters", s.testDeadLetters},
		{"MaxDeliveries/Nack1", s.maxDeliveriesNack(1)},
		{"MaxDeliveries/Nack3", s.maxDeliveriesNack(3)},
		{"MaxDeliveries/Lease", s.testMaxDeliveriesLease},
		{"DoubleSettle", s.testDoubleSettle},
		{"LeaseExpiry", s.testLeaseExpiry},
		{"Extend", s.testExtend},
		{"ClosedConsumer", s.testClosedConsumer},
		{"ConcurrentConsumers", s.testConcurrentConsumers},
		{"ReceiveWakes", s.testReceiveWakes},
		{"ContextCancel", s.testContextCancel},
		{"CancelLosesNothing", s.testCancelLosesNothing},
		{"Closed", s.testClosed},
		{"Invalid", s.testInvalid},
		{"Counts", s.testCounts},
		{"Purge", s.testPurge},
		{"IndependentQueues", s.testIndependentQueues},
		{"Metadata", s.testMetadata},
		{"Presence", s.testPresence},
	}
	ts = append(ts, s.consumerTests()...)
	ts = append(ts, s.partitionTests()...)
	if s.order == broker.Priority {
		ts = append(ts, test{"NackKeepsPriority", s.testNackKeepsPriority})
	}
	return ts
}
