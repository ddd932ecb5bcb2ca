package engine

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// countingPresence records the calls a worker's presence makes.
type countingPresence struct {
	mu       sync.Mutex
	calls    []string
	announce error
}

func (p *countingPresence) add(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, s)
}

func (p *countingPresence) Announce(_ context.Context, crawl, id string, ttl time.Duration) error {
	p.add("announce " + crawl + " " + id + " " + ttl.String())
	return p.announce
}

func (p *countingPresence) Leave(_ context.Context, crawl, id string) error {
	p.add("leave " + crawl + " " + id)
	return nil
}

func (p *countingPresence) Live(context.Context, string) (int, error) { return 0, nil }

// TestPresence: a running worker announces itself at once and every
// third of PresenceTTL, writing its record each time; when it stops, it
// writes its record as stopped and withdraws; a failed announcement is
// logged and the worker goes on.
func TestPresence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cp := &countingPresence{announce: errors.New("down")}
		var logs bytes.Buffer
		var beats []bool
		p := &presence{p: cp, crawl: "c", id: "w", log: slog.New(slog.NewTextHandler(&logs, nil)),
			beat: func(_ context.Context, stopped bool) { cp.add("beat"); beats = append(beats, stopped) }}
		done := make(chan struct{})
		stopped := make(chan struct{})
		go func() { defer close(stopped); p.run(context.Background(), done) }()
		time.Sleep(PresenceTTL/3*2 + time.Millisecond)
		close(done)
		<-stopped
		a := "announce c w " + PresenceTTL.String()
		want := []string{a, "beat", a, "beat", a, "beat", "beat", "leave c w"}
		if strings.Join(cp.calls, "|") != strings.Join(want, "|") {
			t.Errorf("calls %q, want %q", cp.calls, want)
		}
		if len(beats) != 4 || beats[3] != true || beats[2] != false {
			t.Errorf("records written stopped: %v, want the last only", beats)
		}
		if n := strings.Count(logs.String(), "announcing this worker failed"); n != 3 {
			t.Errorf("%d failed announcements logged, want 3", n)
		}
	})
}

// TestPresenceJitter: a worker renews its announcement every third of
// PresenceTTL less a random presenceJitter, never on a fixed beat: on one
// (before), its renewals met its progress line, every 10 s from the same
// start, and an idle Redis worker dialled a second pooled connection each
// time.
func TestPresenceJitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var at []time.Time
		p := &presence{p: &countingPresence{}, crawl: "c", id: "w", log: slog.New(slog.DiscardHandler),
			beat: func(_ context.Context, stopped bool) {
				if !stopped {
					at = append(at, time.Now())
				}
			}}
		done := make(chan struct{})
		stopped := make(chan struct{})
		go func() { defer close(stopped); p.run(context.Background(), done) }()
		time.Sleep(20 * PresenceTTL)
		close(done)
		<-stopped
		gaps := map[time.Duration]int{}
		onBeat := 0 // renewals at a whole multiple of 10 s from the start
		for i := 1; i < len(at); i++ {
			gap := at[i].Sub(at[i-1])
			if gap > PresenceTTL/3 || gap <= PresenceTTL/3-presenceJitter {
				t.Errorf("renewal %d came %v after the one before, want in (%v, %v]", i, gap, PresenceTTL/3-presenceJitter, PresenceTTL/3)
			}
			gaps[gap]++
			if at[i].Sub(at[0])%(10*time.Second) == 0 {
				onBeat++
			}
		}
		if len(at) < 60 || len(gaps) < len(at)/2 {
			t.Errorf("%d renewals in %v, %d distinct gaps between them: %v; want at least 60, most of them apart by a gap of their own", len(at), 20*PresenceTTL, len(gaps), gaps)
		}
		if onBeat > 1 {
			t.Errorf("%d renewals of %d on a 10 s beat from the first, want none but by chance", onBeat, len(at))
		}
	})
}
