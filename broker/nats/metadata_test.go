package nats

import (
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
)

func TestMetadata(t *testing.T) {
	ts := time.Date(2026, 12, 3, 18, 0, 0, 123, time.UTC)
	nanos := "1796320800000000123"
	if got := ts.UnixNano(); got != 1796320800000000123 {
		t.Fatalf("test's time: %d", got)
	}
	want := meta{seq: 42, delivered: 3, stored: ts}
	for _, reply := range []string{
		"$JS.ACK.STREAM.b0.3.42.7." + nanos + ".5",                 // v1
		"$JS.ACK._.ACCHASH.STREAM.b0.3.42.7." + nanos + ".5.TOKEN", // v2
		"$JS.ACK.hub.ACCHASH.STREAM.b0.3.42.7." + nanos + ".5",     // v2 without its last token
	} {
		got, err := metadata(&natsgo.Msg{Reply: reply})
		if err != nil || got.seq != want.seq || got.delivered != want.delivered || !got.stored.Equal(want.stored) {
			t.Errorf("metadata(%q) = %+v, %v; want %+v", reply, got, err, want)
		}
	}
	for _, reply := range []string{
		"",
		"_INBOX.abc",
		"$JS.ACK.STREAM.b0.3.42.7",              // too short
		"$JS.ACK.a.b.STREAM.b0.3.42.7." + nanos, // 10 tokens
		"$JS.API.STREAM.b0.3.42.7." + nanos + ".5",       // not an ack
		"$JS.ACK.STREAM.b0.x.42.7." + nanos + ".5",       // not a number
		"$JS.ACK.STREAM.b0.3.-42.7." + nanos + ".5",      // negative
		"$JS.ACK.STREAM.b0.3.99999999999999999999.7.1.5", // overflows
	} {
		if got, err := metadata(&natsgo.Msg{Reply: reply}); err == nil {
			t.Errorf("metadata(%q) = %+v, nil error; want an error", reply, got)
		}
	}
}
