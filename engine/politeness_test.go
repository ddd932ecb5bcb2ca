package engine

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// waitFor polls cond until it holds or a deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waiting reports how many Acquire calls wait for host.
func (p *politeness) waiting(host string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st := p.hosts[host]; st != nil {
		return st.waiting()
	}
	return 0
}

// The tests of Acquire's timing run in a synctest bubble: its clock is fake
// and moves only when every goroutine of the test waits, so a request
// starts at exactly the time politeness grants, and the tests check exact
// times instead of real ones with slack.

func TestPolitenessConcurrencyCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPoliteness(politenessConfig{PerHost: 2})
		var cur, peak, otherPeak, otherCur atomic.Int32
		var wg sync.WaitGroup
		begin := time.Now()
		for i := range 40 {
			host, c, pk := "a.example", &cur, &peak
			if i%2 == 1 {
				host, c, pk = "b.example", &otherCur, &otherPeak
			}
			wg.Go(func() {
				release, err := p.Acquire(context.Background(), host)
				if err != nil {
					t.Error(err)
					return
				}
				n := c.Add(1)
				for {
					old := pk.Load()
					if n <= old || pk.CompareAndSwap(old, n) {
						break
					}
				}
				time.Sleep(2 * time.Millisecond) // the request's work
				c.Add(-1)
				release()
			})
		}
		wg.Wait()
		if peak.Load() != 2 || otherPeak.Load() != 2 {
			t.Errorf("peak concurrency %d and %d, want 2 per host", peak.Load(), otherPeak.Load())
		}
		// 20 requests per host, two at a time, 2ms each: a freed slot is taken at once.
		if d := time.Since(begin); d != 20*time.Millisecond {
			t.Errorf("40 requests took %v, want 20ms", d)
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		for h, st := range p.hosts {
			if st.active != 0 || st.waiting() != 0 {
				t.Errorf("%s left with %d active, %d waiting", h, st.active, st.waiting())
			}
		}
	})
}

func TestPolitenessDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const delay = 50 * time.Millisecond
		const n = 5
		p := newPoliteness(politenessConfig{PerHost: n, Delay: delay})
		var mu sync.Mutex
		var starts []time.Duration
		var wg sync.WaitGroup
		begin := time.Now()
		for range n {
			wg.Go(func() {
				release, err := p.Acquire(context.Background(), "h")
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				starts = append(starts, time.Since(begin))
				mu.Unlock()
				release()
			})
		}
		wg.Wait()
		slices.Sort(starts)
		want := []time.Duration{0, delay, 2 * delay, 3 * delay, 4 * delay}
		if !slices.Equal(starts, want) {
			t.Errorf("requests started at %v, want %v", starts, want)
		}
		// Another host is not held back.
		start := time.Now()
		release, err := p.Acquire(context.Background(), "other")
		if err != nil || time.Since(start) != 0 {
			t.Errorf("other host waited %v (err %v)", time.Since(start), err)
		}
		release()
	})
}

func TestPolitenessSetDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPoliteness(politenessConfig{Delay: 10 * time.Millisecond})
		p.SetDelay("h", 80*time.Millisecond)
		p.SetDelay("low", time.Millisecond) // below the default: the default holds
		for _, tc := range []struct {
			host string
			gap  time.Duration
		}{{"h", 80 * time.Millisecond}, {"low", 10 * time.Millisecond}} {
			start := time.Now()
			r1, err := p.Acquire(context.Background(), tc.host)
			if err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d != 0 {
				t.Errorf("%s: first start after %v, want at once", tc.host, d)
			}
			r1()
			r2, err := p.Acquire(context.Background(), tc.host)
			if err != nil {
				t.Fatal(err)
			}
			r2()
			if d := time.Since(start); d != tc.gap {
				t.Errorf("%s: second start after %v, want %v", tc.host, d, tc.gap)
			}
		}
	})
}

func TestPolitenessBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPoliteness(politenessConfig{})
		const hold = 150 * time.Millisecond
		start := time.Now()
		p.Backoff("h", start.Add(hold))
		p.Backoff("h", start.Add(hold/2)) // an earlier time does not shorten it

		release, err := p.Acquire(context.Background(), "h")
		if err != nil {
			t.Fatal(err)
		}
		release()
		if d := time.Since(start); d != hold {
			t.Errorf("acquired after %v during a back-off of %v, want at its end", d, hold)
		}

		// A back-off set while requests wait re-times them.
		p2 := newPoliteness(politenessConfig{PerHost: 1})
		r1, _ := p2.Acquire(context.Background(), "h")
		got := make(chan time.Time, 1)
		go func() {
			r, err := p2.Acquire(context.Background(), "h")
			if err == nil {
				r()
			}
			got <- time.Now()
		}()
		synctest.Wait()
		if n := p2.waiting("h"); n != 1 {
			t.Fatalf("%d waiters, want 1", n)
		}
		start = time.Now()
		p2.Backoff("h", start.Add(hold))
		r1()
		if at := <-got; at.Sub(start) != hold {
			t.Errorf("waiter started %v into a back-off of %v, want at its end", at.Sub(start), hold)
		}
	})
}

func TestPolitenessCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPoliteness(politenessConfig{PerHost: 1})
		release, err := p.Acquire(context.Background(), "h")
		if err != nil {
			t.Fatal(err)
		}
		const timeout = 30 * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		start := time.Now()
		if _, err := p.Acquire(ctx, "h"); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want deadline exceeded", err)
		}
		if d := time.Since(start); d != timeout {
			t.Errorf("Acquire returned %v after the call, want at the deadline (%v)", d, timeout)
		}
		if n := p.waiting("h"); n != 0 {
			t.Errorf("%d waiters left after cancel", n)
		}

		// A cancelled waiter holds no slot: after release the next one is immediate.
		release()
		start = time.Now()
		r2, err := p.Acquire(context.Background(), "h")
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("Acquire after release waited %v", d)
		}
		r2()

		// An already cancelled context fails even when a slot is free.
		done, cancelNow := context.WithCancel(context.Background())
		cancelNow()
		if _, err := p.Acquire(done, "free"); !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want canceled", err)
		}

		// Cancel during a long back-off returns at once.
		p.Backoff("slow", time.Now().Add(time.Hour))
		ctx2, cancel2 := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { _, err := p.Acquire(ctx2, "slow"); errc <- err }()
		synctest.Wait()
		if n := p.waiting("slow"); n != 1 {
			t.Fatalf("%d waiters, want 1", n)
		}
		start = time.Now()
		cancel2()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v", err)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("Acquire returned %v after cancel", d)
		}
	})
}

func TestPolitenessReleaseIdempotent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPoliteness(politenessConfig{PerHost: 1})
		r, err := p.Acquire(context.Background(), "h")
		if err != nil {
			t.Fatal(err)
		}
		r()
		r() // must not free a second slot
		r1, err := p.Acquire(context.Background(), "h")
		if err != nil {
			t.Fatal(err)
		}
		defer r1()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if r2, err := p.Acquire(ctx, "h"); err == nil {
			r2()
			t.Error("a double release let two requests in with PerHost 1")
		}
	})
}

func TestPolitenessFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPoliteness(politenessConfig{PerHost: 1})
		hold, _ := p.Acquire(context.Background(), "h")
		order := make(chan int, 5)
		var wg sync.WaitGroup
		for i := range 5 {
			wg.Go(func() {
				r, err := p.Acquire(context.Background(), "h")
				if err != nil {
					t.Error(err)
					return
				}
				order <- i
				r()
			})
			synctest.Wait()
			if n := p.waiting("h"); n != i+1 {
				t.Fatalf("%d waiters, want %d", n, i+1)
			}
		}
		hold()
		wg.Wait()
		close(order)
		want := 0
		for got := range order {
			if got != want {
				t.Errorf("waiter %d started as number %d", got, want)
			}
			want++
		}
	})
}

func TestPolitenessForgetsIdleHosts(t *testing.T) {
	p := newPoliteness(politenessConfig{Delay: time.Millisecond})
	clock := time.Now()
	var clockMu sync.Mutex
	p.now = func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return clock }
	advance := func(d time.Duration) { clockMu.Lock(); clock = clock.Add(d); clockMu.Unlock() }

	for i := range 20000 {
		host := "h" + string(rune('a'+i%26)) + time.Duration(i).String()
		r, err := p.Acquire(context.Background(), host)
		if err != nil {
			t.Fatal(err)
		}
		r()
		advance(10 * time.Millisecond)
	}
	p.mu.Lock()
	n := len(p.hosts)
	p.mu.Unlock()
	// 20000 hosts over 200s: only those of the last minute (6000) may stay.
	if n > 2*6000+minSweep {
		t.Errorf("%d host entries kept, want a bounded number", n)
	}

	// A busy host is never forgotten.
	busy, _ := p.Acquire(context.Background(), "busy")
	advance(time.Hour)
	p.mu.Lock()
	p.sweep(p.stamp(p.now()))
	_, kept := p.hosts["busy"]
	p.mu.Unlock()
	if !kept {
		t.Error("a host with a request in flight was forgotten")
	}
	busy()
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		value string
		want  time.Duration
		ok    bool
	}{
		{"3", 3 * time.Second, true},
		{" 120 ", 2 * time.Minute, true},
		{"0", 0, true},
		{now.Add(10 * time.Second).Format(http.TimeFormat), 10 * time.Second, true},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{"Fri, 02 Jan 2026 03:04:15 GMT", 10 * time.Second, true},
		{"", 0, false},
		{"soon", 0, false},
		{"-1", 0, false},
		{"1.5", 0, false},
	} {
		h := http.Header{}
		if tc.value != "" {
			h.Set("Retry-After", tc.value)
		}
		got, ok := retryAfter(h, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("retryAfter(%q) = %v, %v; want %v, %v", tc.value, got, ok, tc.want, tc.ok)
		}
	}
	if d, ok := retryAfter(http.Header{"Retry-After": {"9999999999999999999"}}, now); !ok || d <= 0 {
		t.Errorf("huge Retry-After = %v, %v", d, ok)
	}
}
