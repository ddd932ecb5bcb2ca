package nats_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/nats"
	"github.com/trawlhq/trawl/internal/integration"
)

func msg(body string, prio int) broker.Message {
	return broker.Message{Body: []byte(body), Priority: prio}
}

// receiveN receives n deliveries of q within wait.
func receiveN(t *testing.T, b broker.Broker, q string, n int, wait time.Duration) []broker.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	var out []broker.Delivery
	for len(out) < n {
		ds, err := b.Receive(ctx, q, n-len(out))
		if err != nil {
			t.Fatalf("Receive(%q): got %d of %d: %v", q, len(out), n, err)
		}
		out = append(out, ds...)
	}
	return out
}

func bodies(ds []broker.Delivery) []string {
	var out []string
	for _, d := range ds {
		out = append(out, fmt.Sprintf("%s/%d", d.Message().Body, d.Attempt()))
	}
	return out
}

func TestEmbeddedRestart(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	const q = "books:requests"
	const lease = 500 * time.Millisecond
	e, err := nats.StartEmbedded(ctx, nats.EmbeddedConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nats.StartEmbedded(ctx, nats.EmbeddedConfig{Dir: dir}); !errors.Is(err, nats.ErrLocked) {
		t.Fatalf("second server on one data directory: %v, want ErrLocked", err)
	}
	b, err := nats.New(ctx, nats.Config{Conn: e.Conn(), Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	err = b.Publish(ctx, q, msg("acked", 2), msg("rejected", 1), msg("crashed", 0),
		msg("low", -2), msg("mid", 0), msg("high", 2))
	if err != nil {
		t.Fatal(err)
	}
	ds := receiveN(t, b, q, 3, 5*time.Second)
	if got := bodies(ds); !slices.Equal(got, []string{"acked/1", "high/1", "rejected/1"}) {
		t.Fatalf("received %q", got)
	}
	if err := ds[0].Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ds[2].Reject(ctx, "bad"); err != nil {
		t.Fatal(err)
	}
	// "high" stays unsettled; Close gives it back.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// A worker that dies holding "crashed": its lease runs out after the restart.
	b2, err := nats.New(ctx, nats.Config{Conn: e.Conn(), Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	if ds := receiveN(t, b2, q, 2, 5*time.Second); !slices.Equal(bodies(ds), []string{"high/2", "crashed/1"}) {
		t.Fatalf("received %q, want high/2 crashed/1", bodies(ds))
	}
	e.Shutdown()
	if err := b2.Close(); err != nil { // cannot give back: the connection is gone
		t.Fatal(err)
	}

	e, err = nats.StartEmbedded(ctx, nats.EmbeddedConfig{Dir: dir})
	if err != nil {
		t.Fatalf("restart on the same directory: %v", err)
	}
	defer e.Shutdown()
	b = newBroker(t, e.Conn(), nats.Config{Lease: lease})
	ds = receiveN(t, b, q, 4, 5*time.Second)
	// mid and low were ready; high and crashed, which the dead worker
	// held, come back too. (Their attempts are not checked exactly: a
	// restarted server redelivers in-flight messages at once, which the
	// broker cannot tell from a delivery that never reached a client;
	// see doc.go.)
	got := bodies(ds)
	if i, j := slices.Index(got, "mid/1"), slices.Index(got, "low/1"); i < 0 || j < i {
		t.Fatalf("after restart received %q, want mid/1 before low/1", got)
	}
	var names []string
	for _, d := range ds {
		names = append(names, string(d.Message().Body))
		if string(d.Message().Body) == "high" && d.Attempt() < 2 {
			t.Errorf("high, given back at close, has attempt %d after the restart, want at least 2", d.Attempt())
		}
	}
	slices.Sort(names)
	if want := []string{"crashed", "high", "low", "mid"}; !slices.Equal(names, want) {
		t.Fatalf("after restart received %q, want %q", got, want)
	}
	for _, d := range ds {
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	dls, err := b.DeadLetters(ctx, q, 10)
	if err != nil || len(dls) != 1 || string(dls[0].Message.Body) != "rejected" || dls[0].Reason != "bad" {
		t.Fatalf("dead letters after restart: %+v, %v; want rejected (bad)", dls, err)
	}
	waitCounts(t, b, q, broker.Counts{Dead: 1})
}

// waitCounts polls until b counts q as want.
func waitCounts(t *testing.T, b *nats.Broker, q string, want broker.Counts) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := b.Counts(t.Context(), q)
		if err != nil {
			t.Fatalf("Counts: %v", err)
		}
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Counts(%q) = %+v, want %+v", q, got, want)
		}
		time.Sleep(20 * time.Millisecond) // polling an observable condition
	}
}

// TestServerRestart restarts a nats-server container (file storage) in
// the middle of a queue's use: nothing acknowledged comes back, nothing
// else is lost, the connection comes back by itself, and a Receive that
// was waiting across the restart sees the next Publish.
func TestServerRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	srv := integration.NATSContainer(t)
	nc, err := nats.Connect(ctx, srv.URL, nats.ConnectConfig{ReconnectWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	b := newBroker(t, nc, nats.Config{Lease: time.Minute})
	q, idle := integration.Name(t)+":requests", integration.Name(t)+":idle"

	const n = 100
	var msgs []broker.Message
	for i := range n {
		msgs = append(msgs, msg(fmt.Sprintf("m%03d", i), i%5-2))
	}
	if err := b.Publish(ctx, q, msgs...); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	take := func(k int) []broker.Delivery {
		ds := receiveN(t, b, q, k, 30*time.Second)
		for _, d := range ds {
			seen[string(d.Message().Body)]++
		}
		return ds
	}
	for _, d := range take(30) {
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	held := take(10)

	// A Receive waiting on an empty queue across the restart.
	type result struct {
		ds  []broker.Delivery
		err error
	}
	waiting := make(chan result, 1)
	go func() {
		ds, err := b.Receive(ctx, idle, 1)
		waiting <- result{ds, err}
	}()

	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	for !nc.IsConnected() {
		select {
		case <-ctx.Done():
			t.Fatal("the connection did not come back after the restart")
		case <-time.After(50 * time.Millisecond):
		}
	}
	for _, d := range held {
		if err := d.Ack(ctx); err != nil {
			t.Fatalf("Ack after the restart of a delivery taken before it: %v", err)
		}
	}
	if err := b.Publish(ctx, idle, msg("wake", 0)); err != nil {
		t.Fatalf("Publish after the restart: %v", err)
	}
	select {
	case r := <-waiting:
		if r.err != nil || len(r.ds) != 1 || string(r.ds[0].Message().Body) != "wake" {
			t.Fatalf("Receive waiting across the restart: %v, %v; want wake", r.ds, r.err)
		}
		if err := r.ds[0].Ack(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("a Receive waiting across the restart did not see a Publish after it")
	}
	if err := b.Publish(ctx, q, msg("after", 0)); err != nil {
		t.Fatal(err)
	}
	for _, d := range take(n - 40 + 1) {
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		if body := fmt.Sprintf("m%03d", i); seen[body] != 1 {
			t.Errorf("%s received %d times, want once", body, seen[body])
		}
	}
	if seen["after"] != 1 {
		t.Errorf("after received %d times, want once", seen["after"])
	}
	waitCounts(t, b, q, broker.Counts{})
}

// TestEmbeddedAdvertise: a server started with Advertise is reachable from
// another client through its data directory, with the recorded token only;
// once it stops, nothing is advertised.
func TestEmbeddedAdvertise(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	if _, err := nats.ConnectRunning(ctx, dir, nats.ConnectConfig{}); !errors.Is(err, nats.ErrNotRunning) {
		t.Fatalf("ConnectRunning with no server: %v, want ErrNotRunning", err)
	}
	e, err := nats.StartEmbedded(ctx, nats.EmbeddedConfig{Dir: dir, Advertise: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown()
	if fi, err := os.Stat(filepath.Join(dir, "client.json")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("address file: %v, %v; want mode 0600", fi, err)
	}
	if _, err := nats.Connect(ctx, e.ClientURL(), nats.ConnectConfig{}); err == nil {
		t.Fatal("a client without the token was let in")
	}
	nc, err := nats.ConnectRunning(ctx, dir, nats.ConnectConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// What one client publishes, the server's own connection receives.
	remote := newBroker(t, nc, nats.Config{})
	if err := remote.Publish(ctx, "books:start_urls", msg("seeded", 0)); err != nil {
		t.Fatal(err)
	}
	local := newBroker(t, e.Conn(), nats.Config{})
	if ds := receiveN(t, local, "books:start_urls", 1, 5*time.Second); !slices.Equal(bodies(ds), []string{"seeded/1"}) {
		t.Fatalf("received %q", bodies(ds))
	}
	e.Shutdown()
	if _, err := os.Stat(filepath.Join(dir, "client.json")); !os.IsNotExist(err) {
		t.Errorf("the address outlives the server: %v", err)
	}
	if _, err := nats.ConnectRunning(ctx, dir, nats.ConnectConfig{}); !errors.Is(err, nats.ErrNotRunning) {
		t.Errorf("ConnectRunning after Shutdown: %v, want ErrNotRunning", err)
	}
}
