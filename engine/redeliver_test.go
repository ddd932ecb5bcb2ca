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
// and dropping work (they grow nothing), adding is refused.
type fullStarts struct{ sliceStarts }

func (s *fullStarts) AddStarts(context.Context, ...[]byte) error {
	return errors.New("OOM command not allowed when used memory > 'maxmemory'")
}

// TestStartURLsKeptWhenWritesFail: start URLs taken from a StartSource
// whose move into the frontier fails (the filter refuses writes) stay in
// the source, although it refuses AddStarts as the filter refuses writes,
// and the crawl then fetches them; a payload rejected is dead-lettered
// once, and dropped at the first take even though that take's move
// failed (kept, it would be rejected again at every take).
func TestStartURLsKeptWhenWritesFail(t *testing.T) {
	s := newLinkSite(t)
	b, f := newMemoryBackends(t)
	fs := &fullStarts{sliceStarts{ps: [][]byte{[]byte(s.URL + "/"), []byte("not a url")}}}
	of := &oomFilter{Filter: f, left: 2}
	c, err := engine.New(b, of, engine.Config{
		Concurrency: 4, IdleTimeout: 100 * time.Millisecond, IgnoreRobots: true,
		TrustedHosts: []string{"127.0.0.1"}, Starts: fs,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := c.Run(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	if len(fs.rejected) != 1 || fs.rejected[0] != "not a url" || len(fs.ps) != 0 {
		t.Errorf("rejected %q, left %q; want the bad payload rejected once, nothing left", fs.rejected, fs.ps)
	}
	if got, want := s.counts(), [4]int{1, 1, 1, 1}; got != want {
		t.Fatalf("fetches of /, /a, /b, /c = %v, want %v: the start URL was lost", got, want)
	}
}
