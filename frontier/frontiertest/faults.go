package frontiertest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/dedup"
)

// ErrDied is the error of a store call made by a worker that the suite
// killed (see Faults).
var ErrDied = errors.New("frontiertest: the worker died here")

// Mode is how a fault strikes the store call it hits.
type Mode int

// Modes.
const (
	// Before: the call fails without effect, and so does every later one
	// until Heal: the worker died before the call reached the store.
	Before Mode = iota + 1
	// After: the call takes effect, then fails, and so does every later
	// one until Heal: the worker died before it heard the answer.
	After
	// Partial: the first half of the call's batch takes effect, then it
	// fails, and so does every later one until Heal: a batch that is not
	// all or nothing (a pipeline, a Cluster) died half-way.
	Partial
	// Cancel: the expansion's context is cancelled, then the call and
	// every later one run as the store runs them on a cancelled context.
	Cancel
)

// String names the mode.
func (m Mode) String() string {
	return [...]string{"none", "before", "after", "partial", "cancel"}[m]
}

// Faults kills the worker that a frontier stands for at the k-th call it
// makes to its stores (Publish on the broker; Add and Contains on the
// filter), once armed. A harness that can wraps its stores with Broker
// and Filter; the suite arms it. Calls the suite makes to read the queue
// (Receive, Counts, settling) pass through untouched.
type Faults struct {
	mu     sync.Mutex
	armed  bool
	left   int // calls to let through before the fault
	mode   Mode
	cancel context.CancelFunc
	fired  bool
	dead   bool
	gate   *gate // Gather's, until it opens
}

// gate holds store calls until n arrived.
type gate struct {
	n, arrived int
	open       chan struct{}
}

// Gather makes the next n store calls, once made, wait for one another
// before they return, so that n workers expanding at once hear the
// stores' answers together whatever the scheduler does: an
// implementation that checks, then claims or publishes on what it heard,
// without excluding the others, is caught in the act. A correct
// implementation may hold the others back (a lock) while its call waits
// at the gate: the gate opens anyway after most.
func (f *Faults) Gather(n int, most time.Duration) {
	g := &gate{n: n, open: make(chan struct{})}
	f.mu.Lock()
	f.gate = g
	f.mu.Unlock()
	time.AfterFunc(most, func() { f.opened(g) })
}

// opened opens g if it is still f's gate.
func (f *Faults) opened(g *gate) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gate == g {
		f.gate = nil
		close(g.open)
	}
}

// gather waits at the gate, if there is one.
func (f *Faults) gather() {
	f.mu.Lock()
	g := f.gate
	if g == nil {
		f.mu.Unlock()
		return
	}
	g.arrived++
	full := g.arrived == g.n
	f.mu.Unlock()
	if full {
		f.opened(g)
	}
	<-g.open
}

// Arm makes the k-th store call from now (0: the next) fail in mode m;
// cancel is called for Cancel.
func (f *Faults) Arm(k int, m Mode, cancel context.CancelFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed, f.left, f.mode, f.cancel, f.fired, f.dead = true, k, m, cancel, false, false
}

// Heal disarms f and brings the worker back: later calls run normally.
// It reports whether the fault fired.
func (f *Faults) Heal() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	fired := f.fired
	f.armed, f.fired, f.dead = false, false, false
	return fired
}

// enter is called before a store call: the mode it strikes in, or 0 for
// a call that runs normally.
func (f *Faults) enter() Mode {
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.dead:
		return Before
	case !f.armed:
		return 0
	case f.left > 0:
		f.left--
		return 0
	}
	f.armed, f.fired = false, true
	if f.mode == Cancel {
		f.cancel()
		return 0
	}
	f.dead = true
	return f.mode
}

// Broker returns b with its Publish going through f.
func (f *Faults) Broker(b broker.Broker) broker.Broker {
	return &faultyBroker{Broker: b, f: f}
}

type faultyBroker struct {
	broker.Broker
	f *Faults
}

func (b *faultyBroker) Publish(ctx context.Context, queue string, msgs ...broker.Message) error {
	switch b.f.enter() {
	case Before:
		return ErrDied
	case After:
		if err := b.Broker.Publish(ctx, queue, msgs...); err != nil {
			return err
		}
		return ErrDied
	case Partial:
		if err := b.Broker.Publish(ctx, queue, msgs[:len(msgs)/2]...); err != nil {
			return err
		}
		return ErrDied
	}
	defer b.f.gather()
	return b.Broker.Publish(ctx, queue, msgs...)
}

// Filter returns fl with its Add (and Contains, when fl is a
// dedup.Checker, as the result then is) going through f.
func (f *Faults) Filter(fl dedup.Filter) dedup.Filter {
	ff := &faultyFilter{Filter: fl, f: f}
	if c, ok := fl.(dedup.Checker); ok {
		return &checkingFilter{faultyFilter: ff, checker: c}
	}
	return ff
}

type faultyFilter struct {
	dedup.Filter
	f *Faults
}

func (ff *faultyFilter) Add(ctx context.Context, fps ...dedup.Fingerprint) ([]bool, error) {
	switch ff.f.enter() {
	case Before:
		return nil, ErrDied
	case After:
		if _, err := ff.Filter.Add(ctx, fps...); err != nil {
			return nil, err
		}
		return nil, ErrDied
	case Partial:
		if _, err := ff.Filter.Add(ctx, fps[:len(fps)/2]...); err != nil {
			return nil, err
		}
		return nil, ErrDied
	}
	defer ff.f.gather()
	return ff.Filter.Add(ctx, fps...)
}

type checkingFilter struct {
	*faultyFilter
	checker dedup.Checker
}

func (cf *checkingFilter) Contains(ctx context.Context, fps ...dedup.Fingerprint) ([]bool, error) {
	if cf.f.enter() != 0 {
		return nil, ErrDied // a read has no effect to keep
	}
	defer cf.f.gather()
	return cf.checker.Contains(ctx, fps...)
}
