package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// Environment variables read by the RabbitMQ helpers.
const (
	// EnvAMQPURL names a RabbitMQ server (amqp://user:pass@host:port/vhost)
	// to use instead of a container.
	EnvAMQPURL = "TRAWL_TEST_AMQP_URL"
	// EnvAMQPManagementURL names the management API of that server
	// (http://user:pass@host:port); default: its host on port 15672 with
	// the same credentials.
	EnvAMQPManagementURL = "TRAWL_TEST_AMQP_MANAGEMENT_URL"
	// EnvRabbitMQImage names the RabbitMQ image to start (default
	// "rabbitmq:3-management"); it must include the management plugin.
	EnvRabbitMQImage = "TRAWL_RABBITMQ_IMAGE"
)

// rabbitStatsInterval is the containers' collect_statistics_interval in
// milliseconds: how stale the management API's counts may be (the server's
// default, 5000, is longer than the conformance suite waits for a count).
const rabbitStatsInterval = 100

// RabbitMQServer is a RabbitMQ server for tests.
type RabbitMQServer struct {
	// URL is the AMQP URL: amqp://guest:guest@host:port/.
	URL string
	// ManagementURL is the management API's base URL, with credentials:
	// http://guest:guest@host:port.
	ManagementURL string

	ctr testcontainers.Container // nil for a server named by EnvAMQPURL
	tls bool                     // WithTLS: the readiness probe has no CA
}

// RabbitMQ returns the AMQP URL of a RabbitMQ server shared by the tests
// of this binary: TRAWL_TEST_AMQP_URL if set, else a container started on
// first use. It fails t if no server can be had (under -short,
// without the variable, it skips t). Tests share the server:
// keep to queues named after Name(t).
func RabbitMQ(t testing.TB) string {
	t.Helper()
	return sharedRabbitMQ(t).URL
}

// RabbitMQManagement returns the management API's base URL (with
// credentials) of the server RabbitMQ returns.
func RabbitMQManagement(t testing.TB) string {
	t.Helper()
	return sharedRabbitMQ(t).ManagementURL
}

func sharedRabbitMQ(t testing.TB) RabbitMQServer {
	t.Helper()
	if u := os.Getenv(EnvAMQPURL); u != "" {
		m, err := externalManagement(u)
		if err != nil {
			t.Fatalf("integration: %s: %v", EnvAMQPURL, err)
		}
		return RabbitMQServer{URL: u, ManagementURL: m}
	}
	skipShort(t, "RabbitMQ", EnvAMQPURL)
	shared.requireMain(t)
	s, err := shared.rabbitmq.get(func() (RabbitMQServer, error) {
		s, err := startRabbitMQ(nil, false, serverOptions{})
		if s != nil && s.ctr != nil {
			shared.track(s.ctr)
		}
		if err != nil {
			return RabbitMQServer{}, err
		}
		return *s, nil
	})
	if err != nil {
		t.Fatalf("integration: no RabbitMQ server (set %s, or make Docker and the image %q available): %v",
			EnvAMQPURL, image(EnvRabbitMQImage, "rabbitmq:3-management"), err)
	}
	return s
}

// externalManagement returns the management URL of the server at amqpURL.
func externalManagement(amqpURL string) (string, error) {
	if m := os.Getenv(EnvAMQPManagementURL); m != "" {
		return m, nil
	}
	uri, err := amqp.ParseURI(amqpURL)
	if err != nil {
		return "", err
	}
	u := url.URL{Scheme: "http", Host: net.JoinHostPort(uri.Host, "15672"), User: url.UserPassword(uri.Username, uri.Password)}
	return u.String(), nil
}

