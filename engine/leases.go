package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trawlhq/trawl/broker"
)

// leaseKeeper holds the deliveries this worker has in hand and keeps
// their leases extended (keep) until they are settled: those taken from
// the frontier (the workbench's held-back ones and those being
// processed) and those with the writer (see hold). It counts them, for
// the feeder: a worker with deliveries in hand is not idle. Its zero
// value is ready to use.
//
// Plain maps under a mutex: each page takes, holds, releases and is done
// once, and sync.Map's stores and deletes allocated a node each.
type leaseKeeper struct {
	mu    sync.Mutex
	taken map[broker.Delivery]struct{} // taken, not yet done
	held  map[broker.Delivery]struct{} // with the writer, not yet released
	n     atomic.Int64                 // taken plus held (a delivery both taken and held counts twice)
	// lost, if set (before keep runs), is given the deliveries whose
	// extension found their lease lost, after each round (see keep).
	lost func([]broker.Delivery)
}

// add puts d in *m, made on first use; k.mu held.
func add(m *map[broker.Delivery]struct{}, d broker.Delivery) {
	if *m == nil {
		*m = make(map[broker.Delivery]struct{})
	}
	(*m)[d] = struct{}{}
}

// take holds d, taken from the frontier, until done.
func (k *leaseKeeper) take(d broker.Delivery) {
	k.n.Add(1)
	k.mu.Lock()
	add(&k.taken, d)
	k.mu.Unlock()
}

// done ends take.
func (k *leaseKeeper) done(d broker.Delivery) {
	k.mu.Lock()
	delete(k.taken, d)
	k.mu.Unlock()
	k.n.Add(-1)
}

// hold holds d, handed to the writer, until release.
func (k *leaseKeeper) hold(d broker.Delivery) {
	k.n.Add(1)
	k.mu.Lock()
	add(&k.held, d)
	k.mu.Unlock()
}

// release ends hold.
func (k *leaseKeeper) release(d broker.Delivery) {
	k.mu.Lock()
	delete(k.held, d)
	k.mu.Unlock()
	k.n.Add(-1)
}

// inFlight counts the deliveries taken and held (one both taken and held
// counts twice): 0 when this worker has none in hand.
func (k *leaseKeeper) inFlight() int64 { return k.n.Load() }

// defaultLease is the lease assumed where Config.Lease is unset.
const defaultLease = 30 * time.Second

// keep extends the leases of the deliveries taken and held, by lease
// (defaultLease if not above 0) every third of it, until done is closed:
// in one call where the broker is a broker.BatchExtender (batch, nil if
// not), else one call per delivery (extendAll). A delivery both taken
// and held is extended once. A failed extension is logged, unless the
// delivery was settled meanwhile (broker.ErrSettled); those whose lease
// is lost (broker.ErrLeaseLost: the broker gives them to another worker)
// go to k.lost after the round, if it is set.
func (k *leaseKeeper) keep(ctx context.Context, lease time.Duration, batch broker.BatchExtender, done <-chan struct{}, log *slog.Logger) {
	if lease <= 0 {
		lease = defaultLease
	}
	t := time.NewTicker(lease / 3)
	defer t.Stop()
	var lost []broker.Delivery // this round's, for k.lost
	var errs []error           // this round's failures, logged in one line after it
	failures := 0
	failed := func(d broker.Delivery, err error) {
		if errors.Is(err, broker.ErrLeaseLost) && k.lost != nil {
			lost = append(lost, d)
		}
		if !errors.Is(err, broker.ErrSettled) {
			failures++
			if len(errs) < loggedFailures {
				errs = append(errs, err)
			}
		}
	}
	var ds []broker.Delivery
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		ds = ds[:0]
		k.mu.Lock()
		for d := range k.taken {
			ds = append(ds, d)
		}
		for d := range k.held {
			if _, taken := k.taken[d]; !taken {
				ds = append(ds, d)
			}
		}
		k.mu.Unlock()
		if len(ds) == 0 {
			continue
		}
		lost, errs, failures = lost[:0], errs[:0], 0
		if batch == nil {
			extendAll(ctx, ds, lease, failed)
		} else {
			for i, err := range batch.ExtendBatch(ctx, lease, ds...) {
				if err != nil {
					failed(ds[i], err)
				}
			}
		}
		if failures > 0 {
			// One line a round, not one a delivery: a server that restarted
			// fails every lease held at once (hundreds of lines).
			log.Warn("lease extension failed", "failed", failures, "of", len(ds), "err", errors.Join(errs...))
		}
		if len(lost) > 0 {
			k.lost(lost)
		}
	}
}

// loggedFailures is how many of a round's failed extensions the keeper's
// one line a round quotes (it counts them all).
const loggedFailures = 3

// extendParallel is how many lease extensions keep has in flight at
// once: a worker may hold thousands of deliveries (the workbench holds
// back up to 16 x Concurrency), and one after the other, a round trip
// each, their extensions could outlast the leases on a loaded machine.
const extendParallel = 32

// extendAll extends every lease of ds by lease, extendParallel at a time,
// and reports each failure to failed (from several goroutines, one at a
// time).
func extendAll(ctx context.Context, ds []broker.Delivery, lease time.Duration, failed func(broker.Delivery, error)) {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		next = make(chan broker.Delivery)
	)
	for range min(extendParallel, len(ds)) {
		wg.Go(func() {
			for e := range next {
				if err := e.Extend(ctx, lease); err != nil {
					mu.Lock()
					failed(e, err)
					mu.Unlock()
				}
			}
		})
	}
	for _, e := range ds {
		next <- e
	}
	close(next)
	wg.Wait()
}

// dropLost takes out of the workbench the deliveries held back there
// whose lease the keeper found lost: the broker gives them to another
// worker (or to this one again), and fetching them here as well would
// fetch their pages twice. They are not settled: settling a lost
// delivery could settle its next one.
//
// A server that restarted is no exception. Redis rolled back to a
// snapshot has the message of a lease taken since back where the
// snapshot found it: ready, or leased as it was then (given back when
// that lease runs out), or, published since, not at all (its parent, whose
// acknowledgement was rolled back or is withheld, see stateGen, is
// processed again and publishes it again). The lease's record is gone,
// so its extension, acknowledgement and nack all find it lost and
// change nothing. Kept, such a page was fetched here and again from
// the ready set. RabbitMQ requeues a closed channel's deliveries, and
// JetStream delivers again what is not acknowledged within AckWait.
func (c *Crawler) dropLost(bench *workbench, ds []broker.Delivery) {
	lost := make(map[broker.Delivery]bool, len(ds))
	for _, d := range ds {
		lost[d] = true
	}
	its := bench.drop(func(d broker.Delivery) bool { return lost[d] })
	for _, it := range its {
		c.leases.done(it.d)
	}
	if len(its) > 0 {
		c.log.Warn(fmt.Sprintf("%d pages held back lost their lease before they started (this worker was held up past its lease, or the broker's server restarted): "+
			"dropped here, the broker hands them out again", len(its)),
			"pages", len(its))
	}
}
