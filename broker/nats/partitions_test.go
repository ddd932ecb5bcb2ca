package nats_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/brokertest"
	"github.com/trawlhq/trawl/broker/nats"
	"github.com/trawlhq/trawl/internal/integration"
)

// TestPartitionsStreams: each partition of a queue is a stream of its
// own, partition 0 with the unpartitioned names and partition p the
// token's suffix "_p<p>", and each stream holds the messages of its
// partition's keys. (Routing, counts and fairness are the conformance
// suite's Partitions cases, run with three partitions.)
func TestPartitionsStreams(t *testing.T) {
	e := embedded(t, "")
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	const parts = 4
	b := newBroker(t, e.Conn(), nats.Config{Partitions: parts})
	q := integration.Name(t) + ":requests"
	msgs := brokertest.Keyed(400, 40)
	want := make([]uint64, parts)
	for _, m := range msgs {
		want[broker.PartitionOf(m.Key, parts)]++
	}
	if err := b.Publish(ctx, q, msgs...); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(e.Conn())
	if err != nil {
		t.Fatal(err)
	}
	for p := range parts {
		name := "TRAWL_Q_" + streamToken(q)
		if p > 0 {
			name += fmt.Sprintf("_p%d", p)
		}
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		if got := s.CachedInfo().State.Msgs; got != want[p] {
			t.Errorf("stream %s holds %d messages, want %d", name, got, want[p])
		}
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
