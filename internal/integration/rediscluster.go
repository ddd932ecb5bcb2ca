package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/testcontainers/testcontainers-go"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
	"github.com/testcontainers/testcontainers-go/wait"
)

// RedisFailoverCluster is a Redis Cluster of three primaries, each with one
// replica, in six containers on a Docker network of their own, for one
// test.
//
// Its nodes announce the addresses they have on that network (host:6379),
// and cluster clients connect to the announced addresses, so the test
// process (and the trawl processes it starts) must reach the containers'
// addresses: they do on a Linux host, where Docker routes its networks,
// not through Docker Desktop's VM. Mapped ports would not do: a node
// announcing 127.0.0.1:PORT for the host's clients would give the same
// address to the other nodes, for which 127.0.0.1 is themselves.
type RedisFailoverCluster struct {
	// Addrs are the nodes' addresses, host:port; the first three were
	// created primaries.
	Addrs []string

	ctrs []testcontainers.Container
}

// RedisClusterNodes is the number of nodes of the clusters
// StartRedisFailoverCluster starts: three primaries, three replicas.
const RedisClusterNodes = 6

// RedisClusterNodeTimeout is the clusters' cluster-node-timeout: a
// primary unreachable for longer is failed over to its replica.
const RedisClusterNodeTimeout = 2 * time.Second

// StartRedisFailoverCluster starts a Redis Cluster of three primaries with one
// replica each (redis-cli --cluster create … --cluster-replicas 1) for t
// alone and removes it when t ends. It returns once every node sees the
// cluster as complete and every replica is in sync with its primary. It
// skips t unless TRAWL_TEST_CLUSTER is set (make test-cluster).
func StartRedisFailoverCluster(t testing.TB) *RedisFailoverCluster {
	t.Helper()
	skipCluster(t, "Redis Cluster with replicas")
	net := newClusterNet(t)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c := &RedisFailoverCluster{Addrs: make([]string, RedisClusterNodes), ctrs: make([]testcontainers.Container, RedisClusterNodes)}
	err := startAll(RedisClusterNodes, func(i int) error {
		ctr, err := net.run(ctx, image(EnvRedisImage, "redis:7"), "r"+itoa(i+1), nil,
			testcontainers.WithCmd("redis-server",
				"--cluster-enabled", "yes",
				"--cluster-config-file", "nodes.conf",
				"--cluster-node-timeout", itoa(int(RedisClusterNodeTimeout/time.Millisecond)),
				"--save", "", "--appendonly", "no",
				"--protected-mode", "no"),
			testcontainers.WithWaitStrategyAndDeadline(startTimeout, wait.ForLog("Ready to accept connections").WithStartupTimeout(startTimeout)),
		)
		c.ctrs[i] = ctr
		if err != nil {
			return err
		}
		ip, err := ctr.ContainerIP(ctx)
		if err != nil || ip == "" {
			return fmt.Errorf("node %d: container IP (%q): %w", i, ip, err)
		}
		c.Addrs[i] = ip + ":6379"
		return nil
	})
	if err != nil {
		t.Fatalf("integration: start Redis Cluster nodes (image %q): %v", image(EnvRedisImage, "redis:7"), err)
	}
	for _, a := range c.Addrs {
		cl := goredis.NewClient(&goredis.Options{Addr: a, DialTimeout: 2 * time.Second})
		err := cl.Ping(ctx).Err()
		_ = cl.Close()
		if err != nil {
			t.Fatalf("integration: Redis Cluster node %s is not reachable from the test process "+
				"(the containers' network addresses must be routable, which they are not on Docker Desktop): %v", a, err)
		}
	}
	cmd := append([]string{"redis-cli", "--cluster", "create"}, c.Addrs...)
	cmd = append(cmd, "--cluster-replicas", "1", "--cluster-yes")
	code, out, err := c.ctrs[0].Exec(ctx, cmd, tcexec.Multiplexed())
	if err != nil {
		t.Fatalf("integration: redis-cli --cluster create: %v", err)
	}
	if code != 0 {
		b, _ := io.ReadAll(out)
		t.Fatalf("integration: redis-cli --cluster create: exit %d: %s", code, b)
	}
	for _, a := range c.Addrs {
		if err := waitClusterOK(ctx, a); err != nil {
			t.Fatalf("integration: %v", err)
		}
	}
	if err := c.waitReplicas(ctx); err != nil {
		t.Fatalf("integration: %v", err)
	}
	return c
}

