package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/deployment"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/metrics"
)

// newCrawlCmd builds "crawl" (seed, then work) or "worker" (work only).
func newCrawlCmd(o *options, seed bool) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Join a crawl and work until it is done (with --idle-timeout=0, serve forever)",
		Args:  cobra.NoArgs,
	}
	if seed {
		cmd.Use = "crawl URL..."
		cmd.Short = "Seed the URLs, then work until the crawl is done"
		cmd.Long = `Seed the URLs, then work until the crawl is done.

With a shared broker, the same start URL given to several workers at once
(trawl crawl URL on every machine) is fetched once; trawl crawl URL on one
machine and trawl worker on the others, or trawl seed once, does as well.`
		cmd.Args = cobra.ArbitraryArgs
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return o.crawl(cmd.Context(), args, seed, adopt(cmd.Flags()))
	}
	o.addBackendFlags(cmd.Flags())
	o.addCrawlFlags(cmd.Flags())
	return cmd
}

func (o *options) crawl(ctx context.Context, args []string, seed bool, adopt []string) error {
	starts := make([]engine.StartURL, 0, len(args))
	var trusted []string
	for _, a := range args {
		s, err := parseStartURL(a)
		if err != nil {
			return err
		}
		starts = append(starts, s)
		u, _ := url.Parse(s.URL)
		trusted = append(trusted, engine.TrustedAddr(u)) // that port only
	}
	// Refused before anything is opened: the default mode would leave a
	// store in ./.trawl/NAME, a crawl that trawl stats then finds.
	local := o.broker == "" || o.broker == "memory"
	if seed && len(starts) == 0 && local {
		return usageError("crawl needs at least one start URL")
	}
	if !seed && local {
		return usageError("worker needs a shared broker: --broker=redis, rabbitmq or nats")
	}
	b, err := o.open(ctx, "")
	if err != nil {
		return err
	}
	defer b.Close()
	if err := b.CheckStarts(ctx); err != nil {
		return err
	}
	if o.flush {
		if err := b.Purge(ctx, false); err != nil {
			return err
		}
	}
	if len(starts) == 0 && !o.flush {
		// Bringing no start URL, it joins a crawl; a mistyped --name
		// would begin another (see AwaitCrawl for --idle-timeout 0).
		if err := b.AwaitCrawl(ctx, o.idleTimeout); err != nil {
			return err
		}
	}
	sink, err := o.openSink(b)
	if err != nil {
		return err
	}
	cfg := o.engineConfig()
	cfg.TrustedHosts = trusted
	cfg.Sink = sink
	cfg.Stats = engine.NewStats()
	cfg.Adopt, cfg.OverrideSettings = adopt, o.overrideSettings
	c, err := b.Crawler(cfg)
	if err != nil {
		sink.Close()
		return usageError("%v", err)
	}
	if err := c.Seed(ctx, starts...); err != nil {
		sink.Close()
		return err
	}

	var wg sync.WaitGroup
	side, stopSide := context.WithCancel(ctx)
	if o.metricsAddr != "" {
		srv, err := o.serveMetrics(cfg.Stats, b)
		if err != nil {
			stopSide()
			sink.Close()
			return err
		}
		wg.Go(func() {
			<-side.Done()
			sctx, cancel := context.WithTimeout(context.WithoutCancel(side), 2*time.Second)
			defer cancel()
			srv.Shutdown(sctx)
		})
	}
	start := time.Now()
	// scrapy-redis users push to NAME:start_urls; say where to push.
	wg.Go(func() { b.WatchMisplacedStarts(side, o.stderr, 5*time.Second) })
	queued := func(ctx context.Context) (broker.Counts, bool) { return b.Backlog(ctx) }
	if f, ok := stderrFile(o.stderr); ok && isTerminal(f) {
		wg.Go(func() { progress(side, f, cfg.Stats, queued) })
	} else if o.progressEvery > 0 {
		wg.Go(func() { progressLines(side, o.stderr, cfg.Stats, queued, o.progressEvery) })
	}
	runErr := c.Run(ctx)
	stopSide()
	wg.Wait()
	if err := sink.Close(); err != nil && runErr == nil {
		runErr = err
	}
	// One summary line, from this worker's counters (the shared stats got
	// them too), but for the dead letters: the crawl's, as its broker
	// counts them.
	sum := engine.Summarize(cfg.Stats.Snapshot(), time.Since(start))
	if n, ok := b.DeadLetterCount(ctx); ok {
		sum.DeadLetters = n
	}
	what := "crawl"
	if !seed {
		what = "worker"
	}
	switch {
	case ctx.Err() != nil && errors.Is(context.Cause(ctx), errTerminated):
		// A service stopped: a graceful stop is a success.
		fmt.Fprintf(o.stderr, "trawl: %s stopped (SIGTERM): %s; pages not done are back in the queue\n", what, sum)
		return nil
	case ctx.Err() != nil:
		fmt.Fprintf(o.stderr, "trawl: %s interrupted: %s\n", what, sum)
		return &exitError{code: 130, err: errors.New("interrupted; run the same command again to resume")}
	case runErr != nil:
		fmt.Fprintf(o.stderr, "trawl: %s failed: %s\n", what, sum)
		if runErr == engine.ErrNoPages && sum.DeadLetters > 0 {
			// No fetch failed: what was taken was dead-lettered (start
			// URLs that are not URLs), with its reason.
			says := "say"
			if sum.DeadLetters == 1 {
				says = "says"
			}
			return fmt.Errorf("%w; the crawl's %d dead %s %s why: trawl deadletter list", runErr, sum.DeadLetters, plural(sum.DeadLetters, "letter"), says)
		}
		return b.StartsHint(runErr) // the start URLs' key changed type meanwhile
	}
	if n, ok := b.Backlog(ctx); o.maxPages > 0 && ok && n.Ready+n.InFlight > 0 {
		// Not done: this worker fetched what --max-pages allows.
		fmt.Fprintf(o.stderr, "trawl: %s stopped at --max-pages %d: %s; %d %s still queued (the same command again fetches up to %d more)\n",
			what, o.maxPages, sum, n.Ready+n.InFlight, plural(n.Ready+n.InFlight, "request"), o.maxPages)
	} else {
		fmt.Fprintf(o.stderr, "trawl: %s done: %s\n", what, sum)
	}
	if n := sum.ErrorKinds[engine.ErrorForbiddenAddress]; n > 0 && !o.allowPrivate {
		fmt.Fprintf(o.stderr, "trawl: %d %s refused: private, loopback or link-local address (--allow-private allows them)\n", n, plural(n, "page"))
	}
	if why := sum.Empty(); why != "" {
		// A crawl was asked for pages; a worker may find its crawl done.
		if seed && !o.allowEmpty {
			return fmt.Errorf("%w: %s", errNoItems, why)
		}
		fmt.Fprintf(o.stderr, "trawl: no item: %s\n", why)
	}
	return nil
}

