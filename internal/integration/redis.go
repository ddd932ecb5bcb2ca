package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	goredis "github.com/redis/go-redis/v9"
	"github.com/testcontainers/testcontainers-go"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/trawlhq/trawl/internal/redislayout"
)

// Environment variables read by the Redis helpers.
const (
	// EnvRedisURL names a Redis server to use instead of a container.
	EnvRedisURL = "TRAWL_TEST_REDIS_URL"
	// EnvRedisCluster names Redis Cluster nodes (host:port, comma-separated)
	// to use instead of containers.
	EnvRedisCluster = "TRAWL_TEST_REDIS_CLUSTER"
	// EnvRedisImage names the Redis image to start (default "redis:7").
	EnvRedisImage = "TRAWL_REDIS_IMAGE"
)

// startTimeout bounds starting one server. It is given to each wait
// strategy and to testcontainers' deadline for them, since both default
// to 60s: a RabbitMQ container starting beside others on a loaded 2-CPU
// machine took longer.
const startTimeout = 2 * time.Minute

// Redis returns the URL (redis://host:port) of a Redis server shared by the
// tests of this binary: TRAWL_TEST_REDIS_URL if set, else a container
// started on first use. It fails t if no server can be had, and skips
// it under -short unless the variable is set.
func Redis(t testing.TB) string {
	t.Helper()
	if u := os.Getenv(EnvRedisURL); u != "" {
		return u
	}
	skipShort(t, "Redis", EnvRedisURL)
	shared.requireMain(t)
	u, err := shared.redis.get(startRedis)
	if err != nil {
		t.Fatalf("integration: no Redis server (set %s, or make Docker and the image %q available): %v",
			EnvRedisURL, image(EnvRedisImage, "redis:7"), err)
	}
	return u
}

// RedisClient returns a client of the server Redis returns, closed when the
// test ends. Tests share the server: keep to keys named after Name(t).
func RedisClient(t testing.TB) *goredis.Client {
	t.Helper()
	return redisClient(t, Redis(t))
}

// redisClient returns a client of the server at url, closed when t ends.
func redisClient(t testing.TB, url string) *goredis.Client {
	t.Helper()
	opt, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatalf("integration: parse Redis URL: %v", err)
	}
	c := goredis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// RedisInfo returns the numeric fields of the INFO sections of c's
// server (connected_clients, blocked_clients, total_commands_processed
// …), and for section commandstats each command's calls (cmdstat_lrange
// …). It fails t if INFO fails.
func RedisInfo(t testing.TB, c goredis.UniversalClient, sections ...string) map[string]int64 {
	t.Helper()
	s, err := c.Info(t.Context(), sections...).Result()
	if err != nil {
		t.Fatalf("integration: INFO %v: %v", sections, err)
	}
	m := map[string]int64{}
	for line := range strings.Lines(s) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if calls, found := strings.CutPrefix(v, "calls="); found {
			v, _, _ = strings.Cut(calls, ",")
		}
		if n, err := strconv.ParseInt(v, 10, 64); ok && err == nil {
			m[k] = n
		}
	}
	return m
}

func startRedis() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	// Not tcredis.Run: its readiness check dials the host testcontainers
	// guesses, which is wrong on some machines (see Endpoint).
	ctr, err := testcontainers.Run(ctx, image(EnvRedisImage, "redis:7"),
		testcontainers.WithExposedPorts("6379/tcp"),
		testcontainers.WithWaitStrategyAndDeadline(startTimeout, wait.ForLog("Ready to accept connections").WithStartupTimeout(startTimeout)),
	)
	if ctr != nil {
		shared.track(ctr)
	}
	if err != nil {
		return "", fmt.Errorf("start redis container: %w", err)
	}
	addr, err := Endpoint(ctx, ctr, "6379/tcp")
	if err != nil {
		return "", err
	}
	return "redis://" + addr, nil
}

