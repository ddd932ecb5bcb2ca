package gctune

import (
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
)

// TestPercent: the percent gives the heap Floor bytes of headroom, within
// [Min, Max]; a tuner that kept a fixed ratio, or inverted it, fails.
func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, 400},          // nothing measured yet: the start's ratio
		{1 * mib, 400},    // small: Max, 4 MiB of headroom
		{32 * mib, 400},   // 128/32 = 4: Max exactly
		{35 * mib, 365},   // a worker crawling 1,000 hosts: 128 MiB of headroom
		{41 * mib, 312},   // the same at 10,000 hosts: still 128 MiB
		{64 * mib, 200},   // 128/64
		{128 * mib, 100},  // Floor: Min
		{1024 * mib, 100}, // a million hosts' state: twice the live heap, not five times
		{1<<40 + 7, 100},  // no overflow
	} {
		if got := Default.Percent(c.live); got != c.want {
			t.Errorf("Default.Percent(%d MiB) = %d, want %d", c.live/mib, got, c.want)
		}
	}
	// The headroom the percent gives between 32 and 128 MiB live stays
	// the Floor, to within rounding: what the memory check measures.
	for live := uint64(33 * mib); live < 128*mib; live += 7 * mib {
		head := live * uint64(Default.Percent(live)) / 100
		if head > Default.Floor || Default.Floor-head > live/100 {
			t.Errorf("live %d MiB: headroom %d MiB, want about %d", live/mib, head/mib, Default.Floor/mib)
		}
	}
}

// gogc reads the collector's percent in force.
func gogc() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

// TestTunerFollowsLiveHeap: after a collection with a live heap of about
// 48 MiB the percent is the policy's for that heap (a Floor of 96 MiB:
// about 200), not the Max the tuner started at; after Stop the percent is
// what it was before, and no collection calls the tuner again.
func TestTunerFollowsLiveHeap(t *testing.T) {
	const mib = 1 << 20
	before := gogc()
	p := Policy{Floor: 96 * mib, Min: 100, Max: 400}
	type setting struct {
		live uint64
		pct  int
	}
	settings := make(chan setting, 100)
	tu := start(p, func(live uint64, pct int) {
		select {
		case settings <- setting{live, pct}:
		default: // the test reads what it needs; the rest may go
		}
	})
	if got := gogc(); got != p.Max {
		t.Errorf("percent after Start %d, want %d", got, p.Max)
	}

	ballast := make([][]byte, 48)
	for i := range ballast {
		ballast[i] = make([]byte, mib)
	}
	deadline := time.After(time.Minute) // a bound on a starved machine, not a wait
	var last setting
	for last.live < 48*mib {
		runtime.GC()
		select {
		case last = <-settings:
		case <-deadline:
			t.Fatalf("no setting after a collection with 48 MiB live within a minute (last %+v)", last)
		}
	}
	if want := p.Percent(last.live); last.pct != want || want >= 300 || want < 100 {
		t.Errorf("at %d MiB live: percent %d, want %d (about 200)", last.live/mib, last.pct, want)
	}
	if got := gogc(); got != last.pct {
		t.Errorf("percent in force %d, want the tuner's %d", got, last.pct)
	}
	runtime.KeepAlive(ballast)

	tu.Stop()
	tu.Stop() // idempotent
	if got := gogc(); got != before {
		t.Errorf("percent after Stop %d, want %d as before Start", got, before)
	}
	// A cleanup armed before Stop may still run once; it must not set the
	// percent or arm another.
	for range 4 {
		runtime.GC()
	}
	drain := len(settings)
	for range drain {
		<-settings
	}
	for range 4 {
		runtime.GC()
	}
	if n := len(settings); n != 0 {
		t.Errorf("%d settings after Stop and 8 collections, want none", n)
	}
	if got := gogc(); got != before {
		t.Errorf("percent after Stop and 8 collections %d, want %d", got, before)
	}
}

// TestTunerRunsNoGoroutine: a started tuner adds no goroutine (it runs
// in the runtime's cleanups) and a stopped one leaves none.
func TestTunerRunsNoGoroutine(t *testing.T) {
	runtime.GC()
	n := runtime.NumGoroutine()
	tu := Start(Default)
	for range 3 {
		runtime.GC()
	}
	if got := runtime.NumGoroutine(); got > n {
		t.Errorf("%d goroutines with a tuner, %d before", got, n)
	}
	tu.Stop()
	for range 3 {
		runtime.GC()
	}
	if got := runtime.NumGoroutine(); got > n {
		t.Errorf("%d goroutines after Stop, %d before", got, n)
	}
}
