package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/dashboard"
	"github.com/trawlhq/trawl/deployment"
	"github.com/trawlhq/trawl/engine"
)

// dashboardTokenEnv names the variable that gives the dashboard's token
// when --token is not given.
const dashboardTokenEnv = "TRAWL_DASHBOARD_TOKEN"

// deadLettersShown is how many dead letters per queue the dashboard lists.
const deadLettersShown = 20

// historyKey is the Metadata key of a slot of the dashboard's saved
// history (dashboard.HistorySlots of them).
func historyKey(slot int) string { return "dashboard.history." + strconv.Itoa(slot) }

func newDashboardCmd(o *options) *cobra.Command {
	var (
		addr, token string
		stallAfter  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve a live web page of a crawl: workers, hosts, totals, queues, dead letters, settings, charts",
		Long: "dashboard serves a page, and the JSON API behind it (/api/state, /api/history; POST /api/requeue, /api/pause, /api/resume), " +
			"for the crawl the deployment flags name, as trawl stats reads it. It listens on --addr, loopback by default; any other address needs --token.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if token == "" {
				token = os.Getenv(dashboardTokenEnv)
			}
			if err := checkDashboardAddr(addr, token); err != nil {
				return err
			}
			if stallAfter <= 0 {
				return usageError("--stall-after %v: want a positive duration", stallAfter)
			}
			ctx := cmd.Context()
			src, err := o.newDashboardSource(ctx)
			if err != nil {
				return err
			}
			defer src.Close()
			d := dashboard.New(src, dashboard.Config{Crawl: o.name, StallAfter: stallAfter, Token: token, Logger: o.log})
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("dashboard: %w", err)
			}
			srv := &http.Server{Handler: d, ReadHeaderTimeout: 10 * time.Second}
			run, stop := context.WithCancel(ctx)
			var wg sync.WaitGroup
			wg.Go(func() { d.Run(run) })
			wg.Go(func() {
				<-run.Done()
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				srv.Shutdown(sctx)
			})
			fmt.Fprintf(o.stdout, "http://%s/\n", ln.Addr())
			fmt.Fprintf(o.stderr, "trawl: dashboard of crawl %s on http://%s/ (Ctrl-C stops it)\n", o.name, ln.Addr())
			err = srv.Serve(ln)
			stop()
			wg.Wait()
			if errors.Is(err, http.ErrServerClosed) {
				return nil
			}
			return fmt.Errorf("dashboard: %w", err)
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", "127.0.0.1:8080", "listen address; one that is not loopback needs --token")
	f.StringVar(&token, "token", "", "require this token of every request (?token= or Authorization: Bearer); needed off loopback (default: "+dashboardTokenEnv+")")
	f.DurationVar(&stallAfter, "stall-after", 2*time.Minute, "mark the crawl stalled when requests are queued and no page was fetched for this long")
	o.addBackendFlags(f)
	o.addHiddenCrawlFlags(f)
	return cmd
}

// checkDashboardAddr refuses an address off loopback without a token.
func checkDashboardAddr(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return usageError("--addr %q: want host:port (127.0.0.1:8080)", addr)
	}
	if token != "" || host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return usageError("--addr %s is not a loopback address: give --token (or %s) so that only those who have it see and steer the crawl", addr, dashboardTokenEnv)
}

// dashboardSource reads a crawl for the dashboard through the deployment
// the flags name. A shared broker is opened once; the default
// mode's data directory is opened for each read and closed after it, so
// that a crawl can start in it while the dashboard runs.
type dashboardSource struct {
	o    *options
	mu   sync.Mutex             // one read at a time on the deployment
	kept *deployment.Deployment // the shared broker's, or nil in the default mode
}

var (
	_ dashboard.Requeuer     = (*dashboardSource)(nil)
	_ dashboard.HistoryStore = (*dashboardSource)(nil)
	_ dashboard.Pauser       = (*dashboardSource)(nil)
)

func (o *options) newDashboardSource(ctx context.Context) (*dashboardSource, error) {
	s := &dashboardSource{o: o}
	if o.broker == "" {
		// Check now that there is a crawl, for a clear error at start.
		b, err := o.open(ctx, "dashboard")
		if err != nil {
			return nil, err
		}
		b.Close()
		return s, nil
	}
	b, err := o.open(ctx, "dashboard")
	if err != nil {
		return nil, err
	}
	s.kept = b
	return s, nil
}

// Close closes the kept deployment.
func (s *dashboardSource) Close() error {
	if s.kept != nil {
		return s.kept.Close()
	}
	return nil
}

// with runs f on the deployment.
func (s *dashboardSource) with(ctx context.Context, f func(*deployment.Deployment) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kept != nil {
		return f(s.kept)
	}
	b, err := s.o.open(ctx, "dashboard")
	if err != nil {
		return err
	}
	defer b.Close()
	return f(b)
}

