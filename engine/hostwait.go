package engine

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// hostWaitSays is how long a page waits for its host's slot (in
// HostLimiter.Acquire) before the worker says why, unless the host's pace
// explains the wait.
const hostWaitSays = 3 * time.Second

// hostWaitEvery bounds what hostWaits says to one line per interval; the
// line counts the pages that waited long since the last one.
const hostWaitEvery = time.Minute

// hostWaits says why pages wait long for their hosts' slots. A page that
// its host's pace holds waits up to PerHost times the host's delay
// (--delay, Crawl-delay, AutoThrottle's), which the crawl asked for; a
// longer wait is a back-off (a Retry-After, a retry's), or, with a shared
// limiter that leases hosts, another worker holding the host (a page
// handed out as this worker's lease lapsed waits for it, asking again
// every 400 ms at most, until the other gives the host back). The zero
// value says nothing; newCrawler sets it.
type hostWaits struct {
	limiter HostLimiter
	perHost int
	log     *slog.Logger

	mu     sync.Mutex
	said   time.Time // when the last line was said
	unsaid int       // pages that waited long since
}

// acquire is the limiter's Acquire of host, saying why if it takes longer
// than hostWaitSays.
func (w *hostWaits) acquire(ctx context.Context, host string) (func(), error) {
	t := time.AfterFunc(hostWaitSays, func() { w.waited(ctx, host) })
	defer t.Stop()
	return w.limiter.Acquire(ctx, host)
}

// waited notes a page still waiting for host's slot after hostWaitSays,
// and says why unless the host's pace explains it or a line was said
// within hostWaitEvery.
func (w *hostWaits) waited(ctx context.Context, host string) {
	dctx, cancel := context.WithTimeout(ctx, time.Second)
	delay, err := w.limiter.Delay(dctx, host)
	cancel()
	if ctx.Err() != nil || err == nil && delay*time.Duration(w.perHost) >= hostWaitSays {
		return
	}
	w.mu.Lock()
	w.unsaid++
	now := time.Now()
	if !w.said.IsZero() && now.Sub(w.said) < hostWaitEvery {
		w.mu.Unlock()
		return
	}
	pages := w.unsaid
	w.said, w.unsaid = now, 0
	w.mu.Unlock()
	w.log.Warn("pages waited for their host's slot longer than its delay explains: a back-off holds the host "+
		"(a Retry-After, a retry), or another worker holds it (a shared limiter) and has not given it back yet",
		"host", host, "waited", hostWaitSays, "delay", delay, "per_host", w.perHost, "pages", pages)
}
