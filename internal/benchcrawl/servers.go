package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/testcontainers/testcontainers-go"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/trawlhq/trawl/internal/integration"
)

// server is a broker server in a container, with what the benchmark reads
// from it.
type server struct {
	kind   string   // redis, nats or rabbitmq
	flags  []string // the trawl flags that reach it
	cpu    cpuMeter // the server's CPU time so far
	cpuHow string   // where cpu reads it

	// requests returns a counter of what clients have sent the server
	// (commands, messages, socket reads) and the client connections open.
	requests func(ctx context.Context) (count int64, conns int, err error)
	// countUnit names what requests counts.
	countUnit string
	// scripted, on Redis, resets the server's command statistics
	// (reset true) or sums the calls of every command in them since,
	// those run inside scripts included, less the benchmark's own.
	scripted func(ctx context.Context, reset bool) (int64, error)
	// byCommand, on Redis, is what scripted summed, by command, most first.
	byCommand func(ctx context.Context) (string, error)

	ctr    testcontainers.Container
	closes []func()
}

// image returns the image named by the environment variable env, or def.
func image(env, def string) string {
	if v := os.Getenv(env); v != "" {
		return v
	}
	return def
}

// startServer starts a server of kind in a container of the local images.
func startServer(ctx context.Context, kind string) (s *server, err error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	s = &server{kind: kind}
	defer func() {
		if err != nil {
			s.close()
			s = nil
		}
	}()
	var (
		img    string
		ports  []string
		custom []testcontainers.ContainerCustomizer
	)
	switch kind {
	case "redis":
		img, ports = image(integration.EnvRedisImage, "redis:7"), []string{"6379/tcp"}
		custom = append(custom, testcontainers.WithWaitStrategy(wait.ForLog("Ready to accept connections")))
	case "nats":
		img, ports = image(integration.EnvNATSImage, "nats:2"), []string{"4222/tcp", "8222/tcp"}
		custom = append(custom,
			testcontainers.WithCmd("-js", "-sd", "/data", "-m", "8222"),
			testcontainers.WithWaitStrategy(wait.ForLog("Server is ready")))
	case "rabbitmq":
		// A stock server: no plugin, so no management API. The image
		// enables the management plugin in its enabled-plugins file;
		// point the server at an empty list instead.
		img, ports = image(integration.EnvRabbitMQImage, "rabbitmq:3-management"), []string{"5672/tcp"}
		custom = append(custom,
			testcontainers.WithEnv(map[string]string{"RABBITMQ_ENABLED_PLUGINS_FILE": "/tmp/no-plugins"}),
			testcontainers.WithFiles(testcontainers.ContainerFile{Reader: strings.NewReader("[].\n"), ContainerFilePath: "/tmp/no-plugins", FileMode: 0o644}),
			testcontainers.WithWaitStrategy(wait.ForLog("Server startup complete").WithStartupTimeout(3*time.Minute)))
	default:
		return nil, fmt.Errorf("unknown server %q", kind)
	}
	custom = append(custom, testcontainers.WithExposedPorts(ports...))
	ctr, err := testcontainers.Run(ctx, img, custom...)
	if ctr != nil {
		s.ctr = ctr
	}
	if err != nil {
		return s, fmt.Errorf("start %s container (image %s; make bench-crawl builds the local images): %w", kind, img, err)
	}
	addr, err := integration.Endpoint(ctx, ctr, ports[0])
	if err != nil {
		return s, err
	}
	switch kind {
	case "redis":
		err = s.redis(ctx, addr)
	case "nats":
		err = s.nats(ctx, addr)
	case "rabbitmq":
		err = s.rabbitmq(ctx, addr)
	}
	return s, err
}

// close removes the container.
func (s *server) close() {
	for i := len(s.closes) - 1; i >= 0; i-- {
		s.closes[i]()
	}
	if s.ctr == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.ctr.Terminate(ctx, testcontainers.StopTimeout(time.Second)); err != nil {
		fmt.Fprintf(os.Stderr, "benchcrawl: remove container %s: %v\n", s.ctr.GetContainerID(), err)
	}
}

// containerCPU sets cpu to the container's CPU usage.
func (s *server) containerCPU(ctx context.Context) error {
	st, err := s.ctr.Inspect(ctx)
	if err != nil {
		return fmt.Errorf("inspect %s container: %w", s.kind, err)
	}
	if st.State == nil || st.State.Pid == 0 {
		return fmt.Errorf("%s container has no process", s.kind)
	}
	s.cpu, s.cpuHow, err = containerCPU(st.State.Pid)
	if err != nil {
		return fmt.Errorf("%s server's CPU: %w", s.kind, err)
	}
	return nil
}

