package engine

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/trawlhq/trawl/broker/memory"
	"github.com/trawlhq/trawl/dedup"
	"github.com/trawlhq/trawl/frontier"
	"github.com/trawlhq/trawl/internal/syncbuf"
)

// markingFrontier holds a worker between adding the crawl's mark to the
// frontier and storing it in the metadata (markCrawl's two steps), and
// says when another worker looked for it.
type markingFrontier struct {
	frontier.Frontier
	added, checked, release chan struct{}
	once                    sync.Once
}

func (f *markingFrontier) Mark(ctx context.Context, fps ...dedup.Fingerprint) error {
	err := f.Frontier.Mark(ctx, fps...)
	if f.release != nil {
		f.once.Do(func() { close(f.added) })
		<-f.release
	}
	return err
}

func (f *markingFrontier) Marked(ctx context.Context, fps ...dedup.Fingerprint) ([]bool, error) {
	r, err := f.Frontier.Marked(ctx, fps...)
	if f.checked != nil {
		f.once.Do(func() { close(f.checked) })
	}
	return r, err
}

// TestWorkersMarkingTogether: a worker that starts while another is marking
// a new crawl (the filter's records added, the metadata's mark not yet)
// joins the crawl the other marks; it does not take the crawl for one whose
// state was lost.
func TestWorkersMarkingTogether(t *testing.T) {
	mb, lf := newBackends(t, memory.Config{})
	fr := frontier.Compose(mb, lf, frontier.ComposeConfig{})
	a := &markingFrontier{Frontier: fr, added: make(chan struct{}), release: make(chan struct{})}
	b := &markingFrontier{Frontier: fr, checked: make(chan struct{})}
	first, err := NewOn(a, Config{Name: "together"})
	if err != nil {
		t.Fatal(err)
	}
	second, err := NewOn(b, Config{Name: "together"})
	if err != nil {
		t.Fatal(err)
	}
	errA := make(chan error, 1)
	go func() { errA <- first.markCrawl(t.Context(), true) }()
	<-a.added // the filter holds the mark; the metadata does not yet
	errB := make(chan error, 1)
	go func() { errB <- second.markCrawl(t.Context(), true) }()
	<-b.checked // the second worker found the filter's record
	close(a.release)
	if err := <-errA; err != nil {
		t.Fatalf("first worker: %v", err)
	}
	if err := <-errB; err != nil {
		t.Fatalf("second worker, started while the first marked the crawl: %v", err)
	}
	if first.state.id == "" || first.state.id != second.state.id {
		t.Fatalf("crawl ids %q and %q, want one", first.state.id, second.state.id)
	}
}

// TestAwaitMarkSaysWhy: a worker that finds the filter's record of a begun
// crawl but no mark in the broker waits for the mark (markWait) and, past
// markWaitSays, says on its log what it waits for; then, the mark still
// missing, it takes the crawl's state for lost.
func TestAwaitMarkSaysWhy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mb, lf := newBackends(t, memory.Config{})
		fr := frontier.Compose(mb, lf, frontier.ComposeConfig{})
		named, _ := filterMarks("waits", "")
		if err := fr.Mark(t.Context(), named); err != nil {
			t.Fatal(err)
		}
		var logs syncbuf.Buffer
		c, err := NewOn(fr, Config{Name: "waits", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- c.markCrawl(t.Context(), true) }()
		const why = "waiting for the worker marking it"
		time.Sleep(markWaitSays - time.Millisecond)
		synctest.Wait()
		if strings.Contains(logs.String(), why) {
			t.Fatalf("said why before %v:\n%s", markWaitSays, logs.String())
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if n := strings.Count(logs.String(), why); n != 1 {
			t.Fatalf("at %v the log says why %d times, want once:\n%s", markWaitSays, n, logs.String())
		}
		if err := <-done; !errors.Is(err, ErrStateLost) {
			t.Fatalf("markCrawl = %v, want ErrStateLost", err)
		}
		if n := strings.Count(logs.String(), why); n != 1 {
			t.Errorf("the log says why %d times, want once:\n%s", n, logs.String())
		}
	})
}
