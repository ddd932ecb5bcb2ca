package deduptest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/trawlhq/trawl/dedup"
)

// Config says how to make the filters under test and what they claim.
type Config struct {
	// New returns a filter. Filters returned by New within the same test
	// (same t) share one backend and one namespace, like the workers of one
	// crawl (a local filter may return the same instance). Each test gets a
	// fresh, empty namespace. New registers its cleanup with t.Cleanup.
	New func(t *testing.T) dedup.Filter
	// FalsePositiveRate is the largest false-positive rate the filter may
	// show; 0 means the filter is exact and no false positive is allowed.
	FalsePositiveRate float64
	// Timeout bounds each call that may block; 0 means 10 seconds.
	Timeout time.Duration
}

// Run runs the suite, one subtest per promise.
func Run(t *testing.T, c Config) {
	t.Helper()
	if c.New == nil {
		t.Fatal("deduptest: Config.New is nil")
	}
	if c.FalsePositiveRate < 0 || c.FalsePositiveRate >= 0.05 {
		t.Fatalf("deduptest: FalsePositiveRate %v is not in [0, 0.05)", c.FalsePositiveRate)
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Second
	}
	s := &suite{Config: c}
	for _, tc := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"NewThenSeen", s.testNewThenSeen},
		{"DuplicateInBatch", s.testDuplicateInBatch},
		{"ResultOrder", s.testResultOrder},
		{"EmptyBatch", s.testEmptyBatch},
		{"SharedAcrossHandles", s.testSharedAcrossHandles},
		{"ManyDistinct", s.testManyDistinct},
		{"LargeBatch", s.testLargeBatch},
		{"ConcurrentSameFingerprints", s.testConcurrent},
		{"Close", s.testClose},
		{"CancelledContext", s.testCancelledContext},
		{"Purge", s.testPurge},
		{"ContainsChangesNothing", s.testContainsChangesNothing},
		{"ContainsAfterAdd", s.testContainsAfterAdd},
		{"ContainsClosed", s.testContainsClosed},
	} {
		t.Run(tc.name, tc.fn)
	}
}

type suite struct {
	Config
}

// rng returns a random source for t, logging its seed.
func (s *suite) rng(t *testing.T) *rand.Rand {
	t.Helper()
	seed := rand.Uint64()
	t.Logf("fingerprint seed %d", seed)
	return rand.New(rand.NewPCG(seed, 0x74726177))
}

// fingerprints returns n distinct random fingerprints.
func fingerprints(r *rand.Rand, n int) []dedup.Fingerprint {
	fps := make([]dedup.Fingerprint, n)
	seen := make(map[dedup.Fingerprint]bool, n)
	for i := 0; i < n; {
		binary.LittleEndian.PutUint64(fps[i][:8], r.Uint64())
		binary.LittleEndian.PutUint64(fps[i][8:], r.Uint64())
		if !seen[fps[i]] {
			seen[fps[i]] = true
			i++
		}
	}
	return fps
}

// allowedFalsePositives returns how many of n fresh fingerprints may be
// reported as seen: twice the expected number plus a margin for chance.
func (s *suite) allowedFalsePositives(n int) int {
	if s.FalsePositiveRate == 0 {
		return 0
	}
	mean := s.FalsePositiveRate * float64(n)
	return int(math.Ceil(2*mean + 3*math.Sqrt(mean) + 3))
}

// add calls f.Add with a bounded context and fails t on error or on a
// result of the wrong length.
func (s *suite) add(t *testing.T, f dedup.Filter, fps ...dedup.Fingerprint) []bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeout)
	defer cancel()
	isNew, err := f.Add(ctx, fps...)
	if err != nil {
		t.Fatalf("Add(%d fingerprints): %v", len(fps), err)
	}
	if len(isNew) != len(fps) {
		t.Fatalf("Add(%d fingerprints) returned %d results", len(fps), len(isNew))
	}
	return isNew
}

// addErr is add for use off the test goroutine: it returns the error.
func (s *suite) addErr(f dedup.Filter, fps ...dedup.Fingerprint) ([]bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeout)
	defer cancel()
	isNew, err := f.Add(ctx, fps...)
	if err == nil && len(isNew) != len(fps) {
		err = fmt.Errorf("Add(%d fingerprints) returned %d results", len(fps), len(isNew))
	}
	return isNew, err
}

