package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/temoto/robotstxt"
)

const (
	// robotsErrorTTL is how long a refusal of this worker's address guard
	// is cached.
	robotsErrorTTL = time.Minute
	// robotsRetryMin and robotsRetryMax bound the back-off between fetches
	// of an unreachable robots.txt (5xx or a network error): it doubles
	// from the first to the second while the file stays unreachable.
	robotsRetryMin = time.Second
	robotsRetryMax = 5 * time.Minute
	// robotsMaxSize is how much of a robots.txt is parsed (RFC 9309 asks
	// for at least 500 KiB); the rest is ignored, not a failure.
	robotsMaxSize = 500 << 10
	// robotsMaxRedirects is how many redirects of /robots.txt are followed.
	robotsMaxRedirects = 5
	// maxCrawlDelay caps the Crawl-delay a robots.txt can impose.
	maxCrawlDelay = time.Minute
)

// robotsCache is a cache of robots.txt files, one per scheme and host, parsed with
// github.com/temoto/robotstxt. It is safe for concurrent use.
//
// What a robots.txt fetch means, after RFC 9309:
//   - 2xx: the file's rules for the agent, cached for the TTL. Only its
//     first 500 KiB are parsed (a longer file is cut at its last line
//     break within them). A file the parser rejects allows everything
//     (cached for the TTL, logged).
//   - 4xx: no robots.txt: everything is allowed, cached for the TTL.
//   - 5xx or a transient network error (see Retryable): the file is
//     unreachable, and everything is disallowed until it can be fetched:
//     Allowed returns a *RobotsUnavailableError saying until when; the
//     file is asked for again then, with a back-off doubling from 1s to 5
//     minutes. Other fetch errors (a name that does not exist, a bad
//     certificate) allow everything for the TTL: the pages fail alike.
//   - A refusal of this worker's address guard: Allowed returns an error
//     wrapping ErrLocalRefusal (cached for a minute); another worker may
//     be allowed to fetch the host.
//   - 3xx: the redirect is followed, up to 5 hops, while it stays on the
//     same host name (scheme and port may change). A redirect to another
//     host, or too many hops, counts as no robots.txt (allow, TTL).
//
// The cache forgets expired entries when it has doubled in size since its
// last sweep, so it holds about twice the hosts asked about within one TTL.
// A host costs its key (its host[:port], the scheme's map chosen) and 16
// bytes beside it in a map (about 80 bytes), and more only for what its
// file says beyond "everything allowed": a
// file with no Disallow line and no Crawl-delay keeps no parsed rules.
//
// With a shared store (RobotsStore: the crawl's Redis), a file fetched
// by one worker is kept there for the TTL and read by the others, so a
// host's robots.txt is fetched once per crawl, not once per worker. Only
// what holds for every worker is shared: a file (2xx) and the answers
// that allow everything; an unreachable file and this worker's address
// guard's refusals are not.
type robotsCache struct {
	fetcher *httpFetcher
	shared  RobotsStore // nil: this worker's cache alone
	agent   string      // product token matched against User-agent lines
	ttl     time.Duration
	now     func() time.Time
	epoch   time.Time // answers expire at a duration since this
	log     *slog.Logger

	mu      sync.Mutex
	known   [2]map[string]robotsAnswer // by scheme (see schemeIndex); key: lower-case host[:port]
	pending [2]map[string]*robotsFetch // the fetches under way, one per host
	sweepAt int
}

// robotsAnswer is what the cache knows of one host, kept by value: a
// host whose every path is allowed costs no more than these 16 bytes
// beside its key.
type robotsAnswer struct {
	rules   *robotsRules  // nil: everything allowed, no Crawl-delay, no sitemaps
	expires time.Duration // since the cache's epoch
}

// failures is how many fetches in a row found a's file unreachable.
func (a robotsAnswer) failures() int {
	if a.rules == nil {
		return 0
	}
	return a.rules.failures
}

// robotsRules is what an answer says beyond "everything allowed".
type robotsRules struct {
	group    *robotstxt.Group // nil: every path allowed, no Crawl-delay
	sitemaps []string         // the file's Sitemap: lines
	refused  error            // the address guard refused the host (wraps ErrLocalRefusal)
	down     error            // unreachable (5xx, network error): disallow until expires
	failures int              // consecutive fetches that found the file unreachable
}

// schemeIndex is the index of scheme's maps in a robotsCache: a host's
// key is its host[:port] alone, which costs no string built per page.
func schemeIndex(scheme string) int {
	if scheme == "https" {
		return 1
	}
	return 0
}

// robotsFetch is a fetch of a host's robots.txt under way: the callers
// who asked meanwhile wait for done.
type robotsFetch struct {
	done     chan struct{} // closed when the fetch finished
	answer   robotsAnswer  // set before done is closed
	failures int           // the host's answer's before this fetch
	failed   bool          // the fetching caller's context ended: callers try again
}

