// Package redisfrontier is the crawl's frontier on Redis: the Redis
// broker's queue and the Redis duplicate filter (set or Bloom) of one
// crawl, whose keys share the crawl's slot, so that one script claims a
// batch of links and publishes the new ones (broker/redis's
// ClaimPublish). A link is never claimed without being published, so the
// frontier keeps no marks, rechecks nothing on a page expanded again, and
// never waits for another worker's claim: Republished never happens, and
// a link claimed before is Filtered.
package redisfrontier

import (
	"context"
	"fmt"

	"github.com/trawlhq/trawl/broker"
	redisbroker "github.com/trawlhq/trawl/broker/redis"
	"github.com/trawlhq/trawl/dedup"
	dedupredis "github.com/trawlhq/trawl/dedup/redis"
	"github.com/trawlhq/trawl/frontier"
)

// Frontier is a frontier.Frontier on a Redis broker and a Redis filter of
// the same crawl. It is safe for concurrent use.
type Frontier struct {
	broker *redisbroker.Broker
	filter dedupredis.Claimer
}

var (
	_ frontier.Markless   = (*Frontier)(nil)
	_ broker.Incarnations = (*Frontier)(nil)
)

// New returns the frontier over b and f, which must be of one crawl (the
// queue NAME:requests and the filter NAME:dupefilter share the Cluster
// hash tag {NAME}): Expand fails with broker.ErrInvalid otherwise. It does
// not own them: the caller closes them.
func New(b *redisbroker.Broker, f dedupredis.Claimer) *Frontier {
	return &Frontier{broker: b, filter: f}
}

// Broker returns the Redis broker beneath.
func (fr *Frontier) Broker() broker.Broker { return fr.broker }

// Markless says that Expand reads no Page.Parent (see frontier.Markless).
func (fr *Frontier) Markless() {}

// Filter returns the Redis filter beneath.
func (fr *Frontier) Filter() dedup.Filter { return fr.filter }

// Incarnation is the Redis server's (broker and filter share it).
func (fr *Frontier) Incarnation(ctx context.Context) (string, error) {
	return fr.broker.Incarnation(ctx)
}

// Expand claims the pages' links and publishes the new ones in one script
// call per 1,000 links (each atomic): a link is published exactly when
// this call claimed it, or it is Unfiltered. A Known link was claimed,
// and so published, by the Expand that offered it: it is Filtered, with
// no word to Redis. The pages' Parent and Start change nothing.
func (fr *Frontier) Expand(ctx context.Context, queue string, pages []frontier.Page) ([][]frontier.Outcome, error) {
	out := make([][]frontier.Outcome, len(pages))
	var links []redisbroker.Link
	for i, p := range pages {
		out[i] = make([]frontier.Outcome, len(p.Links))
		for j, l := range p.Links {
			if l.Known {
				out[i][j] = frontier.Filtered
				continue
			}
			links = append(links, redisbroker.Link{Fingerprint: l.Fingerprint, Unfiltered: l.Unfiltered, Message: l.Message})
		}
	}
	if len(links) == 0 {
		return out, nil
	}
	pub, err := fr.broker.ClaimPublish(ctx, queue, fr.filter, links)
	if err != nil {
		return nil, fmt.Errorf("frontier: %w", err)
	}
	k := 0
	for i, p := range pages {
		for j, l := range p.Links {
			if l.Known {
				continue
			}
			out[i][j] = frontier.Filtered
			if pub[k] {
				out[i][j] = frontier.Published
			}
			k++
		}
	}
	return out, nil
}

// Mark adds fps to the filter.
func (fr *Frontier) Mark(ctx context.Context, fps ...dedup.Fingerprint) error {
	if _, err := fr.filter.Add(ctx, fps...); err != nil {
		return fmt.Errorf("frontier: filter: %w", err)
	}
	return nil
}

// Marked asks the filter, read-only.
func (fr *Frontier) Marked(ctx context.Context, fps ...dedup.Fingerprint) ([]bool, error) {
	if len(fps) == 0 {
		return nil, nil
	}
	checker, ok := fr.filter.(dedup.Checker)
	if !ok {
		return nil, fmt.Errorf("%w (%T)", frontier.ErrCannotTell, fr.filter)
	}
	in, err := checker.Contains(ctx, fps...)
	if err != nil {
		return nil, fmt.Errorf("frontier: filter: %w", err)
	}
	return in, nil
}
