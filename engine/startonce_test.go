package engine_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trawlhq/trawl/dedup/deduptest"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/syncbuf"
)

// TestStartURLGivenToThreeWorkersFetchedOnce: three workers each given the
// same start URL take it at once; the filter makes them claim it together
// and the winner record its publication mark only once the other two have
// looked for it (deduptest.ClaimRace). The site sees it fetched once, and
// every page once. Before enqueueStarts waited for the mark, the two
// others took it for claimed by a dead worker and published it again:
// "/" fetched three times.
func TestStartURLGivenToThreeWorkersFetchedOnce(t *testing.T) {
	const workers = 3
	s := newLinkSite(t)
	b, f := newMemoryBackends(t)
	race := deduptest.NewClaimRace(workers, s.fp(t, "/"))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cs := make([]*engine.Crawler, workers)
	for i := range cs {
		c, err := engine.New(b, race.With(f), engine.Config{
			Concurrency: 2, IdleTimeout: 100 * time.Millisecond, IgnoreRobots: true,
			TrustedHosts: []string{"127.0.0.1"}, StartBatch: 1,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Seed(ctx, engine.StartURL{URL: s.URL + "/"}); err != nil {
			t.Fatal(err)
		}
		cs[i] = c
	}
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for i, c := range cs {
		wg.Go(func() { errs[i] = c.Run(ctx) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("worker %d: %v", i, err)
		}
	}
	if got := s.counts(); got != [4]int{1, 1, 1, 1} {
		t.Errorf("fetches of /, /a, /b, /c = %v, want [1 1 1 1]: the start URL given to %d workers was fetched once per worker", got, workers)
	}
	var republished int64
	for _, c := range cs {
		republished += c.Stats().Get(engine.StatRepublished)
	}
	if republished != 0 {
		t.Errorf("%s = %d, want 0", engine.StatRepublished, republished)
	}
}

// TestStartURLOfDeadClaimerPublished: a start URL claimed in the filter by
// a worker that died before publishing it (no publication mark, and none
// comes) is waited on for half the lease, then published here: nothing is
// lost. A wait that lasts says why.
func TestStartURLOfDeadClaimerPublished(t *testing.T) {
	s := newLinkSite(t)
	b, f := newMemoryBackends(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := f.Add(ctx, s.fp(t, "/")); err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	c, err := engine.New(b, f, engine.Config{
		Concurrency: 2, IdleTimeout: 100 * time.Millisecond, IgnoreRobots: true,
		TrustedHosts: []string{"127.0.0.1"}, Lease: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Seed(ctx, engine.StartURL{URL: s.URL + "/"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.counts(); got != [4]int{1, 1, 1, 1} {
		t.Errorf("fetches of /, /a, /b, /c = %v, want [1 1 1 1]: the start URL of a dead claimer was lost", got)
	}
	if n := c.Stats().Get(engine.StatRepublished); n != 1 {
		t.Errorf("%s = %d, want 1", engine.StatRepublished, n)
	}
	if !strings.Contains(logs.String(), "start urls claimed by another worker are not published yet") {
		t.Errorf("a wait of 2.5s for a dead claimer said nothing:\n%s", logs.String())
	}
}
