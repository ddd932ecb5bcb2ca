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

// TestClusterPartitions (issue 24): on three servers, the three
// partitions of a queue with three replicas each get a leader of their
// own, on three different servers (the broker that creates them moves
// them apart). With the leader of one partition stopped while a consumer
// drains them all, every message is still delivered.
func TestClusterPartitions(t *testing.T) {
	c := integration.StartNATSCluster(t)
	nc, err := nats.Connect(t.Context(), c.URL(), nats.ConnectConfig{Name: t.Name(), ReconnectWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	q := integration.Name(t) + ":requests"
	b := newBroker(t, nc, nats.Config{Replicas: 3, Partitions: 3, Lease: 3 * time.Second})
	msgs := brokertest.Keyed(3000, 30)
	if err := b.Publish(ctx, q, msgs...); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream := "TRAWL_Q_" + streamToken(q)
	names := []string{stream, stream + "_p1", stream + "_p2"}
	leaders := func() []string {
		var out []string
		for _, name := range names {
			s, err := js.Stream(ctx, name)
			if err != nil {
				t.Fatalf("stream %s: %v", name, err)
			}
			l := ""
			if s.CachedInfo().Cluster != nil {
				l = s.CachedInfo().Cluster.Leader
			}
			out = append(out, l)
		}
		return out
	}
	// The stepdowns were asked for before the Publish returned; their
	// elections end within a few seconds.
	var ls []string
	for deadline := time.Now().Add(20 * time.Second); ; {
		ls = leaders()
		if ls[0] != "" && ls[1] != "" && ls[2] != "" && ls[0] != ls[1] && ls[1] != ls[2] && ls[0] != ls[2] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the partitions' leaders are %q, want three different servers", ls)
		}
		time.Sleep(100 * time.Millisecond) // polling the cluster's state, bounded by the deadline
	}
	t.Logf("partition leaders: %q", ls)

	brokertest.DrainWithFault(t, ctx, b, q, msgs, func() {
		t.Logf("stopping %s, the leader of partition 1", ls[1])
		if err := c.Stop(ctx, c.Index(ls[1])); err != nil {
			t.Fatal(err)
		}
	})
}
