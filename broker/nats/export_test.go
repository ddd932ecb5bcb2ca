package nats

import (
	"context"
	"time"

	"github.com/trawlhq/trawl/broker"
)

// Bury dead-letters d as the broker does when a delivery is past
// MaxDeliveries (for a test of burying one message twice).
func (b *Broker) Bury(ctx context.Context, d broker.Delivery, reason string) error {
	return b.bury(ctx, d.(*delivery), reason)
}

// LeaseLeft is how long d's lease has left as d's broker counts it (its
// local deadline, a margin before the server's AckWait ends).
func LeaseLeft(d broker.Delivery) time.Duration {
	dd := d.(*delivery)
	dd.b.mu.Lock()
	defer dd.b.mu.Unlock()
	return time.Until(dd.deadline)
}
