package brokertest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker"
)

// testMetadata: values are per crawl and key, seen by every broker of the
// backend; CreateMeta creates once; PurgeMeta deletes one crawl's values.
func (s *suite) testMetadata(t *testing.T) {
	bs := s.brokers(t, s.setup(), 2)
	m0, ok := bs[0].(broker.Metadata)
	if !ok {
		t.Skip("broker does not implement broker.Metadata")
	}
	m1 := bs[1].(broker.Metadata)
	ctx := t.Context()
	crawl, other := strings.TrimSuffix(queue(t), ":q"), strings.TrimSuffix(queue(t, "other"), ":q")
	if _, err := m0.GetMeta(ctx, crawl, "settings"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("GetMeta of nothing: %v, want ErrNotFound", err)
	}
	if err := m0.CreateMeta(ctx, crawl, "settings", []byte("one")); err != nil {
		t.Fatalf("CreateMeta: %v", err)
	}
	if err := m1.CreateMeta(ctx, crawl, "settings", []byte("two")); !errors.Is(err, broker.ErrExists) {
		t.Fatalf("second CreateMeta: %v, want ErrExists", err)
	}
	if v, err := m1.GetMeta(ctx, crawl, "settings"); err != nil || string(v) != "one" {
		t.Fatalf("GetMeta from another broker = %q, %v; want one", v, err)
	}
	if err := m1.SetMeta(ctx, crawl, "settings", []byte("three")); err != nil {
		t.Fatalf("SetMeta: %v", err)
	}
	if v, err := m0.GetMeta(ctx, crawl, "settings"); err != nil || string(v) != "three" {
		t.Fatalf("GetMeta after SetMeta = %q, %v; want three", v, err)
	}
	if err := m0.SetMeta(ctx, other, "settings", []byte("other")); err != nil {
		t.Fatalf("SetMeta: %v", err)
	}
	if err := m0.PurgeMeta(ctx, crawl); err != nil {
		t.Fatalf("PurgeMeta: %v", err)
	}
	if _, err := m1.GetMeta(ctx, crawl, "settings"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("GetMeta after PurgeMeta: %v, want ErrNotFound", err)
	}
	if v, err := m1.GetMeta(ctx, other, "settings"); err != nil || string(v) != "other" {
		t.Fatalf("PurgeMeta touched another crawl: %q, %v", v, err)
	}
	if err := m1.CreateMeta(ctx, crawl, "settings", []byte("again")); err != nil {
		t.Fatalf("CreateMeta after PurgeMeta: %v", err)
	}
	m0.PurgeMeta(ctx, other)
}

// testPresence: an announcement is seen by every broker of the backend,
// per crawl, until it is withdrawn or expires.
func (s *suite) testPresence(t *testing.T) {
	bs := s.brokers(t, s.setup(), 2)
	p0, ok := bs[0].(broker.Metadata)
	if !ok {
		t.Skip("broker does not implement broker.Metadata (nor its Presence)")
	}
	p1 := bs[1].(broker.Metadata)
	ctx := t.Context()
	crawl, other := strings.TrimSuffix(queue(t), ":q"), strings.TrimSuffix(queue(t, "other"), ":q")
	live := func(p broker.Presence, crawl string) int {
		t.Helper()
		n, err := p.Live(ctx, crawl)
		if err != nil {
			t.Fatalf("Live: %v", err)
		}
		return n
	}
	if n := live(p1, crawl); n != 0 {
		t.Fatalf("Live before any announcement = %d", n)
	}
	if err := p0.Announce(ctx, crawl, "w1/1", time.Minute); err != nil {
		t.Fatalf("Announce: %v", err)
	}
	// w2 announces itself for 300ms. Live must count it until then; a
	// test held up past that (a loaded machine) proves nothing, so the
	// trial is void and run again, as a new worker (three trials at most).
	const short, trials = 300 * time.Millisecond, 3
	for i := 1; ; i++ {
		sent := time.Now()
		if err := p1.Announce(ctx, crawl, fmt.Sprintf("w2/%d", i), short); err != nil {
			t.Fatalf("Announce: %v", err)
		}
		if err := p1.Announce(ctx, crawl, "w1/1", time.Minute); err != nil { // renewed: still one worker
			t.Fatalf("Announce: %v", err)
		}
		n := live(p1, crawl)
		want := []string{"w1/1", fmt.Sprintf("w2/%d", i)}
		got, listed := list(t, p0, crawl)
		if n == 2 && (!listed || slices.Equal(got, want)) {
			break
		}
		took := time.Since(sent)
		if took < short {
			if n != 2 {
				t.Fatalf("Live = %d, want 2", n)
			}
			t.Fatalf("Members = %q, want %q", got, want)
		}
		if i == trials {
			t.Fatalf("Live = %d, want 2; in each of %d trials the test took longer than the announcement's %v (last %v): too loaded a machine to test Presence",
				n, trials, short, took)
		}
		t.Logf("trial %d void: Live = %d, %v after an announcement of %v; trying again", i, n, took, short)
	}
	if n := live(p0, other); n != 0 {
		t.Fatalf("Live of another crawl = %d, want 0", n)
	}
	members(t, p1, other)
	deadline := time.Now().Add(prompt)
	for live(p0, crawl) != 1 { // w2's announcement expires
		if time.Now().After(deadline) {
			t.Fatalf("an announcement of 300ms still live after %v", prompt)
		}
		time.Sleep(20 * time.Millisecond) // polling an expiry, bounded by the deadline
	}
	members(t, p1, crawl, "w1/1")
	if err := p0.Leave(ctx, crawl, "w1/1"); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	if n := live(p1, crawl); n != 0 {
		t.Fatalf("Live after Leave = %d, want 0", n)
	}
	members(t, p0, crawl)
}

// list returns crawl's live workers as p lists them, and whether p is a
// broker.Roster that lists them.
func list(t *testing.T, p broker.Presence, crawl string) ([]string, bool) {
	t.Helper()
	r, ok := p.(broker.Roster)
	if !ok {
		return nil, false
	}
	got, err := r.Members(t.Context(), crawl)
	if err != nil {
		t.Fatalf("Members(%q): %v", crawl, err)
	}
	return got, true
}

// members checks that p, if it is a broker.Roster, lists want (sorted) as
// crawl's live workers.
func members(t *testing.T, p broker.Presence, crawl string, want ...string) {
	t.Helper()
	if got, ok := list(t, p, crawl); ok && !slices.Equal(got, want) {
		t.Fatalf("Members(%q) = %q, want %q", crawl, got, want)
	}
}
