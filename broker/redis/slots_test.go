package redis_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/broker/redis"
	"github.com/trawlhq/trawl/internal/integration"
	"github.com/trawlhq/trawl/internal/redislayout"
)

// TestHostLimiterSlotsAcrossWorkers: two workers, one host with no delay
// and a cap of 2, each with a page of the host: both run one request at
// once, the second while the first is still in progress, and a third
// finds the cap reached. (With the host leased whole, the second worker
// waited until the first had nothing in progress there: at --per-host 2 a
// large host spread over several workers ran one request at a time.)
func TestHostLimiterSlotsAcrossWorkers(t *testing.T) {
	client := integration.RedisClient(t)
	crawl := integration.Name(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cfg := redis.LimiterConfig{Client: client, Crawl: crawl, PerHost: 2, Poll: 5 * time.Millisecond}
	a := newLimiter(t, cfg)
	b := newLimiter(t, cfg)
	ra, err := a.Acquire(ctx, "big.example")
	if err != nil {
		t.Fatal(err)
	}
	defer ra()
	// a's request is in progress to the end of the test: b must get the
	// host's other slot meanwhile (a gives back the slot it does not use
	// after leaseLinger; b asks again within maxRetry).
	wait, cancelWait := context.WithTimeout(ctx, 10*time.Second)
	defer cancelWait()
	start := time.Now()
	rb, err := b.Acquire(wait, "big.example")
	if err != nil {
		t.Fatalf("b started no request while a had one in progress (cap 2, no delay): %v after %v", err, time.Since(start).Round(time.Millisecond))
	}
	defer rb()
	t.Logf("b's request started %v after it asked, a's still in progress", time.Since(start).Round(time.Millisecond))
	key := redislayout.HostKeys(crawl, "big.example").Slots
	held := holders(t, ctx, client, key)
	if len(held) != 2 {
		t.Errorf("the host's slots are held by %v, want one each by two workers", held)
	}
	// The key outlives its last holder (else their slots would free
	// early, and the cap be exceeded).
	now, err := client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	ttl, err := client.PTTL(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	for token, v := range held {
		var n, exp int64
		if _, err := fmt.Sscanf(v, "%d:%d", &n, &exp); err != nil || n != 1 {
			t.Errorf("holder %s: %q, want 1 slot and an expiry", token, v)
		}
		if left := time.UnixMilli(exp).Sub(now); ttl < left {
			t.Errorf("the slots key expires in %v, before its holder %s (in %v)", ttl, token, left)
		}
	}
	for i, l := range []*redis.HostLimiter{a, b} {
		short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
		if r, err := l.Acquire(short, "big.example"); err == nil {
			r()
			t.Errorf("worker %d started a third request to a host of cap 2", i)
		}
		cancelShort()
	}
}

// holders returns the workers holding slots in the slots hash key, each
// with its count and expiry.
func holders(t *testing.T, ctx context.Context, client goredis.UniversalClient, key string) map[string]string {
	t.Helper()
	all, err := client.HGetAll(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	delete(all, "~") // the key's own expiry
	return all
}

// TestHostLimiterDelayedHostStaysWhole: a host with a delay between
// starts (Delay, or a Crawl-delay given through SetDelay once its slots
// were leased one by one) is leased whole: while one worker has a
// request in progress there, another starts none, and the first may
// start its second (the delay kept in its memory).
func TestHostLimiterDelayedHostStaysWhole(t *testing.T) {
	const delay = 20 * time.Millisecond
	for _, tc := range []struct {
		name     string
		delay    time.Duration // LimiterConfig.Delay
		setDelay bool          // SetDelay after a first request each
	}{{"Delay", delay, false}, {"SetDelay", 0, true}} {
		t.Run(tc.name, func(t *testing.T) {
			client := integration.RedisClient(t)
			crawl := integration.Name(t)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			cfg := redis.LimiterConfig{Client: client, Crawl: crawl, PerHost: 2, Delay: tc.delay, Poll: 5 * time.Millisecond}
			a := newLimiter(t, cfg)
			b := newLimiter(t, cfg)
			const host = "slow.example"
			if tc.setDelay {
				// Both hold a slot (no delay known yet), as on a
				// host's first pages before robots.txt is read.
				ra, err := a.Acquire(ctx, host)
				if err != nil {
					t.Fatal(err)
				}
				rb, err := b.Acquire(ctx, host)
				if err != nil {
					t.Fatal(err)
				}
				a.SetDelay(host, delay)
				b.SetDelay(host, delay)
				ra()
				rb()
			}
			first, err := a.Acquire(ctx, host)
			if err != nil {
				t.Fatal(err)
			}
			short, cancelShort := context.WithTimeout(ctx, time.Second)
			defer cancelShort()
			if r, err := b.Acquire(short, host); err == nil {
				r()
				t.Fatal("b started a request to a host with a delay while a had one in progress there")
			}
			second, err := a.Acquire(ctx, host)
			if err != nil {
				t.Fatal(err)
			}
			if held := holders(t, ctx, client, redislayout.HostKeys(crawl, host).Slots); len(held) != 1 {
				t.Errorf("the host's slots are held by %v, want one worker", held)
			}
			first()
			second()
			r, err := b.Acquire(ctx, host)
			if err != nil {
				t.Fatalf("b never got the host once a was done with it: %v", err)
			}
			r()
		})
	}
}

// TestHostLimiterSlotCapAcrossWorkers: four workers with pages of one
// host with no delay, leased slot by slot, never have more than the cap
// (2) in progress together; and the requests of more than one worker do
// run at once (two of the workers have one page at a time, so each
// leaves a slot unused).
func TestHostLimiterSlotCapAcrossWorkers(t *testing.T) {
	client := integration.RedisClient(t)
	crawl := integration.Name(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	const workers, requests = 4, 30
	var mu sync.Mutex
	inProgress := map[int]int{} // worker -> requests in progress
	total, peak, peakWorkers := 0, 0, 0
	var done atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		// A short SlotTTL: renewals (every 300ms) find the want marks,
		// so the host changes hands during the test.
		l := newLimiter(t, redis.LimiterConfig{Client: client, Crawl: crawl, PerHost: 2, SlotTTL: 900 * time.Millisecond, Poll: 5 * time.Millisecond})
		for range w%2 + 1 { // pages in progress at once
			wg.Go(func() {
				for range requests {
					release, err := l.Acquire(ctx, "hammered.example")
					if err != nil {
						t.Errorf("worker %d: %v", w, err)
						return
					}
					mu.Lock()
					inProgress[w]++
					total++
					peak = max(peak, total)
					n := 0
					for _, c := range inProgress {
						if c > 0 {
							n++
						}
					}
					peakWorkers = max(peakWorkers, n)
					mu.Unlock()
					time.Sleep(20 * time.Millisecond) // the fetch: 30 of them outlast leaseLinger
					mu.Lock()
					inProgress[w]--
					total--
					mu.Unlock()
					release()
					done.Add(1)
				}
			})
		}
	}
	wg.Wait()
	if peak > 2 {
		t.Errorf("%d requests in progress at once across %d workers, want at most the cap, 2", peak, workers)
	}
	if peakWorkers < 2 {
		t.Errorf("at most %d worker had requests in progress at once, want 2 (one slot each)", peakWorkers)
	}
	t.Logf("%d requests; peak %d in progress, from %d workers at most", done.Load(), peak, peakWorkers)
}