// RedisCluster returns the addresses (host:port) of the nodes of a
// three-node Redis Cluster shared by the tests of this binary, all slots
// assigned and no replicas: TRAWL_TEST_REDIS_CLUSTER if set, else three
// containers joined with redis-cli --cluster create on first use.
func RedisCluster(t testing.TB) []string {
	t.Helper()
	if v := os.Getenv(EnvRedisCluster); v != "" {
		return strings.Split(v, ",")
	}
	skipShort(t, "Redis Cluster", EnvRedisCluster)
	shared.requireMain(t)
	addrs, err := shared.cluster.get(startCluster)
	if err != nil {
		t.Fatalf("integration: no Redis Cluster (set %s, or make Docker and the image %q available): %v",
			EnvRedisCluster, image(EnvRedisImage, "redis:7"), err)
	}
	return addrs
}

// RedisClusterClient returns a cluster client of the nodes RedisCluster
// returns, closed when the test ends.
func RedisClusterClient(t testing.TB) *goredis.ClusterClient {
	t.Helper()
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: RedisCluster(t)})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func startCluster() ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()

	const nodes = 3
	type started struct {
		ctr testcontainers.Container
		err error
	}
	ch := make(chan started, nodes)
	for range nodes {
		go func() {
			ctr, err := testcontainers.Run(ctx, image(EnvRedisImage, "redis:7"),
				testcontainers.WithCmd("redis-server",
					"--cluster-enabled", "yes",
					"--cluster-config-file", "nodes.conf",
					"--cluster-node-timeout", "5000",
					"--save", "", "--appendonly", "no",
					"--protected-mode", "no"),
				testcontainers.WithExposedPorts("6379/tcp"),
				testcontainers.WithWaitStrategyAndDeadline(startTimeout, wait.ForLog("Ready to accept connections").WithStartupTimeout(startTimeout)),
			)
			ch <- started{ctr, err}
		}()
	}
	var errs []error
	var ctrs []testcontainers.Container
	for range nodes {
		s := <-ch
		if s.ctr != nil {
			shared.track(s.ctr)
			ctrs = append(ctrs, s.ctr)
		}
		if s.err != nil {
			errs = append(errs, s.err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("start cluster nodes: %w", err)
	}

	// Nodes talk to each other, and clients to them, on the addresses they
	// announce: their bridge IPs.
	addrs := make([]string, len(ctrs))
	for i, c := range ctrs {
		ip, err := c.ContainerIP(ctx)
		if err != nil || ip == "" {
			return nil, fmt.Errorf("cluster node IP (%q): %w", ip, err)
		}
		addrs[i] = ip + ":6379"
	}
	for _, a := range addrs {
		c := goredis.NewClient(&goredis.Options{Addr: a, DialTimeout: 2 * time.Second})
		err := c.Ping(ctx).Err()
		_ = c.Close()
		if err != nil {
			return nil, fmt.Errorf("cluster node %s is not reachable from the test process "+
				"(its bridge IP must be routable, which it is not on Docker Desktop): %w", a, err)
		}
	}

	cmd := append([]string{"redis-cli", "--cluster", "create"}, addrs...)
	cmd = append(cmd, "--cluster-replicas", "0", "--cluster-yes")
	code, out, err := ctrs[0].Exec(ctx, cmd, tcexec.Multiplexed())
	if err != nil {
		return nil, fmt.Errorf("redis-cli --cluster create: %w", err)
	}
	if code != 0 {
		b, _ := io.ReadAll(out)
		return nil, fmt.Errorf("redis-cli --cluster create: exit %d: %s", code, b)
	}

	// Wait until every node sees the cluster as complete.
	for _, a := range addrs {
		if err := waitClusterOK(ctx, a); err != nil {
			return nil, err
		}
	}
	return addrs, nil
}

func waitClusterOK(ctx context.Context, addr string) error {
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		info, err := c.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster node %s never reached cluster_state:ok (last: %v): %w", addr, err, ctx.Err())
		case <-tick.C:
		}
	}
}

