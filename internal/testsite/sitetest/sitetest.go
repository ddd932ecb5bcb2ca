// Package sitetest serves a test site (internal/testsite) for the length
// of a test.
package sitetest

import (
	"context"
	"net"
	"testing"

	"github.com/trawlhq/trawl/internal/testsite"
)

// Serve serves a site made from cfg on a loopback port until t ends, and
// returns it with its base URL (no trailing slash). It fails t if the site
// cannot listen.
func Serve(t testing.TB, cfg testsite.Config) (*testsite.Site, string) {
	t.Helper()
	site := testsite.New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	base, wait, err := site.Serve(ctx, "127.0.0.1:0")
	if err != nil {
		cancel()
		t.Fatalf("serve the test site: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := wait(); err != nil {
			t.Errorf("test site: %v", err)
		}
	})
	return site, base
}

// RefusedAddr returns a loopback host:port where connections are refused
// until t ends. The port is held by one end of a connection, not by a
// listener, so nothing answers there and no listener gets it meanwhile:
// a listener closed to free its port lets the next one (of this process
// or another, the test's own server included) take the same port.
func RefusedAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatalf("dial %s: %v", l.Addr(), err)
	}
	s, err := l.Accept()
	if err != nil {
		c.Close()
		t.Fatalf("accept: %v", err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.LocalAddr().String()
}
