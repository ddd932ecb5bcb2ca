package nats_test

import (
	"context"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/brokertest"
	"github.com/trawlhq/trawl/broker/nats"
	"github.com/trawlhq/trawl/internal/integration"
)

// clusterLease is the shortest lease the conformance run on a cluster uses.
const clusterLease = 2 * time.Second

// TestClusterConformance runs the conformance suite on a three-server
// JetStream cluster, every stream with three replicas, each broker
// connected to all three servers (make test-cluster).
func TestClusterConformance(t *testing.T) {
	c := integration.StartNATSCluster(t)
	conn := func(t *testing.T) *natsgo.Conn {
		nc, err := nats.Connect(t.Context(), c.URL(), nats.ConnectConfig{Name: t.Name()})
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	brokertest.Run(t, brokertest.Config{
		New: func(t *testing.T, s brokertest.Setup) broker.Broker {
			return newBroker(t, conn(t), nats.Config{Order: s.Order, Lease: s.Lease, MaxDeliveries: s.MaxDeliveries, Replicas: 3})
		},
		Orders:     []broker.Order{broker.Priority, broker.FIFO},
		Priorities: nats.Config{}.BandPriorities(),
		// Acks go to the stream's leader and are replicated before the
		// answer: a lease of 500ms is too short on a loaded machine.
		Lease: clusterLease,
	})
}

// TestClusterReplicas: the streams and the metadata bucket a broker with
// Replicas 3 creates have three replicas, and a broker opened later with
// the default (as trawl stats is) leaves them so.
func TestClusterReplicas(t *testing.T) {
	c := integration.StartNATSCluster(t)
	nc, err := nats.Connect(t.Context(), c.URL(), nats.ConnectConfig{Name: t.Name()})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	crawl := integration.Name(t)
	q := crawl + ":requests"
	b := newBroker(t, nc, nats.Config{Replicas: 3})
	if err := b.Publish(t.Context(), q, broker.Message{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := b.SetMeta(t.Context(), crawl, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	later := newBroker(t, nc, nats.Config{})
	if _, err := later.GetMeta(t.Context(), crawl, "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := later.Counts(t.Context(), q); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	seen := 0
	for s := range js.ListStreams(ctx).Info() {
		name := s.Config.Name
		if name != "KV_trawl-meta" && !strings.Contains(name, crawl) {
			continue
		}
		seen++
		if s.Config.Replicas != 3 {
			t.Errorf("stream %s: %d replicas, want 3", name, s.Config.Replicas)
		}
		if s.Cluster == nil || len(s.Cluster.Replicas) != 2 {
			t.Errorf("stream %s: cluster info %+v, want a leader and 2 replicas", name, s.Cluster)
		}
	}
	if seen < 3 { // the work stream, the dead letters, the bucket
		t.Errorf("saw %d of trawl's streams, want 3", seen)
	}
}