// errNoItems is the error of a crawl that wrote no item (exit 1, unless
// --allow-empty).
var errNoItems = errors.New("no item")

// openSink opens the item sink named by --out: a file, - for stdout,
// "redis" for the Redis list {NAME}:items, "queue" for the broker queue
// NAME:items, which on Redis is that list: a crawl's items have one
// format in Redis, which trawl items reads.
func (o *options) openSink(b *deployment.Deployment) (engine.Sink, error) {
	switch o.out {
	case "-", "":
		return o.openFileSink()
	case "redis":
		if b.Items == nil {
			return nil, usageError("--out=redis needs --broker=redis")
		}
		return b.Items, nil
	case "queue":
		return b.ItemQueue(), nil
	}
	// As a shell's > does, --out creates the file, not its folder: a
	// missing folder is more often a typo than a wish.
	if dir := filepath.Dir(o.out); dir != "." {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return nil, usageError("--out %s: no folder %s (create it first)", o.out, dir)
		}
	}
	return o.openFileSink()
}

// serveMetrics serves the crawl's metrics (package metrics) on /metrics.
func (o *options) serveMetrics(s *engine.Stats, b *deployment.Deployment) (*http.Server, error) {
	queues := []string{engine.RequestsQueue(o.name), engine.StartQueue(o.name)}
	if b.Starts != nil {
		queues = queues[:1] // start URLs are not a broker queue
	}
	c := metrics.New(metrics.Config{Name: o.name, Stats: s, Broker: b.Broker, Queues: queues, Filter: b.Filter, Logger: o.log})
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.Handler(metrics.NewRegistry(c)))
	ln, err := net.Listen("tcp", o.metricsAddr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	if everyInterface(o.metricsAddr) {
		fmt.Fprintf(o.stderr, "trawl: warning: --metrics-addr %s serves /metrics on every interface, to anyone who reaches this machine; 127.0.0.1%s keeps it local\n",
			o.metricsAddr, o.metricsAddr[strings.LastIndexByte(o.metricsAddr, ':'):])
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln) // ends with Shutdown
	return srv, nil
}