func (s *suite) testNewThenSeen(t *testing.T) {
	f := s.New(t)
	fps := fingerprints(s.rng(t), 20)
	fresh := 0
	for i, fp := range fps {
		if s.add(t, f, fp)[0] {
			fresh++
		} else if s.FalsePositiveRate == 0 {
			t.Fatalf("fingerprint %d (%v) was never added, but Add reported it seen", i, fp)
		}
		if s.add(t, f, fp)[0] {
			t.Fatalf("fingerprint %d (%v) added a second time, but Add reported it new", i, fp)
		}
	}
	if fresh < len(fps)-s.allowedFalsePositives(len(fps)) {
		t.Errorf("%d of %d never-added fingerprints reported new", fresh, len(fps))
	}
	for i, isNew := range s.add(t, f, fps...) {
		if isNew {
			t.Fatalf("fingerprint %d added again in a batch, but Add reported it new", i)
		}
	}
}

func (s *suite) testDuplicateInBatch(t *testing.T) {
	f := s.New(t)
	fps := fingerprints(s.rng(t), 2)
	a, b := fps[0], fps[1]
	got := s.add(t, f, a, a, b, a, b)
	if got[1] || got[3] || got[4] {
		t.Errorf("Add(a, a, b, a, b) = %v: a later copy in the batch was reported new", got)
	}
	if s.FalsePositiveRate == 0 && (!got[0] || !got[2]) {
		t.Errorf("Add(a, a, b, a, b) = %v, want [true false true false false]", got)
	}
	if got := s.add(t, f, a, b); got[0] || got[1] {
		t.Errorf("Add(a, b) after the batch = %v, want [false false]", got)
	}
}

func (s *suite) testResultOrder(t *testing.T) {
	f := s.New(t)
	r := s.rng(t)
	fps := fingerprints(r, 200)
	// Add every other fingerprint first, then all of them, in an order
	// that mixes old and new: the answers must follow the input order.
	var old []dedup.Fingerprint
	for i := 0; i < len(fps); i += 2 {
		old = append(old, fps[i])
	}
	s.add(t, f, old...)
	r.Shuffle(len(fps), func(i, j int) { fps[i], fps[j] = fps[j], fps[i] })
	wasOld := make(map[dedup.Fingerprint]bool, len(old))
	for _, fp := range old {
		wasOld[fp] = true
	}
	got := s.add(t, f, fps...)
	falsePositives := 0
	for i, fp := range fps {
		switch {
		case wasOld[fp] && got[i]:
			t.Fatalf("result %d: fingerprint added before reported new (results out of input order?)", i)
		case !wasOld[fp] && !got[i]:
			falsePositives++
		}
	}
	if max := s.allowedFalsePositives(len(fps) - len(old)); falsePositives > max {
		t.Errorf("%d new fingerprints reported seen, at most %d allowed (results out of input order?)", falsePositives, max)
	}
}

func (s *suite) testEmptyBatch(t *testing.T) {
	f := s.New(t)
	if got := s.add(t, f); len(got) != 0 {
		t.Errorf("Add() = %v, want no results", got)
	}
	if got := s.add(t, f, []dedup.Fingerprint{}...); len(got) != 0 {
		t.Errorf("Add(empty slice) = %v, want no results", got)
	}
	fp := fingerprints(s.rng(t), 1)[0]
	if got := s.add(t, f, fp); !got[0] && s.FalsePositiveRate == 0 {
		t.Error("Add after empty batches: new fingerprint reported seen")
	}
	if s.add(t, f, fp)[0] {
		t.Error("fingerprint added twice reported new the second time")
	}
}

func (s *suite) testSharedAcrossHandles(t *testing.T) {
	f1, f2 := s.New(t), s.New(t)
	fps := fingerprints(s.rng(t), 100)
	s.add(t, f1, fps[:50]...)
	s.add(t, f2, fps[50:]...)
	for i, isNew := range s.add(t, f2, fps[:50]...) {
		if isNew {
			t.Fatalf("fingerprint %d added through one handle reported new through another", i)
		}
	}
	for i, isNew := range s.add(t, f1, fps[50:]...) {
		if isNew {
			t.Fatalf("fingerprint %d added through one handle reported new through another", 50+i)
		}
	}
}

