package engine

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/trawlhq/trawl/broker"
)

// TestShare: the partitions are dealt over the sorted live workers in
// turn, every partition to exactly one worker and each worker within one
// of the others' count; a worker not in the list has no preference
// (nil), one beyond the partitions' count owns none (empty).
func TestShare(t *testing.T) {
	for _, parts := range []int{2, 3, 8, 12, 256} {
		for w := 1; w <= 9; w++ {
			members := make([]string, w)
			for i := range members {
				members[i] = fmt.Sprintf("host/%d/w", 100+i)
			}
			owner := make([]int, parts)
			for i := range owner {
				owner[i] = -1
			}
			lo, hi := parts, 0
			for i, m := range members {
				own := share(parts, members, m)
				if own == nil {
					t.Fatalf("%d partitions, %d workers: worker %d (in the list) prefers nil", parts, w, i)
				}
				for _, p := range own {
					if owner[p] >= 0 {
						t.Fatalf("%d partitions, %d workers: partition %d given to workers %d and %d", parts, w, p, owner[p], i)
					}
					owner[p] = i
				}
				lo, hi = min(lo, len(own)), max(hi, len(own))
			}
			if slices.Contains(owner, -1) {
				t.Errorf("%d partitions, %d workers: some given to none: %v", parts, w, owner)
			}
			if hi-lo > 1 {
				t.Errorf("%d partitions, %d workers: shares from %d to %d, want within one", parts, w, lo, hi)
			}
		}
	}
	if got := share(8, []string{"a", "b"}, "c"); got != nil {
		t.Errorf("share of a worker not in the list = %v, want nil", got)
	}
	if got := share(2, []string{"a", "b", "c", "d"}, "c"); got == nil || len(got) != 0 {
		t.Errorf("share of the third of 4 workers over 2 partitions = %#v, want empty, not nil", got)
	}
	if got := share(8, []string{"a", "b", "c", "d"}, "b"); !slices.Equal(got, []int{1, 5}) {
		t.Errorf("share of the second of 4 workers over 8 partitions = %v, want [1 5]", got)
	}
}

// preferrer is a consumer that records what it was told to prefer.
type preferrer struct {
	mu    sync.Mutex
	calls [][]int
}

func (p *preferrer) Next(ctx context.Context) (broker.Delivery, error) { return nil, ctx.Err() }
func (p *preferrer) Close() error                                      { return nil }
func (p *preferrer) Prefer(own []int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, slices.Clone(own))
}

func (p *preferrer) got() [][]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

// plain is a consumer that cannot prefer.
type plain struct{}

func (plain) Next(ctx context.Context) (broker.Delivery, error) { return nil, ctx.Err() }
func (plain) Close() error                                      { return nil }

// TestAffinityUpdate: the consumer is told its share when it changes,
// and only then, with one Info line per change; more workers than
// partitions is said once, at Warn; a consumer opened again (after a
// pause) is told the share at once; one that cannot prefer, or a queue of
// one partition, turns the share off.
func TestAffinityUpdate(t *testing.T) {
	var logs bytes.Buffer
	a := &affinity{log: slog.New(slog.NewTextHandler(&logs, nil))}
	cons := &preferrer{}
	a.attach(cons, 8)
	a.update([]string{"a"}, "b") // not yet listed: as before, nothing said
	a.update([]string{"a", "b"}, "b")
	a.update([]string{"a", "b"}, "b")
	a.update([]string{"a", "b", "c", "d"}, "b")
	a.update([]string{"a", "b", "c", "d"}, "b")
	a.update([]string{"a", "c", "d"}, "c") // another id: the same as being second of three
	want := [][]int{{1, 3, 5, 7}, {1, 5}, {1, 4, 7}}
	if got := cons.got(); !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("Prefer calls %v, want %v", got, want)
	}
	if n := strings.Count(logs.String(), "this worker now prefers partitions"); n != 3 {
		t.Errorf("%d preference lines logged, want 3 (one per change):\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), `"this worker now prefers partitions 1,5 of 8: 4 workers"`) {
		t.Errorf("no line saying the share of 8 over 4 workers:\n%s", logs.String())
	}
	again := &preferrer{}
	a.attach(again, 8)
	if got := again.got(); !slices.EqualFunc(got, [][]int{{1, 4, 7}}, slices.Equal) {
		t.Errorf("a consumer opened again was told %v, want the share [[1 4 7]]", got)
	}
	a.update([]string{"a", "b"}, "c") // gone from the list: prefer all again
	if got := again.got(); len(got) != 2 || got[1] != nil {
		t.Errorf("a worker dropped from the list: Prefer calls %v, want the last nil", got)
	}

	logs.Reset()
	a.attach(cons, 2)
	for range 3 {
		a.update([]string{"a", "b", "c", "d"}, "d")
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), "4 workers share 2 partitions") {
		t.Errorf("more workers than partitions: %d warnings, want one saying so:\n%s", n, logs.String())
	}

	a.attach(plain{}, 8)
	if a.on() {
		t.Error("a consumer that cannot prefer: the share is on")
	}
	a.attach(cons, 1)
	if a.on() {
		t.Error("a queue of one partition: the share is on")
	}
}

