package engine

import (
	"hash/maphash"
	"net/url"
	"slices"
	"strings"
	"sync"
)

// Defaults of the guards against pages and sites that would make a crawl
// endless or huge (see Config).
const (
	// DefaultMaxLinks is how many links of one page are followed
	// (Config.MaxLinks): the first ones, in document order.
	DefaultMaxLinks = 10_000
	// DefaultMaxQueryValues is the URL-trap guard's default
	// (Config.MaxQueryValues).
	DefaultMaxQueryValues = 1000
)

// Counters of the guards.
const (
	// StatLinksDropped counts the links of pages past Config.MaxLinks.
	StatLinksDropped = "links/dropped"
	// StatURLTrap counts links not followed by the URL-trap guard
	// (Config.MaxQueryValues).
	StatURLTrap = "url/trap"
	// StatHostBudget counts links not followed because their host had
	// its Config.MaxPagesPerHost.
	StatHostBudget = "scheduler/host_budget"
)

// maxBudgetHosts bounds the hosts a hostBudget counts, and the keys the
// guards warn about.
const maxBudgetHosts = 10_000

// maxTrapEntries bounds the values a trapGuard remembers in all; past it,
// it forgets them and starts again.
const maxTrapEntries = 1 << 20

// trapGuard is the URL-trap guard of a worker (Config.MaxQueryValues). A
// link is a step of a query parameter when it has the host, the query
// parameter names and the other parameters' values of the page it was
// found on, and another value of that parameter: a session id handed on
// from page to page (?sid=), a calendar's ?date=, a listing's ?page=.
// For each host, parameter names and parameter, the guard remembers the
// values such steps led to; once there are more than max, a step to a
// value not among them is not followed. A session-id trap, whose values
// never repeat, is so cut after max pages; a listing's pages, which link
// to each other, count once each.
type trapGuard struct {
	max  int
	seed maphash.Seed

	mu      sync.Mutex
	values  map[string]map[uint64]struct{} // key: host, names, parameter
	entries int
	warned  map[string]bool
}

func newTrapGuard(max int) *trapGuard {
	return &trapGuard{max: max, seed: maphash.MakeSeed(), values: map[string]map[uint64]struct{}{}, warned: map[string]bool{}}
}

// step returns the key and the value's hash of link u found on parent, if
// it is a step of one query parameter (see trapGuard); ok false if not.
func (g *trapGuard) step(parent, u *url.URL) (key string, h uint64, ok bool) {
	if u.RawQuery == "" || parent.RawQuery == "" || !strings.EqualFold(u.Host, parent.Host) {
		return "", 0, false
	}
	q, pq := u.Query(), parent.Query()
	if len(q) != len(pq) {
		return "", 0, false
	}
	changed := ""
	for k, vs := range q {
		pvs, ok := pq[k]
		if !ok {
			return "", 0, false
		}
		if !slices.Equal(vs, pvs) {
			if changed != "" {
				return "", 0, false // two parameters changed
			}
			changed = k
		}
	}
	if changed == "" {
		return "", 0, false
	}
	names := make([]string, 0, len(q))
	for k := range q {
		names = append(names, k)
	}
	slices.Sort(names)
	key = strings.ToLower(u.Host) + "?" + strings.Join(names, "&") + "#" + changed
	return key, maphash.String(g.seed, strings.Join(q[changed], "\x00")), true
}

// allow reports whether link u found on parent may be followed. over is
// true the first time the key of a refused link was over its bound, for a
// warning.
func (g *trapGuard) allow(parent, u *url.URL) (ok bool, key string, over bool) {
	key, h, isStep := g.step(parent, u)
	if !isStep {
		return true, "", false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	vals := g.values[key]
	if _, seen := vals[h]; seen {
		return true, key, false
	}
	if len(vals) >= g.max {
		over = !g.warned[key] && len(g.warned) < maxBudgetHosts
		if over {
			g.warned[key] = true
		}
		return false, key, over
	}
	if g.entries >= maxTrapEntries {
		clear(g.values)
		g.entries = 0
	}
	if vals == nil {
		vals = map[uint64]struct{}{}
		g.values[key] = vals
	}
	vals[h] = struct{}{}
	g.entries++
	return true, key, false
}

// hostBudget counts what this worker requested of each host: the links it
// published (Config.MaxPagesPerHost: a link takes a place when it is
// offered to the filter and gives it back unless it is published), or
// the sitemaps (SitemapMaxPerHost). It holds at most maxBudgetHosts
// hosts, past which new hosts are not counted (strict: refused).
type hostBudget struct {
	max    int
	strict bool // past maxBudgetHosts hosts, refuse new ones
	mu     sync.Mutex
	count  map[string]int
	warned map[string]bool
}

func newHostBudget(max int) *hostBudget {
	return &hostBudget{max: max, count: map[string]int{}, warned: map[string]bool{}}
}

// reserve takes a place of host's budget; ok false if it is spent (warn
// is true the first time).
func (b *hostBudget) reserve(host string) (ok, warn bool) {
	host = strings.ToLower(host)
	b.mu.Lock()
	defer b.mu.Unlock()
	n, known := b.count[host]
	switch {
	case n >= b.max:
		warn = !b.warned[host]
		b.warned[host] = true
		return false, warn
	case known || len(b.count) < maxBudgetHosts:
		b.count[host] = n + 1
	case b.strict:
		return false, false
	}
	return true, false
}

// release gives back a place reserve took.
func (b *hostBudget) release(host string) {
	host = strings.ToLower(host)
	b.mu.Lock()
	defer b.mu.Unlock()
	if n, ok := b.count[host]; ok && n > 0 {
		b.count[host] = n - 1
	}
}