// RabbitMQContainer starts a RabbitMQ container for t alone, configured
// by opts, and removes it when t ends. Its host ports are fixed when it
// starts, so its URLs stay valid across Restart. With WithTLS it serves
// AMQP over TLS only (URL amqps://…) and its management API over HTTPS;
// with WithPassword its only user is the one given (no guest). It fails
// t if the container cannot be started; it needs Docker even where
// TRAWL_TEST_AMQP_URL is set.
func RabbitMQContainer(t testing.TB, opts ...ServerOption) *RabbitMQServer {
	t.Helper()
	skipShort(t, "RabbitMQ", "")
	o := serverOpts(opts)
	var s *RabbitMQServer
	var err error
	for try := 1; ; try++ {
		ports := map[string]string{}
		for _, p := range rabbitPorts(o) {
			hp, perr := freePort()
			if perr != nil {
				t.Fatalf("integration: pick a host port: %v", perr)
			}
			ports[p] = hp
		}
		s, err = startRabbitMQ(ports, false, o)
		if s != nil && s.ctr != nil {
			terminateOnCleanup(t, s.ctr)
		}
		if !portTaken(err) || try == portTries {
			break
		}
	}
	if err != nil {
		t.Fatalf("integration: start a RabbitMQ container (image %q): %v", image(EnvRabbitMQImage, "rabbitmq:3-management"), err)
	}
	return s
}

// rabbitPorts are the container's AMQP and management ports.
func rabbitPorts(o serverOptions) []string {
	if o.ca != nil {
		return []string{"5671/tcp", "15671/tcp"}
	}
	return []string{"5672/tcp", "15672/tcp"}
}

// rabbitConf is the rabbitmq.conf of a server with TLS or a password.
func rabbitConf(o serverOptions) string {
	var b strings.Builder
	if o.ca != nil {
		fmt.Fprintf(&b, "listeners.tcp = none\nlisteners.ssl.default = 5671\n")
		for _, prefix := range []string{"ssl_options", "management.ssl"} {
			fmt.Fprintf(&b, "%[1]s.cacertfile = %[2]s\n%[1]s.certfile = %[3]s\n%[1]s.keyfile = %[4]s\n", prefix, tlsCAFile, tlsCertFile, tlsKeyFile)
		}
		fmt.Fprintf(&b, "ssl_options.verify = verify_none\nssl_options.fail_if_no_peer_cert = false\nmanagement.ssl.port = 15671\n")
	}
	if o.password != "" {
		fmt.Fprintf(&b, "default_user = %s\ndefault_pass = %s\nloopback_users = none\n", o.user, o.password)
	}
	return b.String()
}

// RabbitMQStock returns a RabbitMQ server without any plugin (no
// management API: ManagementURL is empty), as a stock deployment has it,
// shared by the tests of this binary: a container started on first use.
// Tests share it: keep to queues named after Name(t). It fails t if the
// container cannot be started, and skips it under -short.
func RabbitMQStock(t testing.TB) *RabbitMQServer {
	t.Helper()
	skipShort(t, "RabbitMQ", "")
	shared.requireMain(t)
	s, err := shared.stock.get(func() (RabbitMQServer, error) {
		s, err := startRabbitMQ(nil, true, serverOptions{})
		if s != nil && s.ctr != nil {
			shared.track(s.ctr)
		}
		if err != nil {
			return RabbitMQServer{}, err
		}
		return *s, nil
	})
	if err != nil {
		t.Fatalf("integration: start a RabbitMQ container without plugins (image %q): %v", image(EnvRabbitMQImage, "rabbitmq:3-management"), err)
	}
	return &RabbitMQServer{URL: s.URL}
}

