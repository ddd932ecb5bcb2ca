package brokertest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker"
)

// partitionTests are the promises of a broker.Partitioned with two
// partitions or more: messages go to their key's partition and come out
// of it, and Receive and a consumer take from every partition, so that a
// backlog in one starves no other. A backend of one partition skips them
// (it says so).
func (s *suite) partitionTests() []test {
	return []test{
		{"Partitions/Spread", s.testPartitionsSpread},
		{"Partitions/FairConsumer", s.fair(consumerTaker)},
		{"Partitions/FairReceive", s.fair(receiveTaker)},
		{"Partitions/Prefer", s.testPrefer},
		{"Partitions/PreferNone", s.testPreferNone},
	}
}

// partitioned returns a broker of t and its partition count, or skips t if
// the backend has fewer than two partitions.
func (s *suite) partitioned(t *testing.T) (broker.Broker, int) {
	t.Helper()
	b := s.one(t, s.setup())
	p, ok := b.(broker.Partitioned)
	if !ok || p.Partitions() < 2 {
		t.Skip("the broker has one partition (not a broker.Partitioned with Partitions() >= 2)")
	}
	return b, p.Partitions()
}

// KeyIn returns a message key ("host<i>.example") of partition p among n
// (see broker.PartitionOf).
func KeyIn(t testing.TB, p, n int) string {
	t.Helper()
	for i := range 10_000 {
		if k := fmt.Sprintf("host%d.example", i); broker.PartitionOf(k, n) == p {
			return k
		}
	}
	t.Fatalf("brokertest: no key of partition %d of %d", p, n)
	return ""
}

// Keyed returns n messages keyed by hosts host names in turn
// ("host<i mod hosts>.example"), each with the body "<key>/<i>".
func Keyed(n, hosts int) []broker.Message {
	msgs := make([]broker.Message, n)
	for i := range msgs {
		key := fmt.Sprintf("host%d.example", i%hosts)
		msgs[i] = broker.Message{Body: fmt.Appendf(nil, "%s/%d", key, i), Key: key}
	}
	return msgs
}

// DrainWithFault takes every one of msgs, which the caller published to q,
// through a consumer of b with a read-ahead of 16, acknowledging each, and
// calls fault once (a server stopped, a leader moved) when a third of them
// have come. Errors of Next and Ack while the fault lasts are retried (an
// Ack lost with a server delivers its message again). It fails t if a
// message has not come when ctx ends, and returns how many came twice or
// more (and how often beyond once).
func DrainWithFault(t *testing.T, ctx context.Context, b broker.Broker, q string, msgs []broker.Message, fault func()) (dups int) {
	t.Helper()
	want := map[string]bool{}
	for _, m := range msgs {
		want[string(m.Body)] = true
	}
	c, err := b.Consume(ctx, q, 16)
	if err != nil {
		t.Fatalf("Consume(%q, 16): %v", q, err)
	}
	defer c.Close()
	seen := map[string]int{}
	faulted := false
	for len(seen) < len(want) {
		d, err := c.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				t.Fatalf("%d of %d delivered: %v", len(seen), len(want), err)
			}
			continue // a connection error while a server is away
		}
		body := string(d.Message().Body)
		if !want[body] {
			t.Errorf("delivered %q, which was not published", body)
		}
		seen[body]++
		if err := d.Ack(ctx); err != nil {
			t.Logf("ack: %v (delivered again later)", err)
		}
		if !faulted && len(seen) >= len(want)/3 {
			faulted = true
			fault()
		}
	}
	for _, n := range seen {
		dups += n - 1
	}
	t.Logf("%d messages delivered, %d more than once", len(seen), dups)
	return dups
}

// testPartitionsSpread: keyed messages go to their key's partition (where
// the broker counts each, broker.PartitionCounter), the counts add up,
// and Receive takes every message once, with the queue it was asked of.
func (s *suite) testPartitionsSpread(t *testing.T) {
	b, n := s.partitioned(t)
	q := queue(t)
	msgs := Keyed(20*n, 4*n)
	publish(t, b, q, msgs...)
	want := make([]int64, n)
	for _, m := range msgs {
		want[broker.PartitionOf(m.Key, n)]++
	}
	if pc, ok := b.(broker.PartitionCounter); ok {
		parts, err := pc.PartitionCounts(t.Context(), q)
		if err != nil {
			t.Fatalf("PartitionCounts: %v", err)
		}
		if len(parts) != n {
			t.Fatalf("PartitionCounts: %d partitions, want %d", len(parts), n)
		}
		for p := range parts {
			if parts[p].Ready != want[p] {
				t.Errorf("partition %d counts %d ready, want %d (all: %+v)", p, parts[p].Ready, want[p], parts)
			}
		}
	}
	waitCounts(t, b, q, broker.Counts{Ready: int64(len(msgs))})
	ds := receive(t, b, q, len(msgs), 7, prompt)
	seen := map[string]bool{}
	for _, d := range ds {
		if body := string(d.Message().Body); seen[body] {
			t.Errorf("%s delivered twice", body)
		} else {
			seen[body] = true
		}
	}
	ack(t, ds...)
	waitCounts(t, b, q, broker.Counts{})
}

