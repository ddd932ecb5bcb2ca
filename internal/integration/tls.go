package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// CA is a certificate authority made for one test: its certificate, and a
// client certificate it signed, are PEM files in a temporary folder, for
// the flags --tls-ca, --tls-cert and --tls-key. Nothing of it is kept:
// the keys live as long as the test.
type CA struct {
	// CAFile is the CA's certificate.
	CAFile string
	// ClientCertFile and ClientKeyFile are a client certificate signed by
	// the CA and its key.
	ClientCertFile, ClientKeyFile string

	cert    *x509.Certificate
	certPEM []byte
	key     *ecdsa.PrivateKey
}

// NewCA makes a certificate authority for t.
func NewCA(t testing.TB) *CA {
	t.Helper()
	ca, err := newCA(t.TempDir(), "trawl test CA")
	if err != nil {
		t.Fatalf("integration: make a test CA: %v", err)
	}
	return ca
}

func newCA(dir, name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	ca := &CA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	ca.CAFile = filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca.CAFile, ca.certPEM, 0o644); err != nil {
		return nil, err
	}
	certPEM, keyPEM, err := ca.issue(pkix.Name{CommonName: "trawl test client"}, nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return nil, err
	}
	ca.ClientCertFile = filepath.Join(dir, "client.pem")
	ca.ClientKeyFile = filepath.Join(dir, "client-key.pem")
	if err := os.WriteFile(ca.ClientCertFile, certPEM, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(ca.ClientKeyFile, keyPEM, 0o600); err != nil {
		return nil, err
	}
	return ca, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

// issue returns a certificate signed by ca for hosts (names or IP
// addresses) and its key, both PEM.
func (ca *CA) issue(subject pkix.Name, hosts []string, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      subject,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// ServerOption configures a server a test starts for itself
// (RedisContainer, RabbitMQContainer, NATSContainer).
type ServerOption func(*serverOptions)

type serverOptions struct {
	ca             *CA
	clientCerts    bool // require a client certificate signed by ca
	user, password string
}

// WithTLS makes the server accept TLS connections only, with a
// certificate signed by ca for every address the test process may reach
// it on (localhost, the loopback addresses, the Docker host, the
// container's IP). Clients trust ca with --tls-ca ca.CAFile.
func WithTLS(ca *CA) ServerOption { return func(o *serverOptions) { o.ca = ca } }

// WithClientCerts makes a TLS server (WithTLS) refuse clients without a
// certificate signed by its CA (ca.ClientCertFile is one). Redis only.
func WithClientCerts() ServerOption { return func(o *serverOptions) { o.clientCerts = true } }

// WithPassword makes the server accept only user with password (and not
// RabbitMQ's guest, Redis's default user, or anonymous NATS clients).
func WithPassword(user, password string) ServerOption {
	return func(o *serverOptions) { o.user, o.password = user, password }
}

func serverOpts(opts []ServerOption) serverOptions {
	var o serverOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Paths of the TLS files inside a container (see awaitTLS).
const (
	tlsDir        = "/trawl-tls"
	tlsCAFile     = tlsDir + "/ca.pem"
	tlsCertFile   = tlsDir + "/server.pem"
	tlsKeyFile    = tlsDir + "/server-key.pem"
	tlsReadyFile  = tlsDir + "/ready"
	tlsWaitingLog = "trawl-test: waiting for TLS files"
)

// awaitTLS returns the customizers that make a container wait, before it
// runs cmd (its entrypoint and command, which replace the image's), until
// installTLS has copied its certificate in: the certificate must name the
// container's IP, which is known only once it runs.
func awaitTLS(cmd ...string) []testcontainers.ContainerCustomizer {
	script := "echo '" + tlsWaitingLog + "'; until [ -f " + tlsReadyFile + " ]; do sleep 0.05; done; exec \"$@\""
	return []testcontainers.ContainerCustomizer{
		testcontainers.WithEntrypoint("sh", "-c", script, "sh"),
		testcontainers.WithCmd(cmd...),
		testcontainers.WithWaitStrategyAndDeadline(startTimeout, wait.ForLog(tlsWaitingLog).WithStartupTimeout(startTimeout)),
	}
}

// installTLS copies into ctr, started with awaitTLS, the CA's certificate
// and a server certificate for every address the test process may reach
// it on, lets it go on and waits until it logs ready.
func installTLS(ctx context.Context, ctr testcontainers.Container, ca *CA, ready wait.Strategy) error {
	hosts := []string{"localhost", "127.0.0.1", "::1"}
	if h, err := ctr.Host(ctx); err == nil {
		hosts = append(hosts, h)
	}
	if ip, err := ctr.ContainerIP(ctx); err == nil && ip != "" {
		hosts = append(hosts, ip)
	}
	certPEM, keyPEM, err := ca.issue(pkix.Name{CommonName: "trawl test server"}, hosts, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return fmt.Errorf("issue a server certificate: %w", err)
	}
	// World-readable: the server may run as a user of its own. The key
	// is a test's, thrown away with the container.
	for _, f := range []struct {
		path string
		data []byte
	}{{tlsCAFile, ca.certPEM}, {tlsCertFile, certPEM}, {tlsKeyFile, keyPEM}, {tlsReadyFile, nil}} {
		if err := ctr.CopyToContainer(ctx, f.data, f.path, 0o644); err != nil {
			return fmt.Errorf("copy %s into the container: %w", f.path, err)
		}
	}
	if err := ready.WaitUntilReady(ctx, ctr); err != nil {
		return fmt.Errorf("server not ready after its TLS files were installed: %w", err)
	}
	return nil
}

// terminateOnCleanup removes ctr when t ends.
func terminateOnCleanup(t testing.TB, ctr testcontainers.Container) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := ctr.Terminate(ctx, testcontainers.StopTimeout(time.Second)); err != nil {
			t.Logf("integration: remove container %s: %v", ctr.GetContainerID(), err)
		}
	})
}
