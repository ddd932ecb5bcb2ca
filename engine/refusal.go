package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trawlhq/trawl/broker"
)

// MaxDeferrals is how often a request is given back untried (see
// Request.Deferrals) before it is dead-lettered with the reason: enough
// for a correctly configured worker to take a page that a misconfigured
// one refused, few enough that a link to a private address in a public
// crawl ends in the dead letters, visible and requeueable, within seconds.
const MaxDeferrals = 10

const (
	// refusalStreak is how many refusals in a row, with no page fetched in
	// between, make a worker back off before taking more work: a few
	// links to private addresses in a public crawl do not slow it down.
	refusalStreak = 4
	// refusalPauseMax caps the pause of a worker that refuses everything.
	refusalPauseMax = 2 * time.Second
	// maxRefusedHosts bounds the hosts whose refusal was logged at Error.
	maxRefusedHosts = 10_000
)

// refusals tracks this worker's refusals that depend on its own
// configuration (ErrLocalRefusal), to say so loudly and to back off.
type refusals struct {
	streak   atomic.Int64 // refusals since the last page this worker fetched
	hosts    sync.Map     // host -> struct{}: refusals logged at Error
	nhosts   atomic.Int64
	pausedAt atomic.Int64 // unix nanoseconds of the last back-off logged
}

// refuse handles a request this worker's address guard refused, asked
// at asked or later. When the worker's settings are the crawl's (stored
// with it, see Settings), every worker would refuse it alike: the page
// fails, once, as a forbidden address; unless the crawl has come to trust
// the host since asked (a worker that gave it as a start URL joined after
// this one: see refreshTrust), and the request is given back, to be
// fetched. Otherwise the refusal is this worker's own: the request is
// given back for another worker (or dead-lettered past MaxDeferrals),
// never settled as done.
func (c *Crawler) refuse(ctx context.Context, req *Request, u *url.URL, asked time.Time, err error) action {
	if c.member.isShared() {
		if c.refreshTrust(ctx, asked, u) {
			c.log.Info("the crawl trusts this host now (a worker that seeded it joined after this one); fetching it",
				"host", u.Host)
			return giveBack()
		}
		// The guard is the crawl's: every worker would refuse it alike,
		// so the page fails here, once, as a forbidden address.
		c.fail(ErrorForbiddenAddress, err)
		c.log.Info("address refused by the crawl's guard", "url", Redact(req.URL), "err", redactErr(err))
		return ack()
	}
	c.stats.Inc(StatRefused)
	c.guards.refused.streak.Add(1)
	if c.guards.refused.nhosts.Load() < maxRefusedHosts {
		if _, seen := c.guards.refused.hosts.LoadOrStore(u.Host, struct{}{}); !seen {
			c.guards.refused.nhosts.Add(1)
			c.log.Error("this worker's address guard refuses a host; its pages go back to the queue for "+
				"other workers. Run this worker with --allow-private (or give the host as a start URL) to crawl it",
				"host", u.Host, "err", redactErr(err))
		}
	}
	req.Deferrals++
	if req.Deferrals > MaxDeferrals {
		c.fail(ErrorForbiddenAddress, err)
		return reject(fmt.Sprintf("refused %d times by a worker's address guard (%v); "+
			"run a worker with --allow-private and requeue it if the address is meant to be crawled",
			req.Deferrals, redactErr(err)))
	}
	return giveBack()
}

// robotsDown handles a request whose host's robots.txt is unreachable:
// the host is paused until the file is asked for again, and the request is
// retried then (a nack with that delay, counted as a retry: past
// MaxRetries it is dead-lettered with the reason). It is not fetched
// meanwhile, not dropped, and not counted as forbidden.
func (c *Crawler) robotsDown(req *Request, prior int, u *url.URL, err error) action {
	c.stats.Inc(StatRobotsUnavailable)
	var wait time.Duration
	var ru *RobotsUnavailableError
	if errors.As(err, &ru) {
		c.limiter.Backoff(u.Host, ru.Until)
		wait = max(time.Until(ru.Until), time.Millisecond)
	}
	return c.retry(req, prior, err, wait)
}