// batchTaker takes deliveries of q one batch at a time, for fair.
type batchTaker func(t *testing.T, b broker.Broker, q string) func(ctx context.Context) ([]broker.Delivery, error)

func consumerTaker(t *testing.T, b broker.Broker, q string) func(ctx context.Context) ([]broker.Delivery, error) {
	c := consume(t, b, q, 4)
	return func(ctx context.Context) ([]broker.Delivery, error) {
		d, err := next(t, ctx, c, q)
		if err != nil {
			return nil, err
		}
		return []broker.Delivery{d}, nil
	}
}

func receiveTaker(t *testing.T, b broker.Broker, q string) func(ctx context.Context) ([]broker.Delivery, error) {
	return func(ctx context.Context) ([]broker.Delivery, error) { return recv(t, ctx, b, q, 4) }
}

// fair: with a backlog of 200 messages of one host in the first partition,
// the 5 messages of a host of the last partition, published once taking
// has begun, come out among the first 100 taken after them (a bound with
// room for a loaded machine, where a server that pushes to a consumer's
// partitions may bring them after some of the backlog). Taking the
// partitions first to last, filling a read-ahead from the backlog first,
// or taking by stream sequence across partitions would hand them out
// after the 199 others: the last partition's queue first holds 300 older
// messages, taken and acknowledged, so that its sequences (where a backend
// numbers each partition's messages) run ahead of the first's.
func (s *suite) fair(take batchTaker) func(t *testing.T) {
	return func(t *testing.T) {
		b, n := s.partitioned(t)
		q := queue(t)
		busy, quiet := KeyIn(t, 0, n), KeyIn(t, n-1, n)
		var old []broker.Message
		for i := range 300 {
			old = append(old, broker.Message{Body: fmt.Appendf(nil, "old/%d", i), Key: quiet})
		}
		publish(t, b, q, old...)
		ack(t, receive(t, b, q, len(old), len(old), prompt)...)
		var backlog []broker.Message
		for i := range 200 {
			backlog = append(backlog, broker.Message{Body: fmt.Appendf(nil, "busy/%d", i), Key: busy})
		}
		publish(t, b, q, backlog...)
		takeBatch := take(t, b, q)
		ctx, cancel := context.WithTimeout(t.Context(), wakeWait)
		defer cancel()
		first, err := takeBatch(ctx)
		if err != nil {
			t.Fatalf("the first of the backlog: %v", err)
		}
		ack(t, first...)
		for i := range 5 {
			publish(t, b, q, broker.Message{Body: fmt.Appendf(nil, "quiet/%d", i), Key: quiet})
		}
		const within = 100
		quietSeen, taken := 0, 0
		var order []string
		for taken < within {
			ds, err := takeBatch(ctx)
			if err != nil {
				t.Fatalf("after %d taken: %v", taken, err)
			}
			for _, d := range ds {
				body := string(d.Message().Body)
				if strings.HasPrefix(body, "quiet/") {
					quietSeen++
				}
				taken++
				order = append(order, body)
			}
			ack(t, ds...)
			if quietSeen == 5 {
				t.Logf("the 5 messages of the last partition came among the first %d taken after them", taken)
				return
			}
		}
		t.Fatalf("%d of the last partition's 5 messages among the first %d taken after them (of %d), want all 5; the first 10: %v",
			quietSeen, taken, len(backlog)-1+5, order[:10])
	}
}

