package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/memory"
	"github.com/trawlhq/trawl/dedup"
	"github.com/trawlhq/trawl/dedup/local"
)

// pipeNet serves HTTP over in-memory pipes, so that a crawl runs inside a
// synctest bubble: goroutines blocked on a pipe are durably blocked and the
// bubble's fake clock advances.
type pipeNet struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipeNet() *pipeNet { return &pipeNet{conns: make(chan net.Conn), done: make(chan struct{})} }

func (p *pipeNet) Accept() (net.Conn, error) {
	select {
	case c := <-p.conns:
		return c, nil
	case <-p.done:
		return nil, net.ErrClosed
	}
}

func (p *pipeNet) Close() error   { p.once.Do(func() { close(p.done) }); return nil }
func (p *pipeNet) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80} }

func (p *pipeNet) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case p.conns <- server:
		return client, nil
	case <-p.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// recordingBroker records the attempt and priority of every delivery.
type recordingBroker struct {
	*memory.Broker
	mu   sync.Mutex
	seen []delivered
}

type delivered struct {
	queue             string
	attempt, priority int
	at                time.Time
}

func (b *recordingBroker) Receive(ctx context.Context, queue string, max int) ([]broker.Delivery, error) {
	ds, err := b.Broker.Receive(ctx, queue, max)
	b.record(ds...)
	return ds, err
}

func (b *recordingBroker) record(ds ...broker.Delivery) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, d := range ds {
		b.seen = append(b.seen, delivered{d.Queue(), d.Attempt(), d.Message().Priority, time.Now()})
	}
}

func (b *recordingBroker) Consume(ctx context.Context, queue string, prefetch int) (broker.Consumer, error) {
	c, err := b.Broker.Consume(ctx, queue, prefetch)
	if err != nil {
		return nil, err
	}
	return recordingConsumer{c, b}, nil
}

// recordingConsumer records what its broker.Consumer delivers.
type recordingConsumer struct {
	broker.Consumer
	b *recordingBroker
}

func (c recordingConsumer) Next(ctx context.Context) (broker.Delivery, error) {
	d, err := c.Consumer.Next(ctx)
	if d != nil {
		c.b.record(d)
	}
	return d, err
}

// requests returns the deliveries of the requests queue.
func (b *recordingBroker) requests() []delivered {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []delivered
	for _, d := range b.seen {
		if d.queue == RequestsQueue("trawl") {
			out = append(out, d)
		}
	}
	return out
}

// crawlInBubble crawls one page, served over pipes, whose callback fails
// the first failures times; it returns the broker and the times the
// callback was called and the dead letters of the frontier. It must run
// inside a synctest bubble.
func crawlInBubble(t *testing.T, cfg Config, failures int) (*recordingBroker, []time.Time, []broker.DeadLetter) {
	t.Helper()
	mb, err := memory.New(memory.Config{MaxDeliveries: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer mb.Close()
	b := &recordingBroker{Broker: mb}
	f, err := local.New(local.Config{Capacity: 1000, FPRate: 1e-6})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	pn := newPipeNet()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<html>leaf</html>")
	})}
	go srv.Serve(pn)
	defer srv.Close()

	var mu sync.Mutex
	var calls []time.Time
	cfg.IgnoreRobots = true
	cfg.IdleTimeout = time.Second
	cfg.Callbacks = map[string]Callback{"": func(ctx context.Context, resp *Response) (Result, error) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, time.Now())
		if len(calls) <= failures {
			return Result{}, errors.New("parser choked")
		}
		return Result{}, nil
	}}
	c, err := New(b, f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.kit.fetcher.transport.DialContext = pn.dial
	ctx := t.Context()
	if err := c.Seed(ctx, StartURL{URL: "http://site.test/", Priority: 7}); err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx); err != nil && !errors.Is(err, ErrNoPages) {
		t.Fatalf("run: %v", err)
	}
	dls, err := b.DeadLetters(ctx, RequestsQueue("trawl"), 10)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	return b, calls, dls
}

