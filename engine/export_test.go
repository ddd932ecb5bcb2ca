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
	c.kit.extractLinks = func(base *url.URL, body []byte, _ int) (string, []linkscan.Link, int) {
		title, links := linkscan.ExtractTokenized(base, body)
		ls := make([]linkscan.Link, len(links))
		for i, l := range links {
			ls[i] = linkscan.FromURL(l, l.String())
		}
		return title, ls, 0
	}
}
