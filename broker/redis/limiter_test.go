package redis_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/broker/redis"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/integration"
	"github.com/trawlhq/trawl/internal/redislayout"
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
		l := newLimiter(t, redis.LimiterConfig{Client: client, Crawl: crawl, PerHost: 2, Delay: 50 * time.Millisecond, Poll: 5 * time.Millisecond})
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
	// The server grants start k at least k delays after start 0, but the
	// client sees each grant some scheduling lag late (on a loaded machine
	// one sighting was 48ms late, so the next start looked 3ms after it):
	// no check may lean on one sighting. Two that cannot be fooled by a lag
	// of up to two delays: any window of 4 delays holds at most 4+1 grants,
	// plus one sighting pushed into it late; and the whole run, 20 starts,
	// spans at least 19 delays less two delays of lag at its start.
	const delay = 50 * time.Millisecond
	const window, most = 4 * delay, 4 + 1 + 1
	for i := range starts {
		n := 0
		for _, s := range starts[i:] {
			if s.Sub(starts[i]) < window {
				n++
			}
		}
		if n > most {
			t.Errorf("%d starts within %v of start %d, want at most %d (one per %v, one sighting late)", n, window, i, most, delay)
		}
	}
	if span, want := starts[len(starts)-1].Sub(starts[0]), time.Duration(len(starts)-1-2)*delay; span < want {
		t.Errorf("%d starts in %v, want at least %v (%d delays of %v, less two of lag)", len(starts), span, want, len(starts)-1, delay)
	}
}

