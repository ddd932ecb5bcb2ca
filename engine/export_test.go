package engine

import (
	"net/url"

	"github.com/trawlhq/trawl/internal/linkscan"
)

// Politeness is the local limiter, exposed to the package's external
// tests, which read the delays it adapted.
type Politeness = politeness

// PolitenessConfig configures a Politeness in external tests.
type PolitenessConfig = politenessConfig

// NewPoliteness exposes newPoliteness to external tests.
func NewPoliteness(o PolitenessConfig) *Politeness { return newPoliteness(o) }

// UseTokenizerLinks makes c extract links with the reference link extraction with x/net/html's
// tokenizer (linkscan.ExtractTokenized), for the benchmark of the link scanner.
func UseTokenizerLinks(c *Crawler) {
	c.kit.extractLinks = func(base *url.URL, body []byte, _ int) (string, []*url.URL, []string, int) {
		title, links := linkscan.ExtractTokenized(base, body)
		urls := make([]string, len(links))
		for i, l := range links {
			urls[i] = l.String()
		}
		return title, links, urls, 0
	}
}
