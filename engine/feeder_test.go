package engine

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// fakeFeeder is a feeder whose crawler is a set of knobs.
type fakeFeeder struct {
	*feeder
	starts   []int // what each take of start URLs takes; then 0
	takes    atomic.Int32
	takeErr  error
	inFlight atomic.Bool
	queued   bool
	others   int64 // requests other workers hold
	countErr error
	lost     error
	deep     int // deep looks at the state
	verified int
	logs     bytes.Buffer
}

func newFakeFeeder(timeout time.Duration) *fakeFeeder {
	ff := &fakeFeeder{}
	ff.feeder = &feeder{
		takeStarts: func(context.Context) (int, error) {
			ff.takes.Add(1)
			if len(ff.starts) == 0 {
				return 0, ff.takeErr
			}
			n := ff.starts[0]
			ff.starts = ff.starts[1:]
			return n, ff.takeErr
		},
		busy: func() bool { return ff.inFlight.Load() },
		idle: func(context.Context) (bool, int64, string, error) {
			if ff.countErr != nil {
				return false, 0, "q", ff.countErr
			}
			if ff.others > 0 && !ff.queued && !ff.inFlight.Load() {
				return false, ff.others, "", nil
			}
			return !ff.queued && !ff.inFlight.Load(), 0, "", nil
		},
		watch: func(_ context.Context, deep bool) error {
			if deep {
				ff.deep++
			}
			return ff.lost
		},
		verify:    func(context.Context) error { ff.verified++; return nil },
		pollPause: func(context.Context) {},
		timeout:   timeout,
		log:       slog.New(slog.NewTextHandler(&ff.logs, nil)),
	}
	ff.startsEmpty = time.Now()
	return ff
}

// runFeeder runs f until it finishes the crawl or d passes, and returns
// when it finished and why (nil: it did not).
func runFeeder(f *feeder, hungry <-chan struct{}, d time.Duration) (after time.Duration, why error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	run, finish := context.WithCancelCause(ctx)
	began := time.Now()
	f.run(run, hungry, finish)
	if errors.Is(context.Cause(run), context.DeadlineExceeded) {
		return time.Since(began), nil
	}
	return time.Since(began), context.Cause(run)
}

// TestFeederDone: an idle crawl is done after IdleTimeout, its state
// verified first; work in flight or queued keeps it going; with no
// IdleTimeout it never ends.
func TestFeederDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeFeeder(time.Second)
		after, why := runFeeder(f.feeder, nil, time.Minute)
		if !errors.Is(why, errCrawlDone) {
			t.Fatalf("an idle crawl ended with %v, want errCrawlDone", why)
		}
		// Idle from the first tick, done at the first tick a second later.
		if want := pollInterval + time.Second; after != want {
			t.Errorf("done after %v, want %v", after, want)
		}
		if f.verified != 1 {
			t.Errorf("state verified %d times before the crawl was done, want 1", f.verified)
		}
		if f.deep != int(after/pollInterval)/stateEvery {
			t.Errorf("the servers looked at %d times in %v, want every %d ticks", f.deep, after, stateEvery)
		}

		busy := newFakeFeeder(time.Second)
		busy.inFlight.Store(true)
		if _, why := runFeeder(busy.feeder, nil, 10*time.Second); why != nil {
			t.Errorf("a worker with pages in flight ended with %v", why)
		}
		queued := newFakeFeeder(time.Second)
		queued.queued = true
		if _, why := runFeeder(queued.feeder, nil, 10*time.Second); why != nil {
			t.Errorf("a crawl with requests queued ended with %v", why)
		}
		never := newFakeFeeder(0)
		if _, why := runFeeder(never.feeder, nil, 10*time.Second); why != nil {
			t.Errorf("a crawl with no idle timeout ended with %v", why)
		}
	})
}

// TestFeederStarts: a hungry receiver gets start URLs at once while they
// last, and at most every startsCooldown once they ran out; taking some
// resets the idle clock; a fatal take ends the crawl with its error.
func TestFeederStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeFeeder(0)
		f.startsLeft = true
		f.starts = []int{5, 5}
		hungry := make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		run, finish := context.WithCancelCause(ctx)
		done := make(chan struct{})
		go func() { defer close(done); f.run(run, hungry, finish) }()
		for range 4 {
			hungry <- struct{}{}
		}
		synctest.Wait()
		// 5, 5, then none: the fourth is within the cooldown.
		if n := f.takes.Load(); n != 3 {
			t.Errorf("%d takes for 4 hungry signals, two batches and none after, want 3", n)
		}
		f.inFlight.Store(true) // no take on the feeder's ticks
		time.Sleep(startsCooldown)
		hungry <- struct{}{}
		synctest.Wait()
		if n := f.takes.Load(); n != 4 {
			t.Errorf("%d takes once the cooldown passed, want 4", n)
		}
		cancel()
		<-done

		fatal := newFakeFeeder(0)
		fatal.startsLeft = true
		fatal.takeErr = ErrStartsType
		h := make(chan struct{}, 1)
		h <- struct{}{}
		if _, why := runFeeder(fatal.feeder, h, time.Minute); !errors.Is(why, ErrStartsType) {
			t.Errorf("a fatal take ended the crawl with %v, want ErrStartsType", why)
		}

		// Start URLs found on a tick restart the idle clock.
		late := newFakeFeeder(time.Second)
		late.startsLeft = true
		late.starts = []int{0, 3}
		// Idle from the first tick; start URLs a second later (past the
		// cooldown); idle again from the tick after, done a second later.
		after, why := runFeeder(late.feeder, nil, time.Minute)
		if want := 2*pollInterval + startsCooldown + time.Second; !errors.Is(why, errCrawlDone) || after != want {
			t.Errorf("with start URLs found late the crawl ended with %v after %v, want done after %v", why, after, want)
		}
	})
}

// TestFeederStateLost: a crawl whose state was lost ends with the loss.
func TestFeederStateLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeFeeder(time.Second)
		f.inFlight.Store(true)
		f.lost = ErrStateLost
		if after, why := runFeeder(f.feeder, nil, time.Minute); !errors.Is(why, ErrStateLost) || after != pollInterval {
			t.Errorf("a lost state ended the crawl with %v after %v, want ErrStateLost at the first tick", why, after)
		}
	})
}

// TestFeederCountsFail: a crawl whose queues cannot be counted is never
// found done, and says so at once and then every countWarnEvery.
func TestFeederCountsFail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeFeeder(time.Second)
		f.countErr = errors.New("no count")
		if _, why := runFeeder(f.feeder, nil, 25*time.Second); why != nil {
			t.Fatalf("a crawl that cannot count its queues ended with %v", why)
		}
		if n := strings.Count(f.logs.String(), "counting a queue failed"); n != 3 {
			t.Errorf("said %d times in 25s that counting fails, want 3 (at once, then every %v)", n, countWarnEvery)
		}
	})
}
