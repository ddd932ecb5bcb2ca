package memory_test

import (
	"context"
	"fmt"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/memory"
)

func Example() {
	ctx := context.Background()
	b, err := memory.New(memory.Config{}) // priority order, 30s leases
	if err != nil {
		panic(err)
	}
	defer b.Close()

	_ = b.Publish(ctx, "books:requests",
		broker.Message{Body: []byte("/catalogue"), Priority: 0},
		broker.Message{Body: []byte("/"), Priority: 10},
		broker.Message{Body: []byte("/about"), Priority: 0},
	)
	ds, _ := b.Receive(ctx, "books:requests", 10)
	for _, d := range ds {
		fmt.Printf("%s priority %d attempt %d\n", d.Message().Body, d.Message().Priority, d.Attempt())
		_ = d.Ack(ctx) // after the page's work is durable
	}
	c, _ := b.Counts(ctx, "books:requests")
	fmt.Printf("%+v\n", c)
	// Output:
	// / priority 10 attempt 1
	// /catalogue priority 0 attempt 1
	// /about priority 0 attempt 1
	// {Ready:0 InFlight:0 Dead:0 Delayed:0}
}

// Two handles on one store are two workers of one crawl. A worker that
// closes with a delivery in hand gives it back at once.
func ExampleStore_Connect() {
	ctx := context.Background()
	store, _ := memory.NewStore(memory.Config{Order: broker.FIFO})
	w1, w2 := store.Connect(), store.Connect()
	defer w2.Close()

	_ = w1.Publish(ctx, "q", broker.Message{Body: []byte("page")})
	ds, _ := w1.Receive(ctx, "q", 1)
	fmt.Println("w1 took", string(ds[0].Message().Body))
	w1.Close() // without settling

	ds, _ = w2.Receive(ctx, "q", 1)
	fmt.Println("w2 took", string(ds[0].Message().Body), "attempt", ds[0].Attempt())
	_ = ds[0].Ack(ctx)
	// Output:
	// w1 took page
	// w2 took page attempt 2
}

// A message nacked MaxDeliveries times, or rejected, goes to the queue's
// dead-letter queue, where it can be read and requeued.
func ExampleBroker_DeadLetters() {
	ctx := context.Background()
	b, _ := memory.New(memory.Config{MaxDeliveries: 2})
	defer b.Close()

	_ = b.Publish(ctx, "q", broker.Message{Body: []byte("flaky")}, broker.Message{Body: []byte("garbage")})
	for range 3 {
		ds, _ := b.Receive(ctx, "q", 1)
		d := ds[0]
		if string(d.Message().Body) == "garbage" {
			_ = d.Reject(ctx, "undecodable payload")
		} else {
			_ = d.Nack(ctx, 0) // retry, up to MaxDeliveries
		}
	}
	dls, _ := b.DeadLetters(ctx, "q", 10)
	for _, dl := range dls {
		fmt.Printf("%s: %s\n", dl.Message.Body, dl.Reason)
	}
	n, _ := b.Requeue(ctx, "q", 10)
	fmt.Println("requeued", n)
	// Output:
	// flaky: nacked after 2 deliveries (max 2)
	// garbage: undecodable payload
	// requeued 2
}

// Nack with a delay hides a message for that long (a retry back-off).
func ExampleBroker_Receive_delay() {
	ctx := context.Background()
	b, _ := memory.New(memory.Config{})
	defer b.Close()

	_ = b.Publish(ctx, "q", broker.Message{Body: []byte("retry me")})
	ds, _ := b.Receive(ctx, "q", 1)
	_ = ds[0].Nack(ctx, 2*time.Second) // long beside the 10ms below, even on a loaded machine

	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	_, err := b.Receive(short, "q", 1)
	cancel()
	fmt.Println("at once:", err)
	ds, _ = b.Receive(ctx, "q", 1) // waits for the delay, without polling
	fmt.Println("later:", string(ds[0].Message().Body), "attempt", ds[0].Attempt())
	// Output:
	// at once: memory broker: receive "q": context deadline exceeded
	// later: retry me attempt 2
}