func (s *suite) testManyDistinct(t *testing.T) {
	const n = 10_000
	f := s.New(t)
	r := s.rng(t)
	fps := fingerprints(r, n)
	fresh := 0
	for rest := fps; len(rest) > 0; {
		batch := rest[:min(len(rest), 1+r.IntN(200))]
		rest = rest[len(batch):]
		for _, isNew := range s.add(t, f, batch...) {
			if isNew {
				fresh++
			}
		}
	}
	if max := s.allowedFalsePositives(n); n-fresh > max {
		t.Errorf("%d of %d distinct fingerprints reported seen, at most %d allowed", n-fresh, n, max)
	}
	for rest := fps; len(rest) > 0; rest = rest[min(len(rest), 500):] {
		for i, isNew := range s.add(t, f, rest[:min(len(rest), 500)]...) {
			if isNew {
				t.Fatalf("fingerprint %d added before reported new", n-len(rest)+i)
			}
		}
	}
}

func (s *suite) testLargeBatch(t *testing.T) {
	const n = 5000
	f := s.New(t)
	fps := fingerprints(s.rng(t), n)
	batch := append(fps, fps...) // each fingerprint twice
	got := s.add(t, f, batch...)
	fresh := 0
	for i := range fps {
		if got[n+i] {
			t.Fatalf("second copy of fingerprint %d in one batch reported new", i)
		}
		if got[i] {
			fresh++
		}
	}
	if max := s.allowedFalsePositives(n); n-fresh > max {
		t.Errorf("%d of %d distinct fingerprints in one batch reported seen, at most %d allowed", n-fresh, n, max)
	}
}

