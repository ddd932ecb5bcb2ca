package engine

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestThrottleNext checks Scrapy's rule with trawl's floor: up at once,
// down by halves, within [floor, MaxDelay], never lowered by a non-2xx.
func TestThrottleNext(t *testing.T) {
	a := AutoThrottle{}.WithDefaults()
	two := AutoThrottle{TargetConcurrency: 2, MaxDelay: 5 * time.Second}.WithDefaults()
	ms := time.Millisecond
	for _, c := range []struct {
		name                string
		a                   AutoThrottle
		old, floor, latency time.Duration
		status              int
		want                time.Duration
	}{
		{"slow response raises at once", a, time.Second, 0, 3 * time.Second, 200, 3 * time.Second},
		{"fast response halves the way", a, time.Second, 0, 100 * ms, 200, 550 * ms},
		{"target concurrency divides", two, 0, 0, time.Second, 200, 500 * ms},
		{"never below the floor", a, 100 * ms, 80 * ms, 0, 200, 80 * ms},
		{"capped at MaxDelay", two, time.Second, 0, time.Minute, 200, 5 * time.Second},
		{"floor above MaxDelay wins", two, time.Second, 10 * time.Second, 0, 200, 10 * time.Second},
		{"404 never lowers", a, time.Second, 0, 10 * ms, 404, time.Second},
		{"503 may raise", a, time.Second, 0, 2 * time.Second, 503, 2 * time.Second},
		{"304 never lowers", a, time.Second, 0, 0, 304, time.Second},
		{"huge latency does not overflow", AutoThrottle{TargetConcurrency: 1e-300}.WithDefaults(), 0, 0, time.Hour, 200, time.Minute},
	} {
		if got := c.a.Next(c.old, c.floor, c.latency, c.status); got != c.want {
			t.Errorf("%s: Next(%v, floor %v, latency %v, %d) = %v, want %v", c.name, c.old, c.floor, c.latency, c.status, got, c.want)
		}
	}
}

func TestThrottleValidate(t *testing.T) {
	for _, a := range []AutoThrottle{
		{TargetConcurrency: -1},
		{StartDelay: 2 * time.Minute},                         // above the default max
		{StartDelay: time.Second, MaxDelay: time.Millisecond}, // start above max
		{MaxDelay: -time.Second},
	} {
		if err := a.Validate(); !errors.Is(err, ErrBadThrottle) {
			t.Errorf("Validate(%+v) = %v, want ErrBadThrottle", a, err)
		}
		if _, err := New(nil, nil, Config{AutoThrottle: &a}); !errors.Is(err, ErrBadThrottle) {
			t.Errorf("New with AutoThrottle %+v = %v, want ErrBadThrottle", a, err)
		}
	}
	if err := (AutoThrottle{}).Validate(); err != nil {
		t.Errorf("zero AutoThrottle: %v", err)
	}
}

// TestPolitenessThrottle: the local limiter starts a host at the start
// delay, paces by the adapted delay (a lowered delay applies to the start
// already waiting), keeps hosts apart and never goes below Delay or
// Crawl-delay.
func TestPolitenessThrottle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		p := newPoliteness(politenessConfig{Delay: 100 * time.Millisecond, AutoThrottle: &AutoThrottle{StartDelay: time.Second}})
		acquire := func(host string) time.Time {
			t.Helper()
			release, err := p.Acquire(ctx, host)
			if err != nil {
				t.Fatal(err)
			}
			release()
			return time.Now()
		}
		if d := p.currentDelay("a"); d != time.Second {
			t.Fatalf("start delay = %v, want 1s", d)
		}
		t0 := acquire("a")
		time.Sleep(10 * time.Millisecond) // the response's latency, on the fake clock
		p.Observe("a", 10*time.Millisecond, 200)
		if d := p.currentDelay("a"); d != 505*time.Millisecond {
			t.Fatalf("after a fast response: delay %v, want 505ms", d)
		}
		if got := acquire("a").Sub(t0); got != 505*time.Millisecond {
			t.Errorf("next start %v after the first, want the lowered delay 505ms", got)
		}
		for range 10 {
			p.Observe("a", time.Millisecond, 200)
		}
		if d := p.currentDelay("a"); d != 100*time.Millisecond {
			t.Errorf("after fast responses: delay %v, want the floor Delay 100ms", d)
		}
		p.Observe("b", 3*time.Second, 200)
		if d, da := p.currentDelay("b"), p.currentDelay("a"); d != 3*time.Second || da != 100*time.Millisecond {
			t.Errorf("slow b: delays b %v, a %v; want 3s and 100ms", d, da)
		}
		t1 := acquire("b")
		if got := acquire("b").Sub(t1); got != 3*time.Second {
			t.Errorf("b's starts %v apart, want its adapted 3s", got)
		}
		p.SetDelay("a", 2*time.Second) // Crawl-delay
		p.Observe("a", time.Millisecond, 200)
		if d := p.currentDelay("a"); d != 2*time.Second {
			t.Errorf("with Crawl-delay 2s: delay %v, want 2s", d)
		}
	})
}

// TestPolitenessNoThrottle: without AutoThrottle, Observe changes nothing.
func TestPolitenessNoThrottle(t *testing.T) {
	p := newPoliteness(politenessConfig{Delay: 50 * time.Millisecond})
	p.Observe("a", 10*time.Second, 200)
	if d := p.currentDelay("a"); d != 50*time.Millisecond {
		t.Errorf("delay %v, want the fixed 50ms", d)
	}
}