// rosterPresence is a presence that lists its members and counts the
// lists read.
type rosterPresence struct {
	countingPresence
	looks []time.Duration // since start
	start time.Time
}

func (p *rosterPresence) Members(context.Context, string) ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.looks = append(p.looks, time.Since(p.start))
	return []string{"v", "w"}, nil
}

// TestPresenceLooksEarly: where the share is on, a worker reads the live
// workers with each announcement and a few times in its first seconds
// (a fleet starts together, and a worker first sees only itself), then
// only with its announcements; the consumer is told its share once.
func TestPresenceLooksEarly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rp := &rosterPresence{start: time.Now()}
		cons := &preferrer{}
		a := &affinity{log: slog.New(slog.DiscardHandler)}
		a.attach(cons, 4)
		p := &presence{p: rp, crawl: "c", id: "w", log: slog.New(slog.DiscardHandler),
			beat: func(context.Context, bool) {}, aff: a}
		done := make(chan struct{})
		stopped := make(chan struct{})
		go func() { defer close(stopped); p.run(context.Background(), done) }()
		time.Sleep(3 * PresenceTTL)
		close(done)
		<-stopped
		announced := strings.Count(strings.Join(rp.calls, "|"), "announce")
		if len(rp.looks) != announced+len(earlyLooks) {
			t.Errorf("%d looks, want one per announcement (%d) and %d early: %v", len(rp.looks), announced, len(earlyLooks), rp.looks)
		}
		early := 0
		for _, at := range rp.looks {
			if at > 0 && at <= earlyLooks[len(earlyLooks)-1] {
				early++
			}
		}
		if early != len(earlyLooks) {
			t.Errorf("%d looks within the first %v after the first, want %d: %v", early, earlyLooks[len(earlyLooks)-1], len(earlyLooks), rp.looks)
		}
		if got := cons.got(); !slices.EqualFunc(got, [][]int{{1, 3}}, slices.Equal) {
			t.Errorf("Prefer calls %v, want [[1 3]] once", got)
		}
	})
}

// TestAffinityNoneOwn: a worker beyond the partitions' count (the 4th of 4
// over 2) is told an empty, not nil, list (none of its own: it only
// steals), and its share counts as changed with none of the partitions
// its own, so that it gives back what its workbench holds for the
// others' (owned: all false, not nil, which would keep them all). One
// dropped from the roster is told nil (no preference) and keeps what it
// holds.
func TestAffinityNoneOwn(t *testing.T) {
	a := &affinity{log: slog.New(slog.DiscardHandler)}
	cons := &preferrer{}
	a.attach(cons, 2)
	a.update([]string{"a", "b", "c", "d"}, "d")
	if got := cons.got(); len(got) != 1 || got[0] == nil || len(got[0]) != 0 {
		t.Fatalf("the 4th of 4 workers over 2 partitions: Prefer calls %#v, want one with an empty, not nil, list", got)
	}
	if n := a.changed.Load(); n != 1 {
		t.Errorf("share changed %d times, want 1: the worker keeps what it holds for the others' partitions", n)
	}
	if own, parts := a.owned(); own == nil || parts != 2 || slices.Contains(own, true) {
		t.Errorf("owned() = %v, %d; want [false false], 2 (none of its own: shed all it holds back)", own, parts)
	}
	a.update([]string{"a", "b"}, "d")
	if got := cons.got(); len(got) != 2 || got[1] != nil {
		t.Errorf("a worker dropped from the roster: Prefer calls %#v, want the last nil", got)
	}
	if own, _ := a.owned(); own != nil {
		t.Errorf("owned() of a worker with no preference = %v, want nil (keeps what it holds)", own)
	}
}
