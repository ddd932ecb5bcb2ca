package rabbitmq

import (
	"sync"
	"testing"

	"github.com/trawlhq/trawl/internal/integration"
)

// TestBootOneIncarnation: brokers connecting at the same moment all learn
// one incarnation id. (Without bootLock an offer made while another broker
// held the id unacknowledged was accepted, x-max-length counting only
// ready messages, and brokers disagreed: a redelivery then went uncounted.)
func TestBootOneIncarnation(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a RabbitMQ server")
	}
	srv := integration.RabbitMQContainer(t) // its own: trawl.boot starts empty
	cfg := Config{URL: srv.URL, ManagementURL: srv.ManagementURL}
	const rounds, brokers = 3, 12
	for round := range rounds {
		ids := make([]string, brokers)
		bs := make([]*Broker, brokers)
		var wg sync.WaitGroup
		for i := range brokers {
			wg.Go(func() {
				b, err := New(t.Context(), cfg)
				if err != nil {
					t.Errorf("New: %v", err)
					return
				}
				bs[i] = b
				b.mu.Lock()
				ids[i] = b.cur.boot
				b.mu.Unlock()
			})
		}
		wg.Wait()
		for _, b := range bs {
			if b != nil {
				_ = b.Close()
			}
		}
		for i, id := range ids {
			if id == "" || id != ids[0] {
				t.Fatalf("round %d: broker %d learnt incarnation %q, broker 0 %q: want one non-empty id", round, i, id, ids[0])
			}
		}
	}
}
