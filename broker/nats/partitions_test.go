package nats_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/nats"
	"github.com/trawlhq/trawl/internal/integration"
)

// keyIn returns a key of partition p among n, not in avoid.
func keyIn(t *testing.T, p, n int, avoid ...string) string {
	t.Helper()
	for i := range 10_000 {
		k := fmt.Sprintf("host%d.example", i)
		if broker.PartitionOf(k, n) == p && !contains(avoid, k) {
			return k
		}
	}
	t.Fatalf("no key of partition %d", p)
	return ""
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// TestPartitionsSpread: messages go to the stream of their key's
// partition (partition 0 keeps the unpartitioned names), PartitionCounts
// counts each and Counts adds them up, and one consumer delivers every
// message once.
func TestPartitionsSpread(t *testing.T) {
	e := embedded(t, "")
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	const parts, hosts, each = 4, 40, 10
	b := newBroker(t, e.Conn(), nats.Config{Partitions: parts})
	q := integration.Name(t) + ":requests"
	want := make([]int64, parts)
	var msgs []broker.Message
	for h := range hosts {
		key := fmt.Sprintf("h%d.example", h)
		for i := range each {
			msgs = append(msgs, broker.Message{Body: fmt.Appendf(nil, "%s/%d", key, i), Key: key})
		}
		want[broker.PartitionOf(key, parts)] += each
	}
	if err := b.Publish(ctx, q, msgs...); err != nil {
		t.Fatal(err)
	}
	got, err := b.PartitionCounts(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	for p := range parts {
		if got[p].Ready != want[p] {
			t.Errorf("partition %d holds %d ready, want %d (all: %+v)", p, got[p].Ready, want[p], got)
		}
	}
	js, err := jetstream.New(e.Conn())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"TRAWL_Q_" + streamToken(q), "TRAWL_Q_" + streamToken(q) + "_p3"} {
		if _, err := js.Stream(ctx, name); err != nil {
			t.Errorf("stream %s: %v", name, err)
		}
	}
	c, err := b.Consume(ctx, q, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seen := map[string]bool{}
	for len(seen) < len(msgs) {
		d, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("after %d of %d: %v", len(seen), len(msgs), err)
		}
		body := string(d.Message().Body)
		if seen[body] {
			t.Fatalf("%s delivered twice", body)
		}
		seen[body] = true
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := b.Counts(ctx, q); err != nil || n.Ready+n.InFlight != 0 {
		t.Errorf("counts after the drain: %+v, %v", n, err)
	}
}

// streamToken is the escaped name of a test queue ("x-y:requests").
func streamToken(q string) string {
	out := []byte{}
	for i := 0; i < len(q); i++ {
		c := q[i]
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' {
			out = append(out, c)
			continue
		}
		out = append(out, fmt.Sprintf("_%02x", c)...)
	}
	return string(out)
}

// TestPartitionsFair: a consumer takes from every partition in turn, so
// that a few messages of one host come out among the first ones even
// behind a backlog of another host's in another partition (drained first
// to last, or taken by stream sequence, they would come after all 200).
func TestPartitionsFair(t *testing.T) {
	e := embedded(t, "")
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	b := newBroker(t, e.Conn(), nats.Config{Partitions: 3})
	q := integration.Name(t) + ":requests"
	busy := keyIn(t, 0, 3)
	quiet := keyIn(t, 2, 3)
	// The quiet partition's stream sequences run ahead of the busy one's:
	// an order by sequence would not interleave them.
	var old []broker.Message
	for i := range 300 {
		old = append(old, broker.Message{Body: fmt.Appendf(nil, "old/%d", i), Key: quiet})
	}
	if err := b.Publish(ctx, q, old...); err != nil {
		t.Fatal(err)
	}
	for n := 0; n < 300; {
		ds, err := b.Receive(ctx, q, 300-n)
		if err != nil {
			t.Fatalf("receive the old messages: %v", err)
		}
		for _, d := range ds {
			if err := d.Ack(ctx); err != nil {
				t.Fatal(err)
			}
		}
		n += len(ds)
	}
	var backlog []broker.Message
	for i := range 200 {
		backlog = append(backlog, broker.Message{Body: fmt.Appendf(nil, "busy/%d", i), Key: busy})
	}
	if err := b.Publish(ctx, q, backlog...); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := b.Publish(ctx, q, broker.Message{Body: fmt.Appendf(nil, "quiet/%d", i), Key: quiet}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := b.Consume(ctx, q, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	quietSeen := 0
	for i := range 14 {
		d, err := c.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(d.Message().Body[:5]) == "quiet" {
			quietSeen++
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
		if quietSeen == 5 {
			t.Logf("the 5 quiet messages came among the first %d", i+1)
			return
		}
	}
	t.Fatalf("%d of the quiet partition's 5 messages among the first 14 deliveries, want all 5", quietSeen)
}