// URL returns the cluster as --redis-url takes it:
// redis://node1?addr=node2&addr=node3….
func (c *RedisFailoverCluster) URL() string {
	q := url.Values{}
	for _, a := range c.Addrs[1:] {
		q.Add("addr", a)
	}
	return "redis://" + c.Addrs[0] + "?" + q.Encode()
}

// Client returns a cluster client of c, closed when t ends.
func (c *RedisFailoverCluster) Client(t testing.TB) *goredis.ClusterClient {
	t.Helper()
	cl := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs})
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// Primary returns the index in Addrs of the primary that serves key now,
// as the first node that answers within a second says.
func (c *RedisFailoverCluster) Primary(ctx context.Context, key string) (int, error) {
	var last error
	for _, a := range c.Addrs {
		i, err := c.primaryFrom(ctx, a, key)
		if err == nil {
			return i, nil
		}
		last = err
	}
	return -1, fmt.Errorf("integration: primary of %q: no node answers (last: %w)", key, last)
}

func (c *RedisFailoverCluster) primaryFrom(ctx context.Context, addr, key string) (int, error) {
	cl := goredis.NewClient(&goredis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1})
	defer cl.Close()
	slot, err := cl.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return -1, fmt.Errorf("cluster keyslot %q on %s: %w", key, addr, err)
	}
	shards, err := cl.ClusterShards(ctx).Result()
	if err != nil {
		return -1, fmt.Errorf("cluster shards on %s: %w", addr, err)
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if slot < r.Start || slot > r.End {
				continue
			}
			for _, n := range sh.Nodes {
				if n.Role != "master" || n.Health != "online" {
					continue
				}
				a := net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
				for i, b := range c.Addrs {
					if a == b {
						return i, nil
					}
				}
				return -1, fmt.Errorf("slot %d is served by %s, none of %v", slot, a, c.Addrs)
			}
		}
	}
	return -1, fmt.Errorf("%s: no node serves slot %d", addr, slot)
}

// Stop stops node i at once (SIGKILL), as a crashed machine would; the
// container stays and Start starts it again.
func (c *RedisFailoverCluster) Stop(ctx context.Context, i int) error {
	return killContainer(ctx, c.ctrs[i])
}

// Start starts node i again after Stop; it rejoins the cluster (as a
// replica, if its replica was promoted meanwhile).
func (c *RedisFailoverCluster) Start(ctx context.Context, i int) error {
	if err := c.ctrs[i].Start(ctx); err != nil {
		return fmt.Errorf("integration: start redis node %s: %w", c.Addrs[i], err)
	}
	return nil
}

// WaitPrimaryServing waits until the slot of key is served by a primary
// other than node i, which answers, and returns its index.
func (c *RedisFailoverCluster) WaitPrimaryServing(ctx context.Context, key string, i int) (int, error) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		j, err := -1, error(nil)
		for k, a := range c.Addrs {
			if k == i {
				continue
			}
			if j, err = c.primaryFrom(ctx, a, key); err == nil {
				break
			}
		}
		if err == nil && j != i {
			cl := goredis.NewClient(&goredis.Options{Addr: c.Addrs[j], DialTimeout: time.Second})
			err = cl.Ping(ctx).Err()
			_ = cl.Close()
			if err == nil {
				return j, nil
			}
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("integration: no other primary took over %q from %s (last: %v): %w", key, c.Addrs[i], err, ctx.Err())
		case <-tick.C:
		}
	}
}

// waitReplicas waits until every replica reports its link to its
// primary up and the cluster has three of them.
func (c *RedisFailoverCluster) waitReplicas(ctx context.Context) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		up, err := 0, error(nil)
		for _, a := range c.Addrs {
			cl := goredis.NewClient(&goredis.Options{Addr: a})
			info, ierr := cl.Info(ctx, "replication").Result()
			_ = cl.Close()
			if ierr != nil {
				err = ierr
				continue
			}
			if strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up") {
				up++
			}
		}
		if up == RedisClusterNodes/2 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redis cluster: %d of %d replicas in sync (last error: %v): %w", up, RedisClusterNodes/2, err, ctx.Err())
		case <-tick.C:
		}
	}
}
