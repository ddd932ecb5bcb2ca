package integration

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// Environment variables read by the NATS helpers.
const (
	// EnvNATSURL names a NATS server with JetStream enabled to use instead
	// of a container.
	EnvNATSURL = "TRAWL_TEST_NATS_URL"
	// EnvNATSImage names the NATS image to start (default "nats:2"). Its
	// server must accept the flags -js (JetStream) and -sd (store dir).
	EnvNATSImage = "TRAWL_NATS_IMAGE"
)

// natsCmd runs the server with JetStream, file storage in /data (inside
// the container: it survives a stop and start of the same container).
var natsCmd = []string{"-js", "-sd", "/data"}

// JetStream returns a JetStream context on a connection to url, with
// opts, closed when t ends: for a test that looks at the streams a crawl
// made. It fails t if it cannot connect.
func JetStream(t testing.TB, url string, opts ...natsgo.Option) jetstream.JetStream {
	t.Helper()
	nc, err := natsgo.Connect(url, opts...)
	if err != nil {
		t.Fatalf("integration: connect to NATS at %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("integration: JetStream at %s: %v", url, err)
	}
	return js
}

// NATS returns the URL (nats://host:port) of a NATS server with JetStream
// shared by the tests of this binary: TRAWL_TEST_NATS_URL if set, else a
// container started on first use. It fails t if no server can be had, and skips
// it under -short unless the variable is set.
// Tests share the server: keep to streams named after Name(t).
func NATS(t testing.TB) string {
	t.Helper()
	if u := os.Getenv(EnvNATSURL); u != "" {
		return u
	}
	skipShort(t, "NATS", EnvNATSURL)
	shared.requireMain(t)
	u, err := shared.nats.get(func() (string, error) {
		s, err := startNATS("", serverOptions{})
		if s != nil && s.ctr != nil {
			shared.track(s.ctr)
		}
		if err != nil {
			return "", err
		}
		return s.URL, nil
	})
	if err != nil {
		t.Fatalf("integration: no NATS server (set %s, or make Docker and the image %q available): %v",
			EnvNATSURL, image(EnvNATSImage, "nats:2"), err)
	}
	return u
}

// NATSServer is a NATS server in a container of its own.
type NATSServer struct {
	// URL is nats://host:port.
	URL string

	ctr testcontainers.Container
	tls bool // WithTLS: the readiness probe has no CA
}

// NATSContainer starts a NATS container with JetStream file storage for t
// alone, configured by opts, and removes it when t ends. Its host port is
// fixed when it starts, so URL stays valid across Restart and clients
// reconnect by themselves. With WithTLS it accepts TLS connections only
// (URL tls://…); with WithPassword only the user given. It fails t if the
// container cannot be started; it needs Docker even where
// TRAWL_TEST_NATS_URL is set.
func NATSContainer(t testing.TB, opts ...ServerOption) *NATSServer {
	t.Helper()
	skipShort(t, "NATS", "")
	var s *NATSServer
	var err error
	for try := 1; ; try++ {
		hp, perr := freePort()
		if perr != nil {
			t.Fatalf("integration: pick a host port: %v", perr)
		}
		s, err = startNATS(hp, serverOpts(opts))
		if s != nil && s.ctr != nil {
			terminateOnCleanup(t, s.ctr)
		}
		if !portTaken(err) || try == portTries {
			break
		}
	}
	if err != nil {
		t.Fatalf("integration: start a NATS container (image %q): %v", image(EnvNATSImage, "nats:2"), err)
	}
	return s
}

// startNATS starts a container, its client port bound to hostPort (""
// for any free one), with TLS and credentials as o says.
func startNATS(hostPort string, o serverOptions) (*NATSServer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	args := slices.Clone(natsCmd)
	if o.password != "" {
		args = append(args, "--user", o.user, "--pass", o.password)
	}
	ready := wait.ForLog("Server is ready").WithStartupTimeout(startTimeout)
	opts := []testcontainers.ContainerCustomizer{testcontainers.WithExposedPorts("4222/tcp")}
	if o.ca != nil {
		args = append(args, "--tls", "--tlscert", tlsCertFile, "--tlskey", tlsKeyFile)
		opts = append(opts, awaitTLS(append([]string{"/usr/bin/nats-server"}, args...)...)...)
	} else {
		opts = append(opts, testcontainers.WithCmd(args...), testcontainers.WithWaitStrategyAndDeadline(startTimeout, ready))
	}
	if hostPort != "" {
		opts = append(opts, testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.PortBindings = network.PortMap{
				network.MustParsePort("4222/tcp"): []network.PortBinding{{HostPort: hostPort}},
			}
		}))
	}
	ctr, err := testcontainers.Run(ctx, image(EnvNATSImage, "nats:2"), opts...)
	s := &NATSServer{ctr: ctr, tls: o.ca != nil}
	if err != nil {
		return s, fmt.Errorf("start nats container: %w", err)
	}
	if o.ca != nil || o.password != "" {
		// The test process cannot ping a server it has no CA or
		// password for: it waits for the log line and a TCP port.
		if o.ca != nil {
			if err := installTLS(ctx, ctr, o.ca, ready); err != nil {
				return s, fmt.Errorf("nats with TLS: %w", err)
			}
		}
		addr, err := Endpoint(ctx, ctr, "4222/tcp")
		if err != nil {
			return s, err
		}
		u := url.URL{Scheme: "nats", Host: addr}
		if hostPort != "" {
			if a, err := fixedEndpoint(ctx, ctr, hostPort); err == nil {
				u.Host = a // survives a restart
			}
		}
		if o.ca != nil {
			u.Scheme = "tls"
		}
		if o.password != "" {
			u.User = url.UserPassword(o.user, o.password)
		}
		s.URL = u.String()
		return s, nil
	}
	// A fixed host port is reached on the loopback address; that address,
	// unlike the container's, survives a restart.
	if hostPort != "" {
		s.URL = "nats://127.0.0.1:" + hostPort
		if err := pingJetStream(ctx, s.URL); err == nil {
			return s, nil
		}
	}
	addr, err := Endpoint(ctx, ctr, "4222/tcp")
	if err != nil {
		return s, err
	}
	s.URL = "nats://" + addr
	return s, WaitNATS(ctx, s.URL)
}

// Restart stops the server (gracefully, within a second) and starts it
// again, returning once it serves JetStream on the same URL. Streams,
// messages and consumers (file storage) survive it. Only servers from
// NATSContainer can be restarted.
func (s *NATSServer) Restart(ctx context.Context) error {
	if s.ctr == nil {
		return errors.New("integration: restart: not a container of NATSContainer")
	}
	if s.tls {
		return errors.New("integration: restart: not supported for a server with TLS")
	}
	stop := time.Second
	if err := s.ctr.Stop(ctx, &stop); err != nil {
		return fmt.Errorf("integration: stop nats: %w", err)
	}
	// Start's wait strategy finds the first start's log line at once, so
	// readiness is checked here.
	if err := s.ctr.Start(ctx); err != nil {
		return fmt.Errorf("integration: start nats: %w", err)
	}
	return WaitNATS(ctx, s.URL)
}

// WaitNATS waits until the server at url accepts a connection and answers
// a JetStream request.
func WaitNATS(ctx context.Context, url string) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := pingJetStream(ctx, url)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("integration: nats at %s not serving jetstream (last: %v): %w", url, err, ctx.Err())
		case <-tick.C:
		}
	}
}

func pingJetStream(ctx context.Context, url string) error {
	nc, err := natsgo.Connect(url, natsgo.Timeout(2*time.Second), natsgo.NoReconnect())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err
}
