package rabbitmq

import (
	"net"
	"sync"
)

// gatherMax bounds the bytes a gatherConn holds: past it, what it holds
// is written at once (a batch of large bodies is then several writes).
const gatherMax = 64 << 10

// gatherConn is the network connection under a session's AMQP connection.
// amqp091 flushes its buffer after every command it sends (a publish's
// method, header and body frames; an ack), so each is a write(2) of its
// own, and a segment the server wakes for. Between hold and release the
// writes gather here and go out in one write: a Publish of many
// messages, an AckBatch of many deliveries (session.send, rchan.ackBatch,
// Broker.replace). In bench-web's RabbitMQ crawl (session 15) those
// writes were a write(2) per page for its acknowledgement and one per
// published request, 14 µs of the worker's CPU a page.
//
// Holds may overlap (concurrent Publishes, an AckBatch): the bytes go out
// when the last one ends, in the order they were written. A holder only
// writes commands the server does not answer before it releases (a
// publish, an ack), so nobody's reply waits on a hold; other writers'
// commands written meanwhile (a heartbeat, a declare) wait for the end
// of the hold, microseconds. A gathered write that fails closes the
// connection: the reader sees it go and amqp091 shuts the connection down,
// as after a failed write of its own (publishes not confirmed are sent
// again on the next connection; acknowledgements not received are
// redeliveries, as for a connection lost after a successful write).
type gatherConn struct {
	net.Conn

	mu    sync.Mutex
	holds int
	buf   []byte
	err   error // a gathered write failed: every later write fails
}

// Write writes p, or keeps it for the end of the holds.
func (c *gatherConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	if c.holds == 0 {
		return c.Conn.Write(p)
	}
	c.buf = append(c.buf, p...)
	if len(c.buf) >= gatherMax {
		if err := c.writeOut(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// hold makes writes gather until the matching release.
func (c *gatherConn) hold() {
	c.mu.Lock()
	c.holds++
	c.mu.Unlock()
}

// release ends a hold; the last one writes what gathered. The error is
// that of the gathered write (or of an earlier one).
func (c *gatherConn) release() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holds--
	if c.holds > 0 || c.err != nil {
		return c.err
	}
	return c.writeOut()
}

// writeOut writes what gathered. c.mu is held.
func (c *gatherConn) writeOut() error {
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.buf)
	if cap(c.buf) > 2*gatherMax {
		c.buf = nil
	} else {
		c.buf = c.buf[:0]
	}
	if err != nil {
		c.err = err
		_ = c.Conn.Close() // amqp091's reader sees it and shuts the connection down
	}
	return err
}

// gather runs f with the writes of the connection gathered, and returns
// f's error or else that of the gathered write. A nil c runs f alone. f
// must not wait for an answer of the server (a channel's close, a
// declare): its request would wait behind the hold for ever.
func (c *gatherConn) gather(f func() error) (err error) {
	if c == nil {
		return f()
	}
	c.hold()
	defer func() {
		if werr := c.release(); err == nil {
			err = werr
		}
	}()
	return f()
}
