package crawl_test

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/trawlhq/trawl/internal/integration"
	"github.com/trawlhq/trawl/internal/testsite"
)

// Crawls on servers that take TLS connections only, with a certificate
// signed by a CA made by the test, and that want a user and password:
// one per broker. A crawl completes with --tls-ca; a wrong password and a
// certificate of another CA each get one line naming what to fix, and no
// password shows in any output.

// TestTLSRedis: Redis with TLS and an ACL user, the broker, filter,
// limiter and stats all on it (rediss://).
func TestTLSRedis(t *testing.T) {
	t.Parallel()
	ca := integration.NewCA(t)
	pw := secret(t)
	srv := integration.RedisContainer(t, integration.WithTLS(ca), integration.WithPassword("trawl", pw))
	secure(t, ca, pw, "--redis-url", func(pw string) []string {
		return []string{"--broker=redis", "--redis-url", withPassword(t, srv.URL, pw)}
	})
}

// TestTLSRedisClientCert: a Redis server that wants a client certificate
// takes --tls-cert and --tls-key, and refuses a client without them.
func TestTLSRedisClientCert(t *testing.T) {
	t.Parallel()
	ca := integration.NewCA(t)
	pw := secret(t)
	srv := integration.RedisContainer(t, integration.WithTLS(ca), integration.WithClientCerts(), integration.WithPassword("trawl", pw))
	site, siteURL := serveSite(t, testsite.Config{Pages: 40, Links: 4, Seed: 33, NoTraps: true})
	base := []string{"crawl", "--broker=redis", "--redis-url", srv.URL, "--tls-ca", ca.CAFile,
		"--name", integration.Name(t), "--allow-private", "--idle-timeout=1s"}
	code, stdout, stderr := runOut(t, append(base, siteURL)...)
	t.Logf("without a client certificate: exit %d, stderr: %s", code, stderr)
	if code == 0 {
		t.Errorf("exit 0 without a client certificate")
	}
	oneLine(t, stderr, "--tls-cert")
	noSecret(t, pw, stdout, stderr)
	w := start(t, append(base, "--tls-cert", ca.ClientCertFile, "--tls-key", ca.ClientKeyFile, siteURL)...)
	if code := w.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("with a client certificate: exit %d:\n%s", code, w.stderr.String())
	}
	if distinct, dups := union(t, w); distinct != site.Expected() || dups != 0 {
		t.Errorf("items: %d distinct (want %d), %d duplicates (want 0)", distinct, site.Expected(), dups)
	}
}

// TestTLSRabbitMQ: RabbitMQ with AMQP over TLS (amqps://), its management
// API over HTTPS, and a user of its own (no guest). The filter is in a
// Redis with TLS too, trusted by the same --tls-ca.
func TestTLSRabbitMQ(t *testing.T) {
	t.Parallel()
	ca := integration.NewCA(t)
	pw := secret(t)
	srv := integration.RabbitMQContainer(t, integration.WithTLS(ca), integration.WithPassword("trawl", pw))
	redis := integration.RedisContainer(t, integration.WithTLS(ca), integration.WithPassword("trawl", pw))
	secure(t, ca, pw, "--amqp-url", func(pw string) []string {
		return []string{"--broker=rabbitmq", "--amqp-url", withPassword(t, srv.URL, pw),
			"--amqp-management-url", srv.ManagementURL, "--redis-url", redis.URL}
	})
}

// TestTLSNATS: NATS JetStream with TLS (tls://) and a user and password.
func TestTLSNATS(t *testing.T) {
	t.Parallel()
	ca := integration.NewCA(t)
	pw := secret(t)
	srv := integration.NATSContainer(t, integration.WithTLS(ca), integration.WithPassword("trawl", pw))
	secure(t, ca, pw, "--nats-url", func(pw string) []string {
		return []string{"--broker=nats", "--nats-url", withPassword(t, srv.URL, pw), "--dedup=local"}
	})
}

// TestTLSMixed: --tls-ca applies to the servers whose URLs ask for TLS
// and leaves the others plain: NATS without TLS (nats://), the filter in
// a Redis with TLS (rediss://).
func TestTLSMixed(t *testing.T) {
	t.Parallel()
	ca := integration.NewCA(t)
	pw := secret(t)
	redis := integration.RedisContainer(t, integration.WithTLS(ca), integration.WithPassword("trawl", pw))
	site, siteURL := serveSite(t, testsite.Config{Pages: 40, Links: 4, Seed: 35, NoTraps: true})
	w := start(t, "crawl", "--broker=nats", "--nats-url", integration.NATS(t), "--redis-url", redis.URL, "--tls-ca", ca.CAFile,
		"--name", integration.Name(t), "--allow-private", "--idle-timeout=1s", siteURL)
	if code := w.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, w.stderr.String())
	}
	if distinct, dups := union(t, w); distinct != site.Expected() || dups != 0 {
		t.Errorf("items: %d distinct (want %d), %d duplicates (want 0)", distinct, site.Expected(), dups)
	}
	noSecret(t, pw, w.stderr.String())
}

