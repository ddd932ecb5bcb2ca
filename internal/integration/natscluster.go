package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// NATSCluster is a JetStream cluster of three nats-server containers on a
// Docker network of their own, for one test.
type NATSCluster struct {
	// URLs are the servers' client URLs, nats://127.0.0.1:PORT, in the
	// order of Names. Their host ports are fixed when the servers start,
	// so a URL stays valid across Stop and Start.
	URLs []string
	// Names are the servers' names (and their aliases on the network):
	// n1, n2, n3. JetStream reports a stream's leader by this name.
	Names []string

	ctrs []testcontainers.Container
}

// NATSClusterNodes is the size of the clusters NATSCluster starts.
const NATSClusterNodes = 3

// StartNATSCluster starts a three-server JetStream cluster for t alone and
// removes it when t ends. Each server is started with a name (-n), the
// cluster's name (--cluster_name trawl), a route listener on 6222, routes
// to all three aliases, JetStream with a store directory of its own, and
// --no_advertise, so that clients use the URLs they are given and no
// address of the Docker network. It returns once a stream with three
// replicas can be created, that is once the cluster has a JetStream
// leader and all three peers. It skips t unless TRAWL_TEST_CLUSTER is set
// (make test-cluster).
func StartNATSCluster(t testing.TB) *NATSCluster {
	t.Helper()
	skipCluster(t, "NATS JetStream cluster")
	net := newClusterNet(t)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	ports, err := freePorts(NATSClusterNodes)
	if err != nil {
		t.Fatalf("integration: pick host ports: %v", err)
	}
	c := &NATSCluster{
		URLs:  make([]string, NATSClusterNodes),
		Names: make([]string, NATSClusterNodes),
		ctrs:  make([]testcontainers.Container, NATSClusterNodes),
	}
	routes := make([]string, NATSClusterNodes)
	for i := range NATSClusterNodes {
		c.Names[i] = "n" + itoa(i+1)
		routes[i] = "nats://" + c.Names[i] + ":6222"
		c.URLs[i] = "nats://127.0.0.1:" + ports[i]
	}
	err = startAll(NATSClusterNodes, func(i int) error {
		ctr, err := net.run(ctx, image(EnvNATSImage, "nats:2"), c.Names[i], map[string]string{"4222/tcp": ports[i]},
			testcontainers.WithCmd("-js", "-sd", "/data/"+c.Names[i], "-n", c.Names[i],
				"--cluster_name", "trawl", "--cluster", "nats://0.0.0.0:6222",
				"--routes", strings.Join(routes, ","), "--no_advertise"),
			testcontainers.WithWaitStrategyAndDeadline(startTimeout, wait.ForLog("Server is ready").WithStartupTimeout(startTimeout)),
		)
		c.ctrs[i] = ctr
		return err
	})
	if err != nil {
		t.Fatalf("integration: start a NATS cluster (image %q): %v", image(EnvNATSImage, "nats:2"), err)
	}
	if err := c.waitR3(ctx); err != nil {
		t.Fatalf("integration: NATS cluster: %v", err)
	}
	return c
}

// URL returns every server's URL, comma-separated, as --nats-url and
// nats.Connect take them.
func (c *NATSCluster) URL() string { return strings.Join(c.URLs, ",") }

// Stop stops server i (SIGTERM, SIGKILL after a second); the container
// stays and Start starts it again.
func (c *NATSCluster) Stop(ctx context.Context, i int) error {
	return stopContainer(ctx, c.ctrs[i], time.Second)
}

// Start starts server i again after Stop and returns once it serves
// JetStream. Its store directory survived the stop.
func (c *NATSCluster) Start(ctx context.Context, i int) error {
	if err := c.ctrs[i].Start(ctx); err != nil {
		return fmt.Errorf("integration: start nats %s: %w", c.Names[i], err)
	}
	return WaitNATS(ctx, c.URLs[i])
}

// Index returns the index of the server named name, or -1.
func (c *NATSCluster) Index(name string) int {
	for i, n := range c.Names {
		if n == name {
			return i
		}
	}
	return -1
}

// waitR3 waits until a stream of three replicas can be created, and
// deletes it.
func (c *NATSCluster) waitR3(ctx context.Context) error {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if last = c.tryR3(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no stream of %d replicas could be created (last: %v): %w", NATSClusterNodes, last, ctx.Err())
		case <-tick.C:
		}
	}
}

func (c *NATSCluster) tryR3(ctx context.Context) error {
	nc, err := natsgo.Connect(c.URL(), natsgo.Timeout(2*time.Second), natsgo.NoReconnect())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	const name = "TRAWL_CLUSTER_READY"
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"trawl-cluster-ready"}, Replicas: NATSClusterNodes}); err != nil &&
		!errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return err
	}
	return js.DeleteStream(ctx, name)
}
