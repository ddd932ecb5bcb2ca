package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync/atomic"
)

// connCounts counts the connections a client opened to the web site and
// how they ended: what a client's CPU for connections (TCP connects, TLS
// handshakes) comes from.
type connCounts struct {
	accepted    atomic.Int64 // TCP connections, HTTP and HTTPS
	full        atomic.Int64 // TLS handshakes that verified a certificate
	resumed     atomic.Int64 // TLS handshakes that resumed a session
	idleTimeout atomic.Int64 // connections the site closed, idle past its IdleTimeout
	clientIdle  atomic.Int64 // idle connections the client closed (its pool's choice, or its exit)
	mid         atomic.Int64 // connections closed with a request in progress (timeouts) or none read yet
}

// connStats is a reading of connCounts.
type connStats struct {
	accepted, full, resumed, idleTimeout, clientIdle, mid int64
}

func (c *connCounts) read() connStats {
	return connStats{c.accepted.Load(), c.full.Load(), c.resumed.Load(), c.idleTimeout.Load(), c.clientIdle.Load(), c.mid.Load()}
}

func (c *connCounts) reset() {
	for _, n := range []*atomic.Int64{&c.accepted, &c.full, &c.resumed, &c.idleTimeout, &c.clientIdle, &c.mid} {
		n.Store(0)
	}
}

func (c *connCounts) handshake(resumed bool) {
	if resumed {
		c.resumed.Add(1)
	} else {
		c.full.Add(1)
	}
}

// state is the site's http.Server.ConnState: it tells, for a closed
// connection, who closed it.
func (c *connCounts) state(nc net.Conn, st http.ConnState) {
	if t, ok := nc.(*tls.Conn); ok {
		nc = t.NetConn()
	}
	cc, ok := nc.(*countedConn)
	if !ok {
		return
	}
	switch st {
	case http.StateClosed, http.StateHijacked:
		switch {
		case cc.last.Load() != int32(http.StateIdle):
			c.mid.Add(1)
		case cc.eof.Load():
			c.clientIdle.Add(1)
		default:
			c.idleTimeout.Add(1)
		}
	default:
		cc.last.Store(int32(st))
	}
}

// String says it in a few words, for the log and the table.
func (s connStats) String() string {
	return fmt.Sprintf("%d connections (TLS: %d full handshakes, %d resumed); closed idle by the site %d, by the client %d; closed busy %d",
		s.accepted, s.full, s.resumed, s.idleTimeout, s.clientIdle, s.mid)
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	c *connCounts
}

func (l countingListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.c.accepted.Add(1)
	return &countedConn{Conn: nc}, nil
}

// countedConn notes whether the client closed its side (a read that
// ended) and the connection's last state.
type countedConn struct {
	net.Conn
	eof  atomic.Bool
	last atomic.Int32 // http.ConnState
}

func (c *countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) { // the site's deadline: its idle timeout
		c.eof.Store(true)
	}
	return n, err
}
