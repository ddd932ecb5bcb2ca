package deduptest

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/trawlhq/trawl/dedup"
)

// ClaimRace wraps the filter that n workers of one crawl share, so that
// they claim fingerprint FP at the same moment and its first claimer
// publishes it late, whatever the scheduler does: each Add that holds FP
// waits until n of them came (the n claims reach the filter together), and
// each Add of FP's publication mark (dedup.PublishedMark) waits until n-1
// Contains calls asking about that mark have been answered (the others
// looked for the mark before the winner could record it). A worker that
// decides whether to publish FP again from that first look publishes it;
// one that waits for the mark does not. Use one ClaimRace per worker,
// made by With from one NewClaimRace.
type ClaimRace struct {
	fp, mark dedup.Fingerprint
	n        int

	mu              sync.Mutex
	claims, looks   int
	claimed, looked chan struct{}
}

// NewClaimRace returns the race of n workers on fp.
func NewClaimRace(n int, fp dedup.Fingerprint) *ClaimRace {
	return &ClaimRace{fp: fp, mark: dedup.PublishedMark(fp), n: n,
		claimed: make(chan struct{}), looked: make(chan struct{})}
}

// With returns f, which must be a dedup.Checker, taking part in the race.
func (r *ClaimRace) With(f dedup.Filter) dedup.Filter {
	return &raceFilter{Filter: f, checker: f.(dedup.Checker), race: r}
}

type raceFilter struct {
	dedup.Filter
	checker dedup.Checker
	race    *ClaimRace
}

// count adds one to *k and closes ch when it reaches n.
func (r *ClaimRace) count(k *int, n int, ch chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if *k++; *k == n {
		close(ch)
	}
}

func (f *raceFilter) Add(ctx context.Context, fps ...dedup.Fingerprint) ([]bool, error) {
	r := f.race
	if slices.Contains(fps, r.fp) {
		r.count(&r.claims, r.n, r.claimed)
		if err := wait(ctx, r.claimed, "the other workers' claims"); err != nil {
			return nil, err
		}
	}
	if slices.Contains(fps, r.mark) {
		if err := wait(ctx, r.looked, "the other workers' looks at the publication mark"); err != nil {
			return nil, err
		}
	}
	return f.Filter.Add(ctx, fps...)
}

func (f *raceFilter) Contains(ctx context.Context, fps ...dedup.Fingerprint) ([]bool, error) {
	in, err := f.checker.Contains(ctx, fps...)
	if r := f.race; err == nil && slices.Contains(fps, r.mark) {
		r.count(&r.looks, r.n-1, r.looked)
	}
	return in, err
}

func wait(ctx context.Context, ch chan struct{}, what string) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("deduptest: claim race: waiting for %s: %w", what, ctx.Err())
	}
}
