package memory

import (
	"context"
	"fmt"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/internal/pollconsumer"
)

// Consume implements broker.Broker. (Stopgap: a polling consumer until the
// native one lands.)
func (b *Broker) Consume(ctx context.Context, queue string, prefetch int) (broker.Consumer, error) {
	if queue == "" || prefetch < 1 {
		return nil, fmt.Errorf("memory: consume %q prefetch %d: %w", queue, prefetch, broker.ErrInvalid)
	}
	return pollconsumer.New(b, queue), nil
}
