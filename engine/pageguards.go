package engine

import (
	"sync"
	"sync/atomic"
)

// pageGuards are this worker's own guards against a crawl that would grow
// endless or huge, or a worker that would spin: Config.MaxPages (the
// pages whose fetch started here), the URL-trap guard
// (Config.MaxQueryValues), the per-host page budget
// (Config.MaxPagesPerHost), the sitemaps per host (SitemapMaxPerHost),
// and the refusals of its own address guard (see refuse). It also says
// once what the guards of a page's content met: links past
// Config.MaxLinks, an undecodable payload, an unknown callback. Each
// worker keeps its own: they are not the crawl's.
type pageGuards struct {
	started  atomic.Int64 // pages whose fetch started on this worker
	traps    *trapGuard   // nil: none
	hosts    *hostBudget  // nil: none
	sitemaps *hostBudget
	refused  refusals

	linksWarned atomic.Bool // a page's links past MaxLinks were logged at Warn
	badLogged   atomic.Bool // the first undecodable payload was logged
	unknownCB   sync.Map    // callback names already logged as unknown at Warn
}

// newPageGuards returns a worker's guards, to be configured.
func newPageGuards() *pageGuards {
	return &pageGuards{sitemaps: &hostBudget{max: SitemapMaxPerHost, strict: true, count: map[string]int{}, warned: map[string]bool{}}}
}

// configure makes the URL-trap guard and the host budget those of cc,
// afresh: cc's settings may be the crawl's, adopted when joining it.
func (g *pageGuards) configure(cc *compiled) {
	g.traps, g.hosts = nil, nil
	if cc.MaxQueryValues > 0 {
		g.traps = newTrapGuard(cc.MaxQueryValues)
	}
	if cc.MaxPagesPerHost > 0 {
		g.hosts = newHostBudget(cc.MaxPagesPerHost)
	}
}

// startPage counts a page whose fetch starts, and reports whether it is
// within max (0: no limit). A page past max stays counted: the worker has
// reached its limit, and takes no more.
func (g *pageGuards) startPage(max int) bool {
	if max > 0 {
		return g.started.Add(1) <= int64(max)
	}
	if max == 0 {
		g.started.Add(1)
	}
	return true
}

// unstartPage takes back the count of a page that was not fetched after
// all (its address was refused before any request).
func (g *pageGuards) unstartPage() { g.started.Add(-1) }

// reached reports whether this worker started max pages (0: no limit).
func (g *pageGuards) reached(max int) bool {
	return max > 0 && g.started.Load() >= int64(max)
}

// firstLinksDropped reports whether this is the first page whose links
// past MaxLinks are dropped: it is told at Warn, the others at Info.
func (g *pageGuards) firstLinksDropped() bool { return g.linksWarned.CompareAndSwap(false, true) }

// firstUndecodable reports whether this is the first undecodable payload.
func (g *pageGuards) firstUndecodable() bool { return g.badLogged.CompareAndSwap(false, true) }

// firstUnknown reports whether this is the first request for the unknown
// callback name.
func (g *pageGuards) firstUnknown(name string) bool {
	_, seen := g.unknownCB.LoadOrStore(name, struct{}{})
	return !seen
}
