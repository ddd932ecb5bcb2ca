package rabbitmq

import (
	"testing"
	"time"
)

// TestDelayNames: every delay rounds up to a step no more than √2 above
// it (trawl's default back-offs exactly), and a delay queue's name gives
// back its queue and its delay.
func TestDelayNames(t *testing.T) {
	for _, d := range []time.Duration{1, 99 * time.Millisecond, 300 * time.Millisecond, 600 * time.Millisecond,
		1200 * time.Millisecond, 1201 * time.Millisecond, 7 * time.Second, 11 * time.Second, time.Hour, maxDelay} {
		r := roundDelay(d)
		if r < d || (d >= 100*time.Millisecond && float64(r) > 1.415*float64(d)) {
			t.Errorf("roundDelay(%v) = %v, want a step in [d, d·√2]", d, r)
		}
		name := delayQueue("books:requests", r)
		if q, ok := delayFamily(name); !ok || q != "books:requests" {
			t.Errorf("delayFamily(%q) = %q, %v", name, q, ok)
		}
		if got := delayOf(name); got != r {
			t.Errorf("delayOf(%q) = %v, want %v", name, got, r)
		}
	}
	for _, d := range []time.Duration{300 * time.Millisecond, 600 * time.Millisecond, 1200 * time.Millisecond} {
		if roundDelay(d) != d {
			t.Errorf("roundDelay(%v) = %v: trawl's default back-offs should be steps", d, roundDelay(d))
		}
	}
	if roundDelay(48*time.Hour) != maxDelay {
		t.Errorf("roundDelay(48h) = %v, want %v", roundDelay(48*time.Hour), maxDelay)
	}
	if len(delaySteps) > 40 {
		t.Errorf("%d delay steps: Counts looks for each of them once per queue", len(delaySteps))
	}
	for _, bad := range []string{"books:requests", "books:requests:delay:", "books:requests:delay:x", ":delay:5"} {
		if _, ok := delayFamily(bad); ok {
			t.Errorf("delayFamily(%q) accepted", bad)
		}
	}
}
