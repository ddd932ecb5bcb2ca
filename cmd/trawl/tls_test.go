package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTLSFlagsChecked: a --tls-ca, --tls-cert or --tls-key that cannot be
// used is a usage error (exit 2) naming the flag, before any connection.
// (internal/integration/crawl's TestTLS* use them against servers with TLS.)
func TestTLSFlagsChecked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"ca missing", []string{"--tls-ca", missing}, "--tls-ca"},
		{"ca not pem", []string{"--tls-ca", notPEM}, "--tls-ca " + notPEM + ": no PEM certificate in it"},
		{"cert alone", []string{"--tls-cert", notPEM}, "--tls-cert and --tls-key go together"},
		{"key alone", []string{"--tls-key", notPEM}, "--tls-cert and --tls-key go together"},
		{"bad pair", []string{"--tls-cert", notPEM, "--tls-key", notPEM}, "--tls-cert " + notPEM},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := trawl(t, time.Minute, append([]string{"stats", "--broker=redis", "--redis-url", "rediss://127.0.0.1:1/0"}, c.args...)...)
			if r.code != 2 {
				t.Errorf("exit %d, want 2 (usage); stderr:\n%s", r.code, r.stderr)
			}
			if !strings.Contains(r.stderr, c.want) || strings.Contains(r.stderr, "127.0.0.1:1") {
				t.Errorf("stderr should say %q, before connecting:\n%s", c.want, r.stderr)
			}
		})
	}
}

// TestConnHint: a failure on a server's certificate or credentials says
// which flag to change.
func TestConnHint(t *testing.T) {
	t.Parallel()
	for msg, want := range map[string]string{
		"redis at h:1: cannot connect: tls: failed to verify certificate: x509: certificate signed by unknown authority": "--tls-ca FILE",
		"redis at h:1: cannot connect: remote error: tls: certificate required":                                          "--tls-cert FILE --tls-key FILE",
		`rabbitmq broker: connect to h: Exception (403) Reason: "username or password not allowed"`:                      "--amqp-url",
		"nats connect nats://***@h:1: nats: Authorization Violation":                                                     "--nats-url",
		"nats connect tls://h:1: tls: failed to verify certificate: x509: certificate is valid for a, not b":             "does not name the host",
	} {
		if got := connHint(msg, nil); !strings.HasPrefix(got, msg) || !strings.Contains(got[len(msg):], want) {
			t.Errorf("connHint(%q) = %q, want a hint with %q", msg, got, want)
		}
	}
	if msg := "redis at h:1: cannot connect: connection refused"; connHint(msg, nil) != msg {
		t.Errorf("connHint added a hint to %q", msg)
	}
}
