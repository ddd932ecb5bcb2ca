package redis_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/redis"
	"github.com/trawlhq/trawl/internal/integration"
)

// benchBatch is the batch size of publish, receive and ack in benchmarks.
const benchBatch = 100

func benchMessages() []broker.Message {
	msgs := make([]broker.Message, benchBatch)
	for i := range msgs {
		// About the size of an encoded request.
		msgs[i] = broker.Message{Body: fmt.Appendf(nil, "https://example.com/catalogue/page-%06d.html?%0100d", i, 0), Priority: i % 3}
	}
	return msgs
}

// BenchmarkRoundTrip publishes, receives and acknowledges messages in
// batches of 100 (three round trips per batch) from one goroutine.
func BenchmarkRoundTrip(b *testing.B) {
	for _, order := range []broker.Order{broker.Priority, broker.FIFO} {
		b.Run(order.String(), func(b *testing.B) {
			br := newBroker(b, integration.RedisClient(b), redis.Config{Order: order})
			q := integration.Name(b) + ":requests"
			msgs := benchMessages()
			ctx := b.Context()
			n := 0
			b.ResetTimer()
			for n < b.N {
				if err := br.Publish(ctx, q, msgs...); err != nil {
					b.Fatal(err)
				}
				ds, err := br.Receive(ctx, q, benchBatch)
				if err != nil {
					b.Fatal(err)
				}
				if err := br.AckBatch(ctx, ds...); err != nil {
					b.Fatal(err)
				}
				n += len(ds)
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "msgs/s")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/msg")
		})
	}
}

// BenchmarkRoundTripParallel is BenchmarkRoundTrip from several
// goroutines (-cpu sets how many per core) sharing one queue and one
// broker, as the workers of a crawl do.
func BenchmarkRoundTripParallel(b *testing.B) {
	br := newBroker(b, integration.RedisClient(b), redis.Config{})
	q := integration.Name(b) + ":requests"
	msgs := benchMessages()
	ctx := b.Context()
	var total atomic.Int64
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := br.Publish(ctx, q, msgs...); err != nil {
				b.Error(err)
				return
			}
			ds, err := br.Receive(ctx, q, benchBatch)
			if err != nil {
				b.Error(err)
				return
			}
			if err := br.AckBatch(ctx, ds...); err != nil {
				b.Error(err)
				return
			}
			total.Add(int64(len(ds)))
		}
	})
	b.ReportMetric(float64(total.Load())/b.Elapsed().Seconds(), "msgs/s")
}
