package memory_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/brokertest"
	"github.com/trawlhq/trawl/broker/memory"
)

// testLease is the suite's shortest lease: short enough for a quick suite,
// long enough not to expire under the race detector on a busy machine.
const testLease = 300 * time.Millisecond

func TestConformance(t *testing.T) {
	t.Parallel()
	var (
		mu     sync.Mutex
		stores = map[*testing.T]*memory.Store{}
	)
	brokertest.Run(t, brokertest.Config{
		New: func(t *testing.T, s brokertest.Setup) broker.Broker {
			mu.Lock()
			st := stores[t]
			if st == nil {
				var err error
				st, err = memory.NewStore(memory.Config{Order: s.Order, Lease: s.Lease, MaxDeliveries: s.MaxDeliveries})
				if err != nil {
					mu.Unlock()
					t.Fatalf("NewStore: %v", err)
				}
				stores[t] = st
				t.Cleanup(func() {
					mu.Lock()
					delete(stores, t)
					mu.Unlock()
				})
			}
			mu.Unlock()
			b := st.Connect()
			t.Cleanup(func() { _ = b.Close() })
			return b
		},
		Lease: testLease,
	})
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if err := (memory.Config{}).Validate(); err != nil {
		t.Fatalf("zero Config: %v", err)
	}
	err := memory.Config{Order: broker.Order(7), Lease: -time.Second, MaxDeliveries: -1}.Validate()
	if !errors.Is(err, broker.ErrInvalid) {
		t.Fatalf("bad Config: %v, want ErrInvalid", err)
	}
	if n := len(err.(interface{ Unwrap() []error }).Unwrap()); n != 3 {
		t.Fatalf("bad Config: %d problems reported, want 3: %v", n, err)
	}
	if _, err := memory.New(memory.Config{Lease: -1}); !errors.Is(err, broker.ErrInvalid) {
		t.Fatalf("New with a bad Config: %v, want ErrInvalid", err)
	}
}