// secure runs the checks of a broker with TLS and a password. flags
// returns the flags that name the broker, with password pw in urlFlag's
// URL; ca signed the servers' certificates.
func secure(t *testing.T, ca *integration.CA, pw, urlFlag string, flags func(pw string) []string) {
	wrong := secret(t)
	other := integration.NewCA(t)
	site, siteURL := serveSite(t, testsite.Config{Pages: 100, Links: 5, Seed: 31, NoTraps: true})
	crawl := func(name string, more ...string) []string {
		args := append([]string{"crawl"}, flags(pw)...)
		return append(append(args, "--name", name, "--allow-private", "--idle-timeout=2s", "--data-dir", t.TempDir()), more...)
	}

	t.Run("crawl", func(t *testing.T) {
		w := start(t, crawl(integration.Name(t), "--tls-ca", ca.CAFile, "--log-level=info", siteURL)...)
		if code := w.wait(t, 3*time.Minute); code != 0 {
			t.Fatalf("exit %d:\n%s", code, w.stderr.String())
		}
		if err := site.Verify(); err != nil {
			t.Errorf("site: %v", err)
		}
		if distinct, dups := union(t, w); distinct != site.Expected() || dups != 0 {
			t.Errorf("items: %d distinct (want %d), %d duplicates (want 0)", distinct, site.Expected(), dups)
		}
		if s := w.stderr.String(); strings.Contains(s, "management API unusable") {
			t.Errorf("the management API was not reached over HTTPS:\n%s", s)
		}
		noSecret(t, pw, w.stderr.String())
	})

	t.Run("wrong-password", func(t *testing.T) {
		args := append([]string{"crawl"}, flags(wrong)...)
		args = append(args, "--name", integration.Name(t), "--allow-private", "--tls-ca", ca.CAFile, "--data-dir", t.TempDir(), siteURL)
		code, stdout, stderr := runOut(t, args...)
		t.Logf("exit %d, stderr: %s", code, stderr)
		if code == 0 {
			t.Errorf("exit 0 with a wrong password")
		}
		oneLine(t, stderr, urlFlag)
		if !strings.Contains(stderr, "authentication failed") {
			t.Errorf("stderr does not say that authentication failed:\n%s", stderr)
		}
		noSecret(t, wrong, stdout, stderr)
		noSecret(t, pw, stdout, stderr)
	})

	t.Run("other-ca", func(t *testing.T) {
		for _, ca := range []string{other.CAFile, ""} { // another CA; the system's
			more := []string{siteURL}
			if ca != "" {
				more = append([]string{"--tls-ca", ca}, more...)
			}
			code, stdout, stderr := runOut(t, crawl(integration.Name(t), more...)...)
			t.Logf("--tls-ca %q: exit %d, stderr: %s", ca, code, stderr)
			if code == 0 {
				t.Errorf("--tls-ca %q: exit 0 with a server certificate of another CA", ca)
			}
			oneLine(t, stderr, "--tls-ca")
			if !strings.Contains(stderr, "certificate") {
				t.Errorf("--tls-ca %q: stderr does not say the certificate is the problem:\n%s", ca, stderr)
			}
			noSecret(t, pw, stdout, stderr)
		}
	})
}

// secret returns a password unlikely to appear in any output by chance.
func secret(t *testing.T) string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "pw" + hex.EncodeToString(b[:])
}

// withPassword returns raw, a URL with user trawl, with the password pw.
func withPassword(t *testing.T, raw, pw string) string {
	t.Helper()
	scheme, rest, ok := strings.Cut(raw, "://trawl:")
	_, host, ok2 := strings.Cut(rest, "@")
	if !ok || !ok2 {
		t.Fatalf("URL %q has no user trawl with a password", raw)
	}
	return scheme + "://trawl:" + pw + "@" + host
}

// noSecret fails t if pw is in any of outs.
func noSecret(t *testing.T, pw string, outs ...string) {
	t.Helper()
	for _, o := range outs {
		if strings.Contains(o, pw) {
			t.Errorf("output shows the password:\n%s", o)
		}
	}
}
