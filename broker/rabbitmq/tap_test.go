package rabbitmq_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
)

// amqpTap is a TCP proxy in front of an AMQP server that counts, as it
// passes them on, the commands its clients send: every AMQP method (a
// publish with its content header and body counts once) and every
// heartbeat. It sees what the client sent the moment it was sent, where
// the management API's statistics come through a collector that lags
// behind under load.
type amqpTap struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns []net.Conn // both ends of every connection, closed by close
	dials int
	sent  map[string]int // command name -> how many
	reads map[string]int // command name -> reads of the client's socket that carried one

	wg sync.WaitGroup
}

// newAMQPTap starts a tap in front of the server at amqpURL and returns
// it with the URL that reaches the server through it. t's cleanup stops
// it.
func newAMQPTap(t *testing.T, amqpURL string) (*amqpTap, string) {
	t.Helper()
	u, err := url.Parse(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tap := &amqpTap{ln: ln, target: u.Host, sent: map[string]int{}, reads: map[string]int{}}
	tap.wg.Add(1)
	go tap.accept()
	t.Cleanup(tap.close)
	u.Host = ln.Addr().String()
	return tap, u.String()
}

func (tap *amqpTap) accept() {
	defer tap.wg.Done()
	for {
		c, err := tap.ln.Accept()
		if err != nil {
			return // closed
		}
		s, err := net.Dial("tcp", tap.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		tap.mu.Lock()
		tap.dials++
		tap.conns = append(tap.conns, c, s)
		tap.mu.Unlock()
		tap.wg.Add(2)
		go func() {
			defer tap.wg.Done()
			tap.forward(s, c)
			_ = s.Close()
		}()
		go func() {
			defer tap.wg.Done()
			_, _ = io.Copy(c, s)
			_ = c.Close()
		}()
	}
}

// forward copies what the client at c sends to the server at s,
// counting its commands.
func (tap *amqpTap) forward(s, c net.Conn) {
	var frames amqpFrames
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			in := map[string]bool{}
			tap.mu.Lock()
			for _, name := range frames.feed(buf[:n]) {
				tap.sent[name]++
				in[name] = true
			}
			for name := range in {
				tap.reads[name]++
			}
			tap.mu.Unlock()
			if _, werr := s.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (tap *amqpTap) close() {
	_ = tap.ln.Close()
	tap.mu.Lock()
	for _, c := range tap.conns {
		_ = c.Close()
	}
	tap.mu.Unlock()
	tap.wg.Wait()
}

// connections returns how many connections the tap has passed on.
func (tap *amqpTap) connections() int {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	return tap.dials
}

// commands returns what the clients sent so far, by command name.
func (tap *amqpTap) commands() map[string]int {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	return maps.Clone(tap.sent)
}

// readsWith returns how many reads of the clients' sockets so far carried
// (the end of) a command of each name: a client that sends n commands in
// one write is read at once, one that writes each is read up to n times.
func (tap *amqpTap) readsWith() map[string]int {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	return maps.Clone(tap.reads)
}

// since returns what was sent after the earlier snapshot, and its total.
func since(before, after map[string]int) (map[string]int, int) {
	d, total := map[string]int{}, 0
	for name, n := range after {
		if n -= before[name]; n > 0 {
			d[name] = n
			total += n
		}
	}
	return d, total
}

// describe lists the commands of d, most frequent first.
func describe(d map[string]int) string {
	names := slices.SortedFunc(maps.Keys(d), func(a, b string) int {
		if d[a] != d[b] {
			return d[b] - d[a]
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, name := range names {
		parts = append(parts, fmt.Sprintf("%s %d", name, d[name]))
	}
	return strings.Join(parts, ", ")
}

// amqpFrames splits a client's byte stream into AMQP 0-9-1 frames: the
// protocol header, then frames of type (1 byte), channel (2), payload
// size (4), payload, and the end octet 0xCE.
type amqpFrames struct {
	pending  []byte
	greeted  bool
	violated bool
}

const amqpProtocolHeader = "AMQP\x00\x00\x09\x01"

// feed takes the next bytes the client sent and returns the commands
// completed in them ("bad frame" once for a stream it cannot follow).
func (f *amqpFrames) feed(p []byte) []string {
	if f.violated {
		return nil
	}
	f.pending = append(f.pending, p...)
	var out []string
	if !f.greeted {
		if len(f.pending) < len(amqpProtocolHeader) {
			return nil
		}
		if string(f.pending[:len(amqpProtocolHeader)]) != amqpProtocolHeader {
			f.violated = true
			return []string{"bad frame"}
		}
		f.pending, f.greeted = f.pending[len(amqpProtocolHeader):], true
	}
	for len(f.pending) >= 7 {
		size := int(binary.BigEndian.Uint32(f.pending[3:7]))
		if len(f.pending) < 7+size+1 {
			break
		}
		frame, payload := f.pending[0], f.pending[7:7+size]
		if f.pending[7+size] != 0xCE {
			f.violated = true
			return append(out, "bad frame")
		}
		switch frame {
		case 1: // method
			name, err := methodName(payload)
			if err != nil {
				f.violated = true
				return append(out, "bad frame")
			}
			out = append(out, name)
		case 8:
			out = append(out, "heartbeat")
		}
		// 2 and 3, a content header and body, belong to their method.
		f.pending = f.pending[7+size+1:]
	}
	f.pending = slices.Clip(f.pending)
	return out
}

// amqpMethods names the methods a client sends, by class and method id.
var amqpMethods = map[[2]uint16]string{
	{10, 11}: "connection.start-ok", {10, 21}: "connection.secure-ok",
	{10, 31}: "connection.tune-ok", {10, 40}: "connection.open",
	{10, 50}: "connection.close", {10, 51}: "connection.close-ok",
	{20, 10}: "channel.open", {20, 20}: "channel.flow", {20, 21}: "channel.flow-ok",
	{20, 40}: "channel.close", {20, 41}: "channel.close-ok",
	{40, 10}: "exchange.declare", {40, 20}: "exchange.delete",
	{40, 30}: "exchange.bind", {40, 40}: "exchange.unbind",
	{50, 10}: "queue.declare", {50, 20}: "queue.bind", {50, 30}: "queue.purge",
	{50, 40}: "queue.delete", {50, 50}: "queue.unbind",
	{60, 10}: "basic.qos", {60, 20}: "basic.consume", {60, 30}: "basic.cancel",
	{60, 40}: "basic.publish", {60, 70}: "basic.get", {60, 80}: "basic.ack",
	{60, 90}: "basic.reject", {60, 110}: "basic.recover", {60, 120}: "basic.nack",
	{85, 10}: "confirm.select",
	{90, 10}: "tx.select", {90, 20}: "tx.commit", {90, 30}: "tx.rollback",
}

func methodName(payload []byte) (string, error) {
	if len(payload) < 4 {
		return "", errors.New("short method frame")
	}
	id := [2]uint16{binary.BigEndian.Uint16(payload), binary.BigEndian.Uint16(payload[2:])}
	if name, ok := amqpMethods[id]; ok {
		return name, nil
	}
	return fmt.Sprintf("method %d.%d", id[0], id[1]), nil
}
