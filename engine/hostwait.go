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

// HostHolders is a HostLimiter shared by several workers that knows
// whether other workers hold a host's slots. A worker whose page waits
// long for its host asks it before it says that another worker holds
// the host.
type HostHolders interface {
	HostLimiter
	// HeldElsewhere tells whether this worker's last ask for host's
	// slots found other workers holding some it wanted (and none has
	// been given it since).
	HeldElsewhere(host string) bool
}

// hostWaits says why pages wait long for their hosts' slots. A page that
// its host's pace holds waits up to PerHost times the host's delay
// (--delay, Crawl-delay, AutoThrottle's), which the crawl asked for (the
// limiters start a host's pages in the order they came); a longer wait
// is a back-off (a Retry-After, a retry's), or, with a shared limiter
// that leases hosts (HostHolders), another worker holding the host (a
// page handed out as this worker's lease lapsed waits for it, asking
// again every 400 ms at most, until the other gives the host back): the
// line says which. The zero value says nothing; newCrawler sets it.
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
	why := "a back-off holds the host (a Retry-After, a retry)"
	if h, ok := w.limiter.(HostHolders); ok && h.HeldElsewhere(host) {
		why = "another worker holds the host (a shared limiter) and has not given it back yet"
	}
	w.log.Warn("pages waited for their host's slot longer than its delay explains: "+why,
		"host", host, "waited", hostWaitSays, "delay", delay, "per_host", w.perHost, "pages", pages)
}