// RobotsStore keeps robots.txt files for every worker of a crawl: a
// HostLimiter shared by the crawl's workers may implement it (the Redis
// one does), and the engine then asks it before it fetches a host's
// robots.txt and gives it what it fetched.
type RobotsStore interface {
	// Robots returns the stored file of key (scheme://host[:port]),
	// empty for a host whose every path is allowed; ok is false when
	// none is stored.
	Robots(ctx context.Context, key string) (file []byte, ok bool, err error)
	// StoreRobots keeps file for key for ttl.
	StoreRobots(ctx context.Context, key string, file []byte, ttl time.Duration) error
}

// ErrRobotsUnavailable is wrapped by the error Allowed returns while a
// host's robots.txt is unreachable (see RobotsUnavailableError).
var ErrRobotsUnavailable = errors.New("robots.txt unreachable")

// RobotsUnavailableError says that a host's robots.txt could not be
// fetched (a 5xx status or a network error): nothing on the host may be
// fetched before Until, when the file is asked for again.
type RobotsUnavailableError struct {
	Host  string    // scheme://host[:port]
	Until time.Time // when the file is fetched again
	Cause error
}

func (e *RobotsUnavailableError) Error() string {
	return fmt.Sprintf("%s/robots.txt unreachable (%v); host disallowed until %s",
		e.Host, e.Cause, e.Until.Format(time.TimeOnly))
}

// Unwrap returns ErrRobotsUnavailable and the cause.
func (e *RobotsUnavailableError) Unwrap() []error { return []error{ErrRobotsUnavailable, e.Cause} }

// newRobotsCache returns a robotsCache that fetches through f and matches rules for
// userAgent (its product token, the part before the first "/" or space, is
// matched case-insensitively against User-agent lines; a group naming a
// prefix of it applies, the longest such wins, else "*"). ttl is how long a
// file is cached; 0 = 24h.
func newRobotsCache(f *httpFetcher, userAgent string, ttl time.Duration) *robotsCache {
	if ttl <= 0 {
		ttl = 24 * time.Hour
	}
	agent := strings.ToLower(strings.TrimSpace(userAgent))
	if i := strings.IndexAny(agent, "/ \t"); i >= 0 {
		agent = agent[:i]
	}
	if agent == "" {
		agent = "*"
	}
	return &robotsCache{
		fetcher: f,
		agent:   agent,
		ttl:     ttl,
		now:     time.Now,
		epoch:   time.Now(),
		log:     f.log,
		known:   [2]map[string]robotsAnswer{{}, {}},
		pending: [2]map[string]*robotsFetch{{}, {}},
		sweepAt: minSweep,
	}
}

// Allowed reports whether u may be fetched and the host's Crawl-delay (0 if
// none; at most one minute). The host's robots.txt is fetched once per TTL:
// concurrent callers for one host wait for the same fetch. err is non-nil
// (and allowed false) for a URL that is not absolute http(s), when ctx ends
// first, while the file is unreachable (a *RobotsUnavailableError), and
// when this worker's address guard refuses the host (ErrLocalRefusal).
func (r *robotsCache) Allowed(ctx context.Context, u *url.URL) (allowed bool, crawlDelay time.Duration, err error) {
	allowed, crawlDelay, _, err = r.check(ctx, u)
	return allowed, crawlDelay, err
}

// check is Allowed that also returns the URLs of the file's Sitemap:
// lines, which the crawler reads without fetching the file again.
func (r *robotsCache) check(ctx context.Context, u *url.URL) (allowed bool, crawlDelay time.Duration, sitemaps []string, err error) {
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return false, 0, nil, fmt.Errorf("robots: check %q: want an absolute http or https URL", u)
	}
	s, host := schemeIndex(u.Scheme), strings.ToLower(u.Host)
	for {
		a, f, leader := r.lookup(s, host)
		if f != nil {
			if leader {
				r.fill(ctx, f, s, host, u)
			} else {
				select {
				case <-f.done:
				case <-ctx.Done():
					return false, 0, nil, fmt.Errorf("robots: wait for %s://%s/robots.txt: %w", u.Scheme, host, ctx.Err())
				}
			}
			if f.failed {
				if err := ctx.Err(); err != nil {
					return false, 0, nil, fmt.Errorf("robots: fetch %s://%s/robots.txt: %w", u.Scheme, host, err)
				}
				continue // the leader gave up; try again
			}
			a = f.answer
		}
		rules := a.rules
		switch {
		case rules == nil:
			return true, 0, nil, nil
		case rules.refused != nil:
			return false, 0, nil, rules.refused
		case rules.down != nil:
			return false, 0, nil, &RobotsUnavailableError{Host: u.Scheme + "://" + host, Until: r.epoch.Add(a.expires), Cause: rules.down}
		case rules.group == nil:
			return true, 0, rules.sitemaps, nil
		}
		path := u.EscapedPath()
		if path == "" {
			path = "/"
		}
		if u.RawQuery != "" {
			path += "?" + u.RawQuery
		}
		return rules.group.Test(path), min(max(rules.group.CrawlDelay, 0), maxCrawlDelay), rules.sitemaps, nil
	}
}