func (s *suite) testConcurrent(t *testing.T) {
	const (
		n       = 1000
		workers = 8
	)
	handles := []dedup.Filter{s.New(t), s.New(t)}
	r := s.rng(t)
	fps := fingerprints(r, n)
	index := make(map[dedup.Fingerprint]int, n)
	for i, fp := range fps {
		index[fp] = i
	}
	// Each worker adds all n fingerprints, shuffled, in batches of random
	// size; all start at once.
	orders := make([][]dedup.Fingerprint, workers)
	for w := range orders {
		orders[w] = append([]dedup.Fingerprint(nil), fps...)
		r.Shuffle(n, func(i, j int) { orders[w][i], orders[w][j] = orders[w][j], orders[w][i] })
	}
	var (
		start = make(chan struct{})
		wg    sync.WaitGroup
		mu    sync.Mutex
		trues = make([]int, n)
		errs  []error
	)
	for w := range workers {
		wg.Go(func() {
			f := handles[w%len(handles)]
			<-start
			for rest := orders[w]; len(rest) > 0; {
				batch := rest[:min(len(rest), 1+(w*37+len(rest))%64)]
				rest = rest[len(batch):]
				isNew, err := s.addErr(f, batch...)
				mu.Lock()
				if err != nil {
					errs = append(errs, fmt.Errorf("worker %d: %w", w, err))
					mu.Unlock()
					return
				}
				for i, fp := range batch {
					if isNew[i] {
						trues[index[fp]]++
					}
				}
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	total, missing, repeated := 0, 0, 0
	for i, c := range trues {
		total += c
		switch {
		case c > 1:
			if repeated++; repeated <= 3 {
				t.Errorf("fingerprint %d reported new %d times by concurrent Adds, want once", i, c)
			}
		case c == 0:
			missing++
		}
	}
	if repeated > 0 {
		t.Errorf("%d of %d fingerprints reported new more than once by concurrent Adds", repeated, n)
	}
	if s.FalsePositiveRate == 0 && missing > 0 {
		t.Errorf("%d of %d fingerprints never reported new by any of the concurrent Adds", missing, n)
	}
	if min := int(math.Ceil((1 - 2*s.FalsePositiveRate) * n)); total < min {
		t.Errorf("concurrent Adds reported %d fingerprints new, want at least %d of %d", total, min, n)
	}
}

func (s *suite) testClose(t *testing.T) {
	f := s.New(t)
	fp := fingerprints(s.rng(t), 1)[0]
	s.add(t, f, fp)
	if err := s.bounded(t, "Close", f.Close); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.bounded(t, "second Close", f.Close); err != nil {
		t.Errorf("second Close: %v, want nil (Close is idempotent)", err)
	}
	var isNew []bool
	err := s.bounded(t, "Add after Close", func() (err error) {
		isNew, err = f.Add(context.Background(), fp)
		return err
	})
	if !errors.Is(err, dedup.ErrClosed) {
		t.Errorf("Add after Close = %v, %v; want an error wrapping dedup.ErrClosed", isNew, err)
	}
	if err := s.bounded(t, "Add() after Close", func() (err error) {
		_, err = f.Add(context.Background())
		return err
	}); err != nil && !errors.Is(err, dedup.ErrClosed) {
		t.Errorf("empty Add after Close = %v; want nil or an error wrapping dedup.ErrClosed", err)
	}
}

func (s *suite) testCancelledContext(t *testing.T) {
	f := s.New(t)
	fps := fingerprints(s.rng(t), 10)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var isNew []bool
	err := s.bounded(t, "Add with a cancelled context", func() (err error) {
		isNew, err = f.Add(ctx, fps...)
		return err
	})
	switch {
	case err != nil && !errors.Is(err, context.Canceled):
		t.Errorf("Add with a cancelled context: %v; want an error wrapping context.Canceled", err)
	case err == nil && len(isNew) != len(fps):
		t.Errorf("Add with a cancelled context succeeded with %d results for %d fingerprints", len(isNew), len(fps))
	}
	// The filter still works with a live context.
	s.add(t, f, fps...)
	for i, isNew := range s.add(t, f, fps...) {
		if isNew {
			t.Fatalf("fingerprint %d reported new after it was added", i)
		}
	}
}

func (s *suite) testPurge(t *testing.T) {
	f := s.New(t)
	fps := fingerprints(s.rng(t), 100)
	s.add(t, f, fps...)
	if err := s.bounded(t, "Purge", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), s.Timeout)
		defer cancel()
		return f.Purge(ctx)
	}); err != nil {
		t.Fatalf("Purge: %v", err)
	}
	fresh := 0
	for _, isNew := range s.add(t, f, fps...) {
		if isNew {
			fresh++
		}
	}
	if max := s.allowedFalsePositives(len(fps)); len(fps)-fresh > max {
		t.Errorf("after Purge, %d of %d fingerprints added before were still seen, at most %d allowed", len(fps)-fresh, len(fps), max)
	}
	for i, isNew := range s.add(t, f, fps...) {
		if isNew {
			t.Fatalf("fingerprint %d added after Purge reported new again", i)
		}
	}
}

// bounded runs fn and fails t if it does not return within the timeout.
func (s *suite) bounded(t *testing.T, what string, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(s.Timeout):
		t.Fatalf("%s did not return within %v", what, s.Timeout)
		return nil
	}
}

// checker returns f as a dedup.Checker, or skips t.
func checker(t *testing.T, f dedup.Filter) dedup.Checker {
	t.Helper()
	c, ok := f.(dedup.Checker)
	if !ok {
		t.Skipf("%T does not implement dedup.Checker", f)
	}
	return c
}

// contains calls c.Contains with a bounded context and fails t on error or
// on a result of the wrong length.
func (s *suite) contains(t *testing.T, c dedup.Checker, fps ...dedup.Fingerprint) []bool {
	t.Helper()
	var in []bool
	err := s.bounded(t, "Contains", func() (err error) {
		ctx, cancel := context.WithTimeout(context.Background(), s.Timeout)
		defer cancel()
		in, err = c.Contains(ctx, fps...)
		return err
	})
	if err != nil {
		t.Fatalf("Contains(%d fingerprints): %v", len(fps), err)
	}
	if len(in) != len(fps) {
		t.Fatalf("Contains(%d fingerprints) returned %d results", len(fps), len(in))
	}
	return in
}

