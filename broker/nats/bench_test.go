package nats_test

import (
	"context"
	"sync"
	"testing"

	natsgo "github.com/nats-io/nats.go"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/nats"
	"github.com/trawlhq/trawl/internal/integration"
)

// BenchmarkRoundTrip publishes in batches of 100 (priorities over all
// five bands), receives in batches of up to 100 and acknowledges every
// message (each Ack waits for the server's confirmation; the acks of a
// batch are sent concurrently); one op is one message. Servers: embedded
// with an in-process connection, embedded over loopback TCP, and the
// external test server (a container, or TRAWL_TEST_NATS_URL).
func BenchmarkRoundTrip(b *testing.B) {
	conns := []struct {
		name string
		conn func(b *testing.B) *natsgo.Conn
	}{
		{"embedded", func(b *testing.B) *natsgo.Conn { return embedded(b, "").Conn() }},
		{"embedded-tcp", func(b *testing.B) *natsgo.Conn {
			e := embedded(b, "127.0.0.1:0")
			nc, err := natsgo.Connect(e.ClientURL())
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(nc.Close)
			return nc
		}},
		{"external", func(b *testing.B) *natsgo.Conn {
			nc, err := nats.Connect(b.Context(), integration.NATS(b), nats.ConnectConfig{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(nc.Close)
			return nc
		}},
	}
	for _, c := range conns {
		for _, order := range []broker.Order{broker.Priority, broker.FIFO} {
			b.Run(c.name+"/"+order.String(), func(b *testing.B) {
				br := newBroker(b, c.conn(b), nats.Config{Order: order, Storage: nats.FileStorage})
				q := integration.Name(b) + ":bench"
				roundTrip(b, br, q)
			})
		}
	}
}

func roundTrip(b *testing.B, br *nats.Broker, q string) {
	ctx := context.Background()
	const batch = 100
	msgs := make([]broker.Message, batch)
	for i := range msgs {
		msgs[i] = broker.Message{Body: make([]byte, 100), Priority: i%5 - 2}
	}
	b.ReportAllocs()
	b.ResetTimer()
	done := 0
	for done < b.N {
		n := min(batch, b.N-done)
		if err := br.Publish(ctx, q, msgs[:n]...); err != nil {
			b.Fatal(err)
		}
		for got := 0; got < n; {
			ds, err := br.Receive(ctx, q, batch)
			if err != nil {
				b.Fatal(err)
			}
			var wg sync.WaitGroup
			for _, d := range ds {
				wg.Go(func() {
					if err := d.Ack(ctx); err != nil {
						b.Error(err)
					}
				})
			}
			wg.Wait()
			got += len(ds)
		}
		done += n
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkConsume is the path a worker takes: batches of 100 published
// (priorities over all five bands), taken with one long-lived consumer
// (prefetch 32, as a worker at --concurrency 32) and acknowledged with
// AckBatch in batches of 32; one op is one message.
func BenchmarkConsume(b *testing.B) {
	for _, c := range []struct {
		name string
		conn func(b *testing.B) *natsgo.Conn
	}{
		{"embedded", func(b *testing.B) *natsgo.Conn { return embedded(b, "").Conn() }},
		{"external", func(b *testing.B) *natsgo.Conn {
			nc, err := nats.Connect(b.Context(), integration.NATS(b), nats.ConnectConfig{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(nc.Close)
			return nc
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			br := newBroker(b, c.conn(b), nats.Config{Storage: nats.FileStorage})
			q := integration.Name(b) + ":bench"
			ctx := context.Background()
			cons, err := br.Consume(ctx, q, 32)
			if err != nil {
				b.Fatal(err)
			}
			defer cons.Close()
			const batch = 100
			msgs := make([]broker.Message, batch)
			for i := range msgs {
				msgs[i] = broker.Message{Body: make([]byte, 100), Priority: i%5 - 2}
			}
			b.ReportAllocs()
			b.ResetTimer()
			var held []broker.Delivery
			for done := 0; done < b.N; {
				n := min(batch, b.N-done)
				if err := br.Publish(ctx, q, msgs[:n]...); err != nil {
					b.Fatal(err)
				}
				for range n {
					d, err := cons.Next(ctx)
					if err != nil {
						b.Fatal(err)
					}
					if held = append(held, d); len(held) == 32 {
						if err := br.AckBatch(ctx, held...); err != nil {
							b.Fatal(err)
						}
						held = held[:0]
					}
				}
				done += n
			}
			if err := br.AckBatch(ctx, held...); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
