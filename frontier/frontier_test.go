package frontier_test

import (
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker/memory"
	"github.com/trawlhq/trawl/dedup/local"
	"github.com/trawlhq/trawl/frontier"
	"github.com/trawlhq/trawl/frontier/frontiertest"
)

// newStores returns a memory broker and a local filter of their own.
func newStores(t *testing.T) (*memory.Broker, *local.Filter) {
	t.Helper()
	b, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := local.New(local.Config{Capacity: 10_000, FPRate: 1e-6})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(); f.Close() })
	return b, f
}

func TestMemory(t *testing.T) {
	frontiertest.Run(t, frontiertest.Harness{Faulty: true, New: func(t *testing.T, _ string, faults *frontiertest.Faults) frontier.Frontier {
		b, f := newStores(t)
		return frontier.NewMemory(faults.Broker(b), faults.Filter(f).(frontier.CheckingFilter))
	}})
}

func TestComposedOverMemory(t *testing.T) {
	frontiertest.Run(t, frontiertest.Harness{Faulty: true, SamePageRaces: true, New: func(t *testing.T, _ string, faults *frontiertest.Faults) frontier.Frontier {
		b, f := newStores(t)
		return frontier.Compose(faults.Broker(b), faults.Filter(f), frontier.ComposeConfig{ClaimWait: 2 * time.Second})
	}})
}