// startRabbitMQ starts a container, its ports bound to the given host
// ports (nil: any free ones); stock: with no plugin enabled (no
// management API); o: TLS and credentials.
func startRabbitMQ(ports map[string]string, stock bool, o serverOptions) (*RabbitMQServer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	env := map[string]string{
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": fmt.Sprintf("-rabbit collect_statistics_interval %d", rabbitStatsInterval),
	}
	exposed := rabbitPorts(o)
	amqpPort, mgmtPort := exposed[0], exposed[1]
	var files []testcontainers.ContainerFile
	if conf := rabbitConf(o); conf != "" {
		env["RABBITMQ_CONFIG_FILE"] = "/etc/rabbitmq/trawl-test.conf"
		files = append(files, testcontainers.ContainerFile{Reader: strings.NewReader(conf), ContainerFilePath: "/etc/rabbitmq/trawl-test.conf", FileMode: 0o644})
	}
	if stock {
		// The image enables the management plugin in its enabled
		// plugins file; point the server at an empty list instead.
		env["RABBITMQ_ENABLED_PLUGINS_FILE"] = "/tmp/no-plugins"
		files = append(files, testcontainers.ContainerFile{Reader: strings.NewReader("[].\n"), ContainerFilePath: "/tmp/no-plugins", FileMode: 0o644})
		exposed = exposed[:1]
	}
	ready := wait.ForLog("Server startup complete").WithStartupTimeout(startTimeout)
	opts := []testcontainers.ContainerCustomizer{
		testcontainers.WithExposedPorts(exposed...),
		testcontainers.WithEnv(env),
		testcontainers.WithFiles(files...),
	}
	if o.ca != nil {
		opts = append(opts, awaitTLS("/usr/lib/rabbitmq/bin/rabbitmq-server")...)
	} else {
		opts = append(opts, testcontainers.WithWaitStrategyAndDeadline(startTimeout, ready))
	}
	if ports != nil {
		opts = append(opts, testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.PortBindings = network.PortMap{}
			for p, hp := range ports {
				hc.PortBindings[network.MustParsePort(p)] = []network.PortBinding{{HostPort: hp}}
			}
		}))
	}
	ctr, err := testcontainers.Run(ctx, image(EnvRabbitMQImage, "rabbitmq:3-management"), opts...)
	s := &RabbitMQServer{ctr: ctr, tls: o.ca != nil}
	if err != nil {
		return s, fmt.Errorf("start rabbitmq container: %w", err)
	}
	if o.ca != nil {
		if err := installTLS(ctx, ctr, o.ca, ready); err != nil {
			return s, fmt.Errorf("rabbitmq with TLS: %w", err)
		}
	}
	addr := func(port string) (string, error) {
		if hp, ok := ports[port]; ok {
			// The fixed host port, which a restart keeps (the bridge IP
			// Endpoint may settle on can change).
			if a, err := fixedEndpoint(ctx, ctr, hp); err == nil {
				return a, nil
			}
		}
		return Endpoint(ctx, ctr, port)
	}
	amqpAddr, err := addr(amqpPort)
	if err != nil {
		return s, err
	}
	user := url.UserPassword("guest", "guest")
	if o.password != "" {
		user = url.UserPassword(o.user, o.password)
	}
	amqpURL := url.URL{Scheme: "amqp", User: user, Host: amqpAddr, Path: "/"}
	mgmtURL := url.URL{Scheme: "http", User: user}
	if o.ca != nil {
		amqpURL.Scheme, mgmtURL.Scheme = "amqps", "https"
	}
	s.URL = amqpURL.String()
	if stock {
		return s, nil
	}
	if mgmtURL.Host, err = addr(mgmtPort); err != nil {
		return s, err
	}
	s.ManagementURL = mgmtURL.String()
	return s, nil
}

// fixedEndpoint returns the first of the Docker host and the loopback
// address that accepts a connection on host port hp.
func fixedEndpoint(ctx context.Context, ctr testcontainers.Container, hp string) (string, error) {
	var cands []string
	if h, err := ctr.Host(ctx); err == nil {
		cands = append(cands, net.JoinHostPort(h, hp))
	}
	cands = append(cands, net.JoinHostPort("127.0.0.1", hp))
	d := net.Dialer{Timeout: 2 * time.Second}
	var errs []error
	for _, a := range cands {
		c, err := d.DialContext(ctx, "tcp", a)
		if err == nil {
			_ = c.Close()
			return a, nil
		}
		errs = append(errs, err)
	}
	return "", errors.Join(errs...)
}

