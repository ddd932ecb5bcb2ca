package engine

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Stat names, as Scrapy users know them.
const (
	StatEnqueued = "scheduler/enqueued"
	StatDequeued = "scheduler/dequeued"
	StatFiltered = "dupefilter/filtered"
	// StatRepublished counts links a page processed again published past
	// the filter: an earlier attempt claimed them and never published them.
	StatRepublished     = "dupefilter/republished"
	StatOffsite         = "offsite/filtered"
	StatRequests        = "downloader/request_count"
	StatBytes           = "downloader/response_bytes"
	StatResponses       = "downloader/response_count"
	StatStatusPrefix    = "downloader/response_status_count/"
	StatItems           = "item_scraped_count"
	StatRetries         = "retry/count"
	StatRetriesExceeded = "retry/max_reached"
	StatRobotsForbidden = "robotstxt/forbidden"
	// StatRobotsUnavailable counts pages given back because their host's
	// robots.txt was unreachable.
	StatRobotsUnavailable = "robotstxt/unavailable"
	// StatRefused counts pages this worker refused because of its own
	// configuration (ErrLocalRefusal) and gave back.
	StatRefused = "refused/given_back"
	// StatURLTooLong counts links and redirects over MaxURLLength, dropped.
	StatURLTooLong = "url/too_long"
	// StatStartURLsRejected counts start-URL payloads that are not a start
	// URL (dead-lettered with the reason where the source allows).
	StatStartURLsRejected = "start_urls/rejected"
	StatErrors            = "errors"
	StatDeadLetters       = "deadletter/count"
	StatRedirects         = "redirect/count"
	StatDropped           = "callback/dropped"
	StatStartURLs         = "start_urls/taken"
)

// Stats are a crawl's counters, safe for concurrent use.
type Stats struct {
	mu sync.RWMutex
	m  map[string]*atomic.Int64

	// Not counters, so not in Snapshot (whose values are shared as sums).
	inFlight atomic.Int64                         // pages held by this worker now
	fetches  [len(FetchBuckets) + 1]atomic.Uint64 // by bucket; the last is +Inf
	fetchNs  atomic.Int64                         // sum of fetch durations
	hosts    hostTally                            // the busiest hosts' fetches, for the worker's record
}

// NewStats returns empty counters.
func NewStats() *Stats { return &Stats{m: make(map[string]*atomic.Int64)} }

// FetchBuckets are the upper bounds, in seconds, of the buckets of
// fetch durations (Stats.FetchDurations).
var FetchBuckets = [...]float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// ObserveFetch records the duration of one fetch (request sent to body
// read, or failure).
func (s *Stats) ObserveFetch(d time.Duration) {
	sec := d.Seconds()
	i := 0
	for i < len(FetchBuckets) && sec > FetchBuckets[i] {
		i++
	}
	s.fetches[i].Add(1)
	s.fetchNs.Add(int64(d))
}

// Durations is a histogram of durations.
type Durations struct {
	Count   uint64             // observations
	Sum     time.Duration      // their total
	Buckets map[float64]uint64 // upper bound in seconds -> observations at most that long (cumulative; +Inf is Count)
}

// FetchDurations returns the histogram of fetch durations so far.
func (s *Stats) FetchDurations() Durations {
	h := Durations{Buckets: make(map[float64]uint64, len(FetchBuckets)), Sum: time.Duration(s.fetchNs.Load())}
	for i, le := range FetchBuckets {
		h.Count += s.fetches[i].Load()
		h.Buckets[le] = h.Count
	}
	h.Count += s.fetches[len(FetchBuckets)].Load()
	return h
}

// AddInFlight adds n (negative when a page is done) to the pages this
// worker holds.
func (s *Stats) AddInFlight(n int64) { s.inFlight.Add(n) }

// InFlight returns how many pages this worker holds now.
func (s *Stats) InFlight() int64 { return s.inFlight.Load() }

// Add adds n to counter name.
func (s *Stats) Add(name string, n int64) {
	s.mu.RLock()
	c := s.m[name]
	s.mu.RUnlock()
	if c == nil {
		s.mu.Lock()
		if c = s.m[name]; c == nil {
			c = new(atomic.Int64)
			s.m[name] = c
		}
		s.mu.Unlock()
	}
	c.Add(n)
}

// addSome adds n to counter name unless n is 0 (a counter is created
// only once something is counted).
func (s *Stats) addSome(name string, n int64) {
	if n != 0 {
		s.Add(name, n)
	}
}

// Inc adds one to counter name.
func (s *Stats) Inc(name string) { s.Add(name, 1) }

// Get returns counter name.
func (s *Stats) Get(name string) int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if c := s.m[name]; c != nil {
		return c.Load()
	}
	return 0
}

// Snapshot returns a copy of all counters.
func (s *Stats) Snapshot() map[string]int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[string]int64, len(s.m))
	for k, c := range s.m {
		out[k] = c.Load()
	}
	return out
}

func statusStat(code int) string { return StatStatusPrefix + strconv.Itoa(code) }

// StatErrorKindPrefix prefixes the counters of errors by kind: every error
// counted in StatErrors is also counted in exactly one of them.
const StatErrorKindPrefix = "errors/"

// Error kinds, the suffixes of StatErrorKindPrefix.
const (
	ErrorFetch            = "fetch"             // a fetch failed for good (not retried)
	ErrorForbiddenAddress = "forbidden_address" // refused by the address guard
	ErrorBodyTooLarge     = "body_too_large"    // response body over the cap
	ErrorRetries          = "retries_exhausted" // timeouts, 5xx, 429 past the retry limit
	ErrorBadURL           = "bad_url"           // a request or start URL that cannot be fetched
	ErrorRedirect         = "redirect"          // too many redirects, or a bad Location
	ErrorCallback         = "callback"          // unknown callback
)

// SharedStats keeps counters summed over a crawl's workers (the Redis
// hash redis.Stats; a file in the CLI's default mode). See
// Config.SharedStats.
type SharedStats interface {
	// Add adds deltas to the shared counters.
	Add(ctx context.Context, deltas map[string]int64) error
	// Load returns the shared counters.
	Load(ctx context.Context) (map[string]int64, error)
}

// shareEvery is how often a crawler adds its counters' growth to
// Config.SharedStats.
const shareEvery = time.Second

// shareStats adds the growth of c's counters to Config.SharedStats every
// shareEvery until ctx ends, then once more (bounded by settleTimeout) so
// that the shared counters hold all of this worker's. A failed Add is
// logged and its growth carried into the next.
func (c *Crawler) shareStats(ctx context.Context) {
	var shared map[string]int64 // what the shared stats already have
	flush := func(ctx context.Context) {
		now := c.stats.Snapshot()
		deltas := make(map[string]int64, len(now))
		for k, v := range now {
			if d := v - shared[k]; d != 0 {
				deltas[k] = d
			}
		}
		if len(deltas) == 0 {
			return
		}
		if err := c.cfg.SharedStats.Add(ctx, deltas); err != nil {
			c.log.Warn("sharing stats failed", "err", err)
			return
		}
		shared = now
	}
	t := time.NewTicker(shareEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
			defer cancel()
			flush(fctx)
			return
		case <-t.C:
			flush(ctx)
		}
	}
}