// TestHostLimiterBackoff: a back-off set by one worker holds the others.
func TestHostLimiterBackoff(t *testing.T) {
	client := integration.RedisClient(t)
	crawl := integration.Name(t)
	a := newLimiter(t, redis.LimiterConfig{Client: client, Crawl: crawl})
	b := newLimiter(t, redis.LimiterConfig{Client: client, Crawl: crawl})
	// Causal: b may start no sooner than until, however long a's call
	// to Redis took (one that took 74ms on a loaded machine made an
	// "elapsed since Backoff returned" of 226ms out of a 300ms back-off).
	until := time.Now().Add(300 * time.Millisecond)
	a.Backoff("h.example", until)
	release, err := b.Acquire(t.Context(), "h.example")
	if err != nil {
		t.Fatal(err)
	}
	got := time.Now()
	release()
	if got.Before(until) {
		t.Errorf("acquired %v before the end of another worker's 300ms back-off", until.Sub(got))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	a.Backoff("other.example", time.Now().Add(time.Hour))
	if _, err := b.Acquire(ctx, "other.example"); err == nil {
		t.Error("acquired during another worker's hour-long back-off")
	}
	// The worker holding a host keeps its own back-off in memory.
	b.Backoff("h.example", time.Now().Add(time.Hour))
	ctx, cancel = context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := b.Acquire(ctx, "h.example"); err == nil {
		t.Error("acquired during its own hour-long back-off, holding the host")
	}
}

// TestHostLimiterDeadWorkerSlots: the slots of a worker that died holding
// them (its limiter stopped without releasing, as kill -9 does) come back
// within SlotTTL.
func TestHostLimiterDeadWorkerSlots(t *testing.T) {
	client := integration.RedisClient(t)
	crawl := integration.Name(t)
	const ttl = time.Second
	dead := newLimiter(t, redis.LimiterConfig{Client: client, Crawl: crawl, PerHost: 2, SlotTTL: ttl})
	for range 2 {
		if _, err := dead.Acquire(t.Context(), "h.example"); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	_ = dead.Close() // dies: no release, no renewal
	live := newLimiter(t, redis.LimiterConfig{Client: client, Crawl: crawl, PerHost: 2, SlotTTL: ttl, Poll: 10 * time.Millisecond})
	ctx, cancel := context.WithTimeout(t.Context(), ttl+2*time.Second)
	defer cancel()
	release, err := live.Acquire(ctx, "h.example")
	if err != nil {
		t.Fatalf("a dead worker's slot did not come back within %v: %v", ttl+2*time.Second, err)
	}
	release()
	t.Logf("slot back after %v (SlotTTL %v)", time.Since(start).Round(time.Millisecond), ttl)
}

// TestHostLimiterRenewsSlots: a live worker keeps its slots past SlotTTL
// while its requests run (a slow page), and gives them back at release.
func TestHostLimiterRenewsSlots(t *testing.T) {
	client := integration.RedisClient(t)
	crawl := integration.Name(t)
	const ttl = 600 * time.Millisecond
	holder := newLimiter(t, redis.LimiterConfig{Client: client, Crawl: crawl, PerHost: 1, SlotTTL: ttl})
	other := newLimiter(t, redis.LimiterConfig{Client: client, Crawl: crawl, PerHost: 1, SlotTTL: ttl, Poll: 10 * time.Millisecond})
	release, err := holder.Acquire(t.Context(), "h.example")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*ttl)
	defer cancel()
	if r, err := other.Acquire(ctx, "h.example"); err == nil {
		r()
		t.Fatalf("took the only slot while its holder was alive and working (SlotTTL %v)", ttl)
	}
	release()
	ctx, cancel = context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	r, err := other.Acquire(ctx, "h.example")
	if err != nil {
		t.Fatalf("slot not free after release: %v", err)
	}
	r()
}

// TestHostLimiterReleaseAfterOutage: releases that fail because Redis is
// unreachable are retried when it comes back, so the slots do not wait
// for their TTL.
func TestHostLimiterReleaseAfterOutage(t *testing.T) {
	opt, err := goredis.ParseURL(integration.Redis(t))
	if err != nil {
		t.Fatal(err)
	}
	px := newCutProxy(t, opt.Addr)
	popt := *opt
	popt.Addr = px.addr()
	popt.MaxRetries = -1
	popt.DialTimeout = 200 * time.Millisecond
	cut := goredis.NewClient(&popt)
	t.Cleanup(func() { _ = cut.Close() })
	client := integration.RedisClient(t)
	crawl := integration.Name(t)
	a := newLimiter(t, redis.LimiterConfig{Client: cut, Crawl: crawl, PerHost: 2}) // default TTL: 30s
	b := newLimiter(t, redis.LimiterConfig{Client: client, Crawl: crawl, PerHost: 2, Poll: 10 * time.Millisecond})
	var releases []func()
	for range 2 {
		r, err := a.Acquire(t.Context(), "h.example")
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, r)
	}
	px.cut(true)
	for _, r := range releases {
		r() // the lease's release, leaseLinger later, fails: Redis is unreachable
	}
	for redis.FailedReleases(a) == 0 {
		if t.Context().Err() != nil {
			t.Fatal("the release never failed")
		}
		runtime.Gosched()
	}
	px.cut(false)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	start := time.Now()
	r, err := b.Acquire(ctx, "h.example")
	if err != nil {
		t.Fatalf("slots released during an outage still held 5s after it (TTL %v): %v", redis.DefaultSlotTTL, err)
	}
	r()
	t.Logf("slot back %v after the outage", time.Since(start).Round(time.Millisecond))
}

// cutProxy forwards TCP connections to a server until it is cut: then it
// drops every connection and refuses new ones, as a network outage would.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]bool
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut(true)
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.down {
				p.mu.Unlock()
				_ = c.Close()
				continue
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				p.mu.Unlock()
				_ = c.Close()
				continue
			}
			p.conns[c], p.conns[s] = true, true
			p.mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(s, c); _ = s.Close(); _ = c.Close() })
			wg.Go(func() { _, _ = io.Copy(c, s); _ = s.Close(); _ = c.Close() })
		}
	})
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

// cut drops every connection and refuses new ones (down), or lets them in.
func (p *cutProxy) cut(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.conns {
			_ = c.Close()
		}
		clear(p.conns)
	}
}

