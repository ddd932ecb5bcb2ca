package engine

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/trawlhq/trawl/internal/syncbuf"
)

// heldLimiter is a HostLimiter whose Acquire waits until its test lets it
// go (or ctx ends), with a fixed delay per host.
type heldLimiter struct {
	HostLimiter
	delay time.Duration
	let   chan struct{}
}

func (l *heldLimiter) Acquire(ctx context.Context, host string) (func(), error) {
	select {
	case <-l.let:
		return func() {}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *heldLimiter) Delay(context.Context, string) (time.Duration, error) { return l.delay, nil }

// TestHostWaitSaysWhy: a page that waits for its host's slot longer than
// hostWaitSays, more than PerHost times the host's delay explains, is
// said on the log (a lease another worker holds, a back-off), with its
// host, once per hostWaitEvery with the count of such pages; a wait its
// host's delay explains, and a shorter one, say nothing.
func TestHostWaitSaysWhy(t *testing.T) {
	const why = "longer than its delay explains"
	synctest.Test(t, func(t *testing.T) {
		var logs syncbuf.Buffer
		l := &heldLimiter{delay: 100 * time.Millisecond, let: make(chan struct{})}
		w := &hostWaits{limiter: l, perHost: 8, log: slog.New(slog.NewTextHandler(&logs, nil))}
		page := func() {
			go func() {
				if _, err := w.acquire(t.Context(), "slow.example"); err != nil && t.Context().Err() == nil {
					t.Errorf("acquire: %v", err)
				}
			}()
		}

		page()
		time.Sleep(hostWaitSays - time.Millisecond)
		synctest.Wait()
		if logs.String() != "" {
			t.Fatalf("said before %v:\n%s", hostWaitSays, logs.String())
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if n := strings.Count(logs.String(), why); n != 1 || !strings.Contains(logs.String(), "host=slow.example") {
			t.Fatalf("after %v of waiting the log says why %d times, want once, naming the host:\n%s", hostWaitSays, n, logs.String())
		}
		l.let <- struct{}{}

		page() // within hostWaitEvery of the line: counted, not said
		time.Sleep(hostWaitSays)
		synctest.Wait()
		l.let <- struct{}{}
		time.Sleep(hostWaitEvery)
		page()
		time.Sleep(hostWaitSays)
		synctest.Wait()
		if n := strings.Count(logs.String(), why); n != 2 || !strings.Contains(logs.String(), "pages=2") {
			t.Fatalf("two more long waits, a minute apart: the log says why %d times, want twice, the second counting 2 pages:\n%s", n, logs.String())
		}
		l.let <- struct{}{}

		// A delay that explains the wait: 8 pages at 400ms, the last
		// waits 3.2s.
		l.delay = 400 * time.Millisecond
		time.Sleep(hostWaitEvery)
		page()
		time.Sleep(2 * hostWaitSays)
		synctest.Wait()
		if n := strings.Count(logs.String(), why); n != 2 {
			t.Errorf("a wait the host's delay explains was said:\n%s", logs.String())
		}
		l.let <- struct{}{}
		synctest.Wait()
	})
}

// holderLimiter is a heldLimiter that says whether another worker holds
// its hosts (HostHolders).
type holderLimiter struct {
	*heldLimiter
	elsewhere bool
}

func (l *holderLimiter) HeldElsewhere(string) bool { return l.elsewhere }

// TestHostWaitSaysWhoHolds: the line says another worker holds the host
// only when the limiter says one does (HostHolders); else, and with a
// limiter of this worker alone, it names a back-off. (A single Redis
// worker with --delay 200ms said another worker held its host.)
func TestHostWaitSaysWhoHolds(t *testing.T) {
	const other, backoff = "another worker", "a back-off holds the host"
	for _, tc := range []struct {
		name      string
		limiter   func(*heldLimiter) HostLimiter
		elsewhere bool
	}{
		{"local", func(l *heldLimiter) HostLimiter { return l }, false},
		{"shared, held here", func(l *heldLimiter) HostLimiter { return &holderLimiter{l, false} }, false},
		{"shared, held elsewhere", func(l *heldLimiter) HostLimiter { return &holderLimiter{l, true} }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var logs syncbuf.Buffer
				l := &heldLimiter{delay: 100 * time.Millisecond, let: make(chan struct{})}
				w := &hostWaits{limiter: tc.limiter(l), perHost: 8, log: slog.New(slog.NewTextHandler(&logs, nil))}
				go func() {
					if _, err := w.acquire(t.Context(), "slow.example"); err != nil && t.Context().Err() == nil {
						t.Errorf("acquire: %v", err)
					}
				}()
				time.Sleep(hostWaitSays)
				synctest.Wait()
				said := logs.String()
				if strings.Contains(said, other) != tc.elsewhere || strings.Contains(said, backoff) == tc.elsewhere {
					t.Errorf("another worker holds the host: %v; the line says:\n%s", tc.elsewhere, said)
				}
				l.let <- struct{}{}
				synctest.Wait()
			})
		})
	}
}
