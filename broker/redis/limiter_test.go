package redis_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker/redis"
	"github.com/trawlhq/trawl/integration"
)

// TestHostLimiterAcrossWorkers: three workers (limiters) with per-host 2
// and a 50ms delay never have more than 2 requests in progress nor start
// more than one per 50ms, together.
func TestHostLimiterAcrossWorkers(t *testing.T) {
	client := integration.RedisClient(t)
	crawl := integration.Name(t)
	var inProgress, peak atomic.Int64
	var mu sync.Mutex
	var starts []time.Time
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for w := range 3 {
		l, err := redis.NewHostLimiter(redis.LimiterConfig{Client: client, Crawl: crawl, PerHost: 2, Delay: 50 * time.Millisecond, Poll: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			wg.Go(func() {
				for range 4 {
					release, err := l.Acquire(ctx, "site.example")
					if err != nil {
						t.Errorf("worker %d: %v", w, err)
						return
					}
					now := inProgress.Add(1)
					for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
					}
					mu.Lock()
					starts = append(starts, time.Now())
					mu.Unlock()
					time.Sleep(30 * time.Millisecond) // the fetch
					inProgress.Add(-1)
					release()
				}
			})
		}
	}
	wg.Wait()
	if p := peak.Load(); p > 2 {
		t.Errorf("peak concurrency %d, want at most 2", p)
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(starts); i++ {
		// Server and client share a clock here; allow scheduling jitter.
		if gap := starts[i].Sub(starts[i-1]); gap < 40*time.Millisecond {
			t.Errorf("starts %d and %d only %v apart, want about 50ms", i-1, i, gap)
		}
	}
	if el := starts[len(starts)-1].Sub(starts[0]); float64(len(starts)-1)/el.Seconds() > 20.5 {
		t.Errorf("%d starts in %v: over 20 per second", len(starts), el)
	}
}

// TestHostLimiterBackoff: a back-off set by one worker holds the others.
func TestHostLimiterBackoff(t *testing.T) {
	client := integration.RedisClient(t)
	crawl := integration.Name(t)
	a, _ := redis.NewHostLimiter(redis.LimiterConfig{Client: client, Crawl: crawl})
	b, _ := redis.NewHostLimiter(redis.LimiterConfig{Client: client, Crawl: crawl})
	a.Backoff("h.example", time.Now().Add(300*time.Millisecond))
	start := time.Now()
	release, err := b.Acquire(t.Context(), "h.example")
	if err != nil {
		t.Fatal(err)
	}
	release()
	if el := time.Since(start); el < 250*time.Millisecond {
		t.Errorf("acquired after %v, want the 300ms back-off honoured", el)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	a.Backoff("h.example", time.Now().Add(time.Hour))
	if _, err := b.Acquire(ctx, "h.example"); err == nil {
		t.Error("acquired during an hour-long back-off")
	}
}