// RedisServer is a Redis server in a container of its own.
type RedisServer struct {
	// URL is redis://127.0.0.1:port, or rediss://user:password@host:port
	// with WithTLS and WithPassword.
	URL string

	ctr testcontainers.Container
	tls bool // the server speaks TLS only
}

// RedisContainer starts a Redis container for t alone, configured by
// opts, and removes it when t ends. Its host port is fixed when it starts,
// so URL stays valid across Restart and clients reconnect by themselves.
// It fails t if the container cannot be started; it needs Docker even
// where TRAWL_TEST_REDIS_URL is set.
func RedisContainer(t testing.TB, opts ...ServerOption) *RedisServer {
	t.Helper()
	skipShort(t, "Redis", "")
	o := serverOpts(opts)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	args := []string{"redis-server", "--save", "", "--appendonly", "no"}
	if o.password != "" {
		args = append(args, "--user", "default", "off", "--user", o.user, "on", ">"+o.password, "~*", "&*", "+@all")
	}
	ready := wait.ForLog("Ready to accept connections").WithStartupTimeout(startTimeout)
	custom := []testcontainers.ContainerCustomizer{testcontainers.WithExposedPorts("6379/tcp")}
	switch {
	case o.ca != nil:
		auth := "no"
		if o.clientCerts {
			auth = "yes"
		}
		args = append(args, "--port", "0", "--tls-port", "6379", "--tls-cert-file", tlsCertFile, "--tls-key-file", tlsKeyFile,
			"--tls-ca-cert-file", tlsCAFile, "--tls-auth-clients", auth)
		custom = append(custom, awaitTLS(append([]string{"/usr/local/bin/docker-entrypoint.sh"}, args...)...)...)
	case o.password != "":
		custom = append(custom, testcontainers.WithCmd(args...), testcontainers.WithWaitStrategyAndDeadline(startTimeout, ready))
	default:
		custom = append(custom, testcontainers.WithWaitStrategyAndDeadline(startTimeout, ready)) // the image's command
	}
	var hp string
	var ctr *testcontainers.DockerContainer
	var err error
	for try := 1; ; try++ {
		if hp, err = freePort(); err != nil {
			t.Fatalf("integration: pick a host port: %v", err)
		}
		bind := testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.PortBindings = network.PortMap{
				network.MustParsePort("6379/tcp"): []network.PortBinding{{HostPort: hp}},
			}
		})
		ctr, err = testcontainers.Run(ctx, image(EnvRedisImage, "redis:7"), append(custom, bind)...)
		if ctr != nil {
			terminateOnCleanup(t, ctr)
		}
		if !portTaken(err) || try == portTries {
			break
		}
	}
	if err != nil {
		t.Fatalf("integration: start a Redis container (image %q): %v", image(EnvRedisImage, "redis:7"), err)
	}
	s := &RedisServer{ctr: ctr, tls: o.ca != nil}
	if o.ca != nil {
		if err := installTLS(ctx, ctr, o.ca, ready); err != nil {
			t.Fatalf("integration: Redis with TLS: %v", err)
		}
	}
	u := url.URL{Scheme: "redis", Host: "127.0.0.1:" + hp}
	if _, err := fixedEndpoint(ctx, ctr, hp); err != nil {
		if u.Host, err = Endpoint(ctx, ctr, "6379/tcp"); err != nil {
			t.Fatalf("integration: Redis container: %v", err)
		}
	}
	if o.ca != nil {
		u.Scheme = "rediss"
	}
	if o.password != "" {
		u.User = url.UserPassword(o.user, o.password)
	}
	s.URL = u.String()
	if o.ca == nil {
		if err := waitRedis(ctx, s.URL); err != nil {
			t.Fatalf("integration: Redis container: %v", err)
		}
	}
	return s
}