// Contains of fingerprints never added reports them absent (allowing false
// positives) and adds nothing: Add then still hears them new, and Contains
// repeated says the same.
func (s *suite) testContainsChangesNothing(t *testing.T) {
	f := s.New(t)
	c := checker(t, f)
	fps := fingerprints(s.rng(t), 500)
	if got := s.contains(t, c); len(got) != 0 {
		t.Errorf("Contains() = %v, want no results", got)
	}
	first := s.contains(t, c, fps...)
	present := 0
	for _, in := range first {
		if in {
			present++
		}
	}
	if max := s.allowedFalsePositives(len(fps)); present > max {
		t.Errorf("Contains reported %d of %d never-added fingerprints present, at most %d allowed", present, len(fps), max)
	}
	again := s.contains(t, c, fps...)
	for i := range fps {
		if again[i] != first[i] {
			t.Fatalf("fingerprint %d: Contains said %v, then %v: Contains changed the filter", i, first[i], again[i])
		}
	}
	fresh := 0
	for i, isNew := range s.add(t, f, fps...) {
		if isNew {
			fresh++
		} else if !first[i] && s.FalsePositiveRate == 0 {
			t.Fatalf("fingerprint %d: only Contains saw it, yet Add reported it seen: Contains added it", i)
		}
	}
	if fresh < len(fps)-s.allowedFalsePositives(len(fps))-present {
		t.Errorf("after Contains, Add reported only %d of %d never-added fingerprints new: Contains added them", fresh, len(fps))
	}
}

// After Add, Contains reports every fingerprint present, through any
// handle, in input order, mixed with absent ones.
func (s *suite) testContainsAfterAdd(t *testing.T) {
	f1, f2 := s.New(t), s.New(t)
	c1, c2 := checker(t, f1), checker(t, f2)
	r := s.rng(t)
	fps := fingerprints(r, 400)
	var added []dedup.Fingerprint
	wasAdded := map[dedup.Fingerprint]bool{}
	for i := 0; i < len(fps); i += 2 {
		added = append(added, fps[i])
		wasAdded[fps[i]] = true
	}
	s.add(t, f1, added...)
	r.Shuffle(len(fps), func(i, j int) { fps[i], fps[j] = fps[j], fps[i] })
	for h, c := range []dedup.Checker{c1, c2} {
		falsePositives := 0
		for i, in := range s.contains(t, c, fps...) {
			switch {
			case wasAdded[fps[i]] && !in:
				t.Fatalf("handle %d: result %d: an added fingerprint reported absent (results out of input order?)", h+1, i)
			case !wasAdded[fps[i]] && in:
				falsePositives++
			}
		}
		if max := s.allowedFalsePositives(len(fps) - len(added)); falsePositives > max {
			t.Errorf("handle %d: %d never-added fingerprints reported present, at most %d allowed", h+1, falsePositives, max)
		}
	}
}

// Contains after Close fails with an error wrapping dedup.ErrClosed; with
// a cancelled context it returns promptly, and its error, if any, wraps
// context.Canceled.
func (s *suite) testContainsClosed(t *testing.T) {
	f := s.New(t)
	c := checker(t, f)
	fps := fingerprints(s.rng(t), 10)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var in []bool
	err := s.bounded(t, "Contains with a cancelled context", func() (err error) {
		in, err = c.Contains(ctx, fps...)
		return err
	})
	switch {
	case err != nil && !errors.Is(err, context.Canceled):
		t.Errorf("Contains with a cancelled context: %v; want an error wrapping context.Canceled", err)
	case err == nil && len(in) != len(fps):
		t.Errorf("Contains with a cancelled context succeeded with %d results for %d fingerprints", len(in), len(fps))
	}
	if err := s.bounded(t, "Close", f.Close); err != nil {
		t.Fatalf("Close: %v", err)
	}
	err = s.bounded(t, "Contains after Close", func() (err error) {
		in, err = c.Contains(context.Background(), fps...)
		return err
	})
	if !errors.Is(err, dedup.ErrClosed) {
		t.Errorf("Contains after Close = %v, %v; want an error wrapping dedup.ErrClosed", in, err)
	}
}
