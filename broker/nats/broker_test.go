package nats_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/brokertest"
	"github.com/trawlhq/trawl/broker/nats"
	"github.com/trawlhq/trawl/internal/integration"
)

func TestMain(m *testing.M) { integration.Main(m) }

// suiteLease is the shortest lease the conformance runs use.
const suiteLease = 500 * time.Millisecond

// suiteConfig runs brokers on connections from conn, one per broker.
func suiteConfig(conn func(t *testing.T) *natsgo.Conn) brokertest.Config {
	return brokertest.Config{
		New: func(t *testing.T, s brokertest.Setup) broker.Broker {
			return newBroker(t, conn(t), nats.Config{Order: s.Order, Lease: s.Lease, MaxDeliveries: s.MaxDeliveries})
		},
		// LIFO: a stream is consumed from its front.
		Orders:     []broker.Order{broker.Priority, broker.FIFO},
		Priorities: nats.Config{}.BandPriorities(),
		Lease:      suiteLease,
	}
}

func newBroker(t testing.TB, nc *natsgo.Conn, cfg nats.Config) *nats.Broker {
	t.Helper()
	cfg.Conn = nc
	b, err := nats.New(t.Context(), cfg)
	if err != nil {
		t.Fatalf("nats.New: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// embedded starts an embedded server in a fresh directory, shut down when
// t ends.
func embedded(t testing.TB, listen string) *nats.Embedded {
	t.Helper()
	e, err := nats.StartEmbedded(t.Context(), nats.EmbeddedConfig{Dir: t.TempDir(), Listen: listen})
	if err != nil {
		t.Fatalf("StartEmbedded: %v", err)
	}
	t.Cleanup(e.Shutdown)
	return e
}

// embeddedConn returns a new in-process connection to e, closed when t
// ends (after the brokers of t, whose cleanups run first).
func embeddedConn(e *nats.Embedded) func(t *testing.T) *natsgo.Conn {
	return func(t *testing.T) *natsgo.Conn {
		nc, err := e.Connect()
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
}

// external returns a connection to the shared test server, closed when t
// ends.
func external(t *testing.T) *natsgo.Conn {
	t.Helper()
	nc, err := nats.Connect(t.Context(), integration.NATS(t), nats.ConnectConfig{Name: t.Name()})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func TestConformanceEmbedded(t *testing.T) {
	brokertest.Run(t, suiteConfig(embeddedConn(embedded(t, ""))))
}

// TestConformancePartitioned runs the suite on brokers whose queues have
// three partitions: a consumer drains them all, counts add them up.
func TestConformancePartitioned(t *testing.T) {
	conn := embeddedConn(embedded(t, ""))
	cfg := suiteConfig(conn)
	cfg.New = func(t *testing.T, s brokertest.Setup) broker.Broker {
		return newBroker(t, conn(t), nats.Config{Order: s.Order, Lease: s.Lease, MaxDeliveries: s.MaxDeliveries, Partitions: 3})
	}
	brokertest.Run(t, cfg)
}

func TestConformanceExternal(t *testing.T) {
	integration.NATS(t) // fail here, once, if there is no server
	cfg := suiteConfig(external)
	cfg.Restartable = func(t *testing.T) brokertest.Server {
		srv := integration.NATSContainer(t)
		return brokertest.Server{
			New: suiteConfig(func(t *testing.T) *natsgo.Conn {
				nc, err := nats.Connect(t.Context(), srv.URL, nats.ConnectConfig{Name: t.Name(), ReconnectWait: 100 * time.Millisecond})
				if err != nil {
					t.Fatalf("connect: %v", err)
				}
				t.Cleanup(nc.Close)
				return nc
			}).New,
			Restart: func(t *testing.T) {
				if err := srv.Restart(t.Context()); err != nil {
					t.Fatalf("restart NATS: %v", err)
				}
			},
		}
	}
	brokertest.Run(t, cfg)
}

// TestSharedConn runs brokers that share one connection, as a worker's
// goroutines may: closing one leaves the others working.
func TestSharedConn(t *testing.T) {
	e := embedded(t, "")
	nc := e.Conn()
	ctx := t.Context()
	a := newBroker(t, nc, nats.Config{})
	b := newBroker(t, nc, nats.Config{})
	q := integration.Name(t) + ":requests"
	if err := a.Publish(ctx, q, broker.Message{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	ds, err := a.Receive(ctx, q, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if nc.IsClosed() {
		t.Fatal("closing a broker closed the connection it was given")
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	got, err := b.Receive(rctx, q, 1)
	if err != nil || string(got[0].Message().Body) != "x" || got[0].Attempt() != 2 {
		t.Fatalf("after the other broker closed: %v, %v; want x attempt 2", got, err)
	}
	if err := ds[0].Ack(ctx); !errors.Is(err, broker.ErrClosed) {
		t.Fatalf("Ack of a closed broker's delivery: %v, want ErrClosed", err)
	}
	if err := got[0].Ack(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestBands(t *testing.T) {
	e := embedded(t, "")
	ctx := t.Context()
	b := newBroker(t, e.Conn(), nats.Config{Bands: 3}) // bands: ≤-1, 0, ≥1
	if got, want := (nats.Config{Bands: 3}).BandPriorities(), []int{-1, 0, 1}; !slices.Equal(got, want) {
		t.Fatalf("BandPriorities = %v, want %v", got, want)
	}
	q := integration.Name(t) + ":q"
	var msgs []broker.Message
	for i, p := range []int{-7, 0, 9, -1, 1, 0, 100} {
		msgs = append(msgs, broker.Message{Body: fmt.Appendf(nil, "m%d", i), Priority: p})
	}
	if err := b.Publish(ctx, q, msgs...); err != nil {
		t.Fatal(err)
	}
	ds, err := b.Receive(ctx, q, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range ds {
		got = append(got, fmt.Sprintf("%s/%d", d.Message().Body, d.Message().Priority))
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Priorities above the top band share it, in publish order; each keeps
	// its own value.
	want := []string{"m2/9", "m4/1", "m6/100", "m1/0", "m5/0", "m0/-7", "m3/-1"}
	if !slices.Equal(got, want) {
		t.Fatalf("received %v, want %v", got, want)
	}

	// A broker with other bands refuses the queue.
	other, err := nats.New(ctx, nats.Config{Conn: e.Conn(), Bands: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.Publish(ctx, q, broker.Message{}); !errors.Is(err, broker.ErrInvalid) {
		t.Fatalf("Publish with 5 bands to a 3-band queue: %v, want ErrInvalid", err)
	}
}

func TestConfigValidate(t *testing.T) {
	nc := &natsgo.Conn{}
	for _, tc := range []struct {
		name string
		cfg  nats.Config
		ok   bool
	}{
		{"zero with conn", nats.Config{Conn: nc}, true},
		{"fifo", nats.Config{Conn: nc, Order: broker.FIFO}, true},
		{"no conn", nats.Config{}, false},
		{"lifo", nats.Config{Conn: nc, Order: broker.LIFO}, false},
		{"bands", nats.Config{Conn: nc, Bands: nats.MaxBands + 1}, false},
		{"short lease", nats.Config{Conn: nc, Lease: time.Millisecond}, false},
		{"negative", nats.Config{Conn: nc, MaxDeliveries: -1}, false},
		{"storage", nats.Config{Conn: nc, Storage: 7}, false},
		{"domain", nats.Config{Conn: nc, Domain: "hub"}, true},
		{"dotted domain", nats.Config{Conn: nc, Domain: "a.b"}, false},
	} {
		err := tc.cfg.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("%s: Validate = %v, want ok %v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("%s: %v does not wrap ErrInvalid", tc.name, err)
		}
	}
	err := nats.Config{Order: broker.LIFO, Bands: -1}.Validate()
	for _, want := range []string{"Conn is nil", "lifo", "Bands -1"} {
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(want)) {
			t.Errorf("Validate of three problems = %v, want it to mention %q", err, want)
		}
	}
}