// Client returns a client of s, closed when t ends: one of its own, so
// that what the server counts of its clients (INFO clients, CLIENT LIST)
// is the test's. Not for a server with TLS (its CA is not the system's).
func (s *RedisServer) Client(t testing.TB) *goredis.Client {
	t.Helper()
	return redisClient(t, s.URL)
}

// Restart stops the server (gracefully, within a second: it saves its
// data) and starts it again, returning once it answers on the same URL.
// A server with TLS cannot be restarted.
func (s *RedisServer) Restart(ctx context.Context) error {
	if s.tls {
		return errors.New("integration: restart: not supported for a server with TLS")
	}
	stop := time.Second
	if err := s.ctr.Stop(ctx, &stop); err != nil {
		return fmt.Errorf("integration: stop redis: %w", err)
	}
	if err := s.ctr.Start(ctx); err != nil {
		return fmt.Errorf("integration: start redis: %w", err)
	}
	return waitRedis(ctx, s.URL)
}

// waitRedis waits until the server at url answers PING.
func waitRedis(ctx context.Context, url string) error {
	opt, err := goredis.ParseURL(url)
	if err != nil {
		return fmt.Errorf("parse %s: %w", url, err)
	}
	c := goredis.NewClient(opt)
	defer c.Close()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := c.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redis at %s: %w (last: %v)", url, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// CheckPartitionKeys checks that crawl's keys on c's server (SCAN, on
// every primary of a Cluster) are those of its layout of n partitions
// (redislayout.Match) and nothing of another count: no key under the tag
// of a partition of another count, none outside the layout, none of the
// queues a repartition moves through (redislayout.RepartitionQueues);
// under the crawl's own tag, of the keys a
// count of one has and a count of n > 1 splits, only the filter's: set
// shards holding at most marks members in all (the crawl's marks, see
// engine.FilterMarks) and Bloom bitmaps (see dedup/redis.DropPartitions).
func CheckPartitionKeys(t testing.TB, c goredis.UniversalClient, crawl string, n, marks int) {
	t.Helper()
	tags := map[string]bool{}
	for p := range n {
		tags[redislayout.PartitionTag(crawl, p, n)] = true
	}
	var mu sync.Mutex
	var members int64 // in the set filter's own shards
	var errs []string
	scan := func(ctx context.Context, c goredis.UniversalClient) error {
		for _, pattern := range []string{redislayout.Pattern(crawl), redislayout.PartitionPattern(crawl)} {
			iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
			for iter.Next(ctx) {
				key := iter.Val()
				k, ok := redislayout.Match(crawl, key)
				tag := key[1:strings.IndexByte(key, '}')]
				mu.Lock()
				switch {
				case !ok:
					errs = append(errs, fmt.Sprintf("key %s is not of the crawl's layout", key))
				case strings.HasPrefix(k.Part, "requests~repartition"):
					errs = append(errs, fmt.Sprintf("key %s of a queue a repartition moves through remains", key))
				case !k.Partitioned || tags[tag]:
				case tag != crawl:
					errs = append(errs, fmt.Sprintf("key %s is of a partition of another count than %d", key, n))
				case k.Part == "dupefilter:bloom:*":
				case k.Part == "dupefilter:*":
					members += c.SCard(ctx, key).Val()
				default:
					errs = append(errs, fmt.Sprintf("key %s (%s) of the layout of one partition remains with %d", key, k.Part, n))
				}
				mu.Unlock()
			}
			if err := iter.Err(); err != nil {
				return err
			}
		}
		return nil
	}
	var err error
	if cc, ok := c.(*goredis.ClusterClient); ok {
		err = cc.ForEachMaster(t.Context(), func(ctx context.Context, c *goredis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(t.Context(), c)
	}
	if err != nil {
		t.Fatalf("integration: SCAN the keys of crawl %s: %v", crawl, err)
	}
	for _, e := range errs {
		t.Error(e)
	}
	if members > int64(marks) {
		t.Errorf("the set filter's own shards hold %d members with %d partitions, want the crawl's %d marks at most", members, n, marks)
	}
}
