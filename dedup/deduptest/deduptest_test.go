package deduptest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trawlhq/trawl/dedup"
	"github.com/trawlhq/trawl/dedup/deduptest"
)

// mapFilter is an exact filter over a shared set. Its flaws switch on the
// defects the suite must catch.
type mapFilter struct {
	set   *set
	flaws flaws

	mu     sync.Mutex
	closed bool
}

type set struct {
	mu   sync.Mutex
	seen map[dedup.Fingerprint]bool
}

type flaws struct {
	checkThenSet       bool // tests the whole batch, then sets it: not atomic
	alwaysNew          bool
	reversed           bool // results in reverse order
	openAfterClose     bool
	closeErrorsTwice   bool
	purgeForgetsNot    bool
	hangsWhenCancelled bool
	wrongCancelError   bool
	containsAdds       bool // Contains is a test-and-set
	containsNothing    bool // Contains always reports absent
}

func (f *mapFilter) Add(ctx context.Context, fps ...dedup.Fingerprint) ([]bool, error) {
	if err := ctx.Err(); err != nil {
		switch {
		case f.flaws.hangsWhenCancelled:
			select {} // the suite must notice, not hang
		case f.flaws.wrongCancelError:
			return nil, errors.New("gave up")
		}
		return nil, err
	}
	f.mu.Lock()
	closed := f.closed && !f.flaws.openAfterClose
	f.mu.Unlock()
	if closed {
		return nil, dedup.ErrClosed
	}
	isNew := make([]bool, len(fps))
	s := f.set
	s.mu.Lock()
	for i, fp := range fps {
		isNew[i] = !s.seen[fp] || f.flaws.alwaysNew
		if !f.flaws.checkThenSet {
			s.seen[fp] = true
		}
	}
	s.mu.Unlock()
	if f.flaws.checkThenSet {
		s.mu.Lock()
		for _, fp := range fps {
			s.seen[fp] = true
		}
		s.mu.Unlock()
	}
	if f.flaws.reversed {
		for i, j := 0, len(isNew)-1; i < j; i, j = i+1, j-1 {
			isNew[i], isNew[j] = isNew[j], isNew[i]
		}
	}
	return isNew, nil
}

func (f *mapFilter) Contains(ctx context.Context, fps ...dedup.Fingerprint) ([]bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	closed := f.closed && !f.flaws.openAfterClose
	f.mu.Unlock()
	if closed {
		return nil, dedup.ErrClosed
	}
	in := make([]bool, len(fps))
	s := f.set
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, fp := range fps {
		in[i] = s.seen[fp] && !f.flaws.containsNothing
		if f.flaws.containsAdds {
			s.seen[fp] = true
		}
	}
	return in, nil
}

func (f *mapFilter) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed && f.flaws.closeErrorsTwice {
		return errors.New("already closed")
	}
	f.closed = true
	return nil
}

func (f *mapFilter) Purge(ctx context.Context) error {
	if !f.flaws.purgeForgetsNot {
		f.set.mu.Lock()
		clear(f.set.seen)
		f.set.mu.Unlock()
	}
	return nil
}

// config returns a suite configuration over mapFilters with the given
// flaws; unshared gives every handle its own set.
func config(fl flaws, unshared bool) deduptest.Config {
	var mu sync.Mutex
	sets := map[*testing.T]*set{}
	return deduptest.Config{
		New: func(t *testing.T) dedup.Filter {
			mu.Lock()
			defer mu.Unlock()
			s := sets[t]
			if s == nil || unshared {
				s = &set{seen: map[dedup.Fingerprint]bool{}}
				sets[t] = s
			}
			f := &mapFilter{set: s, flaws: fl}
			t.Cleanup(func() { f.Close() })
			return f
		},
		Timeout: 2 * time.Second,
	}
}

func TestExactFilterPasses(t *testing.T) {
	deduptest.Run(t, config(flaws{}, false))
}

// brokenFilters maps a defect to the subtest that must catch it.
var brokenFilters = map[string]struct {
	flaws    flaws
	unshared bool
	caughtBy string
}{
	"unshared":            {unshared: true, caughtBy: "SharedAcrossHandles"},
	"unshared/concurrent": {unshared: true, caughtBy: "ConcurrentSameFingerprints"},
	"checkThenSet":        {flaws: flaws{checkThenSet: true}, caughtBy: "DuplicateInBatch"},
	"alwaysNew":           {flaws: flaws{alwaysNew: true}, caughtBy: "NewThenSeen"},
	"reversed":            {flaws: flaws{reversed: true}, caughtBy: "ResultOrder"},
	"openAfterClose":      {flaws: flaws{openAfterClose: true}, caughtBy: "Close"},
	"closeErrorsTwice":    {flaws: flaws{closeErrorsTwice: true}, caughtBy: "Close"},
	"purgeForgetsNot":     {flaws: flaws{purgeForgetsNot: true}, caughtBy: "Purge"},
	"hangsWhenCancelled":  {flaws: flaws{hangsWhenCancelled: true}, caughtBy: "CancelledContext"},
	"wrongCancelError":    {flaws: flaws{wrongCancelError: true}, caughtBy: "CancelledContext"},
	"containsAdds":        {flaws: flaws{containsAdds: true}, caughtBy: "ContainsChangesNothing"},
	"containsNothing":     {flaws: flaws{containsNothing: true}, caughtBy: "ContainsAfterAdd"},
}

// TestBrokenFilter runs the suite over one broken filter when the test
// binary is started by TestSuiteCatchesBrokenFilters.
func TestBrokenFilter(t *testing.T) {
	name := os.Getenv("DEDUPTEST_BROKEN")
	if name == "" {
		t.Skip("run by TestSuiteCatchesBrokenFilters")
	}
	b := brokenFilters[name]
	c := config(b.flaws, b.unshared)
	c.Timeout = 500 * time.Millisecond
	deduptest.Run(t, c)
}

// TestSuiteCatchesBrokenFilters checks that the suite can fail: each broken
// filter runs in a child process, which must fail in the expected subtest.
func TestSuiteCatchesBrokenFilters(t *testing.T) {
	if os.Getenv("DEDUPTEST_BROKEN") != "" {
		t.Skip("in a child process")
	}
	for name, b := range brokenFilters {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestBrokenFilter$", "-test.v")
			cmd.Env = append(os.Environ(), "DEDUPTEST_BROKEN="+name)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("child: %v, want a failing exit\n%s", err, out)
			}
			if want := "--- FAIL: TestBrokenFilter/" + b.caughtBy + " "; !strings.Contains(string(out), want) {
				t.Errorf("child output lacks %q\n%s", want, out)
			}
		})
	}
}
