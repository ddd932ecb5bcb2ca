package nats_test

import (
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/nats"
)

// TestBuryTwiceOneDeadLetter: a message buried twice (its ack came after
// its lease under load, so the server delivered it again, past
// MaxDeliveries) is one dead letter, not two (a CI run's
// MaxDeliveries/Lease counted Dead: 2).
func TestBuryTwiceOneDeadLetter(t *testing.T) {
	conn := embeddedConn(embedded(t, ""))
	for _, parts := range []int{1, 3} {
		b := newBroker(t, conn(t), nats.Config{Lease: time.Minute, Partitions: parts})
		q := "bury" + string(rune('0'+parts))
		if err := b.Publish(t.Context(), q, broker.Message{Body: []byte("once")}); err != nil {
			t.Fatal(err)
		}
		ds, err := b.Receive(t.Context(), q, 1)
		if err != nil || len(ds) != 1 {
			t.Fatalf("Receive: %d deliveries, %v", len(ds), err)
		}
		for range 2 {
			if err := b.Bury(t.Context(), ds[0], "test"); err != nil {
				t.Fatalf("bury: %v", err)
			}
		}
		c, err := b.Counts(t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		if c.Dead != 1 {
			t.Errorf("partitions %d: one message buried twice made %d dead letters, want 1", parts, c.Dead)
		}
	}
}
