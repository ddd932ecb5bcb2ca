package nats_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/brokertest"
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

// BenchmarkConsumeWorkers is the path of four workers on one queue of 8
// partitions (bench-web's nats4 mode runs --partitions 8): keyed messages
// over 1,000 hosts are published in batches of 100, keeping a backlog of
// at most 400, and taken by four consumers, each on a broker and a
// connection of its own (prefetch 32), each holding up to 64 deliveries
// unsettled (a worker's pages in flight) and acknowledging the oldest 32
// with AckBatch when it holds 64. One op is one message. Besides time and
// allocations it reports what the consumers' connections sent and
// received per message (pull requests, info requests, acks and their
// answers), and with "prefer" each consumer prefers two partitions of its
// own (broker.PartitionPreferrer). "trickle" is "prefer" with the backlog
// of a crawl whose workers keep up with its pages' links: 10 messages are
// published, then none until all are taken, so that the consumers wait
// between batches.
func BenchmarkConsumeWorkers(b *testing.B) {
	for _, mode := range []string{"all", "prefer", "trickle"} {
		prefer := mode != "all"
		backlog := int64(300)
		if mode == "trickle" {
			backlog = 0
		}
		b.Run(mode, func(b *testing.B) {
			const workers, parts = 4, 8
			url := integration.NATS(b)
			conn := func() *natsgo.Conn {
				nc, err := nats.Connect(b.Context(), url, nats.ConnectConfig{})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(nc.Close)
				return nc
			}
			cfg := nats.Config{Storage: nats.FileStorage, Partitions: parts, Lease: time.Minute}
			pub := newBroker(b, conn(), cfg)
			q := integration.Name(b) + ":bench"
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if err := pub.Publish(ctx, q, brokertest.Keyed(1, 1)...); err != nil { // create the streams
				b.Fatal(err)
			}
			if err := drainOne(ctx, pub, q); err != nil {
				b.Fatal(err)
			}
			type worker struct {
				nc   *natsgo.Conn
				cons broker.Consumer
				br   *nats.Broker
			}
			ws := make([]worker, workers)
			for i := range ws {
				nc := conn()
				br := newBroker(b, nc, cfg)
				cons, err := br.Consume(ctx, q, 32)
				if err != nil {
					b.Fatal(err)
				}
				defer cons.Close()
				if prefer {
					cons.(broker.PartitionPreferrer).Prefer([]int{2 * i, 2*i + 1})
				}
				ws[i] = worker{nc, cons, br}
			}
			var taken atomic.Int64
			msgs := brokertest.Keyed(100, 1000)
			if backlog == 0 {
				msgs = msgs[:10]
			}
			b.ReportAllocs()
			before := make([]natsgo.Statistics, workers)
			for i, w := range ws {
				before[i] = w.nc.Stats()
			}
			b.ResetTimer()
			var wg sync.WaitGroup
			for _, w := range ws {
				wg.Go(func() {
					var held []broker.Delivery
					for taken.Load() < int64(b.N) {
						d, err := w.cons.Next(ctx)
						if err != nil {
							break // ctx ended: every message came
						}
						taken.Add(1)
						if held = append(held, d); len(held) == 64 {
							if err := w.br.AckBatch(context.Background(), held[:32]...); err != nil {
								b.Error(err)
							}
							held = append(held[:0], held[32:]...)
						}
					}
					if err := w.br.AckBatch(context.Background(), held...); err != nil {
						b.Error(err)
					}
				})
			}
			for published := 0; published < b.N; {
				if int64(published)-taken.Load() > backlog {
					time.Sleep(time.Millisecond)
					continue
				}
				n := min(len(msgs), b.N-published)
				if err := pub.Publish(ctx, q, msgs[:n]...); err != nil {
					b.Fatal(err)
				}
				published += n
			}
			for taken.Load() < int64(b.N) {
				time.Sleep(time.Millisecond)
			}
			cancel()
			wg.Wait()
			b.StopTimer()
			var out, in uint64
			for i, w := range ws {
				s := w.nc.Stats()
				out += s.OutMsgs - before[i].OutMsgs
				in += s.InMsgs - before[i].InMsgs
			}
			b.ReportMetric(float64(out)/float64(b.N), "sent/msg")
			b.ReportMetric(float64(in)/float64(b.N), "recv/msg")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// drainOne receives and acknowledges one message of q.
func drainOne(ctx context.Context, br *nats.Broker, q string) error {
	ds, err := br.Receive(ctx, q, 1)
	if err != nil {
		return err
	}
	return ds[0].Ack(ctx)
}
