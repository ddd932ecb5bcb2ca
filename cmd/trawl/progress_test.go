package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/engine"
)

// TestProgressLinesJitter: progress lines come about every interval,
// never on a fixed beat (each wait is the interval less a random
// twentieth), and each line's rate is over the time since the line
// before. On a fixed beat, a line's count of the queues at Redis met the
// feeder's look at the start URLs every 30 s, and an idle worker dialled
// a second pooled connection each time.
func TestProgressLinesJitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const every = 10 * time.Second
		stats := engine.NewStats()
		var at []time.Time
		queued := func(context.Context) (broker.Counts, bool) {
			at = append(at, time.Now())
			stats.Add(engine.StatResponses, 100) // 100 pages before the next line
			return broker.Counts{}, true
		}
		var out bytes.Buffer
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); progressLines(ctx, &out, stats, queued, every) }()
		time.Sleep(100 * every)
		cancel()
		<-done
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if len(lines) != len(at) || len(at) < 100 {
			t.Fatalf("%d lines, %d counts of the queues in %v, want one each about every %v:\n%s", len(lines), len(at), 100*every, every, out.String())
		}
		gaps := map[time.Duration]int{}
		for i := 1; i < len(at); i++ {
			gap := at[i].Sub(at[i-1])
			if gap > every || gap <= every-every/20 {
				t.Errorf("line %d came %v after the one before, want in (%v, %v]", i, gap, every-every/20, every)
			}
			gaps[gap]++
			// The rate of line i is over its own gap: 100 pages since.
			if want := fmt.Sprintf("(at %.1f pages/s)", 100/gap.Seconds()); !strings.Contains(lines[i], want) {
				t.Errorf("line %d, %v after the one before: %q, want %s", i, gap, lines[i], want)
			}
		}
		if len(gaps) < len(at)/2 {
			t.Errorf("%d distinct gaps between %d lines: %v; want most lines apart by a gap of their own", len(gaps), len(at), gaps)
		}
	})
}

// TestProgressQueuedText: a progress line's backlog counts what is not
// done, ready or not (a back-off's delayed, the workers' leased), and
// says how much of it is ready; "?" when the broker could not count.
func TestProgressQueuedText(t *testing.T) {
	for _, tc := range []struct {
		c        broker.Counts
		ok       bool
		n, ready string
	}{
		{broker.Counts{Ready: 5, Delayed: 2, InFlight: 7, Dead: 4}, true, "12", " (3 ready)"},
		{broker.Counts{InFlight: 20}, true, "20", " (0 ready)"},
		{broker.Counts{}, false, "?", ""},
	} {
		n, ready := queuedText(t.Context(), func(context.Context) (broker.Counts, bool) { return tc.c, tc.ok })
		if n != tc.n || ready != tc.ready {
			t.Errorf("%+v, %v: %q%q, want %q%q", tc.c, tc.ok, n, ready, tc.n, tc.ready)
		}
	}
}
