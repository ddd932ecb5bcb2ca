package frontier

import (
	"context"
	"fmt"
	"sync"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/dedup"
)

// CheckingFilter is a duplicate filter that can tell what it holds.
type CheckingFilter interface {
	dedup.Filter
	dedup.Checker
}

// Memory is the frontier of a crawl whose stores only this process
// writes: the in-memory broker with a local filter. It claims and
// publishes under one lock, so no other expansion sees a link claimed and
// not yet published, and it keeps no marks: it asks the filter which
// links are new, publishes them, and only then claims them. A failure
// before the claim leaves the links unclaimed, to be published by the
// next expansion of the page; a failure of the claim after the publish
// can publish them twice, never lose one.
type Memory struct {
	mu     sync.Mutex // held from the check to the claim
	broker broker.Broker
	filter CheckingFilter
}

var _ Markless = (*Memory)(nil)

// NewMemory returns the frontier over b and f, which nothing but it may
// claim in or publish to. It does not own them: the caller closes them.
func NewMemory(b broker.Broker, f CheckingFilter) *Memory {
	return &Memory{broker: b, filter: f}
}

// Broker returns the broker beneath.
func (m *Memory) Broker() broker.Broker { return m.broker }

// Markless says that Expand reads no Page.Parent (see Markless).
func (m *Memory) Markless() {}

// String names the filter when it says what it is, else "".
func (m *Memory) String() string {
	if s, ok := m.filter.(fmt.Stringer); ok {
		return s.String()
	}
	return ""
}

// Mark adds fps to the filter.
func (m *Memory) Mark(ctx context.Context, fps ...dedup.Fingerprint) error {
	if _, err := m.filter.Add(ctx, fps...); err != nil {
		return fmt.Errorf("frontier: filter: %w", err)
	}
	return nil
}

// Marked asks the filter, read-only.
func (m *Memory) Marked(ctx context.Context, fps ...dedup.Fingerprint) ([]bool, error) {
	if len(fps) == 0 {
		return nil, nil
	}
	in, err := m.filter.Contains(ctx, fps...)
	if err != nil {
		return nil, fmt.Errorf("frontier: filter: %w", err)
	}
	return in, nil
}

// Expand checks, publishes and claims the pages' links under the lock. A
// Known link is Filtered: this process expanded it before, and nothing
// of what it expanded is lost while it runs. Nothing is Republished.
func (m *Memory) Expand(ctx context.Context, queue string, pages []Page) ([][]Outcome, error) {
	out := make([][]Outcome, len(pages))
	var (
		fps  []dedup.Fingerprint
		at   [][2]int // page and link of fps[k]
		msgs []broker.Message
	)
	for i, p := range pages {
		out[i] = make([]Outcome, len(p.Links))
		for j, l := range p.Links {
			switch {
			case l.Unfiltered:
				out[i][j] = Published
			case l.Known:
				out[i][j] = Filtered
			default:
				fps = append(fps, l.Fingerprint)
				at = append(at, [2]int{i, j})
			}
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var held []bool
	if len(fps) > 0 {
		var err error
		if held, err = m.filter.Contains(ctx, fps...); err != nil {
			return nil, fmt.Errorf("frontier: filter: %w", err)
		}
	}
	var claims []dedup.Fingerprint
	once := make(map[dedup.Fingerprint]bool, len(fps))
	for k, fp := range fps {
		i, j := at[k][0], at[k][1]
		if held[k] || once[fp] {
			out[i][j] = Filtered
			continue
		}
		once[fp] = true
		out[i][j] = Published
		claims = append(claims, fp)
	}
	for i, p := range pages {
		for j, l := range p.Links {
			if out[i][j] == Published {
				msgs = append(msgs, l.Message)
			}
		}
	}
	if len(msgs) == 0 {
		return out, nil
	}
	if err := m.broker.Publish(ctx, queue, msgs...); err != nil {
		return nil, fmt.Errorf("frontier: publish: %w", err)
	}
	if len(claims) > 0 {
		if _, err := m.filter.Add(ctx, claims...); err != nil {
			return nil, fmt.Errorf("frontier: filter: %w", err)
		}
	}
	return out, nil
}
