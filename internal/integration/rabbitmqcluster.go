package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
	"github.com/testcontainers/testcontainers-go/wait"
)

// RabbitMQCluster is a RabbitMQ cluster of three nodes in containers on a
// Docker network of their own, for one test.
type RabbitMQCluster struct {
	// URLs are the nodes' AMQP URLs, amqp://guest:guest@127.0.0.1:PORT/,
	// in the order of Nodes. Their host ports are fixed when the nodes
	// start, so a URL stays valid across Stop and Start.
	URLs []string
	// Nodes are the nodes' Erlang names: rabbit@q1, rabbit@q2, rabbit@q3.
	Nodes []string

	ctrs []testcontainers.Container
}

// RabbitMQClusterNodes is the size of the clusters StartRabbitMQCluster
// starts.
const RabbitMQClusterNodes = 3

// rabbitCookie is the Erlang cookie the nodes of a test cluster share.
const rabbitCookie = "trawl-cluster-test-cookie"

// StartRabbitMQCluster starts a three-node RabbitMQ cluster for t alone
// and removes it when t ends. Each node runs with no plugin (no management
// API, as a stock server), the node name rabbit@ALIAS (its host name and
// alias on the network) and one Erlang cookie; q2 and q3 then join q1 with
// rabbitmqctl join_cluster. It returns once every node reports all three
// running. It skips t unless TRAWL_TEST_CLUSTER is set (make
// test-cluster).
func StartRabbitMQCluster(t testing.TB) *RabbitMQCluster {
	t.Helper()
	skipCluster(t, "RabbitMQ cluster")
	net := newClusterNet(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*startTimeout)
	defer cancel()
	ports, err := freePorts(RabbitMQClusterNodes)
	if err != nil {
		t.Fatalf("integration: pick host ports: %v", err)
	}
	c := &RabbitMQCluster{
		URLs:  make([]string, RabbitMQClusterNodes),
		Nodes: make([]string, RabbitMQClusterNodes),
		ctrs:  make([]testcontainers.Container, RabbitMQClusterNodes),
	}
	img := image(EnvRabbitMQImage, "rabbitmq:3-management")
	err = startAll(RabbitMQClusterNodes, func(i int) error {
		alias := "q" + itoa(i+1)
		c.Nodes[i] = "rabbit@" + alias
		c.URLs[i] = "amqp://guest:guest@127.0.0.1:" + ports[i] + "/"
		ctr, err := net.run(ctx, img, alias, map[string]string{"5672/tcp": ports[i]},
			testcontainers.WithEnv(map[string]string{
				"RABBITMQ_NODENAME":             c.Nodes[i],
				"RABBITMQ_ERLANG_COOKIE":        rabbitCookie,
				"RABBITMQ_ENABLED_PLUGINS_FILE": "/tmp/no-plugins",
			}),
			testcontainers.WithFiles(testcontainers.ContainerFile{Reader: strings.NewReader("[].\n"), ContainerFilePath: "/tmp/no-plugins", FileMode: 0o644}),
			testcontainers.WithWaitStrategyAndDeadline(2*startTimeout, wait.ForLog("Server startup complete").WithStartupTimeout(2*startTimeout)),
		)
		c.ctrs[i] = ctr
		return err
	})
	if err != nil {
		t.Fatalf("integration: start a RabbitMQ cluster (image %q): %v", img, err)
	}
	for i := 1; i < RabbitMQClusterNodes; i++ {
		for _, cmd := range [][]string{
			{"rabbitmqctl", "stop_app"},
			{"rabbitmqctl", "join_cluster", c.Nodes[0]},
			{"rabbitmqctl", "start_app"},
		} {
			if out, err := c.exec(ctx, i, cmd...); err != nil {
				t.Fatalf("integration: %s on %s: %v: %s", strings.Join(cmd, " "), c.Nodes[i], err, out)
			}
		}
	}
	if err := c.waitRunning(ctx, RabbitMQClusterNodes); err != nil {
		t.Fatalf("integration: RabbitMQ cluster: %v", err)
	}
	for _, u := range c.URLs {
		if err := WaitAMQP(ctx, u); err != nil {
			t.Fatalf("integration: %v", err)
		}
	}
	return c
}

// URL returns every node's URL, comma-separated, as --amqp-url takes them.
func (c *RabbitMQCluster) URL() string { return strings.Join(c.URLs, ",") }

// Stop stops node i (SIGTERM: RabbitMQ hands its queue leaderships over
// as it shuts down; SIGKILL after 10s). The container stays.
func (c *RabbitMQCluster) Stop(ctx context.Context, i int) error {
	return stopContainer(ctx, c.ctrs[i], 10*time.Second)
}

// Index returns the index of the node named node (rabbit@q1), or -1.
func (c *RabbitMQCluster) Index(node string) int {
	for i, n := range c.Nodes {
		if n == node {
			return i
		}
	}
	return -1
}

// QueueLeader returns the node that leads quorum queue name (or holds
// classic queue name), asking node i, and the queue's type.
func (c *RabbitMQCluster) QueueLeader(ctx context.Context, i int, name string) (node, typ string, err error) {
	out, err := c.exec(ctx, i, "rabbitmqctl", "list_queues", "--quiet", "--formatter", "json", "name", "type", "leader", "pid")
	if err != nil {
		return "", "", fmt.Errorf("integration: list_queues on %s: %w: %s", c.Nodes[i], err, out)
	}
	var qs []struct {
		Name   string `json:"name"`
		Type   string `json:"type"`
		Leader string `json:"leader"`
		Pid    string `json:"pid"`
	}
	if err := json.Unmarshal([]byte(jsonPart(out, '[')), &qs); err != nil {
		return "", "", fmt.Errorf("integration: list_queues on %s: %w: %s", c.Nodes[i], err, out)
	}
	for _, q := range qs {
		if q.Name == name {
			return q.Leader, q.Type, nil
		}
	}
	return "", "", fmt.Errorf("integration: no queue %q on %s", name, c.Nodes[i])
}

// jsonPart cuts what precedes the first open (a '[' or '{') of the output
// of a CLI tool.
func jsonPart(s string, open byte) string {
	if i := strings.IndexByte(s, open); i >= 0 {
		return s[i:]
	}
	return s
}

// exec runs cmd in the container of node i and returns its output.
func (c *RabbitMQCluster) exec(ctx context.Context, i int, cmd ...string) (string, error) {
	code, r, err := c.ctrs[i].Exec(ctx, cmd, tcexec.Multiplexed(), tcexec.WithEnv([]string{"RABBITMQ_ERLANG_COOKIE=" + rabbitCookie}))
	if err != nil {
		return "", err
	}
	b, _ := io.ReadAll(r)
	if code != 0 {
		return string(b), fmt.Errorf("exit %d", code)
	}
	return string(b), nil
}

// waitRunning waits until node 0 reports n running nodes.
func (c *RabbitMQCluster) waitRunning(ctx context.Context, n int) error {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		out, err := c.exec(ctx, 0, "rabbitmqctl", "cluster_status", "--quiet", "--formatter", "json")
		if err == nil {
			var st struct {
				Running []string `json:"running_nodes"`
			}
			if json.Unmarshal([]byte(jsonPart(out, '{')), &st) == nil && len(st.Running) == n {
				return nil
			}
		}
		last = fmt.Sprint(err, ": ", out)
		select {
		case <-ctx.Done():
			return fmt.Errorf("fewer than %d nodes running (last: %s): %w", n, last, ctx.Err())
		case <-tick.C:
		}
	}
}
