package integration

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// portTries bounds the starts of a container on fixed host ports that
// another container took in the meantime (see portTaken).
const portTries = 5

// portTaken reports whether a container failed to start because one of
// the host ports chosen for it (free a moment before) was taken since,
// by Docker for another container started beside it. Docker says so only
// in words.
func portTaken(err error) bool {
	return err != nil && strings.Contains(err.Error(), "port is already allocated")
}

// ephemeralRange is where Linux reads the ports it hands out for port 0,
// and where Docker picks the host ports of containers that publish a port
// without naming one: in order, from the bottom up.
const ephemeralRange = "/proc/sys/net/ipv4/ip_local_port_range"

// fixedPorts is how many ports below the ephemeral range freePort picks
// from.
const fixedPorts = 10000

// freePort returns a TCP port that was free on the host, on every
// address, a moment ago. It picks it at random below the ephemeral range:
// a port from that range, free now, may be the next one Docker gives to a
// container started beside this one without a fixed port (CI saw "Bind
// for :::32793 failed: port is already allocated"). Where the range
// cannot be read, or leaves no room below it, the kernel picks the port.
func freePort() (string, error) {
	lo := ephemeralLow()
	if lo-fixedPorts < 1024 {
		return kernelPort()
	}
	var err error
	for range 100 {
		p := lo - fixedPorts + rand.IntN(fixedPorts)
		var l net.Listener
		if l, err = net.Listen("tcp", ":"+strconv.Itoa(p)); err == nil {
			_ = l.Close()
			return strconv.Itoa(p), nil
		}
	}
	return "", fmt.Errorf("no free port below %d: %w", lo, err)
}

// ephemeralLow is the first port of the kernel's ephemeral range, 0 if it
// cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile(ephemeralRange)
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return lo
}

// kernelPort returns a port the kernel picked as free.
func kernelPort() (string, error) {
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}