// TestHostLimiterAutoThrottleShared: two workers' limiters with
// AutoThrottle see one adapted delay per host, kept in Redis under the
// crawl's hash tag; each one's responses move it by the averaging rule,
// never below Delay nor lowered by a non-2xx; and it paces the other
// worker's requests (a lowered delay at once).
func TestHostLimiterAutoThrottleShared(t *testing.T) {
	client := integration.RedisClient(t)
	crawl := integration.Name(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := redis.LimiterConfig{Client: client, Crawl: crawl, Delay: 100 * time.Millisecond, Poll: 5 * time.Millisecond,
		AutoThrottle: &engine.AutoThrottle{StartDelay: time.Second, MaxDelay: 10 * time.Second}}
	a := newLimiter(t, cfg)
	b := newLimiter(t, cfg)
	both := func(host string, want time.Duration) {
		t.Helper()
		for i, l := range []*redis.HostLimiter{a, b} {
			d, err := l.Delay(ctx, host)
			if err != nil {
				t.Fatal(err)
			}
			if d != want {
				t.Errorf("worker %d: delay of %s %v, want %v", i, host, d, want)
			}
		}
	}
	both("slow.example", time.Second) // the start delay
	a.Observe("slow.example", 3*time.Second, 200)
	both("slow.example", 3*time.Second) // up at once
	b.Observe("slow.example", time.Second, 200)
	both("slow.example", 2*time.Second) // (3s + 1s) / 2
	a.Observe("slow.example", time.Millisecond, 404)
	both("slow.example", 2*time.Second) // a 404 never lowers
	for i := range 8 {
		[]*redis.HostLimiter{a, b}[i%2].Observe("fast.example", time.Millisecond, 200)
	}
	both("fast.example", 100*time.Millisecond) // down to Delay, no lower
	both("other.example", time.Second)         // hosts apart
	key := redislayout.HostKeys(crawl, "slow.example").Throttle
	if ttl, err := client.PTTL(ctx, key).Result(); err != nil || ttl <= 0 {
		t.Errorf("throttle key %s: TTL %v, %v; want a key that expires", key, ttl, err)
	}

	// Pacing across workers: a starts, then a fast response lowers the
	// shared delay from 1s to 505ms; a gives the host back (Close gives
	// back the hosts it holds idle, at once rather than leaseLinger
	// later), and b's start waits for that delay, not 1s.
	release, err := a.Acquire(ctx, "paced.example")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	release()
	a.Observe("paced.example", 10*time.Millisecond, 200)
	a.Close()
	release, err = b.Acquire(ctx, "paced.example")
	if err != nil {
		t.Fatal(err)
	}
	gap := time.Since(t0)
	release()
	if gap < 450*time.Millisecond || gap > 900*time.Millisecond {
		t.Errorf("b started %v after a, want the lowered shared delay of about 505ms", gap)
	}
}

// countHook counts the commands a client sends, by name.
type countHook struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *countHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *countHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.mu.Lock()
		h.n[cmd.Name()]++
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *countHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

func (h *countHook) get(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[name]
}

// TestHostLimiterLeasedHostCostsNoRoundTrip: a worker's pages of one
// host, one after the other with one slot (per-host 1), take the host's
// lease once: the pages themselves cost Redis nothing. Once the worker
// has had no page of the host in progress for a while it gives the
// lease back, and another worker takes the host.
func TestHostLimiterLeasedHostCostsNoRoundTrip(t *testing.T) {
	const pages = 50
	client := integration.RedisClient(t)
	hook := &countHook{n: map[string]int{}}
	client.AddHook(hook)
	crawl := integration.Name(t)
	l := newLimiter(t, redis.LimiterConfig{Client: client, Crawl: crawl, PerHost: 1})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for i := range pages {
		release, err := l.Acquire(ctx, "site.example")
		if err != nil {
			t.Fatalf("page %d: %v", i, err)
		}
		release()
	}
	// One lease (the script loaded once: evalsha, then eval), and a
	// release only if the test was descheduled past the linger.
	if n := hook.get("evalsha") + hook.get("eval"); n > 4 {
		t.Errorf("%d script calls for %d pages of one host; want the lease taken once", n, pages)
	}
	other := newLimiter(t, redis.LimiterConfig{Client: integration.RedisClient(t), Crawl: crawl, PerHost: 1})
	release, err := other.Acquire(ctx, "site.example")
	if err != nil {
		t.Fatalf("another worker could not take the host given back: %v", err)
	}
	release()
}

// TestHostLimiterWantedHostYields: a worker that keeps a host busy
// gives it back when another worker asks for it, at its next renewal
// (SlotTTL/3): the other does not wait until the first runs out of work.
func TestHostLimiterWantedHostYields(t *testing.T) {
	client := integration.RedisClient(t)
	crawl := integration.Name(t)
	const ttl = 900 * time.Millisecond // renewed every 300ms
	cfg := redis.LimiterConfig{Client: client, Crawl: crawl, PerHost: 1, SlotTTL: ttl, Poll: 5 * time.Millisecond}
	a := newLimiter(t, cfg)
	b := newLimiter(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	first, err := a.Acquire(ctx, "busy.example")
	if err != nil {
		t.Fatal(err)
	}
	first()
	busy, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { // a's pages of the host, one after the other
		for busy.Err() == nil {
			r, err := a.Acquire(busy, "busy.example")
			if err != nil {
				return
			}
			time.Sleep(10 * time.Millisecond) // the fetch
			r()
		}
	})
	defer wg.Wait()
	defer stop()
	wait, cancelWait := context.WithTimeout(ctx, 10*time.Second)
	defer cancelWait()
	start := time.Now()
	r, err := b.Acquire(wait, "busy.example")
	if err != nil {
		t.Fatalf("the host stayed with the worker keeping it busy for %v: %v", time.Since(start).Round(time.Millisecond), err)
	}
	r()
	t.Logf("b got the host %v after asking (renewals every %v)", time.Since(start).Round(time.Millisecond), ttl/3)
}

// TestHostLimiterHandOverKeepsDelay: a host handed from one worker to
// another keeps its delay: the second worker's first request starts a
// delay after the first worker's last, not when it took the lease
// (leaseLinger after the first worker's last page ended).
func TestHostLimiterHandOverKeepsDelay(t *testing.T) {
	client := integration.RedisClient(t)
	crawl := integration.Name(t)
	const delay = time.Second // past leaseLinger (200ms) and the retries that follow it
	cfg := redis.LimiterConfig{Client: client, Crawl: crawl, PerHost: 1, Delay: delay, Poll: 5 * time.Millisecond}
	a := newLimiter(t, cfg)
	b := newLimiter(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// Causal: a's start is no sooner than asked, so b's, a delay after
	// a's, is at least a delay after asked. (Measured from after a's
	// grant, the gap came out at 999.97ms: a started before that.)
	asked := time.Now()
	release, err := a.Acquire(ctx, "h.example")
	if err != nil {
		t.Fatal(err)
	}
	release()
	r, err := b.Acquire(ctx, "h.example")
	if err != nil {
		t.Fatal(err)
	}
	gap := time.Since(asked)
	r()
	if gap < delay {
		t.Errorf("b started %v after a was asked to start, want at least the delay %v carried over with the lease", gap, delay)
	}
	t.Logf("b started %v after a was asked (delay %v)", gap.Round(time.Millisecond), delay)
}

// TestHostLimiterLeasesShareRoundTrips: the leases asked for while a
// script call runs are asked for together in the next one: a call held at
// Redis and nine for other hosts that came meanwhile take two script
// calls; then the per-host cap (7) holds in memory: six more requests to
// the first host start with no round trip, and an eighth finds it full.
func TestHostLimiterLeasesShareRoundTrips(t *testing.T) {
	const calls = 10
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	l, hook := heldLimiter(t, ctx, 7)
	results := make([]<-chan acquired, 0, calls)
	results = append(results, acquireAsync(ctx, l, "a.example"))
	hook.awaitHeld(t, ctx)
	for i := 1; i < calls; i++ {
		results = append(results, acquireAsync(ctx, l, fmt.Sprintf("h%d.example", i)))
	}
	awaitQueued(t, ctx, l, calls-1) // the nine, behind the held call
	close(hook.release)
	for _, ch := range results {
		r := <-ch
		if r.err != nil {
			t.Fatalf("Acquire: %v", r.err)
		}
		defer r.release()
	}
	for range 6 {
		r, err := l.Acquire(ctx, "a.example")
		if err != nil {
			t.Fatal(err)
		}
		defer r()
	}
	if n := hook.calls.Load(); n != 2 {
		t.Errorf("%d script calls for %d hosts, nine of them waiting together, and 6 more requests; want 2", n, calls)
	}
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	if r, err := l.Acquire(short, "a.example"); err == nil {
		r()
		t.Error("an eighth Acquire of a.example took a slot; want the host full (7 of 7)")
	}
}

// TestHostLimiterAbandonedAcquire: an Acquire whose context ends while it
// waits for the host's lease returns at once with the context's error,
// and takes no slot.
func TestHostLimiterAbandonedAcquire(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	l, hook := heldLimiter(t, ctx, 2)
	first := acquireAsync(ctx, l, "h.example")
	hook.awaitHeld(t, ctx)
	gone, leave := context.WithCancel(ctx)
	abandoned := acquireAsync(gone, l, "h.example")
	for redis.Waiting(l, "h.example") < 2 {
		if ctx.Err() != nil {
			t.Fatal("the second Acquire never waited for the lease")
		}
		runtime.Gosched()
	}
	leave()
	if r := <-abandoned; !errors.Is(r.err, context.Canceled) {
		if r.err == nil {
			r.release()
		}
		t.Fatalf("Acquire abandoned while waiting: %v, want context.Canceled", r.err)
	}
	close(hook.release)
	f := <-first
	if f.err != nil {
		t.Fatal(f.err)
	}
	defer f.release() // held to the end: the host has one slot left
	short, cancelShort := context.WithTimeout(ctx, 5*time.Second)
	defer cancelShort()
	r, err := l.Acquire(short, "h.example")
	if err != nil {
		t.Fatalf("the host's second slot: %v; want it free (the abandoned call took none)", err)
	}
	r()
}

// heldLimiter returns a limiter of perHost slots per host whose client
// goes through a holdHook, armed once a first Acquire has loaded the
// script (so that each try is one script call). Its leases outlive the
// test: no renewal, a script call of its own, is counted.
func heldLimiter(t *testing.T, ctx context.Context, perHost int) (*redis.HostLimiter, *holdHook) {
	t.Helper()
	client := integration.RedisClient(t)
	hook := &holdHook{entered: make(chan struct{}), release: make(chan struct{})}
	client.AddHook(hook)
	l := newLimiter(t, redis.LimiterConfig{Client: client, Crawl: integration.Name(t), PerHost: perHost,
		Poll: time.Hour, SlotTTL: 10 * time.Minute})
	warm, err := l.Acquire(ctx, "warm.example")
	if err != nil {
		t.Fatal(err)
	}
	warm()
	hook.armed.Store(true)
	return l, hook
}

// acquired is what an Acquire started by acquireAsync returned.
type acquired struct {
	release func()
	err     error
}

// acquireAsync starts l.Acquire(ctx, host) and returns where its result comes.
func acquireAsync(ctx context.Context, l *redis.HostLimiter, host string) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		r, err := l.Acquire(ctx, host)
		ch <- acquired{r, err}
	}()
	return ch
}

