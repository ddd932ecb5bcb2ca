package nats_test

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/trawlhq/trawl/broker/nats"
	"github.com/trawlhq/trawl/internal/integration"
)

// stallDialer dials TCP connections whose reads it can hold back: once
// armed, the first write that holds trigger stalls every read that
// returns after it until release, as a server (or this process) held up
// between a request and its answer would.
type stallDialer struct {
	trigger []byte
	mu      sync.Mutex
	armed   bool
	stalled chan struct{} // closed when the stall begins
	gate    chan struct{} // closed by release
}

func newStallDialer(trigger string) *stallDialer {
	return &stallDialer{trigger: []byte(trigger), stalled: make(chan struct{}), gate: make(chan struct{})}
}

func (d *stallDialer) Dial(network, address string) (net.Conn, error) {
	c, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return &stallConn{Conn: c, d: d}, nil
}

func (d *stallDialer) arm() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.armed = true
}

func (d *stallDialer) release() { close(d.gate) }

type stallConn struct {
	net.Conn
	d        *stallDialer
	stalling bool
}

func (c *stallConn) Write(p []byte) (int, error) {
	d := c.d
	d.mu.Lock()
	if d.armed && bytes.Contains(p, d.trigger) {
		d.armed = false
		c.stalling = true
		close(d.stalled)
	}
	d.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *stallConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.d.mu.Lock()
	stalling := c.stalling
	c.d.mu.Unlock()
	if stalling {
		<-c.d.gate
	}
	return n, err
}

// TestReceiveOutlivesStall: the answer to a pull request that comes more
// than a second late (a server or a process held up) still delivers its
// message if its lease has not run out meanwhile (nats.go's Fetch stops
// listening a second after a "no wait" request and dropped it: it came
// back only after its lease), and is not handed out if it has (the server
// gives it to another worker: handing it out too would fetch a page
// twice); then the server's next delivery is.
func TestReceiveOutlivesStall(t *testing.T) {
	const stall = 1500 * time.Millisecond // past nats.go's second
	for _, tc := range []struct {
		name        string
		lease       time.Duration
		wantAttempt int
	}{
		{"within the lease", 30 * time.Second, 1},
		{"past the lease", time.Second, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Past the lease, attempt 1 can also mean that the server
			// answered the stalled request "no messages" (a consumer that
			// had not yet counted the message just published) and its next
			// delivery was the first: a void trial, run again. A client that
			// hands out the late answer gives attempt 1 in every trial.
			const trials = 5
			for trial := 1; ; trial++ {
				r := stallReceive(t, tc.lease, stall)
				if r.err != nil || r.body != "late" {
					t.Fatalf("Receive across a %v stall, lease %v: got %q, %v; want the message", stall, tc.lease, r.body, r.err)
				}
				if r.attempt == tc.wantAttempt {
					return
				}
				if tc.wantAttempt == 2 && r.attempt == 1 && trial < trials {
					t.Logf("trial %d void: attempt 1 past the lease (the server may have answered the stalled request empty); trying again", trial)
					continue
				}
				t.Fatalf("Receive across a %v stall, lease %v: got %q attempt %d (trial %d); want the message, attempt %d",
					stall, tc.lease, r.body, r.attempt, trial, tc.wantAttempt)
			}
		})
	}
}

// stallResult is what stallReceive's Receive returned.
type stallResult struct {
	body    string
	attempt int
	err     error
}

// stallReceive publishes a message on a fresh broker with lease, stalls
// the connection's reads once its pull request is written, for stall, and
// returns what Receive returned (its delivery acknowledged).
func stallReceive(t *testing.T, lease, stall time.Duration) stallResult {
	t.Helper()
	e := embedded(t, "127.0.0.1:0")
	dialer := newStallDialer("CONSUMER.MSG.NEXT")
	nc, err := e.Connect(natsgo.InProcessServer(nil), natsgo.SetCustomDialer(dialer))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	b := newBroker(t, nc, nats.Config{Lease: lease})
	q := integration.Name(t) + ":requests"
	if err := b.Publish(t.Context(), q, msg("late", 0)); err != nil {
		t.Fatal(err)
	}

	dialer.arm()
	done := make(chan stallResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		ds, err := b.Receive(ctx, q, 1)
		if err != nil || len(ds) != 1 {
			done <- stallResult{err: err}
			return
		}
		done <- stallResult{body: string(ds[0].Message().Body), attempt: ds[0].Attempt(), err: ds[0].Ack(ctx)}
	}()
	select {
	case <-dialer.stalled:
	case r := <-done:
		t.Fatalf("Receive returned (%q, %v) without a pull request", r.body, r.err)
	}
	time.Sleep(stall) // the stall under test, not a synchronisation
	dialer.release()
	return <-done
}
