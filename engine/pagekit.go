package engine

import (
	"fmt"
	"log/slog"
	"net/url"

	"github.com/trawlhq/trawl/internal/linkscan"
)

// pageKit is what a worker fetches and reads pages with: the fetcher and
// its address guard, the robots.txt cache (nil: robots.txt ignored), the
// scope links are followed in, and the extraction of fields and links.
// All but extractLinks derive from the worker's settings (build), and are
// built again when it adopts the crawl's.
type pageKit struct {
	fetcher *httpFetcher
	robots  *robotsCache
	scope   *scope
	extract []*extraction
	// extractLinks finds a page's title and links:
	// linkscan.ExtractLimited; the benchmark of the link scanner swaps in
	// the x/net/html tokenizer.
	extractLinks func(base *url.URL, body []byte, max int) (title string, links []linkscan.Link, dropped int)
}

// build makes the kit that of cc, logging to log unless cc's fetch
// options name a logger. It keeps extractLinks. The caller closes the
// fetcher it replaces.
func (k *pageKit) build(cc *compiled, log *slog.Logger) error {
	extract, err := compileExtract(cc.Extract)
	if err != nil {
		return fmt.Errorf("engine config: %w", err)
	}
	k.scope, k.extract, k.robots = newScope(cc), extract, nil
	fo := cc.Fetch
	if fo.Logger == nil {
		fo.Logger = log
	}
	k.fetcher = newHTTPFetcher(fo)
	for _, h := range cc.TrustedHosts {
		k.fetcher.Trust(h)
	}
	if !cc.IgnoreRobots {
		ua := fo.UserAgent
		if ua == "" {
			ua = DefaultUserAgent
		}
		k.robots = newRobotsCache(k.fetcher, ua, 0)
		k.robots.shared, _ = cc.Limiter.(RobotsStore) // a crawl's workers share robots.txt files
	}
	return nil
}