// redis reads CPU from INFO cpu and requests from INFO stats: every
// command counts (total_commands_processed), less every command the
// benchmark itself sent before the reading (its earlier readings included),
// so that readings as frequent as the idle window's samples add nothing.
func (s *server) redis(ctx context.Context, addr string) error {
	c := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 1})
	var own atomic.Int64 // commands this client sent
	c.AddHook(countHook{&own})
	s.closes = append(s.closes, func() { _ = c.Close() })
	s.flags = []string{"--broker=redis", "--redis-url", "redis://" + addr}
	info := func(ctx context.Context, sections ...string) (map[string]string, error) {
		txt, err := c.Info(ctx, sections...).Result()
		if err != nil {
			return nil, fmt.Errorf("redis INFO: %w", err)
		}
		m := map[string]string{}
		for line := range strings.Lines(txt) {
			if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
				m[k] = v
			}
		}
		return m, nil
	}
	s.cpu = func() (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m, err := info(ctx, "cpu")
		if err != nil {
			return 0, err
		}
		sys, err1 := strconv.ParseFloat(m["used_cpu_sys"], 64)
		user, err2 := strconv.ParseFloat(m["used_cpu_user"], 64)
		if err := errors.Join(err1, err2); err != nil {
			return 0, fmt.Errorf("redis INFO cpu: %w", err)
		}
		return time.Duration((sys + user) * float64(time.Second)), nil
	}
	s.cpuHow = "INFO cpu (used_cpu_sys + used_cpu_user)"
	calls := func(ctx context.Context) (map[string]int64, error) {
		m, err := info(ctx, "commandstats")
		if err != nil {
			return nil, err
		}
		out := map[string]int64{}
		for k, v := range m {
			cmd, ok := strings.CutPrefix(k, "cmdstat_")
			if !ok || cmd == "info" || cmd == "config|resetstat" {
				continue
			}
			calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
			c, err := strconv.ParseInt(calls, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("redis INFO commandstats: %s: %w", k, err)
			}
			out[cmd] = c
		}
		return out, nil
	}
	s.scripted = func(ctx context.Context, reset bool) (int64, error) {
		if reset {
			return 0, c.ConfigResetStat(ctx).Err()
		}
		m, err := calls(ctx)
		var n int64
		for _, c := range m {
			n += c
		}
		return n, err
	}
	s.byCommand = func(ctx context.Context) (string, error) {
		m, err := calls(ctx)
		if err != nil {
			return "", err
		}
		cmds := slices.SortedFunc(maps.Keys(m), func(a, b string) int { return cmp.Compare(m[b], m[a]) })
		var parts []string
		for _, c := range cmds {
			parts = append(parts, fmt.Sprintf("%s %d", c, m[c]))
		}
		return strings.Join(parts, ", "), nil
	}
	s.countUnit = "commands"
	s.requests = func(ctx context.Context) (int64, int, error) {
		sent := own.Load() // this reading is counted by the next
		m, err := info(ctx, "stats", "clients")
		if err != nil {
			return 0, 0, err
		}
		n, err1 := strconv.ParseInt(m["total_commands_processed"], 10, 64)
		conns, err2 := strconv.Atoi(m["connected_clients"])
		if err := errors.Join(err1, err2); err != nil {
			return 0, 0, fmt.Errorf("redis INFO: %w", err)
		}
		// Less the benchmark's commands and its connection.
		return n - sent, conns - 1, nil
	}
	_, err := s.cpu()
	return err
}

// nats reads requests from the monitoring endpoint: the messages the
// client connections sent (in_msgs of /connz, closed connections too) and
// the connections open.
func (s *server) nats(ctx context.Context, addr string) error {
	mon, err := integration.Endpoint(ctx, s.ctr, "8222/tcp")
	if err != nil {
		return err
	}
	s.flags = []string{"--broker=nats", "--nats-url", "nats://" + addr, "--dedup=local"}
	s.countUnit = "messages"
	s.requests = func(ctx context.Context) (int64, int, error) {
		var all, open struct {
			NumConnections int `json:"num_connections"`
			Total          int `json:"total"`
			Connections    []struct {
				InMsgs int64 `json:"in_msgs"`
			} `json:"connections"`
		}
		if err := getJSON(ctx, "http://"+mon+"/connz?state=all&limit=100000", &all); err != nil {
			return 0, 0, err
		}
		if all.Total > len(all.Connections) {
			return 0, 0, fmt.Errorf("nats /connz: %d connections, %d listed", all.Total, len(all.Connections))
		}
		if err := getJSON(ctx, "http://"+mon+"/connz?state=open", &open); err != nil {
			return 0, 0, err
		}
		var n int64
		for _, c := range all.Connections {
			n += c.InMsgs
		}
		return n, open.NumConnections, nil
	}
	return s.containerCPU(ctx)
}

func getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return nil
}

// rabbitmq reads requests with rabbitmqctl list_connections recv_cnt (the
// socket reads of each AMQP connection) in the container.
func (s *server) rabbitmq(ctx context.Context, addr string) error {
	s.flags = []string{"--broker=rabbitmq", "--amqp-url", "amqp://guest:guest@" + addr + "/", "--dedup=local"}
	s.countUnit = "socket reads"
	s.requests = func(ctx context.Context) (int64, int, error) {
		cmd := []string{"rabbitmqctl", "list_connections", "recv_cnt", "-q", "--no-table-headers"}
		code, out, err := s.ctr.Exec(ctx, cmd, tcexec.Multiplexed())
		if err != nil {
			return 0, 0, fmt.Errorf("rabbitmqctl: %w", err)
		}
		b, _ := io.ReadAll(out)
		if code != 0 {
			return 0, 0, fmt.Errorf("rabbitmqctl list_connections: exit %d: %s", code, b)
		}
		var n int64
		conns := 0
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		for sc.Scan() {
			f := strings.TrimSpace(sc.Text())
			if f == "" {
				continue
			}
			v, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				return 0, 0, fmt.Errorf("rabbitmqctl list_connections: %q: %w", f, err)
			}
			n += v
			conns++
		}
		return n, conns, nil
	}
	return s.containerCPU(ctx)
}

// countHook counts the commands a client sends.
type countHook struct{ n *atomic.Int64 }

func (countHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h countHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h countHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}
