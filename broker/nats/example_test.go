package nats_test

import (
	"context"
	"fmt"
	"os"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/nats"
)

// An embedded server keeps a crawl's queues on disk; a broker on it hands
// out the highest band first.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "trawl-example")
	defer os.RemoveAll(dir)

	e, err := nats.StartEmbedded(ctx, nats.EmbeddedConfig{Dir: dir})
	if err != nil {
		panic(err)
	}
	defer e.Shutdown()
	b, err := nats.New(ctx, nats.Config{Conn: e.Conn()}) // priority order, 5 bands, 30s leases
	if err != nil {
		panic(err)
	}
	defer b.Close()

	_ = b.Publish(ctx, "books:requests",
		broker.Message{Body: []byte("/catalogue"), Priority: 0},
		broker.Message{Body: []byte("/"), Priority: 10},
		broker.Message{Body: []byte("/retry"), Priority: -1},
	)
	ds, _ := b.Receive(ctx, "books:requests", 10)
	for _, d := range ds {
		fmt.Printf("%s priority %d attempt %d\n", d.Message().Body, d.Message().Priority, d.Attempt())
		_ = d.Ack(ctx)
	}
	// Output:
	// / priority 10 attempt 1
	// /catalogue priority 0 attempt 1
	// /retry priority -1 attempt 1
}
