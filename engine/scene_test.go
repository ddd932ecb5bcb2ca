package engine_test

import (
	"testing"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/dedup"
	"github.com/trawlhq/trawl/frontier"
	"github.com/trawlhq/trawl/frontier/frontiertest"
)

// scene sets the state a crawl's frontier holds after what other workers
// did, through the frontier the engine composes over b and f, so that a
// test says what happened (a page published, a worker died after
// claiming its links) rather than which records that leaves behind.
type scene struct {
	t      *testing.T
	fr     *frontier.Composed
	faults *frontiertest.Faults
}

// sceneQueue is where the scene's own expansions publish: not the
// crawl's queue, which the test fills itself.
const sceneQueue = "scene:elsewhere"

func newScene(t *testing.T, b broker.Broker, f dedup.Filter) *scene {
	faults := &frontiertest.Faults{}
	return &scene{t: t, fr: frontier.Compose(faults.Broker(b), faults.Filter(f), frontier.ComposeConfig{}), faults: faults}
}

// page is the page of parent with links fps.
func scenePage(parent dedup.Fingerprint, fps ...dedup.Fingerprint) frontier.Page {
	p := frontier.Page{Parent: parent}
	for _, fp := range fps {
		p.Links = append(p.Links, frontier.Link{Fingerprint: fp, Message: broker.Message{Body: fp[:]}})
	}
	return p
}

// published: another page claimed and published fps.
func (s *scene) published(fps ...dedup.Fingerprint) {
	s.t.Helper()
	other := dedup.Fingerprint{0xff, byte(len(fps))}
	if _, err := s.fr.Expand(s.t.Context(), sceneQueue, []frontier.Page{scenePage(other, fps...)}); err != nil {
		s.t.Fatal(err)
	}
}

// expanded: parent's page was expanded (its own links published).
func (s *scene) expanded(parent dedup.Fingerprint) {
	s.t.Helper()
	own := dedup.Fingerprint{0xfe}
	copy(own[1:], parent[:])
	if _, err := s.fr.Expand(s.t.Context(), sceneQueue, []frontier.Page{scenePage(parent, own)}); err != nil {
		s.t.Fatal(err)
	}
}

// diedAfterClaiming: a worker expanding parent's page for the first time
// claimed links and died before it published them (at the store call
// that publishes).
func (s *scene) diedAfterClaiming(parent dedup.Fingerprint, links ...dedup.Fingerprint) {
	s.t.Helper()
	// The calls of a first expansion: the page's mark, the claims, the
	// publish.
	s.faults.Arm(2, frontiertest.Before, nil)
	_, err := s.fr.Expand(s.t.Context(), sceneQueue, []frontier.Page{scenePage(parent, links...)})
	if !s.faults.Heal() || err == nil {
		s.t.Fatalf("the worker expanding the page did not die at its publish (err %v)", err)
	}
}
