package nats_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/nats"
	"github.com/trawlhq/trawl/dedup/local"
	"github.com/trawlhq/trawl/engine"
)

// TestHostileHeaders plants messages with absurd trawl headers straight
// into a crawl's streams (a delay of 285 years on the delay subject, a
// negative attempt count on a band): a worker with a short idle timeout
// still finishes the crawl and exits, and each planted message is in the
// dead letters with a reason naming its header.
func TestHostileHeaders(t *testing.T) {
	e := embedded(t, "")
	nc := embeddedConn(e)(t)
	const name = "hostile"
	queue := engine.RequestsQueue(name)
	b := newBroker(t, nc, nats.Config{Lease: 2 * time.Second})

	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		hits.Add(1)
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<html><title>ok</title></html>")
	}))
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	// A genuine request creates the streams.
	body, err := (&engine.Request{URL: srv.URL + "/page", Scope: "127.0.0.1"}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, queue, broker.Message{Body: body}); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	plant := func(subject, header, value string) {
		t.Helper()
		m := natsgo.NewMsg(subject)
		m.Data = body
		m.Header.Set(header, value)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatalf("plant %s on %s: %v", header, subject, err)
		}
	}
	// Subjects as documented in names.go: "hostile:requests" escapes to
	// hostile_3arequests; the default priority 0 is band b2 of 5.
	plant("trawl.hostile_3arequests.delay", "Trawl-Delay", "9000000000000000000")
	plant("trawl.hostile_3arequests.b2", "Trawl-Attempts", "-9000000000000000000")

	f, err := local.New(local.Config{Capacity: 1000, FPRate: 1e-6})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := engine.New(b, f, engine.Config{
		Name: name, IdleTimeout: 500 * time.Millisecond, Lease: 2 * time.Second,
		TrustedHosts: []string{srv.Listener.Addr().String()},
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the crawl did not end within 30s of a worker with a 500ms idle timeout")
	}
	if hits.Load() < 1 {
		t.Error("the genuine page was never fetched")
	}
	dls, err := b.DeadLetters(ctx, queue, 10)
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, d := range dls {
		reasons = append(reasons, d.Reason)
	}
	all := strings.Join(reasons, "\n")
	for _, want := range []string{"Trawl-Delay", "Trawl-Attempts"} {
		if !strings.Contains(all, want) {
			t.Errorf("no dead letter names %s; reasons:\n%s", want, all)
		}
	}
}

// TestBadStartURLsDeadLettered publishes garbage and a 900 KB "URL" (the
// server takes no message over 1 MB) to a
// crawl's start queue beside a good start URL: only the good one is
// fetched, and the others are in the start queue's dead letters with their
// reasons.
func TestBadStartURLsDeadLettered(t *testing.T) {
	e := embedded(t, "")
	nc := embeddedConn(e)(t)
	const name = "badstarts"
	b := newBroker(t, nc, nats.Config{Lease: 2 * time.Second})
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<html></html>")
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	huge := srv.URL + "/" + strings.Repeat("a", 900<<10)
	if err := b.Publish(ctx, engine.StartQueue(name),
		broker.Message{Body: []byte("ftp://nope/")}, broker.Message{Body: []byte(huge)},
		broker.Message{Body: []byte(srv.URL + "/ok")}); err != nil {
		t.Fatal(err)
	}
	f, err := local.New(local.Config{Capacity: 1000, FPRate: 1e-6})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := engine.New(b, f, engine.Config{
		Name: name, IdleTimeout: 300 * time.Millisecond, Lease: 2 * time.Second, IgnoreRobots: true,
		TrustedHosts: []string{srv.Listener.Addr().String()},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("%d fetches, want 1", n)
	}
	dls, err := b.DeadLetters(ctx, engine.StartQueue(name), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 2 {
		t.Fatalf("%d dead letters, want 2", len(dls))
	}
	all := dls[0].Reason + "\n" + dls[1].Reason
	if !strings.Contains(all, "too long") || !strings.Contains(all, "start url") {
		t.Errorf("reasons:\n%s\nwant one saying too long", all)
	}
}
