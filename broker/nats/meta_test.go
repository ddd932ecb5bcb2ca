package nats_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker/nats"
	"github.com/trawlhq/trawl/internal/integration"
)

// TestMembersLongID: a worker whose id is too long for a key (which keeps
// a hash of it) is listed by its id, so that it finds itself among the
// crawl's workers (the engine's affinity looks itself up in Members).
func TestMembersLongID(t *testing.T) {
	e := embedded(t, "")
	ctx := t.Context()
	b := newBroker(t, e.Conn(), nats.Config{})
	crawl := integration.Name(t)
	long := "worker." + strings.Repeat("Host-With-A-Long-Name.", 12) + "example/1234"
	short := "w/1"
	for _, id := range []string{long, short} {
		if err := b.Announce(ctx, crawl, id, time.Minute); err != nil {
			t.Fatalf("Announce(%q): %v", id, err)
		}
	}
	got, err := b.Members(ctx, crawl)
	if want := []string{short, long}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("Members = %q, %v; want %q", got, err, want)
	}
	if err := b.Leave(ctx, crawl, long); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	if got, err := b.Members(ctx, crawl); err != nil || !slices.Equal(got, []string{short}) {
		t.Fatalf("Members after the long id left = %q, %v; want %q", got, err, []string{short})
	}
}
