package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// tlsOptions are the flags that configure TLS to the brokers: one CA and
// client certificate for every server a deployment names (Redis,
// RabbitMQ and its management API, NATS).
type tlsOptions struct {
	ca, cert, key string
	config        *tls.Config // built by check; nil without the flags
}

func (t *tlsOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&t.ca, "tls-ca", "", "PEM file of the CA certificates that sign the servers' certificates (rediss://, amqps://, an https:// management API, tls:// or a NATS server that requires TLS), trusted instead of the system's")
	fs.StringVar(&t.cert, "tls-cert", "", "PEM file of a client certificate for servers that ask for one (with --tls-key)")
	fs.StringVar(&t.key, "tls-key", "", "PEM file of the key of --tls-cert")
}

// check reads the files the flags name and builds the configuration,
// reporting every problem.
func (t *tlsOptions) check() []error {
	if t.ca == "" && t.cert == "" && t.key == "" {
		return nil
	}
	var errs []error
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.ca != "" {
		pem, err := os.ReadFile(t.ca)
		if err != nil {
			errs = append(errs, fmt.Errorf("--tls-ca: %w", err))
		} else {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				errs = append(errs, fmt.Errorf("--tls-ca %s: no PEM certificate in it", t.ca))
			}
			cfg.RootCAs = pool
		}
	}
	switch {
	case (t.cert == "") != (t.key == ""):
		errs = append(errs, errors.New("--tls-cert and --tls-key go together: give both or neither"))
	case t.cert != "":
		c, err := tls.LoadX509KeyPair(t.cert, t.key)
		if err != nil {
			errs = append(errs, fmt.Errorf("--tls-cert %s, --tls-key %s: %w", t.cert, t.key, err))
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	if len(errs) == 0 {
		t.config = cfg
	}
	return errs
}

// clone returns a configuration of the flags for one client, nil without
// the flags (the library's default: the system's CAs).
func (t *tlsOptions) clone() *tls.Config {
	if t.config == nil {
		return nil
	}
	return t.config.Clone()
}

// connHint returns msg, the message of err, with what to change where
// err is a failure to connect to a server on its certificate or its
// credentials. Client libraries flatten some errors to text, hence the
// text matches beside errors.As.
func connHint(msg string, err error) string {
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
	)
	switch {
	case errors.As(err, &unknown), strings.Contains(msg, "certificate signed by unknown authority"):
		return msg + " (the server's certificate is not signed by a CA trusted here: give the CA that signed it with --tls-ca FILE)"
	case errors.As(err, &hostname), strings.Contains(msg, "x509: certificate is valid for"):
		return msg + " (the server's certificate does not name the host of the URL: connect by a name or address it lists)"
	case errors.As(err, &invalid), strings.Contains(msg, "x509: certificate has expired"):
		return msg + " (the server's certificate is not valid now: renew it)"
	case strings.Contains(msg, "tls: certificate required"):
		return msg + " (the server wants a client certificate: give it with --tls-cert FILE --tls-key FILE)"
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return msg + " (the server does not speak TLS on this port: use redis://, amqp:// or nats://)"
	case strings.Contains(msg, "username or password not allowed"):
		return msg + " (authentication failed: check the user and password in --amqp-url)"
	case strings.Contains(msg, "Authorization Violation"):
		return msg + " (authentication failed: check the user and password in --nats-url)"
	}
	return msg
}
