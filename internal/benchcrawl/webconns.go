package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
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

	seq     atomic.Int64
	mu      sync.Mutex
	tracing bool
	closed  []closedConn // when tracing: the connections closed since the last reset
}

// closedConn is a connection's end, for -trace.
type closedConn struct {
	id, host int
	end      time.Time
	closer   string // site-idle, client-idle or busy
	tls      string // full, resumed or "" (HTTP)
}

// connStats is a reading of connCounts.
type connStats struct {
	accepted, full, resumed, idleTimeout, clientIdle, mid int64
}

func (c *connCounts) read() connStats {
	return connStats{c.accepted.Load(), c.full.Load(), c.resumed.Load(), c.idleTimeout.Load(), c.clientIdle.Load(), c.mid.Load()}
}

func (c *connCounts) reset() {
	c.mu.Lock()
	c.closed = nil
	c.mu.Unlock()
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
	nc0 := nc
	if t, ok := nc.(*tls.Conn); ok {
		nc = t.NetConn()
	}
	cc, ok := nc.(*countedConn)
	if !ok {
		return
	}
	switch st {
	case http.StateClosed, http.StateHijacked:
		closer := "site-idle"
		switch {
		case cc.last.Load() != int32(http.StateIdle):
			c.mid.Add(1)
			closer = "busy"
		case cc.timedOut.Load():
			c.idleTimeout.Add(1)
		default: // a read that ended (a TLS client's close_notify is data, not EOF, to this conn)
			c.clientIdle.Add(1)
			closer = "client-idle"
		}
		c.mu.Lock()
		if c.tracing {
			kind := ""
			if t, ok := nc0.(*tls.Conn); ok {
				kind = "full"
				if t.ConnectionState().DidResume {
					kind = "resumed"
				}
			}
			c.closed = append(c.closed, closedConn{cc.id, cc.host, time.Now(), closer, kind})
		}
		c.mu.Unlock()
	case http.StateIdle:
		// The server ended its read behind the request it served with a
		// past deadline: only a deadline from here on is its idle timeout.
		cc.timedOut.Store(false)
		cc.last.Store(int32(st))
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
	c    *connCounts
	host int
}

func (l countingListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.c.accepted.Add(1)
	return &countedConn{Conn: nc, id: int(l.c.seq.Add(1)), host: l.host}, nil
}

// countedConn notes whether the site's read deadline ended it and the
// connection's last state.
type countedConn struct {
	net.Conn
	id, host int
	timedOut atomic.Bool
	last     atomic.Int32 // http.ConnState
}

func (c *countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if errors.Is(err, os.ErrDeadlineExceeded) { // the site's read deadline: its idle timeout
		c.timedOut.Store(true)
	}
	return n, err
}

// connKey is the context key of a request's *countedConn.
type connKey struct{}

// connContext is the site's http.Server.ConnContext: a request knows its
// connection, for -trace.
func connContext(ctx context.Context, nc net.Conn) context.Context {
	if t, ok := nc.(*tls.Conn); ok {
		nc = t.NetConn()
	}
	if cc, ok := nc.(*countedConn); ok {
		return context.WithValue(ctx, connKey{}, cc)
	}
	return ctx
}

// connID is the id of r's connection, 0 if unknown.
func connID(r *http.Request) int {
	if cc, ok := r.Context().Value(connKey{}).(*countedConn); ok {
		return cc.id
	}
	return 0
}