// Snapshot implements dashboard.Source.
func (s *dashboardSource) Snapshot(ctx context.Context) (dashboard.Snapshot, error) {
	var snap dashboard.Snapshot
	err := s.with(ctx, func(b *deployment.Deployment) error {
		stats, err := s.o.stats(ctx, b)
		if err != nil {
			return err
		}
		snap.Stats = stats
		snap.Queues = queuesOf(stats)
		if m := b.Metadata; m != nil {
			if snap.Workers, err = engine.Workers(ctx, m, s.o.name); err != nil {
				return err
			}
			if snap.Paused, err = engine.Paused(ctx, m, s.o.name); err != nil {
				return err
			}
			st, err := engine.StoredSettings(ctx, m, s.o.name)
			switch {
			case err == nil:
				snap.Settings = st
			case !errors.Is(err, broker.ErrNotFound):
				return err
			}
		}
		for _, q := range []string{engine.RequestsQueue(s.o.name), engine.StartQueue(s.o.name)} {
			ls, err := b.DeadLetters(q).DeadLetters(ctx, q, deadLettersShown)
			if err != nil {
				return err
			}
			for _, l := range ls {
				what, reason := describe(q, l)
				snap.DeadLetters = append(snap.DeadLetters, dashboard.DeadLetter{Queue: b.QueueName(q), What: what, Reason: reason})
			}
		}
		return nil
	})
	return snap, err
}

// queuesOf gathers the queue counts of stats (keys QUEUE/ready,
// QUEUE/in_flight, QUEUE/dead, QUEUE/delayed, as trawl stats prints
// them). A queue without a delayed count (the start URLs kept in Redis)
// has Delayed -1.
func queuesOf(stats map[string]int64) []dashboard.Queue {
	var out []dashboard.Queue
	idx := map[string]int{}
	for k, v := range stats {
		name, field, ok := cutLast(k, "/")
		if !ok || (field != "ready" && field != "in_flight" && field != "dead" && field != "delayed") {
			continue
		}
		i, seen := idx[name]
		if !seen {
			i = len(out)
			idx[name] = i
			out = append(out, dashboard.Queue{Name: name, Delayed: -1})
		}
		switch field {
		case "ready":
			out[i].Ready = v
		case "in_flight":
			out[i].InFlight = v
		case "dead":
			out[i].Dead = v
		case "delayed":
			out[i].Delayed = v
		}
	}
	slices.SortFunc(out, func(a, b dashboard.Queue) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func cutLast(s, sep string) (string, string, bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// Requeue implements dashboard.Requeuer: every dead letter of the crawl's
// queues goes back.
func (s *dashboardSource) Requeue(ctx context.Context) (int, error) {
	total := 0
	err := s.with(ctx, func(b *deployment.Deployment) error {
		for _, q := range []string{engine.RequestsQueue(s.o.name), engine.StartQueue(s.o.name)} {
			n, err := requeueAll(ctx, b.DeadLetters(q), q, 0)
			total += n
			if err != nil {
				return err
			}
		}
		return nil
	})
	return total, err
}

// SetPaused implements dashboard.Pauser: every worker of the crawl
// stops taking requests, or goes on (engine.SetPaused).
func (s *dashboardSource) SetPaused(ctx context.Context, paused bool) error {
	return s.with(ctx, func(b *deployment.Deployment) error {
		m := b.Metadata
		if m == nil {
			return fmt.Errorf("--broker=%s keeps no crawl state: it cannot pause the crawl", s.o.broker)
		}
		return engine.SetPaused(ctx, m, s.o.name, paused)
	})
}

// LoadHistory implements dashboard.HistoryStore: the history is kept in
// the crawl's metadata.
func (s *dashboardSource) LoadHistory(ctx context.Context, slot int) ([]byte, error) {
	var data []byte
	err := s.with(ctx, func(b *deployment.Deployment) error {
		m := b.Metadata
		if m == nil {
			return dashboard.ErrNoHistory
		}
		v, err := m.GetMeta(ctx, s.o.name, historyKey(slot))
		if errors.Is(err, broker.ErrNotFound) {
			return dashboard.ErrNoHistory
		}
		data = v
		return err
	})
	return data, err
}

// SaveHistory implements dashboard.HistoryStore.
func (s *dashboardSource) SaveHistory(ctx context.Context, slot int, data []byte) error {
	return s.with(ctx, func(b *deployment.Deployment) error {
		if m := b.Metadata; m != nil {
			return m.SetMeta(ctx, s.o.name, historyKey(slot), data)
		}
		return nil
	})
}