// awaitQueued waits until n hosts' lease asks of l wait to be sent.
func awaitQueued(t *testing.T, ctx context.Context, l *redis.HostLimiter, n int) {
	t.Helper()
	for redis.WaitingAsks(l) < n {
		if ctx.Err() != nil {
			t.Fatalf("%d of %d Acquire calls queued behind the held one", redis.WaitingAsks(l), n)
		}
		runtime.Gosched()
	}
}

// holdHook, once armed, holds the first script call of a client until
// release is closed, and counts the script calls.
type holdHook struct {
	armed   atomic.Bool // counts and holds only once armed
	calls   atomic.Int32
	entered chan struct{} // closed when the first call is held
	release chan struct{}
}

// awaitHeld waits until the first script call is held.
func (h *holdHook) awaitHeld(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-h.entered:
	case <-ctx.Done():
		t.Fatal("the first Acquire never reached Redis")
	}
}

func (h *holdHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *holdHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if name := cmd.Name(); h.armed.Load() && (name == "evalsha" || name == "eval") {
			if h.calls.Add(1) == 1 {
				close(h.entered)
				<-h.release
			}
		}
		return next(ctx, cmd)
	}
}

func (h *holdHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// TestHostLimiterPurge: Purge deletes the crawl's per-host state (a
// host's lease, next start, and the stored robots.txt files), so that a
// crawl started clean (--flush) fetches robots.txt again; another
// crawl's state stays.
func TestHostLimiterPurge(t *testing.T) {
	client := integration.RedisClient(t)
	crawl, other := integration.Name(t), integration.Name(t)+"-other"
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	open := func(crawl string) *redis.HostLimiter {
		return newLimiter(t, redis.LimiterConfig{Client: client, Crawl: crawl, PerHost: 1, Delay: time.Minute})
	}
	l, o := open(crawl), open(other)
	for _, l := range []*redis.HostLimiter{l, o} {
		if err := l.StoreRobots(ctx, "https://site.example", []byte("User-agent: *\nDisallow: /private\n"), time.Hour); err != nil {
			t.Fatal(err)
		}
		release, err := l.Acquire(ctx, "site.example") // its lease and, with the delay, its next start
		if err != nil {
			t.Fatal(err)
		}
		release()
	}
	keys := func(crawl string) []string {
		ks, err := client.Keys(ctx, redislayout.Crawl(crawl, "*")).Result()
		if err != nil {
			t.Fatal(err)
		}
		var hosts []string
		for _, k := range ks {
			if strings.Contains(k, ":host:") || strings.Contains(k, ":robots:") {
				hosts = append(hosts, k)
			}
		}
		slices.Sort(hosts)
		return hosts
	}
	if len(keys(crawl)) == 0 {
		t.Fatal("the limiter kept no per-host key to purge")
	}
	before := keys(other)
	if err := l.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := l.Robots(ctx, "https://site.example"); err != nil || ok {
		t.Errorf("robots.txt still stored after Purge (ok=%v, err=%v): a crawl started clean would not fetch it", ok, err)
	}
	if left := keys(crawl); len(left) != 0 {
		t.Errorf("per-host keys left after Purge: %v", left)
	}
	if after := keys(other); !slices.Equal(after, before) {
		t.Errorf("another crawl's per-host keys: %v before, %v after the purge of %s", before, after, crawl)
	}
	if _, ok, err := o.Robots(ctx, "https://site.example"); err != nil || !ok {
		t.Errorf("another crawl's robots.txt gone (ok=%v, err=%v)", ok, err)
	}
}

// TestHostLimiterFirstComeFirstServed: the Acquire calls of a held host
// with a delay start in the order they came, so none waits longer than
// the calls before it take: 8 pages of a host at --delay 200ms wait 1.4s
// at most, where pages woken together in any order waited past 3s (and
// the worker said another worker held the host).
func TestHostLimiterFirstComeFirstServed(t *testing.T) {
	const host, pages = "paced.example", 8
	client := integration.RedisClient(t)
	l := newLimiter(t, redis.LimiterConfig{Client: client, Crawl: integration.Name(t), PerHost: pages,
		Delay: 20 * time.Millisecond})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	first, err := l.Acquire(ctx, host) // the host held here, whole
	if err != nil {
		t.Fatal(err)
	}
	defer first()
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range pages - 1 {
		wg.Go(func() {
			r, err := l.Acquire(ctx, host)
			if err != nil {
				t.Errorf("page %d: %v", i, err)
				return
			}
			defer r()
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
		})
		for redis.Waiting(l, host) < i+1 { // call i waits before call i+1 comes
			if ctx.Err() != nil {
				t.Fatalf("call %d never waited", i)
			}
			runtime.Gosched()
		}
	}
	wg.Wait()
	if !slices.IsSorted(order) {
		t.Errorf("calls started in the order %v, want the order they came", order)
	}
}

// TestHostLimiterHeldElsewhere: a worker whose ask for a host found
// another worker holding it says so (engine.HostHolders), the holder
// does not, nor does a worker that never asked.
func TestHostLimiterHeldElsewhere(t *testing.T) {
	const host = "held.example"
	client := integration.RedisClient(t)
	cfg := redis.LimiterConfig{Client: client, Crawl: integration.Name(t), PerHost: 2, Delay: 50 * time.Millisecond,
		Poll: 5 * time.Millisecond}
	var ls [3]*redis.HostLimiter
	for i := range ls {
		ls[i] = newLimiter(t, cfg)
	}
	a, b, c := ls[0], ls[1], ls[2]
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	r, err := a.Acquire(ctx, host) // a holds the host whole to the end
	if err != nil {
		t.Fatal(err)
	}
	defer r()
	// b asks, and is refused (it asks again and again until it gives up).
	asking, stopAsking := context.WithCancel(ctx)
	defer stopAsking()
	got := acquireAsync(asking, b, host)
	for !b.HeldElsewhere(host) {
		if ctx.Err() != nil {
			t.Fatal("b, refused the host a holds, never said another worker holds it")
		}
		runtime.Gosched()
	}
	stopAsking()
	if r := <-got; r.err == nil {
		r.release()
		t.Fatal("b started a request to a host a holds whole")
	}
	if a.HeldElsewhere(host) {
		t.Error("a, the holder, says another worker holds the host")
	}
	if c.HeldElsewhere(host) {
		t.Error("c, which never asked, says another worker holds the host")
	}
}

// newLimiter returns a limiter of cfg, closed when the test ends (Close
// is idempotent: a test may close it sooner); an error ends the test.
func newLimiter(t *testing.T, cfg redis.LimiterConfig) *redis.HostLimiter {
	t.Helper()
	l, err := redis.NewHostLimiter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// robotsHook, once armed, holds the first read of a robots.txt (GET or
// MGET) until release is closed, and counts the reads and the dials.
type robotsHook struct {
	armed   atomic.Bool
	reads   atomic.Int32
	dials   atomic.Int32
	entered chan struct{} // closed when the first read is held
	release chan struct{}
}

func (h *robotsHook) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if h.armed.Load() {
			h.dials.Add(1)
		}
		return next(ctx, network, addr)
	}
}