// lookup returns host's answer (of scheme index s) if it is live; else
// the fetch under way for it, or a new one that the caller (the leader)
// must fill.
func (r *robotsCache) lookup(s int, host string) (a robotsAnswer, f *robotsFetch, leader bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f := r.pending[s][host]; f != nil {
		return robotsAnswer{}, f, false
	}
	now := r.now().Sub(r.epoch)
	a, ok := r.known[s][host]
	if ok && now < a.expires {
		return a, nil, false
	}
	if len(r.known[0])+len(r.known[1]) >= r.sweepAt {
		for _, known := range r.known {
			for k, old := range known {
				if now >= old.expires {
					delete(known, k)
				}
			}
		}
		r.sweepAt = max(minSweep, 2*(len(r.known[0])+len(r.known[1])))
	}
	f = &robotsFetch{done: make(chan struct{}), failures: a.failures()}
	r.pending[s][host] = f
	return robotsAnswer{}, f, true
}

// forgetRefusals drops the cached refusals of the address guard, so that
// a host trusted since is asked for its robots.txt again.
func (r *robotsCache) forgetRefusals() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, known := range r.known {
		for k, a := range known {
			if a.rules != nil && a.rules.refused != nil {
				delete(known, k)
			}
		}
	}
}

// fill fetches the robots.txt for f, or reads it from the shared store,
// keeps the answer under host (of scheme index s) and closes f.done.
func (r *robotsCache) fill(ctx context.Context, f *robotsFetch, s int, host string, u *url.URL) {
	group, sitemaps, ttl, err := r.load(ctx, u)
	r.mu.Lock()
	delete(r.pending[s], host)
	var a robotsAnswer
	failures := f.failures
	now := r.now().Sub(r.epoch)
	switch {
	case err != nil && ctx.Err() != nil:
		f.failed = true
	case errors.Is(err, ErrLocalRefusal):
		a.rules = &robotsRules{refused: err, failures: failures}
		a.expires = now + robotsErrorTTL
	case err != nil:
		wait := robotsRetryMin << min(failures, 16)
		wait = min(wait, robotsRetryMax)
		failures++
		a.rules = &robotsRules{down: err, failures: failures}
		a.expires = now + wait
		lvl := slog.LevelInfo
		if wait >= 16*time.Second { // a wait that is no longer short says why
			lvl = slog.LevelWarn
		}
		r.log.Log(ctx, lvl, "robots.txt unreachable; host disallowed until it can be fetched",
			"url", u.Scheme+"://"+u.Host+"/robots.txt", "retry_in", wait, "failures", failures, "error", err)
	default:
		if failures > 0 {
			r.log.Info("robots.txt reachable again", "url", u.Scheme+"://"+u.Host+"/robots.txt")
		}
		if group != nil || len(sitemaps) > 0 {
			a.rules = &robotsRules{group: group, sitemaps: sitemaps}
		}
		a.expires = now + ttl
	}
	if !f.failed {
		f.answer = a
		// A key of its own: host may be part of a page's URL.
		r.known[s][strings.Clone(host)] = a
	}
	r.mu.Unlock()
	close(f.done)
}

// load returns what fetch does, from the shared store if it holds the
// file, else fetched and then stored. A store that fails is logged and
// passed by: the file is fetched.
func (r *robotsCache) load(ctx context.Context, u *url.URL) (*robotstxt.Group, []string, time.Duration, error) {
	if r.shared == nil {
		group, sitemaps, ttl, _, err := r.fetch(ctx, u)
		return group, sitemaps, ttl, err
	}
	key := u.Scheme + "://" + strings.ToLower(u.Host)
	file, ok, err := r.shared.Robots(ctx, key)
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, nil, 0, err
	case err != nil:
		r.log.Warn("reading the crawl's stored robots.txt failed; fetching it", "host", key, "err", err)
	case ok:
		group, sitemaps := r.parse(file, key)
		return group, sitemaps, r.ttl, nil
	}
	group, sitemaps, ttl, file, err := r.fetch(ctx, u)
	if err == nil && ttl > 0 {
		if err := r.shared.StoreRobots(ctx, key, file, ttl); err != nil && ctx.Err() == nil {
			r.log.Warn("storing robots.txt for the crawl's other workers failed; each fetches it", "host", key, "err", err)
		}
	}
	return group, sitemaps, ttl, err
}