// testPrefer: a consumer told to prefer partition A (a
// broker.PartitionPreferrer) takes A's messages before those of partition
// B published after the first of A's was taken, while A has some, and
// still takes B's once A is empty (it steals). A consumer that ignores
// Prefer takes the two partitions in turn (fair): about half of what it
// takes while A has messages is B's, where a preferring one takes at most
// what it read ahead of B before A's loop started (none here: A's first
// came first) and what it holds when A runs dry. A consumer that is not
// a PartitionPreferrer skips the case.
func (s *suite) testPrefer(t *testing.T) {
	b, n := s.partitioned(t)
	q := queue(t)
	const prefetch, each = 4, 40
	c := consume(t, b, q, prefetch)
	pp, ok := c.(broker.PartitionPreferrer)
	if !ok {
		t.Skipf("the consumer (%T) is not a broker.PartitionPreferrer", c)
	}
	const a = 0
	bp := n - 1
	keyA, keyB := KeyIn(t, a, n), KeyIn(t, bp, n)
	pp.Prefer([]int{a})
	batch := func(key, name string) []broker.Message {
		msgs := make([]broker.Message, each)
		for i := range msgs {
			msgs[i] = broker.Message{Body: fmt.Appendf(nil, "%s/%d", name, i), Key: key}
		}
		return msgs
	}
	publish(t, b, q, batch(keyA, "a")...)
	ctx, cancel := context.WithTimeout(t.Context(), wakeWait)
	defer cancel()
	d, err := next(t, ctx, c, q)
	if err != nil {
		t.Fatalf("the first of partition %d's messages: %v", a, err)
	}
	if body := string(d.Message().Body); !strings.HasPrefix(body, "a/") {
		t.Fatalf("the first delivery is %q, want one of partition %d's (the only one with messages)", body, a)
	}
	ack(t, d)
	publish(t, b, q, batch(keyB, "b")...)
	// The rest of A's, 39, come before B's but for the read-ahead's
	// reordering (at most what the consumer held when A ran dry).
	const slack = 2 * prefetch
	seen := map[string]bool{}
	var order []string
	bEarly := 0
	for len(seen) < 2*each-1 {
		d, err := next(t, ctx, c, q)
		if err != nil {
			t.Fatalf("%d of %d delivered (preferring partition %d of %d, the rest in partition %d): %v; so far: %v",
				len(seen), 2*each-1, a, n, bp, err, order)
		}
		body := string(d.Message().Body)
		if seen[body] {
			t.Errorf("%q delivered twice", body)
		}
		seen[body] = true
		order = append(order, body)
		if len(order) <= each-1 && strings.HasPrefix(body, "b/") {
			bEarly++
		}
		ack(t, d)
	}
	if bEarly > slack {
		t.Fatalf("%d of partition %d's messages among the first %d taken after them, while preferred partition %d still had messages (want at most %d, the read-ahead's reordering): %v",
			bEarly, bp, each-1, a, slack, order)
	}
	t.Logf("%d of the non-preferred partition's messages among the first %d taken; all %d taken", bEarly, each-1, len(seen))
}

// stealMoment is the least a consumer that prefers none of the partitions
// (Prefer with an empty own) must have waited in Next before it steals:
// broker.PartitionPreferrer's "moment", a second on Redis and NATS; the
// suite asks for half. A lower bound on a wait holds on a starved
// machine.
const stealMoment = 500 * time.Millisecond

// testPreferNone: a consumer told to prefer an empty, not nil, list of
// partitions (a worker beyond the partitions' count: more workers than
// partitions) has none of its own, so it takes a message of any
// partition only as it steals, once its Next has waited the moment
// (stealMoment), and then takes all (it does steal). A consumer that reads
// empty as nil, every partition alike, returns the message as soon as it
// is leased, well within the moment.
func (s *suite) testPreferNone(t *testing.T) {
	b, n := s.partitioned(t)
	// Prefer takes effect at the consumer's next take: one already in
	// flight when it is called (a pull request that a fresh NATS
	// consumer's loop sent before it saw the preference) may still bring a
	// message at once. A trial whose first message came early is void and
	// run again, on a fresh queue and consumer; a consumer that reads empty
	// as nil takes early in every trial.
	for trial := 1; ; trial++ {
		q := queue(t)
		c := consume(t, b, q, 4)
		pp, ok := c.(broker.PartitionPreferrer)
		if !ok {
			t.Skipf("the consumer (%T) is not a broker.PartitionPreferrer", c)
		}
		pp.Prefer([]int{})
		var msgs []broker.Message
		for p := range n {
			key := KeyIn(t, p, n)
			msgs = append(msgs, broker.Message{Body: []byte(key), Key: key})
		}
		publish(t, b, q, msgs...)
		ctx, cancel := context.WithTimeout(t.Context(), wakeWait)
		defer cancel()
		started := time.Now()
		d, err := next(t, ctx, c, q)
		if err != nil {
			t.Fatalf("a consumer that prefers no partition did not steal a message of the %d partitions: %v", n, err)
		}
		if waited := time.Since(started); waited < stealMoment {
			if trial < voidTrials {
				t.Logf("trial %d void: took %q after %v (a take in flight before Prefer?); trying again", trial, d.Message().Body, waited.Round(time.Millisecond))
				ack(t, d)
				continue
			}
			t.Fatalf("a consumer that prefers no partition (Prefer([]int{})) took %q after %v, want only as it steals, after waiting at least %v (in each of %d trials): it took from every partition alike, as with no preference (nil)",
				d.Message().Body, waited.Round(time.Millisecond), stealMoment, trial)
		}
		ack(t, d)
		for range n - 1 {
			d, err := next(t, ctx, c, q)
			if err != nil {
				t.Fatalf("a consumer that prefers no partition stole one message, not all %d: %v", n, err)
			}
			ack(t, d)
		}
		return
	}
}
