package integration

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePortBelowEphemeralRange checks that a fixed host port is one
// Docker does not hand out on its own (the ephemeral range is where it
// picks the ports of containers that ask for any), and that it is free.
func TestFreePortBelowEphemeralRange(t *testing.T) {
	lo := ephemeralLow()
	if lo-fixedPorts < 1024 {
		t.Skipf("ephemeral range starts at %d: no room below it", lo)
	}
	seen := map[string]bool{}
	for range 50 {
		p, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			t.Fatalf("port %q: %v", p, err)
		}
		if n < lo-fixedPorts || n >= lo {
			t.Fatalf("port %d, want one in [%d, %d)", n, lo-fixedPorts, lo)
		}
		l, err := net.Listen("tcp", ":"+p)
		if err != nil {
			t.Fatalf("port %s is not free: %v", p, err)
		}
		_ = l.Close()
		seen[p] = true
	}
	if len(seen) < 40 {
		t.Errorf("50 picks gave %d distinct ports, want them spread at random", len(seen))
	}
}
