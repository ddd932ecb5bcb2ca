package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/testcontainers/testcontainers-go"
	tcnetwork "github.com/testcontainers/testcontainers-go/network"
)

// EnvCluster turns on the tests of broker clusters (three servers each,
// started per test): make test-cluster sets it to 1. Without it,
// StartNATSCluster, StartRedisFailoverCluster and StartRabbitMQCluster skip their test
// with a message saying so, so that make test stays within its time.
const EnvCluster = "TRAWL_TEST_CLUSTER"

// skipCluster skips t unless EnvCluster is set, and under -short.
func skipCluster(t testing.TB, what string) {
	t.Helper()
	if os.Getenv(EnvCluster) == "" {
		t.Skipf("integration: a %s is heavy: make test-cluster runs this test (or set %s=1)", what, EnvCluster)
	}
	skipShort(t, what, "")
}

// clusterNet is a Docker network of its own for the containers of one
// cluster, which reach each other by their aliases on it.
type clusterNet struct {
	nw   *testcontainers.DockerNetwork
	mu   sync.Mutex
	ctrs []testcontainers.Container
}

// newClusterNet creates a network removed, with the containers started
// on it, when t ends.
func newClusterNet(t testing.TB) *clusterNet {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	nw, err := tcnetwork.New(ctx)
	if err != nil {
		t.Fatalf("integration: create a Docker network: %v", err)
	}
	c := &clusterNet{nw: nw}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c.mu.Lock()
		ctrs := c.ctrs
		c.mu.Unlock()
		for _, ctr := range ctrs {
			if err := ctr.Terminate(ctx, testcontainers.StopTimeout(time.Second)); err != nil {
				t.Logf("integration: remove container %s: %v", ctr.GetContainerID(), err)
			}
		}
		if err := nw.Remove(ctx); err != nil {
			t.Logf("integration: remove network %s: %v", nw.Name, err)
		}
	})
	return c
}

// run starts a container on the network under alias, its ports bound to
// the given host ports (so that the addresses stay valid across a stop
// and start), and registers it for removal.
func (c *clusterNet) run(ctx context.Context, img, alias string, ports map[string]string, opts ...testcontainers.ContainerCustomizer) (testcontainers.Container, error) {
	exposed := make([]string, 0, len(ports))
	for p := range ports {
		exposed = append(exposed, p)
	}
	opts = append([]testcontainers.ContainerCustomizer{
		tcnetwork.WithNetwork([]string{alias}, c.nw),
		testcontainers.WithExposedPorts(exposed...),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.PortBindings = network.PortMap{}
			for p, hp := range ports {
				hc.PortBindings[network.MustParsePort(p)] = []network.PortBinding{{HostPort: hp}}
			}
		}),
		testcontainers.WithConfigModifier(func(cfg *container.Config) { cfg.Hostname = alias }),
	}, opts...)
	ctr, err := testcontainers.Run(ctx, img, opts...)
	if ctr != nil {
		c.mu.Lock()
		c.ctrs = append(c.ctrs, ctr)
		c.mu.Unlock()
	}
	if err != nil {
		return ctr, fmt.Errorf("start %s (%s): %w", alias, img, err)
	}
	return ctr, nil
}

// startAll runs start(i) for i in [0, n) at once and returns every error.
func startAll(n int, start func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = start(i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// freePorts returns n host ports that were free a moment ago.
func freePorts(n int) ([]string, error) {
	ps := make([]string, 0, n)
	seen := map[string]bool{}
	for len(ps) < n {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		if !seen[p] {
			seen[p] = true
			ps = append(ps, p)
		}
	}
	return ps, nil
}

// stopContainer stops ctr: SIGTERM, then SIGKILL after grace.
func stopContainer(ctx context.Context, ctr testcontainers.Container, grace time.Duration) error {
	if err := ctr.Stop(ctx, &grace); err != nil {
		return fmt.Errorf("integration: stop container %s: %w", ctr.GetContainerID(), err)
	}
	return nil
}

// itoa is strconv.Itoa, short.
func itoa(i int) string { return strconv.Itoa(i) }