// A callback error is retried through the broker after the configured
// back-off (doubling, with at most ±25% jitter), on the same message: its
// Attempt grows and its priority stays.
func TestCallbackErrorRetriedWithBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const backoff = 2 * time.Second
		b, calls, _ := crawlInBubble(t, Config{RetryBackoff: backoff, MaxRetries: 3}, 2)
		if len(calls) != 3 {
			t.Fatalf("callback called %d times, want 3 (two failures, then success)", len(calls))
		}
		// The frontier is polled while idle, so a retry may be taken up to
		// one poll late.
		for i, want := range []time.Duration{backoff, 2 * backoff} {
			gap := calls[i+1].Sub(calls[i])
			if lo, hi := want*3/4, want*5/4+pollInterval; gap < lo || gap > hi {
				t.Errorf("retry %d came %v after the failure, want %v ±25%% (in [%v, %v])", i+1, gap, want, lo, hi)
			}
		}
		ds := b.requests()
		if len(ds) != 3 {
			t.Fatalf("%d deliveries of the request, want 3: %+v", len(ds), ds)
		}
		for i, d := range ds {
			if d.attempt != i+1 || d.priority != 7 {
				t.Errorf("delivery %d: attempt %d priority %d, want attempt %d priority 7 (a retry is a nack of the same message)",
					i+1, d.attempt, d.priority, i+1)
			}
		}
	})
}

// Past MaxRetries the request is dead-lettered with the reason, after
// MaxRetries+1 deliveries.
func TestCallbackErrorDeadLetteredPastRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, calls, dls := crawlInBubble(t, Config{RetryBackoff: 100 * time.Millisecond, MaxRetries: 2}, 100)
		if len(calls) != 3 {
			t.Errorf("callback called %d times, want 3 (MaxRetries 2)", len(calls))
		}
		if len(dls) != 1 || !strings.Contains(dls[0].Reason, "parser choked") || !strings.Contains(dls[0].Reason, "retries exhausted") {
			t.Errorf("dead letters = %+v, want one, its reason naming the exhausted retries and the callback's error", dls)
		}
	})
}

// failingFilter fails every Add after the first ok ones, as a Redis server
// out of memory refuses writes.
type failingFilter struct {
	*local.Filter
	mu sync.Mutex
	ok int
}

var errOOM = errors.New("OOM command not allowed when used memory > 'maxmemory'")

func (f *failingFilter) Add(ctx context.Context, fps ...dedup.Fingerprint) ([]bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ok == 0 {
		return nil, errOOM
	}
	f.ok--
	return f.Filter.Add(ctx, fps...)
}

// When the filter keeps refusing writes, the page is never acknowledged
// nor dead-lettered, and Run gives up with ErrBackendFailing after
// FailureTimeout, naming the error (issue 13.2: the crawl went on, dead-
// lettered the pages and exited 0).
func TestWriteFailuresStopRunWithoutAck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mb, lf := newBackends(t, memory.Config{MaxDeliveries: 100})
		f := &failingFilter{Filter: lf, ok: 2} // the crawl's mark (see state.go) and the start URL get through
		pn := newPipeNet()
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, `<html><a href="/a">a</a></html>`)
		})}
		go srv.Serve(pn)
		defer srv.Close()
		const timeout = 10 * time.Second
		var items int
		c, err := New(mb, f, Config{
			IgnoreRobots: true, IdleTimeout: time.Second, FailureTimeout: timeout, RetryBackoff: 100 * time.Millisecond,
			Sink: sinkFunc(func(_ context.Context, it []any) error { items += len(it); return nil }),
		})
		if err != nil {
			t.Fatal(err)
		}
		c.kit.fetcher.transport.DialContext = pn.dial
		ctx := t.Context()
		if err := c.Seed(ctx, StartURL{URL: "http://site.test/"}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err = c.Run(ctx)
		took := time.Since(start)
		if !errors.Is(err, ErrBackendFailing) || !strings.Contains(err.Error(), "OOM command not allowed") {
			t.Errorf("Run = %v, want ErrBackendFailing naming the filter's error", err)
		}
		if took < timeout || took > timeout+time.Second {
			t.Errorf("Run gave up after %v, want just after FailureTimeout %v", took, timeout)
		}
		n, err := mb.Counts(ctx, RequestsQueue("trawl"))
		if err != nil {
			t.Fatal(err)
		}
		if n.Ready+n.InFlight != 1 || n.Dead != 0 {
			t.Errorf("frontier after Run: %+v, want the page still there (1 ready or in flight), none dead", n)
		}
		if items != 0 {
			t.Errorf("%d items written for a page whose links could not be published", items)
		}
	})
}

// sinkFunc is a Sink from a function.
type sinkFunc func(context.Context, []any) error

func (f sinkFunc) Write(ctx context.Context, items []any) error { return f(ctx, items) }
func (f sinkFunc) Close() error                                 { return nil }