// refusalPause makes a worker whose recent requests were all refused by
// its own configuration wait before it takes more work, saying so at most
// every 10 seconds, so that other workers take the work and this one does
// not spin. It returns false if ctx ended.
func (c *Crawler) refusalPause(ctx context.Context) bool {
	n := c.guards.refused.streak.Load()
	if n < refusalStreak {
		return true
	}
	d := min(time.Duration(n-refusalStreak+1)*100*time.Millisecond, refusalPauseMax)
	now := time.Now()
	if last := c.guards.refused.pausedAt.Load(); now.UnixNano()-last > int64(10*time.Second) &&
		c.guards.refused.pausedAt.CompareAndSwap(last, now.UnixNano()) {
		c.log.Warn("every request this worker took lately was refused by its address guard; "+
			"backing off so that other workers take them (run it with --allow-private to crawl private addresses)",
			"refused_in_a_row", n, "pause", d)
	}
	return sleep(ctx, d)
}

// trustKey is the Metadata key that says the crawl trusts h, a host or
// "host:port" as TrustedAddr writes it (normalized). Every worker that
// joins creates one per trusted host of its own (see publishTrust): keys
// created, never rewritten, so that workers joining at once cannot lose
// each other's, as they could in the stored Settings (read, merged, set).
func trustKey(h string) string { return "trusted " + h }

// normalizeTrusted writes a trusted host ("host" or "host:port") as
// trustKey expects it.
func normalizeTrusted(h string) string {
	if _, port, err := net.SplitHostPort(h); err == nil && port != "" {
		return net.JoinHostPort(normalizeHost(h), port)
	}
	return normalizeHost(h)
}

// publishTrust records with the crawl, in m, that it trusts hosts.
func publishTrust(ctx context.Context, m broker.Metadata, crawl string, hosts []string) error {
	for _, h := range hosts {
		err := m.CreateMeta(ctx, crawl, trustKey(normalizeTrusted(h)), []byte(h))
		if err != nil && !errors.Is(err, broker.ErrExists) {
			return fmt.Errorf("crawl %q: store trusted host %q: %w", crawl, h, err)
		}
	}
	return nil
}

// refreshTrust asks the crawl whether it trusts u's host (or its host and
// port) now, and trusts it here if so. It reports whether this worker's
// trusted hosts grew after asked (when the refused request was asked
// about) and now include u's: then the request is worth asking again
// (and only then: a request refused for another address, a redirect's,
// cannot come back forever, for each time takes a host more). Trusted
// hosts are the one setting that grows after a worker joined: each worker
// that joins adds its start URLs' hosts, so a worker that joined before
// the one that seeded a private address (a test site on loopback) would
// refuse its pages. A refusal is rare where the crawl does not trust the
// address (a link to a private address in a public crawl): two reads of
// the crawl's metadata per refusal are cheap.
func (c *Crawler) refreshTrust(ctx context.Context, asked time.Time, u *url.URL) bool {
	m := c.metadata()
	if m == nil {
		return false
	}
	host := normalizeHost(u.Hostname())
	for _, h := range []string{net.JoinHostPort(host, defaultPort(u)), host} {
		if c.kit.fetcher.guard.trusts(h) {
			continue
		}
		_, err := m.GetMeta(ctx, c.cfg.Name, trustKey(h))
		if errors.Is(err, broker.ErrNotFound) {
			continue
		}
		if err != nil {
			c.log.Debug("asking the crawl whether it trusts a host failed", "host", h, "err", err)
			return false
		}
		c.kit.fetcher.Trust(h)
		c.member.trustGrown()
	}
	if !c.member.trustGrewSince(asked) || !c.kit.fetcher.guard.isTrusted(host, defaultPort(u)) {
		return false
	}
	if c.kit.robots != nil {
		// A refusal cached while the host was not trusted.
		c.kit.robots.forgetRefusals()
	}
	return true
}
