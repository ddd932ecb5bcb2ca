package nats

import (
	"context"

	"github.com/trawlhq/trawl/broker"
)

// Bury dead-letters d as the broker does when a delivery is past
// MaxDeliveries (for a test of burying one message twice).
func (b *Broker) Bury(ctx context.Context, d broker.Delivery, reason string) error {
	return b.bury(ctx, d.(*delivery), reason)
}
