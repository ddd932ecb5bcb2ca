package integration

import (
	"context"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestNATS(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	u := NATS(t)
	nc, err := natsgo.Connect(u)
	if err != nil {
		t.Fatalf("connect %s: %v", u, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	name := Name(t)
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name}})
	if err != nil {
		t.Fatalf("create stream (is JetStream enabled?): %v", err)
	}
	defer func() { _ = js.DeleteStream(context.WithoutCancel(ctx), name) }()
	if _, err := js.Publish(ctx, name, []byte("v")); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if m, err := s.GetMsg(ctx, 1); err != nil || string(m.Data) != "v" {
		t.Fatalf("get = %v, %v; want v", m, err)
	}
	if a, b := NATS(t), NATS(t); a != b {
		t.Fatalf("NATS returned %q, then %q; want one shared server", a, b)
	}
}

func TestNATSContainerRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	srv := NATSContainer(t)
	nc, err := natsgo.Connect(srv.URL, natsgo.MaxReconnects(-1), natsgo.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("connect %s: %v", srv.URL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "s", Subjects: []string{"s"}}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	if _, err := js.Publish(ctx, "s", []byte("kept")); err != nil {
		t.Fatalf("publish: %v", err)
	}
	before := srv.URL
	if err := srv.Restart(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if srv.URL != before {
		t.Fatalf("URL changed across Restart: %q, then %q", before, srv.URL)
	}
	// The old connection reconnects by itself, and the stream kept its message.
	for {
		s, err := js.Stream(ctx, "s")
		if err == nil {
			m, err := s.GetMsg(ctx, 1)
			if err != nil || string(m.Data) != "kept" {
				t.Fatalf("after restart: get = %v, %v; want kept", m, err)
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("stream not reachable after restart: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
