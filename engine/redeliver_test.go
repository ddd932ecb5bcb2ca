package engine_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/memory"
	"github.com/trawlhq/trawl/dedup"
	"github.com/trawlhq/trawl/dedup/local"
	"github.com/trawlhq/trawl/engine"
)

// linkSite serves "/" linking to /a, /b and /c, which link nowhere, and
// counts the fetches of each path.
type linkSite struct {
	URL string

	mu      sync.Mutex
	fetches map[string]int
}

func newLinkSite(t *testing.T) *linkSite {
	t.Helper()
	s := &linkSite{fetches: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.fetches[r.URL.Path]++
		s.mu.Unlock()
		w.Header().Set("Content-Type", "text/html")
		if r.URL.Path == "/" {
			fmt.Fprint(w, `<html><a href="/a">a</a> <a href="/b">b</a> <a href="/c">c</a> <a href="/a">a again</a></html>`)
			return
		}
		fmt.Fprint(w, `<html>leaf</html>`)
	}))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// counts returns the fetch counts of /, /a, /b and /c.
func (s *linkSite) counts() [4]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return [4]int{s.fetches["/"], s.fetches["/a"], s.fetches["/b"], s.fetches["/c"]}
}

// fp returns the fingerprint the engine computes for a GET of s.URL+path.
func (s *linkSite) fp(t *testing.T, path string) dedup.Fingerprint {
	t.Helper()
	u, err := url.Parse(s.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	return dedup.Fingerprinter{}.Fingerprint("GET", u, nil, nil)
}

// runUntilIdle runs a crawler on b and f until the crawl is idle and
// returns its counters.
func runUntilIdle(t *testing.T, b broker.Broker, f dedup.Filter) *engine.Stats {
	t.Helper()
	c, err := engine.New(b, f, engine.Config{
		Concurrency: 4, IdleTimeout: 100 * time.Millisecond, IgnoreRobots: true,
		TrustedHosts: []string{"127.0.0.1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := c.Run(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	return c.Stats()
}

// queueRoot puts the request for "/" into the frontier as a message on its
// attempt-th delivery (earlier deliveries are received and nacked).
func queueRoot(t *testing.T, b *memory.Broker, s *linkSite, attempt int) {
	t.Helper()
	ctx := t.Context()
	body, err := (&engine.Request{URL: s.URL + "/", Scope: "127.0.0.1"}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	q := engine.RequestsQueue("trawl")
	if err := b.Publish(ctx, q, broker.Message{Body: body}); err != nil {
		t.Fatal(err)
	}
	for range attempt - 1 {
		ds, err := b.Receive(ctx, q, 1)
		if err != nil || len(ds) != 1 {
			t.Fatalf("receive: %v, %v", ds, err)
		}
		if err := ds[0].Nack(ctx, 0); err != nil {
			t.Fatal(err)
		}
	}
}

func newMemoryBackends(t *testing.T) (*memory.Broker, *local.Filter) {
	t.Helper()
	b, err := memory.New(memory.Config{MaxDeliveries: 10})
	if err != nil {
		t.Fatal(err)
	}
	f, err := local.New(local.Config{Capacity: 10_000, FPRate: 1e-6})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(); f.Close() })
	return b, f
}

// A page redelivered after its first attempt published all its links (a
// broker crash flags every recovered message redelivered) publishes
// nothing again: every link carries its publication mark.
func TestRedeliveredPageRepublishesNothing(t *testing.T) {
	s := newLinkSite(t)
	b, f := newMemoryBackends(t)
	queueRoot(t, b, s, 1)
	newScene(t, b, f).published(s.fp(t, "/"))
	runUntilIdle(t, b, f)
	if got := s.counts(); got != [4]int{1, 1, 1, 1} {
		t.Fatalf("first crawl fetched /, /a, /b, /c %v times, want once each", got)
	}

	queueRoot(t, b, s, 2) // the same page, redelivered
	st := runUntilIdle(t, b, f)
	if got := s.counts(); got != [4]int{2, 1, 1, 1} {
		t.Errorf("after the redelivery of /, fetches of /, /a, /b, /c = %v, want [2 1 1 1]: links published again", got)
	}
	if n := st.Get(engine.StatEnqueued); n != 0 {
		t.Errorf("the redelivered page published %d requests, want 0", n)
	}
	if n := st.Get(engine.StatRepublished); n != 0 {
		t.Errorf("%s = %d, want 0", engine.StatRepublished, n)
	}
}

// A page whose earlier attempt claimed its links in the filter and died
// before publishing them publishes exactly those again, on a redelivery
// (attempt 2) and as a requeued dead letter (attempt 1 again); a link
// another page published (it has its mark) is not.
func TestRedeliveredPageRepublishesClaimedLinks(t *testing.T) {
	for _, attempt := range []int{2, 1} {
		t.Run(fmt.Sprintf("attempt%d", attempt), func(t *testing.T) {
			s := newLinkSite(t)
			b, f := newMemoryBackends(t)
			root, a, bb, c := s.fp(t, "/"), s.fp(t, "/a"), s.fp(t, "/b"), s.fp(t, "/c")
			// "/" was published by its parent; /c by another page; the
			// earlier attempt of "/" claimed /a, /b and /c and died.
			sc := newScene(t, b, f)
			sc.published(root)
			sc.published(c)
			sc.diedAfterClaiming(root, a, bb, c)
			queueRoot(t, b, s, attempt)
			st := runUntilIdle(t, b, f)
			if got := s.counts(); got != [4]int{1, 1, 1, 0} {
				t.Errorf("fetches of /, /a, /b, /c = %v, want [1 1 1 0]: exactly the claimed, unpublished links", got)
			}
			if n := st.Get(engine.StatRepublished); n != 2 {
				t.Errorf("%s = %d, want 2", engine.StatRepublished, n)
			}
			// The republished links got their marks: a further redelivery
			// publishes nothing.
			queueRoot(t, b, s, attempt+1)
			runUntilIdle(t, b, f)
			if got := s.counts(); got != [4]int{2, 1, 1, 0} {
				t.Errorf("after one more redelivery, fetches = %v, want [2 1 1 0]", got)
			}
		})
	}
}

// blindFilter hides the local filter's Contains: it cannot tell what it
// holds without adding it.
type blindFilter struct{ dedup.Filter }

// With a filter that cannot tell what it holds, a page processed again
// publishes every link the filter held (the old behaviour), so nothing is
// lost.
func TestRedeliveryWithBlindFilter(t *testing.T) {
	s := newLinkSite(t)
	b, f := newMemoryBackends(t)
	newScene(t, b, f).diedAfterClaiming(s.fp(t, "/"), s.fp(t, "/a"), s.fp(t, "/b"))
	queueRoot(t, b, s, 2)
	runUntilIdle(t, b, blindFilter{f})
	if got := s.counts(); got != [4]int{1, 1, 1, 1} {
		t.Errorf("fetches of /, /a, /b, /c = %v, want [1 1 1 1]", got)
	}
}

// partialFilter fails its first batch Add of more than one fingerprint
// after adding all of them but the first, as a pipeline of SADDs does when
// Redis refuses one command under maxmemory: a batch that is not all or
// nothing.
type partialFilter struct {
	*local.Filter
	mu     sync.Mutex
	marked bool // the crawl's mark was added (see engine.ErrStateLost): its Add is let through
	failed bool
}

func (f *partialFilter) Add(ctx context.Context, fps ...dedup.Fingerprint) ([]bool, error) {
	f.mu.Lock()
	fail := f.marked && !f.failed && len(fps) > 1
	f.marked = true
	f.failed = f.failed || fail
	f.mu.Unlock()
	if fail {
		if _, err := f.Filter.Add(ctx, fps[1:]...); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("partial add: OOM command not allowed")
	}
	return f.Filter.Add(ctx, fps...)
}

// TestPartialFilterAddLosesNothing: a page whose links were claimed in part
// by a failed batch is retried, and its retry publishes every link, the
// claimed ones included. With the parent's mark in the same batch as its
// links, the mark could be the part that failed: the retry took the page
// for new and the claimed links for other pages' links, and lost them.
func TestPartialFilterAddLosesNothing(t *testing.T) {
	s := newLinkSite(t)
	b, f := newMemoryBackends(t)
	pf := &partialFilter{Filter: f}
	queueRoot(t, b, s, 1)
	runUntilIdle(t, b, pf)
	if !pf.failed {
		t.Fatal("the filter never failed a batch: the test tests nothing")
	}
	if got, want := s.counts(), [4]int{1, 1, 1, 1}; got != want {
		t.Fatalf("fetches of /, /a, /b, /c = %v, want %v (/ once: held and written again)", got, want)
	}
}

// TestRedeliveryTrustsExpandedLinks: a claimed link without its publication
// mark but whose own page was expanded was published (its page was
// fetched), so a redelivered parent does not publish it again. That is a
// worker killed between publishing /b and recording its mark, after /b's
// page was fetched by another worker.
func TestRedeliveryTrustsExpandedLinks(t *testing.T) {
	s := newLinkSite(t)
	b, f := newMemoryBackends(t)
	root, a, bb, c := s.fp(t, "/"), s.fp(t, "/a"), s.fp(t, "/b"), s.fp(t, "/c")
	sc := newScene(t, b, f)
	sc.published(root)
	sc.diedAfterClaiming(root, a, bb, c)
	sc.expanded(bb)
	queueRoot(t, b, s, 2)
	runUntilIdle(t, b, f)
	if got := s.counts(); got != [4]int{1, 1, 0, 1} {
		t.Errorf("fetches of /, /a, /b, /c = %v, want [1 1 0 1]: /b was expanded, so it was published", got)
	}
}

// oomFilter refuses its first n Adds after the crawl's mark (see
// engine.ErrStateLost), as a Redis server out of memory does.
type oomFilter struct {
	*local.Filter
	mu     sync.Mutex
	marked bool
	left   int
}

func (f *oomFilter) Add(ctx context.Context, fps ...dedup.Fingerprint) ([]bool, error) {
	f.mu.Lock()
	fail := f.marked && f.left > 0
	if fail {
		f.left--
	}
	f.marked = true
	f.mu.Unlock()
	if fail {
		return nil, errors.New("OOM command not allowed when used memory > 'maxmemory'")
	}
	return f.Filter.Add(ctx, fps...)
}

// fullStarts is a start source on a Redis server out of memory: taking
// works (a pop frees memory), adding is refused, and, with returner,
// ReturnStarts puts back what was taken.
type fullStarts struct {
	sliceStarts
	returned int
}

func (s *fullStarts) AddStarts(context.Context, ...[]byte) error {
	return errors.New("OOM command not allowed when used memory > 'maxmemory'")
}

type returningStarts struct{ *fullStarts }

func (s returningStarts) ReturnStarts(ctx context.Context, ps ...[]byte) error {
	s.mu.Lock()
	s.returned += len(ps)
	s.ps = append(ps[:len(ps):len(ps)], s.ps...)
	s.mu.Unlock()
	return nil
}

// TestStartURLsKeptWhenWritesFail: start URLs taken from a StartSource
// whose move into the frontier fails (the filter refuses writes) go back
// to the source through StartReturner, although the source refuses
// AddStarts as the filter refuses writes; the crawl then fetches them.
// Before, they were put back with AddStarts, refused: lost.
func TestStartURLsKeptWhenWritesFail(t *testing.T) {
	s := newLinkSite(t)
	b, f := newMemoryBackends(t)
	fs := &fullStarts{sliceStarts: sliceStarts{ps: [][]byte{[]byte(s.URL + "/"), []byte("not a url")}}}
	of := &oomFilter{Filter: f, left: 2}
	c, err := engine.New(b, of, engine.Config{
		Concurrency: 4, IdleTimeout: 100 * time.Millisecond, IgnoreRobots: true,
		TrustedHosts: []string{"127.0.0.1"}, Starts: returningStarts{fs},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := c.Run(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	if fs.returned != 2 {
		t.Errorf("%d start URLs returned, want 2: the good one, once per refused Add", fs.returned)
	}
	if got, want := s.counts(), [4]int{1, 1, 1, 1}; got != want {
		t.Fatalf("fetches of /, /a, /b, /c = %v, want %v: the start URL was lost", got, want)
	}
}

// leasingStarts is a StartLeaser over a slice: it records the leases asked
// for, the batches confirmed and returned, and counts the batches out as
// pending.
type leasingStarts struct {
	sliceStarts
	plainTakes, out, done, returned int
	leases                          []time.Duration
}

func (s *leasingStarts) TakeStarts(ctx context.Context, max int) ([][]byte, error) {
	s.mu.Lock()
	s.plainTakes++
	s.mu.Unlock()
	return s.sliceStarts.TakeStarts(ctx, max)
}

func (s *leasingStarts) TakeLeased(ctx context.Context, max int, lease time.Duration) (engine.StartBatch, error) {
	ps, _ := s.sliceStarts.TakeStarts(ctx, max)
	if len(ps) == 0 {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.out++
	s.leases = append(s.leases, lease)
	return &sliceBatch{s: s, ps: ps}, nil
}

func (s *leasingStarts) PendingStarts(ctx context.Context) (int64, error) {
	n, _ := s.sliceStarts.PendingStarts(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	return n + int64(s.out), nil
}

type sliceBatch struct {
	s  *leasingStarts
	ps [][]byte
}

func (b *sliceBatch) Payloads() [][]byte { return b.ps }

func (b *sliceBatch) Done(context.Context) error {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	b.s.out--
	b.s.done++
	return nil
}

func (b *sliceBatch) Return(_ context.Context, ps ...[]byte) error {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	b.s.out--
	b.s.returned++
	b.s.ps = append(ps[:len(ps):len(ps)], b.s.ps...)
	return nil
}

// TestLeasedStartsConfirmed: a StartLeaser's batches are taken for
// Config.Lease, returned (not added) when the move into the frontier fails,
// and confirmed once it succeeds; its plain TakeStarts is never used.
func TestLeasedStartsConfirmed(t *testing.T) {
	s := newLinkSite(t)
	b, f := newMemoryBackends(t)
	ls := &leasingStarts{sliceStarts: sliceStarts{ps: [][]byte{[]byte(s.URL + "/"), []byte("not a url")}}}
	of := &oomFilter{Filter: f, left: 2}
	c, err := engine.New(b, of, engine.Config{
		Concurrency: 4, IdleTimeout: 100 * time.Millisecond, IgnoreRobots: true, Lease: 7 * time.Second,
		TrustedHosts: []string{"127.0.0.1"}, Starts: ls,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := c.Run(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	if ls.plainTakes != 0 || ls.returned != 2 || ls.done != 1 || ls.out != 0 {
		t.Errorf("%d plain takes, %d batches returned, %d confirmed, %d out; want 0, 2 (once per refused Add), 1, 0",
			ls.plainTakes, ls.returned, ls.done, ls.out)
	}
	for _, l := range ls.leases {
		if l != 7*time.Second {
			t.Errorf("lease %v, want Config.Lease (7s)", l)
		}
	}
	if got, want := s.counts(), [4]int{1, 1, 1, 1}; got != want {
		t.Fatalf("fetches of /, /a, /b, /c = %v, want %v", got, want)
	}
}
