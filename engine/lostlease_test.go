package engine

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/trawlhq/trawl/broker/memory"
)

// TestHeldBackLeasesLostAtOnce: a worker held up past its lease (or a
// Redis rolled back under it) finds, in one round of its lease keeper,
// the lease of every delivery held back in its full workbench lost, with
// no page in progress. It drops them, unfetched, and goes on: the broker
// hands their messages out again and each page is fetched once, and the
// crawl ends. Kept (before 582610d), they were fetched here and again
// where the broker handed them next (TestNATSThreeWorkers: 2 pages
// twice); dropped without waking the receiver (582610d), the worker
// waited for good on a workbench it believed full (TestRedisRolledBack
// hung in two clean-clone CI runs).
func TestHeldBackLeasesLostAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const concurrency, lease = 2, 3 * time.Second
		full := int64(readAheadFactor * concurrency)
		leaser := &refusingLeaser{HostLimiter: newPoliteness(politenessConfig{})}
		var bc *bubbleCrawl
		var fetches atomic.Int64
		held := make(chan struct{}) // closed once the workbench is full and leases stall
		// The twentieth fetch has the host refused: the receiver fills
		// the workbench with deliveries it cannot start, and waits.
		before := func(ctx context.Context, req *Request) {
			if fetches.Add(1) != 20 {
				return
			}
			leaser.refuse.Store(true)
			for give := time.Now().Add(time.Minute); bc.c.leases.inFlight() < full+1; {
				if time.Now().After(give) {
					t.Errorf("the workbench held %d deliveries after a minute, want it full (%d)", bc.c.leases.inFlight()-1, full)
					break
				}
				time.Sleep(10 * time.Millisecond) // polling an observable condition, in the bubble's time
			}
			bc.tb.stall.Store(true)
			close(held)
		}
		dropped := &logSignal{Handler: slog.DiscardHandler, match: "held back lost their lease", ch: make(chan struct{})}
		bc = newBubbleCrawl(t, true, nil, Config{Concurrency: concurrency, Lease: lease, Limiter: leaser, BeforeFetch: before,
			Logger: slog.New(dropped)})
		go func() {
			<-held
			// The pages in progress end: the workbench alone holds leases.
			for bc.c.leases.inFlight() != full {
				time.Sleep(10 * time.Millisecond)
			}
			// Held up past the lease (the memory broker's, for those not
			// extended to --lease yet): the broker gives the messages
			// back, and the keeper's next extension finds every lease lost.
			time.Sleep(memory.DefaultLease + time.Second)
			bc.tb.stall.Store(false)
			// The keeper's next round (within a third of the lease)
			// drops them; a worker that kept them starts them now.
			select {
			case <-dropped.ch:
			case <-time.After(2 * lease):
			}
			leaser.refuse.Store(false)
		}()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()
		start := time.Now()
		if err := bc.c.Run(ctx); err != nil {
			t.Fatalf("Run = %v after %v, want nil (the worker stuck on a workbench it took for full?)", err, time.Since(start))
		}
		if n := fetches.Load(); n < 20 {
			t.Fatalf("%d fetches: the workbench never filled, nothing was tested", n)
		}
		pages := []string{"/"}
		for i := 0; i < len(pages); i++ {
			pages = append(pages, treeLinks(pages[i])...)
		}
		for _, p := range pages {
			if n := bc.site.count(p); n != 1 {
				t.Errorf("%s fetched %d times, want once", p, n)
			}
		}
		if held := bc.c.leases.inFlight(); held != 0 {
			t.Errorf("%d deliveries still held after Run", held)
		}
	})
}

// logSignal is a slog.Handler that closes ch at the first record whose
// message contains match.
type logSignal struct {
	slog.Handler
	match string
	once  sync.Once
	ch    chan struct{}
}

func (h *logSignal) Handle(ctx context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.match) {
		h.once.Do(func() { close(h.ch) })
	}
	return h.Handler.Handle(ctx, r)
}

func (h *logSignal) Enabled(context.Context, slog.Level) bool { return true }
