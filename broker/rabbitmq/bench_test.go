package rabbitmq_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/rabbitmq"
	"github.com/trawlhq/trawl/internal/integration"
)

// benchBatch is the batch size of publish and receive in benchmarks.
const benchBatch = 100

// benchMessages returns a batch of messages about the size of an
// encoded request, as broker/redis's benchmarks use.
func benchMessages() []broker.Message {
	msgs := make([]broker.Message, benchBatch)
	for i := range msgs {
		msgs[i] = broker.Message{Body: fmt.Appendf(nil, "https://example.com/catalogue/page-%06d.html?%0100d", i, 0), Priority: i % 3}
	}
	return msgs
}

func benchBroker(b *testing.B, mod func(*rabbitmq.Config)) (*rabbitmq.Broker, string) {
	cfg := server(b)
	cfg.Lease = time.Minute
	if mod != nil {
		mod(&cfg)
	}
	br := newBroker(b, cfg)
	q := integration.Name(b) + ":requests"
	b.Cleanup(func() { (&queues{names: map[string]bool{q: true}}).deleteAll(b, cfg.URL) })
	return br, q
}

// roundTrip publishes a batch (returning when all are confirmed),
// receives it and acknowledges each message.
func roundTrip(ctx context.Context, br *rabbitmq.Broker, q string, msgs []broker.Message) (int, error) {
	if err := br.Publish(ctx, q, msgs...); err != nil {
		return 0, err
	}
	got := 0
	for got < len(msgs) {
		ds, err := br.Receive(ctx, q, len(msgs)-got)
		if err != nil {
			return got, err
		}
		for _, d := range ds {
			if err := d.Ack(ctx); err != nil {
				return got, err
			}
		}
		got += len(ds)
	}
	return got, nil
}

// BenchmarkRoundTrip publishes batches of 100 with publisher confirms,
// receives them (one Receive asks for the whole batch: prefetch 100) and
// acknowledges each message, from one goroutine; one op is one batch.
// Durable: a durable queue and persistent messages (confirmed once on
// disk); transient: neither.
func BenchmarkRoundTrip(b *testing.B) {
	for _, durable := range []bool{true, false} {
		name := "durable"
		if !durable {
			name = "transient"
		}
		b.Run(name, func(b *testing.B) {
			br, q := benchBroker(b, func(c *rabbitmq.Config) { c.NonDurable = !durable })
			msgs := benchMessages()
			ctx := b.Context()
			n := 0
			b.ResetTimer()
			for range b.N {
				got, err := roundTrip(ctx, br, q, msgs)
				if err != nil {
					b.Fatal(err)
				}
				n += got
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "msgs/s")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/msg")
		})
	}
}

// BenchmarkRoundTripParallel is BenchmarkRoundTrip from four goroutines
// per core sharing one queue and one broker, as the workers of a crawl
// do; durable.
func BenchmarkRoundTripParallel(b *testing.B) {
	br, q := benchBroker(b, nil)
	msgs := benchMessages()
	ctx := b.Context()
	var total atomic.Int64
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			got, err := roundTrip(ctx, br, q, msgs)
			total.Add(int64(got))
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(total.Load())/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkLatency measures the consumer-side latency at a given
// prefetch: a consumer loops on Receive(max = prefetch) and acknowledges
// what it gets; the benchmark publishes one message at a time and times
// from the start of Publish to the consumer holding the message. One op
// is 100 messages; p50 and p99 are over all of them.
func BenchmarkLatency(b *testing.B) {
	for _, bc := range []struct {
		prefetch int
		durable  bool
	}{{1, true}, {10, true}, {100, true}, {10, false}} {
		name := "durable"
		if !bc.durable {
			name = "transient"
		}
		prefetch := bc.prefetch
		b.Run(name+"/prefetch="+strconv.Itoa(prefetch), func(b *testing.B) {
			br, q := benchBroker(b, func(c *rabbitmq.Config) { c.Prefetch, c.NonDurable = prefetch, !bc.durable })
			ctx, cancel := context.WithCancel(b.Context())
			got := make(chan time.Time, benchBatch)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for ctx.Err() == nil {
					ds, err := br.Receive(ctx, q, prefetch)
					at := time.Now()
					if err != nil {
						if ctx.Err() == nil {
							b.Error(err)
						}
						return
					}
					for _, d := range ds {
						got <- at
						if err := d.Ack(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				}
			}()
			defer func() { cancel(); <-done }()
			msg := benchMessages()[:1]
			var lat []time.Duration
			b.ResetTimer()
			for range b.N {
				for range benchBatch {
					start := time.Now()
					if err := br.Publish(ctx, q, msg...); err != nil {
						b.Fatal(err)
					}
					select {
					case at := <-got:
						lat = append(lat, at.Sub(start))
					case <-time.After(10 * time.Second):
						b.Fatal("the consumer did not get a message within 10s")
					}
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}
