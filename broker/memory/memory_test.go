package memory_test

import (
	"context"
	"errors"
	"flag"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/brokertest"
	"github.com/trawlhq/trawl/broker/memory"
	"go.uber.org/goleak"
)

// TestMain raises the default -test.parallel: the conformance subtests
// spend their time waiting for leases and delays, not computing, and with
// GOMAXPROCS of 2 the default would run them two at a time. It fails the
// binary if a goroutine outlives the tests.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", "32")
	}
	goleak.VerifyTestMain(m)
}

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

func mustNew(t testing.TB, cfg memory.Config) *memory.Store {
	t.Helper()
	s, err := memory.NewStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Closing a handle gives its deliveries back at once, not after the lease,
// counting the attempt; one that used up its deliveries is dead-lettered.
func TestCloseGivesBackAtOnce(t *testing.T) {
	t.Parallel()
	st := mustNew(t, memory.Config{MaxDeliveries: 2}) // 30s leases
	a, b := st.Connect(), st.Connect()
	defer b.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if err := a.Publish(ctx, "q", broker.Message{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Receive(ctx, "q", 1); err != nil {
		t.Fatal(err)
	}
	a.Close()
	ds, err := b.Receive(ctx, "q", 1) // well within the 30s lease
	if err != nil || ds[0].Attempt() != 2 {
		t.Fatalf("after a.Close: %v, %v; want the message at attempt 2", ds, err)
	}
	c := st.Connect()
	c.Close() // a handle with no deliveries
	b.Close()
	d := st.Connect()
	defer d.Close()
	if got, _ := d.Counts(ctx, "q"); got != (broker.Counts{Dead: 1}) {
		t.Fatalf("after closing the holder of the last attempt: %+v, want one dead letter", got)
	}
}

// An expired delivery is lost from the moment its deadline passes, even
// before anything has looked at the queue.
func TestExpiredLeaseLostBeforeRedelivery(t *testing.T) {
	t.Parallel()
	const lease = 20 * time.Millisecond
	b, _ := memory.New(memory.Config{Lease: lease})
	defer b.Close()
	ctx := t.Context()
	if err := b.Publish(ctx, "q", broker.Message{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	ds, err := b.Receive(ctx, "q", 1)
	if err != nil {
		t.Fatal(err)
	}
	<-time.After(2 * lease) // the behaviour under test is the clock's
	if err := ds[0].Ack(ctx); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("Ack after the deadline: %v, want ErrLeaseLost", err)
	}
	if got, _ := b.Counts(ctx, "q"); got != (broker.Counts{Ready: 1}) {
		t.Fatalf("Counts = %+v, want the message ready again", got)
	}
}

// A requeued dead letter starts its deliveries afresh.
func TestRequeueResetsAttempts(t *testing.T) {
	t.Parallel()
	b, _ := memory.New(memory.Config{MaxDeliveries: 1})
	defer b.Close()
	ctx := t.Context()
	if err := b.Publish(ctx, "q", broker.Message{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		ds, err := b.Receive(ctx, "q", 1)
		if err != nil || ds[0].Attempt() != 1 {
			t.Fatalf("round %d: %v, %v; want attempt 1", round, ds, err)
		}
		if err := ds[0].Nack(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if n, err := b.Requeue(ctx, "q", 1); n != 1 || err != nil {
			t.Fatalf("round %d: Requeue = %d, %v", round, n, err)
		}
	}
}

// A waiting Receive sleeps until the earliest lease deadline or delayed
// nack of its queue, not a moment more. It runs in a synctest bubble, so
// "not a moment more" is exact on the bubble's clock.
func TestReceiveWakesOnTimer(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b, _ := memory.New(memory.Config{Lease: time.Minute})
		defer b.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		if err := b.Publish(ctx, "q", broker.Message{Body: []byte("x")}, broker.Message{Body: []byte("y")}); err != nil {
			t.Fatal(err)
		}
		ds, err := b.Receive(ctx, "q", 2)
		if err != nil || len(ds) != 2 {
			t.Fatal(ds, err)
		}
		start := time.Now()
		if err := ds[0].Nack(ctx, 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if err := ds[1].Extend(ctx, 100*time.Millisecond); err != nil { // never shortens a lease
			t.Fatal(err)
		}
		got, err := b.Receive(ctx, "q", 2)
		el := time.Since(start)
		if err != nil || len(got) != 1 || string(got[0].Message().Body) != "x" {
			t.Fatalf("Receive: %v, %v; want x", got, err)
		}
		if el != 300*time.Millisecond {
			t.Fatalf("delayed message arrived after %v, want 300ms", el)
		}
	})
}
