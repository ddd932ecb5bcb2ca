package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	"go.uber.org/goleak"
)

// servers holds the containers shared by the tests of one binary. It is the
// package's only state; Main creates it and removes its containers.
type servers struct {
	mu      sync.Mutex
	running bool // Main is running the tests
	started []testcontainers.Container

	redis    once[string]
	cluster  once[[]string]
	rabbitmq once[RabbitMQServer]
	stock    once[RabbitMQServer]
	nats     once[string]
}

// once starts a shared server at most once and remembers the outcome,
// including a failure, so that every test sees the same answer quickly.
type once[T any] struct {
	mu   sync.Mutex
	done bool
	val  T
	err  error
}

// get returns the outcome of start, calling it on first use.
func (o *once[T]) get(start func() (T, error)) (T, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.done {
		o.val, o.err = start()
		o.done = true
	}
	return o.val, o.err
}

var shared = &servers{}

// Main runs the tests of a package that uses the helpers of this package,
// removes the containers they started, and then fails the binary if a
// goroutine outlives the tests (go.uber.org/goleak), unless the tests
// already failed. Call it from TestMain:
//
//	func TestMain(m *testing.M) { integration.Main(m) }
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run is Main that returns the exit code instead of exiting, for a
// TestMain with more to do after the tests.
func Run(m *testing.M) int {
	shared.mu.Lock()
	shared.running = true
	shared.mu.Unlock()

	code := m.Run()

	shared.mu.Lock()
	ctrs := shared.started
	shared.started = nil
	shared.running = false
	shared.mu.Unlock()
	for _, c := range ctrs {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := c.Terminate(ctx, testcontainers.StopTimeout(time.Second)); err != nil {
			fmt.Fprintf(os.Stderr, "integration: remove container %s: %v\n", c.GetContainerID(), err)
		}
		cancel()
	}
	// After the containers: connections to them are closed now, so the
	// goroutines of idle HTTP and broker connections have ended.
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "integration: goroutines outlived the tests: %v\n", err)
			code = 1
		}
	}
	return code
}

// track registers a container for removal by Main.
func (s *servers) track(c testcontainers.Container) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.started = append(s.started, c)
}

// requireMain fails t unless the binary runs its tests through Main.
func (s *servers) requireMain(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		t.Fatal("integration: shared servers need the test binary to call integration.Main from TestMain " +
			"(func TestMain(m *testing.M) { integration.Main(m) }), which removes them at the end")
	}
}

// Name returns a name unique to this test and run, usable as a crawl name,
// queue name or key prefix on a shared server: lower-case letters, digits
// and '-', beginning with the test's name.
func Name(t testing.TB) string {
	t.Helper()
	var b strings.Builder
	for _, r := range strings.ToLower(t.Name()) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			if s := b.String(); s != "" && !strings.HasSuffix(s, "-") {
				b.WriteByte('-')
			}
		}
		if b.Len() >= 40 {
			break
		}
	}
	var rnd [4]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatalf("integration: random name: %v", err)
	}
	return strings.TrimSuffix(b.String(), "-") + "-" + hex.EncodeToString(rnd[:])
}

// Endpoint returns an address (host:port) on which the test process reaches
// port (like "6379/tcp") of ctr. It tries, in order, the host and mapped
// port testcontainers reports, the container's bridge IP and the port
// itself, and the loopback address with the mapped port, and returns the
// first that accepts a TCP connection. The first alone is not enough: inside
// a container running its own Docker engine, testcontainers reports the
// outer default gateway, which does not forward the mapped ports.
func Endpoint(ctx context.Context, ctr testcontainers.Container, port string) (string, error) {
	var cands []string
	var errs []error
	mapped, err := ctr.MappedPort(ctx, port)
	if err != nil {
		errs = append(errs, fmt.Errorf("mapped port: %w", err))
	} else {
		if h, err := ctr.Host(ctx); err == nil {
			cands = append(cands, net.JoinHostPort(h, mapped.Port()))
		} else {
			errs = append(errs, fmt.Errorf("host: %w", err))
		}
	}
	if ip, err := ctr.ContainerIP(ctx); err == nil && ip != "" {
		num, _, _ := strings.Cut(port, "/")
		cands = append(cands, net.JoinHostPort(ip, num))
	}
	if !mapped.IsZero() {
		cands = append(cands, net.JoinHostPort("127.0.0.1", mapped.Port()))
	}
	d := net.Dialer{Timeout: 2 * time.Second}
	for _, a := range cands {
		c, err := d.DialContext(ctx, "tcp", a)
		if err == nil {
			_ = c.Close()
			return a, nil
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("container %s port %s reachable on none of %v: %w",
		ctr.GetContainerID(), port, cands, errors.Join(errs...))
}

// skipShort skips t under -short (go test -short, make unit), which starts
// no container, so that the unit run needs neither Docker nor a server.
// env, if not empty, names the variable that points the test at a running
// server instead, with which the test runs under -short too.
func skipShort(t testing.TB, server, env string) {
	t.Helper()
	if !testing.Short() {
		return
	}
	if env == "" {
		t.Skipf("integration: -short starts no container, and this test needs a %s container of its own", server)
	}
	t.Skipf("integration: -short starts no container; set %s to run this test against a %s server", env, server)
}

// image returns the image named by the environment variable env, or def.
func image(env, def string) string {
	if v := os.Getenv(env); v != "" {
		return v
	}
	return def
}

// killContainer sends SIGKILL to ctr's main process, as a crash or
// `docker kill` would: the server gets no chance to flush or close
// anything. The container stays, stopped, and can be started again.
func killContainer(ctx context.Context, ctr testcontainers.Container) error {
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return fmt.Errorf("integration: docker client: %w", err)
	}
	defer cli.Close()
	if _, err := cli.ContainerKill(ctx, ctr.GetContainerID(), client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		return fmt.Errorf("integration: kill container %s: %w", ctr.GetContainerID(), err)
	}
	// Wait until Docker reports it stopped, so that Start starts it anew.
	for {
		st, err := ctr.State(ctx)
		if err != nil {
			return fmt.Errorf("integration: state of container %s: %w", ctr.GetContainerID(), err)
		}
		if !st.Running {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("integration: container %s still running after SIGKILL: %w", ctr.GetContainerID(), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