// Restart stops the server (gracefully, within a second) and starts it
// again, returning once it accepts AMQP connections on the same URL.
// Durable queues and persistent messages survive it. Only servers from
// RabbitMQContainer can be restarted.
func (s *RabbitMQServer) Restart(ctx context.Context) error {
	if s.ctr == nil {
		return errors.New("integration: restart: not a container of RabbitMQContainer")
	}
	if s.tls {
		return errors.New("integration: restart: not supported for a server with TLS")
	}
	stop := time.Second
	if err := s.ctr.Stop(ctx, &stop); err != nil {
		return fmt.Errorf("integration: stop rabbitmq: %w", err)
	}
	// Start's wait strategy finds the first start's log line at once, so
	// readiness is checked here.
	if err := s.ctr.Start(ctx); err != nil {
		return fmt.Errorf("integration: start rabbitmq: %w", err)
	}
	return WaitAMQP(ctx, s.URL)
}

// Kill kills the server with SIGKILL, as a crash or kill -9 would, then
// starts it again, returning once it accepts AMQP connections on the same
// URL. Durable queues and persistent, confirmed messages survive it; every
// message that was delivered and not acknowledged comes back flagged as
// redelivered. Only servers from RabbitMQContainer can be killed.
func (s *RabbitMQServer) Kill(ctx context.Context) error {
	if s.ctr == nil {
		return errors.New("integration: kill: not a container of RabbitMQContainer")
	}
	if s.tls {
		return errors.New("integration: kill: not supported for a server with TLS")
	}
	if err := killContainer(ctx, s.ctr); err != nil {
		return err
	}
	if err := s.ctr.Start(ctx); err != nil {
		return fmt.Errorf("integration: start rabbitmq: %w", err)
	}
	return WaitAMQP(ctx, s.URL)
}

// WaitAMQP waits until the server at url accepts an AMQP connection.
func WaitAMQP(ctx context.Context, url string) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		c, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
		if err == nil {
			return c.Close()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("integration: rabbitmq at %s not accepting connections (last: %v): %w", redactURL(url), err, ctx.Err())
		case <-tick.C:
		}
	}
}

func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// CloseAMQPConnections closes, through the management API at
// managementURL, every connection whose client-provided connection name
// is name, the way an operator's `rabbitmqctl close_connection` or a
// network cut ends them. It returns how many it closed.
func CloseAMQPConnections(ctx context.Context, managementURL, name string) (int, error) {
	base, err := url.Parse(managementURL)
	if err != nil {
		return 0, err
	}
	user := base.User
	base.User = nil
	do := func(method, path string) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, method, base.String()+path, nil)
		if err != nil {
			return nil, err
		}
		if user != nil {
			pw, _ := user.Password()
			req.SetBasicAuth(user.Username(), pw)
		}
		req.Header.Set("X-Reason", "closed by a trawl test")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if resp.StatusCode/100 != 2 && resp.StatusCode != http.StatusNotFound {
			return nil, fmt.Errorf("%s %s: %s: %.200s", method, path, resp.Status, body)
		}
		return body, err
	}
	body, err := do(http.MethodGet, "/api/connections?columns=name,client_properties")
	if err != nil {
		return 0, fmt.Errorf("integration: list connections: %w", err)
	}
	var conns []struct {
		Name  string `json:"name"`
		Props struct {
			ConnectionName string `json:"connection_name"`
		} `json:"client_properties"`
	}
	if err := json.Unmarshal(body, &conns); err != nil {
		return 0, fmt.Errorf("integration: list connections: %w", err)
	}
	n := 0
	for _, c := range conns {
		if c.Props.ConnectionName != name {
			continue
		}
		if _, err := do(http.MethodDelete, "/api/connections/"+url.PathEscape(c.Name)); err != nil {
			return n, fmt.Errorf("integration: close connection: %w", err)
		}
		n++
	}
	return n, nil
}
