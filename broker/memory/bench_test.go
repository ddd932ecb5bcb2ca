package memory_test

import (
	"context"
	"testing"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/memory"
)

// BenchmarkRoundTrip publishes in batches of 100, receives in batches of up
// to 100 and acknowledges each message; one op is one message.
func BenchmarkRoundTrip(b *testing.B) {
	for _, order := range []broker.Order{broker.Priority, broker.FIFO, broker.LIFO} {
		b.Run(order.String(), func(b *testing.B) {
			br, err := memory.New(memory.Config{Order: order})
			if err != nil {
				b.Fatal(err)
			}
			defer br.Close()
			ctx := context.Background()
			const batch = 100
			msgs := make([]broker.Message, batch)
			for i := range msgs {
				msgs[i] = broker.Message{Body: make([]byte, 100), Priority: i % 5}
			}
			b.ReportAllocs()
			b.ResetTimer()
			done := 0
			for done < b.N {
				n := min(batch, b.N-done)
				if err := br.Publish(ctx, "bench", msgs[:n]...); err != nil {
					b.Fatal(err)
				}
				for got := 0; got < n; {
					ds, err := br.Receive(ctx, "bench", batch)
					if err != nil {
						b.Fatal(err)
					}
					for _, d := range ds {
						if err := d.Ack(ctx); err != nil {
							b.Fatal(err)
						}
					}
					got += len(ds)
				}
				done += n
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkRoundTripParallel is BenchmarkRoundTrip with one handle per
// goroutine on a shared store and queue.
func BenchmarkRoundTripParallel(b *testing.B) {
	store, err := memory.NewStore(memory.Config{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		br := store.Connect()
		defer br.Close()
		msgs := make([]broker.Message, 100)
		for i := range msgs {
			msgs[i] = broker.Message{Body: make([]byte, 100), Priority: i % 5}
		}
		for pb.Next() {
			// one op is one batch of 100 here; see the msgs/s metric
			if err := br.Publish(ctx, "bench", msgs...); err != nil {
				b.Error(err)
				return
			}
			ds, err := br.Receive(ctx, "bench", len(msgs))
			if err != nil {
				b.Error(err)
				return
			}
			for _, d := range ds {
				if err := d.Ack(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		}
	})
	b.ReportMetric(float64(b.N)*100/b.Elapsed().Seconds(), "msgs/s")
}
