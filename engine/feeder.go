package engine

import (
	"context"
	"log/slog"
	"time"
)

// feeder runs beside the receiver (see receive) until its context ends:
// it moves start URLs into the frontier when the receiver waits on it
// (hungry), at once while start URLs remain and at most every
// startsCooldown once they ran out, and every pollInterval it looks at
// the crawl's state and, while nothing is in flight here, at whether the
// crawl is done; done for IdleTimeout, it ends the receiver with
// errCrawlDone. A start source of the wrong type (ErrStartsType) or a
// crawl whose state was lost ends it with that error. Its state is its
// goroutine's alone.
type feeder struct {
	// What the feeder asks of its crawler.
	takeStarts func(context.Context) (int, error) // a batch of start URLs into the frontier (feedStarts)
	busy       func() bool                        // deliveries in hand here
	// idle reports whether nothing is queued or in flight anywhere, and
	// how many requests other workers hold when none is ready for this
	// one; on a failure to count, the queue concerned and the error.
	idle      func(context.Context) (bool, int64, string, error)
	watch     func(ctx context.Context, deep bool) error // the crawl's loss, looked for at the servers when deep
	verify    func(context.Context) error                // the crawl's state, before it is found done
	pollPause func(context.Context)
	timeout   time.Duration // Config.IdleTimeout; 0: never done
	lease     time.Duration // Config.Lease, said by waitOthers
	log       *slog.Logger

	startsLeft  bool      // the last take took start URLs
	startsEmpty time.Time // when a take last found none
	idleSince   time.Time // zero: not idle
	ticks       int
	countWarned time.Time // when a failure to count was last said
	othersSince time.Time // since when only other workers hold requests (zero: not so)
	othersSaid  bool      // that wait was said
}

// run feeds until ctx ends, or until the crawl ends: it calls finish with
// why (errCrawlDone when the crawl is done).
func (f *feeder) run(ctx context.Context, hungry <-chan struct{}, finish context.CancelCauseFunc) {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		var end error
		select {
		case <-ctx.Done():
			return
		case <-hungry:
			_, end = f.take(ctx)
		case <-tick.C:
			end = f.tick(ctx)
		}
		if end != nil {
			finish(end)
			return
		}
	}
}

// take moves start URLs into the frontier unless they ran out less than
// startsCooldown ago, and reports whether it took some. The error is one
// that ends the crawl.
func (f *feeder) take(ctx context.Context) (bool, error) {
	if !f.startsLeft && time.Since(f.startsEmpty) < startsCooldown {
		return false, nil
	}
	took, err := f.takeStarts(ctx)
	f.startsLeft = took > 0
	if f.startsLeft {
		f.idleSince = time.Time{}
	} else {
		f.startsEmpty = time.Now()
	}
	return f.startsLeft, err
}

// tick is the feeder's look every pollInterval: at the crawl's state
// (at the servers every stateEvery ticks), at a pause, at start URLs
// while nothing is in flight here, then at whether the crawl is done.
func (f *feeder) tick(ctx context.Context) error {
	f.ticks++
	if err := f.watch(ctx, f.ticks%stateEvery == 0); err != nil {
		return err
	}
	f.pollPause(ctx)
	if f.busy() {
		f.idleSince = time.Time{}
		return nil
	}
	if took, err := f.take(ctx); took || err != nil {
		return err
	}
	return f.done(ctx)
}

// done returns errCrawlDone once the crawl was idle for the timeout,
// and its state checked (see verifyState).
func (f *feeder) done(ctx context.Context) error {
	if f.timeout == 0 {
		return nil
	}
	idle, others, queue, err := f.idle(ctx)
	if err != nil {
		f.warnCounts(ctx, queue, err)
	}
	f.waitOthers(others)
	switch {
	case !idle:
		f.idleSince = time.Time{}
		return nil
	case f.idleSince.IsZero():
		f.idleSince = time.Now()
		return nil
	case time.Since(f.idleSince) < f.timeout:
		return nil
	}
	// An empty frontier is done only if it is the crawl's.
	if err := f.verify(ctx); err != nil {
		return err
	}
	f.log.Info("crawl idle; done", "idle", f.timeout)
	return errCrawlDone
}

// othersWait is how long a worker waits for requests other workers hold,
// with none ready for it, before it says why it waits.
const othersWait = 5 * time.Second

// waitOthers says, once per wait longer than othersWait, that this
// worker, which holds nothing, waits for the n requests other workers
// hold (n > 0): the crawl is not done while they may come back, which
// those of a worker that died do when their lease ends.
func (f *feeder) waitOthers(n int64) {
	switch {
	case n == 0:
		f.othersSince, f.othersSaid = time.Time{}, false
	case f.othersSince.IsZero():
		f.othersSince = time.Now()
	case !f.othersSaid && time.Since(f.othersSince) >= othersWait:
		f.othersSaid = true
		f.log.Warn("waiting for requests other workers hold: the crawl is not done until they are settled, "+
			"and a worker that stopped without giving them back holds them until their lease ends",
			"in_flight", n, "lease", f.lease)
	}
}

// countWarnEvery bounds the warnings of warnCounts.
const countWarnEvery = 10 * time.Second

// warnCounts says, at once and then every countWarnEvery, that the crawl
// cannot be found done because counting a queue fails: a worker never
// waits in silence.
func (f *feeder) warnCounts(ctx context.Context, queue string, err error) {
	if ctx.Err() != nil {
		return
	}
	if !f.countWarned.IsZero() && time.Since(f.countWarned) < countWarnEvery {
		return
	}
	f.countWarned = time.Now()
	f.log.Warn("cannot tell whether the crawl is done: counting a queue failed; still trying", "queue", queue, "err", err)
}