func (h *robotsHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if name := cmd.Name(); h.armed.Load() && (name == "get" || name == "mget") {
			if h.reads.Add(1) == 1 {
				close(h.entered)
				<-h.release
			}
		}
		return next(ctx, cmd)
	}
}

func (h *robotsHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// TestHostLimiterReadsRobotsTogether: the robots.txt files that a
// worker's fetches ask for at once (a worker starting on new hosts) are
// read together, in one MGET for those that came while a read was out,
// on one pooled connection: one GET each took a connection each, and a
// worker dialled 130-150 in its first second. Each call gets its own
// host's file, or none.
func TestHostLimiterReadsRobotsTogether(t *testing.T) {
	const calls = 48
	client := integration.RedisClient(t)
	hook := &robotsHook{entered: make(chan struct{}), release: make(chan struct{})}
	client.AddHook(hook)
	l := newLimiter(t, redis.LimiterConfig{Client: client, Crawl: integration.Name(t), PerHost: 1})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	site := func(i int) string { return fmt.Sprintf("https://h%d.example", i) }
	for i := 0; i < calls; i += 2 { // every other site has a file
		if err := l.StoreRobots(ctx, site(i), fmt.Appendf(nil, "User-agent: *\nDisallow: /%d\n", i), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	type answer struct {
		file []byte
		ok   bool
		err  error
	}
	answers := make([]chan answer, calls)
	read := func(i int) {
		answers[i] = make(chan answer, 1)
		go func() {
			f, ok, err := l.Robots(ctx, site(i))
			answers[i] <- answer{f, ok, err}
		}()
	}
	hook.armed.Store(true)
	read(0)
	select {
	case <-hook.entered:
	case <-ctx.Done():
		t.Fatal("the first Robots call never reached Redis")
	}
	for i := 1; i < calls; i++ {
		read(i)
	}
	// The others wait for the held read, or (one GET each) were answered.
	for deadline := time.Now().Add(20 * time.Second); ; {
		answered := 0
		for _, a := range answers[1:] {
			answered += len(a)
		}
		if redis.WaitingRobots(l)+answered == calls-1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d Robots calls queued or answered in 20s", redis.WaitingRobots(l)+answered, calls-1)
		}
		time.Sleep(5 * time.Millisecond) // polling an observable condition
	}
	close(hook.release)
	for i, ch := range answers {
		a := <-ch
		want := i%2 == 0
		switch {
		case a.err != nil:
			t.Errorf("Robots(%s): %v", site(i), a.err)
		case a.ok != want:
			t.Errorf("Robots(%s): ok=%v, want %v", site(i), a.ok, want)
		case want && string(a.file) != fmt.Sprintf("User-agent: *\nDisallow: /%d\n", i):
			t.Errorf("Robots(%s) = %q: another host's file", site(i), a.file)
		}
	}
	t.Logf("%d Robots calls: %d reads, %d dials", calls, hook.reads.Load(), hook.dials.Load())
	if n := hook.reads.Load(); n > 2 {
		t.Errorf("%d Robots calls that came together took %d reads; want 2 (the first, then the rest together)", calls, n)
	}
	if n := hook.dials.Load(); n > 2 {
		t.Errorf("%d Robots calls that came together dialled %d connections; want 2 at most", calls, n)
	}
}
