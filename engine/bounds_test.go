package engine

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/trawlhq/trawl/broker/memory"
	"github.com/trawlhq/trawl/internal/syncbuf"
)

// serveInBubble serves h over pipes for a crawler made by New in a
// synctest bubble; it returns the crawler's stop function's cleanup.
func serveInBubble(t *testing.T, c *Crawler, h http.Handler) {
	t.Helper()
	pn := newPipeNet()
	srv := &http.Server{Handler: h}
	go srv.Serve(pn)
	t.Cleanup(func() { srv.Close() })
	c.kit.fetcher.transport.DialContext = pn.dial
}

// A Retry-After over a minute holds the host for a minute, not for what
// the server asked (99999999 s stalled a crawl with no reason given), and
// the capped hold is logged with its host.
func TestRetryAfterCappedForHost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, f := newBackends(t, memory.Config{})
		var mu sync.Mutex
		var at []time.Time
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			at = append(at, time.Now())
			if len(at) == 1 {
				w.Header().Set("Retry-After", "99999999")
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.Header().Set("Content-Type", "text/html")
			w.Write([]byte("<html>ok</html>"))
		})
		var logs syncbuf.Buffer
		c, err := New(b, f, Config{IgnoreRobots: true, IdleTimeout: time.Second,
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		serveInBubble(t, c, h)
		ctx := t.Context()
		if err := c.Seed(ctx, StartURL{URL: "http://site.test/"}); err != nil {
			t.Fatal(err)
		}
		if err := c.Run(ctx); err != nil && !errors.Is(err, ErrNoPages) {
			t.Fatalf("run: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(at) != 2 {
			t.Fatalf("%d fetches, want 2 (a 503, then the retry)", len(at))
		}
		if gap := at[1].Sub(at[0]); gap > maxBackoff+2*pollInterval {
			t.Errorf("the retry came %v after the 503, want at most the one-minute cap (+ a poll)", gap)
		}
		if !strings.Contains(logs.String(), "Retry-After over the one-minute cap") || !strings.Contains(logs.String(), "host=site.test") {
			t.Errorf("no warning naming the host of the capped hold:\n%s", logs.String())
		}
	})
}
