package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// refusingLeaser is a HostLeaser that leases every host until refuse is
// set, then none, asking again a second later, as the Redis limiter does
// when its lease script fails (a Redis out of memory refuses the SET).
type refusingLeaser struct {
	HostLimiter
	refuse atomic.Bool
}

func (l *refusingLeaser) Lease(host string, active, waiting int, ready func()) bool {
	if !l.refuse.Load() {
		return true
	}
	time.AfterFunc(time.Second, ready)
	return false
}

// TestParkedWorkbenchStopsOnFailingWrites: a worker whose writes keep
// failing stops within FailureTimeout even when its receiver waits on a
// workbench full of deliveries for hosts it cannot lease (a Redis out of
// memory refuses both the writes and the host leases). The receiver
// waited there for a host to come back, woken every second by the
// leaser and waiting again, and never looked at the writes' streak: a
// worker on a Redis out of memory, its pages given back, ran on past
// --failure-timeout (found by hand: alive 12 s after the first refused
// write with --failure-timeout 10s, the receiver in nextItem).
func TestParkedWorkbenchStopsOnFailingWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 10 * time.Second
		leaser := &refusingLeaser{HostLimiter: newPoliteness(politenessConfig{})}
		var failing atomic.Bool
		const concurrency = 2
		var fetches atomic.Int64
		var bc *bubbleCrawl
		// The twentieth page (61 others queued), once fetched, finds the sink failing. Before its
		// fetch, the leases are refused, and the receiver, on the other
		// slot, fills the workbench with deliveries it cannot start: the
		// page waits for it (the workbench's and its own, in hand).
		before := func(ctx context.Context, req *Request) {
			if fetches.Add(1) != 20 {
				return
			}
			leaser.refuse.Store(true)
			for give := time.Now().Add(time.Minute); bc.c.leases.inFlight() < readAheadFactor*concurrency+1; {
				if time.Now().After(give) {
					t.Errorf("the workbench held %d deliveries after a minute, want it full (%d)", bc.c.leases.inFlight()-1, readAheadFactor*concurrency)
					break
				}
				time.Sleep(10 * time.Millisecond) // polling an observable condition, in the bubble's time
			}
			failing.Store(true)
		}
		bc = newBubbleCrawl(t, true, nil, Config{RetryBackoff: 100 * time.Millisecond, FailureTimeout: timeout,
			Concurrency: concurrency, Limiter: leaser, BeforeFetch: before})
		next := bc.c.cfg.Sink
		var refused sync.Once
		var firstRefused time.Time
		bc.c.cfg.Sink = sinkFunc(func(ctx context.Context, items []any) error {
			if failing.Load() {
				refused.Do(func() { firstRefused = time.Now() })
				return errors.New("OOM command not allowed when used memory > 'maxmemory'")
			}
			return next.Write(ctx, items)
		})
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()
		err := bc.c.Run(ctx)
		if firstRefused.IsZero() {
			t.Fatalf("Run = %v, and no write was refused: nothing was tested", err)
		}
		took := time.Since(firstRefused)
		if !errors.Is(err, ErrBackendFailing) {
			t.Fatalf("Run = %v %v after the first refused write, want ErrBackendFailing within FailureTimeout %v", err, took, timeout)
		}
		if took > timeout+holdRetryMax+time.Second {
			t.Errorf("Run gave up %v after the first refused write, want within FailureTimeout %v", took, timeout)
		}
		t.Logf("Run gave up %v after the first refused write", took)
		if held := bc.c.leases.inFlight(); held != 0 {
			t.Errorf("%d deliveries still held after Run", held)
		}
	})
}