// parse returns the group of a robots.txt for r's agent (nil = allow
// all) and its Sitemap: lines; an unparsable file allows everything, and
// so does one without a Disallow line or Crawl-delay, whose parsed group
// is not kept.
func (r *robotsCache) parse(file []byte, where string) (*robotstxt.Group, []string) {
	if len(file) == 0 {
		return nil, nil
	}
	data, err := robotstxt.FromBytes(file)
	if err != nil {
		r.log.Warn("robots.txt unparsable; allowing all", "url", where, "error", err)
		return nil, nil
	}
	group := data.FindGroup(r.agent)
	if group.CrawlDelay == 0 && !disallows(file) {
		group = nil
	}
	return group, data.Sitemaps
}

// disallows reports whether a robots.txt may disallow a path: whether a
// line, its comment cut, holds "disallow" and anything but spaces and
// colons beside it. Without such a line, only Allow rules remain, and a
// path that no rule disallows is allowed (RFC 9309). It errs on the side
// of yes ("User-agent: disallowbot" counts).
func disallows(file []byte) bool {
	for line := range bytes.Lines(bytes.ReplaceAll(file, []byte{'\r'}, []byte{'\n'})) {
		if i := bytes.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = bytes.ToLower(line)
		if !bytes.Contains(line, []byte("disallow")) {
			continue
		}
		line = bytes.ReplaceAll(line, []byte("disallow"), nil)
		if len(bytes.Fields(bytes.ReplaceAll(line, []byte{':'}, []byte{' '}))) > 0 {
			return true
		}
	}
	return false
}

// errOffHost ends a robots.txt redirect chain that leaves the host.
var errOffHost = errors.New("redirected to another host")

// errServer is the cause of a robots.txt answered with a 5xx status.
var errServer = errors.New("server error")

// fetch gets and parses the robots.txt of u's host. It returns the group
// for r's agent (nil = allow all), the URLs of its Sitemap: lines, how
// long to cache the answer and the file as parsed (empty for an answer
// that allows all); err is set when ctx ended, when this worker's guard
// refused the host (ErrLocalRefusal) and when the file is unreachable
// (5xx, network error).
func (r *robotsCache) fetch(ctx context.Context, u *url.URL) (*robotstxt.Group, []string, time.Duration, []byte, error) {
	target := &url.URL{Scheme: u.Scheme, Host: u.Host, Path: "/robots.txt"}
	for hop := 0; ; hop++ {
		resp, err := r.fetcher.fetch(ctx, &Request{URL: target.String()}, robotsMaxSize, true)
		switch {
		case err == nil:
		case ctx.Err() != nil, errors.Is(err, ErrLocalRefusal), isRetryable(err):
			return nil, nil, 0, nil, err
		default:
			// Not a transient failure (a name that does not exist, a bad
			// certificate): the page's own fetch fails alike and says why.
			r.log.Info("robots.txt fetch failed for good; allowing all", "url", target.String(), "error", err)
			return nil, nil, r.ttl, nil, nil
		}
		switch code := resp.StatusCode; {
		case code >= 200 && code < 300:
			body := resp.Body
			if len(body) == robotsMaxSize {
				// Perhaps cut: drop a last line that may be partial.
				if i := bytes.LastIndexByte(body, '\n'); i >= 0 {
					body = body[:i+1]
				}
				r.log.Info("robots.txt parsed on its first 500 KiB", "url", target.String())
			}
			group, sitemaps := r.parse(body, target.String())
			return group, sitemaps, r.ttl, body, nil
		case code >= 300 && code < 400:
			next, err := r.redirect(target, resp.Header.Get("Location"), hop)
			if err != nil {
				r.log.Info("robots.txt redirect not followed; allowing all", "url", target.String(), "error", err)
				return nil, nil, r.ttl, nil, nil
			}
			target = next
		case code >= 400 && code < 500:
			return nil, nil, r.ttl, nil, nil
		default: // 5xx and oddities
			return nil, nil, 0, nil, fmt.Errorf("%w: status %d", errServer, code)
		}
	}
}

// redirect resolves the Location of a robots.txt redirect at hop.
func (r *robotsCache) redirect(from *url.URL, location string, hop int) (*url.URL, error) {
	if hop+1 > robotsMaxRedirects {
		return nil, fmt.Errorf("more than %d redirects", robotsMaxRedirects)
	}
	loc, err := url.Parse(strings.TrimSpace(location))
	if err != nil || location == "" {
		return nil, fmt.Errorf("bad Location %q", location)
	}
	next := from.ResolveReference(loc)
	next.Fragment, next.RawFragment = "", ""
	if (next.Scheme != "http" && next.Scheme != "https") ||
		!strings.EqualFold(next.Hostname(), from.Hostname()) {
		return nil, fmt.Errorf("%w: %s", errOffHost, next)
	}
	return next, nil
}
