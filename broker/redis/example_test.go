package redis_test

import (
	"context"
	"fmt"
	"log"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/redis"
)

// A worker publishes requests and takes them in batches; each delivery is
// acknowledged once its work is done. (No output: it needs a Redis server.)
func Example() {
	ctx := context.Background()
	opt, err := goredis.ParseURL("redis://127.0.0.1:6379/0")
	if err != nil {
		log.Fatal(err)
	}
	client := goredis.NewClient(opt)
	defer client.Close()

	b, err := redis.New(ctx, redis.Config{Client: client, Lease: time.Minute})
	if err != nil {
		log.Fatal(err) // e.g. redis broker: connect: dial tcp 127.0.0.1:6379: connect: connection refused
	}
	defer b.Close()

	err = b.Publish(ctx, "books:requests",
		broker.Message{Body: []byte("https://books.example/"), Priority: 1},
		broker.Message{Body: []byte("https://books.example/about")},
	)
	if err != nil {
		log.Fatal(err)
	}
	ds, err := b.Receive(ctx, "books:requests", 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range ds {
		fmt.Printf("%s (attempt %d)\n", d.Message().Body, d.Attempt())
	}
	// Acknowledge the batch in one round trip.
	if err := b.AckBatch(ctx, ds...); err != nil {
		log.Fatal(err)
	}
}

// A slow page keeps its lease by extending it while it is in progress.
func Example_extend() {
	ctx := context.Background()
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	b, err := redis.New(ctx, redis.Config{Client: client, Lease: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	ds, err := b.Receive(ctx, "books:requests", 1)
	if err != nil {
		log.Fatal(err)
	}
	d := ds[0]
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if err := d.Extend(ctx, 30*time.Second); err != nil {
					log.Print(err) // broker.ErrLeaseLost: another worker may have it now
					return
				}
			}
		}
	}()
	// ... fetch and process the page ...
	close(done)
	if err := d.Ack(ctx); err != nil {
		log.Fatal(err)
	}
}