// progressLines logs a progress line about every interval, for a stderr
// that is not a terminal (a log file, a container's log). Its rate is in
// pages/s, as the summary's. Each wait is the interval less a random
// twentieth: a line counts the queues at Redis, and on a fixed beat it met
// the feeder's look at the start URLs, which ticks on a grid started
// with the crawl, every 30 s (an idle worker dialled a second pooled
// connection each time; see engine's presenceJitter).
func progressLines(ctx context.Context, w io.Writer, s *engine.Stats, queued backlog, every time.Duration) {
	t := time.NewTimer(every - rand.N(every/20+1))
	defer t.Stop()
	var last int64
	lastAt := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			t.Reset(every - rand.N(every/20+1))
		}
		pages, now := s.Get(engine.StatResponses), time.Now()
		n, ready := queuedText(ctx, queued)
		fmt.Fprintf(w, "trawl: crawled %d %s (at %.1f pages/s), %s queued%s, %d %s, %d %s\n",
			pages, plural(pages, "page"), float64(pages-last)/now.Sub(lastAt).Seconds(), n, ready,
			s.Get(engine.StatItems), plural(s.Get(engine.StatItems), "item"), s.Get(engine.StatErrors), plural(s.Get(engine.StatErrors), "error"))
		last, lastAt = pages, now
	}
}

// stderrFile is the file under w, if any.
func stderrFile(w io.Writer) (*os.File, bool) {
	switch w := w.(type) {
	case *os.File:
		return w, true
	case interface{ File() (*os.File, bool) }:
		return w.File()
	}
	return nil, false
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// backlog counts the crawl's requests and start URLs (Deployment.Backlog).
type backlog func(context.Context) (broker.Counts, bool)

// queuedText is what a progress line says of the crawl's backlog, from the
// broker's counts, not this worker's: n, the requests and start URLs not
// done yet (ready, delayed by a back-off, or leased to workers: read
// ahead, held back for their hosts, in progress), "12", and ready, of
// them those ready to be taken, " (3 ready)"; "?" and "" when counting
// failed.
func queuedText(ctx context.Context, queued backlog) (n, ready string) {
	c, ok := queued(ctx)
	if !ok {
		return "?", ""
	}
	return strconv.FormatInt(c.Ready+c.InFlight, 10), fmt.Sprintf(" (%d ready)", c.Ready-c.Delayed)
}

// progress redraws one status line on a terminal every second; queued is
// the crawl's backlog, not what this worker added to it.
func progress(ctx context.Context, f *os.File, s *engine.Stats, queued backlog) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	start := time.Now()
	for {
		select {
		case <-ctx.Done():
			fmt.Fprint(f, "\r\033[K")
			return
		case <-t.C:
		}
		pages := s.Get(engine.StatResponses)
		n, ready := queuedText(ctx, queued)
		fmt.Fprintf(f, "\r\033[Kpages %d  items %d  queued %s%s  filtered %d  retries %d  errors %d  %.1f pages/s",
			pages, s.Get(engine.StatItems), n, ready, s.Get(engine.StatFiltered),
			s.Get(engine.StatRetries), s.Get(engine.StatErrors), float64(pages)/time.Since(start).Seconds())
	}
}

func plural(n int64, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
