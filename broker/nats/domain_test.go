package nats_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/nats"
	"github.com/trawlhq/trawl/internal/integration"
)

// runServer starts an in-process nats-server with JetStream in domain,
// stopped when t ends.
func runServer(t *testing.T, name, domain string, leaf server.LeafNodeOpts) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		ServerName: name, Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true,
		JetStream: true, JetStreamDomain: domain, StoreDir: t.TempDir(), LeafNode: leaf,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatalf("server %s not ready", name)
	}
	return s
}

func dial(t *testing.T, s *server.Server) *natsgo.Conn {
	t.Helper()
	nc, err := natsgo.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// TestDomain runs a crawl's queues in the JetStream of a hub (domain
// "hub") through a leaf node that has a JetStream of its own (domain
// "leaf"): a worker connected to the leaf with Domain "hub" publishes,
// receives, consumes and keeps metadata in the hub, where a worker
// connected to the hub itself sees them; without the domain, the leaf's
// worker would use the leaf's JetStream and see none of it.
func TestDomain(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	hub := runServer(t, "hub", "hub", server.LeafNodeOpts{Host: "127.0.0.1", Port: port})
	u, err := url.Parse(fmt.Sprintf("nats://127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	leaf := runServer(t, "leaf", "leaf", server.LeafNodeOpts{Remotes: []*server.RemoteLeafOpts{{URLs: []*url.URL{u}}}})
	for deadline := time.Now().Add(10 * time.Second); hub.NumLeafNodes() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the leaf node did not connect to the hub")
		}
		time.Sleep(20 * time.Millisecond) // polling an observable condition
	}
	ctx := t.Context()
	q := integration.Name(t) + ":requests"
	// The hub's JetStream answers through the leaf a moment after the
	// leaf connection is up (503 "jetstream not enabled" until then).
	leafConn := dial(t, leaf)
	js, err := jetstream.NewWithDomain(leafConn, "hub")
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; {
		_, err := js.AccountInfo(ctx)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hub's JetStream never answered through the leaf: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // polling an observable condition
	}
	remote := newBroker(t, leafConn, nats.Config{Domain: "hub"})
	local := newBroker(t, dial(t, leaf), nats.Config{}) // the leaf's own JetStream
	home := newBroker(t, dial(t, hub), nats.Config{})

	// The hub may take a moment to answer across the new leaf connection.
	for deadline := time.Now().Add(10 * time.Second); ; {
		err := remote.Publish(ctx, q, msg("from-leaf", 1))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Publish through the domain: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // polling an observable condition
	}
	if err := home.Publish(ctx, q, msg("from-hub", 0)); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, home, q, broker.Counts{Ready: 2})
	waitCounts(t, local, q, broker.Counts{}) // not in the leaf's JetStream

	// Receive and a consumer through the domain, both highest first.
	ds := receiveN(t, remote, q, 1, 5*time.Second)
	if got := bodies(ds); !slices.Equal(got, []string{"from-leaf/1"}) {
		t.Fatalf("Receive through the domain: %q", got)
	}
	if err := ds[0].Ack(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := remote.Consume(ctx, q, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, want := range []string{"from-hub", "later"} {
		if want == "later" {
			if err := home.Publish(ctx, q, msg("later", 0)); err != nil {
				t.Fatal(err)
			}
		}
		nctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		d, err := c.Next(nctx)
		cancel()
		if err != nil || string(d.Message().Body) != want {
			t.Fatalf("Next through the domain: %v, %v; want %s", d, err, want)
		}
		if err := d.Extend(ctx, time.Minute); err != nil {
			t.Fatalf("Extend through the domain: %v", err)
		}
		if err := d.Nack(ctx, time.Millisecond); err != nil {
			t.Fatalf("Nack with a delay through the domain: %v", err)
		}
		nctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		d, err = c.Next(nctx)
		cancel()
		if err != nil || string(d.Message().Body) != want || d.Attempt() != 2 {
			t.Fatalf("Next after a delayed Nack: %v, %v; want %s attempt 2", d, err, want)
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waitCounts(t, home, q, broker.Counts{})

	// Metadata lives in the hub too.
	if err := remote.SetMeta(ctx, "crawl", "settings", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if v, err := home.GetMeta(ctx, "crawl", "settings"); err != nil || string(v) != "v1" {
		t.Fatalf("metadata set through the domain, read in the hub: %q, %v", v, err)
	}
}
