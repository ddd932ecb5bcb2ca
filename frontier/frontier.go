// Package frontier is the crawl's shared state as the engine sees it: the
// queue of requests to fetch and the claims on the links found so far,
// behind one interface. The engine expands a page (claims its links and
// publishes the new ones) in one call, and takes and settles leased
// requests through the broker beneath; it no longer composes a broker, a
// filter and the marks that tie them together itself.
//
// Each deployment implements the frontier where its state lives:
//   - Compose: any broker with any duplicate filter. The two stores cannot
//     change together, so the frontier keeps marks in the filter
//     (dedup.ExpandedMark, dedup.PublishedMark) that let a page expanded
//     again publish exactly the links an earlier attempt claimed and never
//     published;
//   - Memory: the in-memory broker with a local filter, claim and publish
//     under one lock, no marks.
//
// The promises every implementation keeps are stated in code by
// frontier/frontiertest.
package frontier

import (
	"context"
	"errors"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/dedup"
)

// ErrCannotTell is wrapped by Marked on a frontier whose filter cannot
// tell what it holds without adding it (no dedup.Checker).
var ErrCannotTell = errors.New("frontier: the filter cannot tell what it holds")

// Link is a request found on a page, to publish unless the crawl claimed
// its fingerprint before.
type Link struct {
	// Fingerprint is the link's claim (see dedup.Fingerprinter). Unused
	// when Unfiltered.
	Fingerprint dedup.Fingerprint
	// Message is the encoded request and its priority.
	Message broker.Message
	// Unfiltered links are published whatever the filter holds, and
	// claim nothing (Request.DontFilter).
	Unfiltered bool
	// Known says that the caller offered this link before, in an Expand
	// that succeeded (a lossy memory of its own): the crawl holds it. Its
	// Fingerprint and Message are left unset; a frontier that needs them
	// (it expands the page again and rechecks every link) asks
	// Page.Resolve. On a page expanded for the first time a Known link is
	// Filtered without a word to the stores.
	Known bool
}

// Page is one expansion: the links found on one page, or a batch of start
// URLs.
type Page struct {
	// Parent is the fingerprint of the request whose page the links were
	// found on; unused for Start.
	Parent dedup.Fingerprint
	// Start says the links are start URLs (no parent). Every worker given
	// the same start URL expands it: of those that claim it, one publishes
	// it, the others find it claimed and wait a while for its publication
	// (see ComposeConfig.ClaimWait) before they take its claimer for dead
	// and publish it themselves.
	Start bool
	// Links are the page's links, in its order.
	Links []Link
	// Resolve returns Links[i] with its Fingerprint and Message set, for
	// a Known link the frontier must claim. It may be nil when no link is
	// Known.
	Resolve func(i int) (Link, error)
}

// Markless is implemented by a frontier that keeps no marks, whose
// Expand reads no Page.Parent (Memory, and redisfrontier's, which claim
// and publish in one step): a caller may leave Parent unset, sparing the
// parent's fingerprint. Compose keeps a page's dedup.ExpandedMark, of
// its Parent, and does not implement it.
type Markless interface {
	Frontier
	// Markless does nothing: it says what the type is.
	Markless()
}

// Outcome is what Expand did with one link.
type Outcome uint8

// Outcomes. The zero Outcome is none of them.
const (
	// Filtered: the crawl claimed the link before and it was published
	// (or its claimer is alive to publish it); this call did not.
	Filtered Outcome = iota + 1
	// Published: the link was new to the crawl (or Unfiltered), and this
	// call published it.
	Published
	// Republished: the crawl claimed the link before, but its claimer
	// died before publishing it (it was claimed by an earlier expansion
	// of the same page, or by another worker given the same start URL);
	// this call published it.
	Republished
)

// String returns "filtered", "published" or "republished".
func (o Outcome) String() string {
	switch o {
	case Filtered:
		return "filtered"
	case Published:
		return "published"
	case Republished:
		return "republished"
	}
	return "outcome(?)"
}

// Frontier is a crawl's shared state: the queues of requests and the
// claims on links. Any number of workers share one crawl's frontier.
type Frontier interface {
	// Expand claims each page's links and publishes to queue those new
	// to the crawl, and reports, per page and link, what it did. It is
	// idempotent per page: a page expanded again (a redelivery, a worker
	// killed part-way through an earlier Expand, a duplicate message)
	// publishes no link twice that an earlier expansion published, and
	// loses none that it claimed. A link found on several pages of one
	// call is published at most once. An error fails every page of the
	// call (none of them may be acknowledged); part of the links may have
	// been claimed or published, which a later expansion of the same
	// pages makes good.
	Expand(ctx context.Context, queue string, pages []Page) ([][]Outcome, error)
	// Broker is the queues beneath: requests are consumed, settled,
	// given back and counted through it, start URLs seeded and taken.
	// The frontier does not own it.
	Broker() broker.Broker
	// Mark records fingerprints that are not links (the crawl's identity,
	// see engine/state.go) beside the claims, as durably as the claims.
	Mark(ctx context.Context, fps ...dedup.Fingerprint) error
	// Marked reports, for each fingerprint, whether it was marked (or
	// claimed), without marking it. It returns an error wrapping
	// ErrCannotTell when the frontier cannot tell.
	Marked(ctx context.Context, fps ...dedup.Fingerprint) ([]bool, error)
}
