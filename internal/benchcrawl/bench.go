package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/trawlhq/trawl/broker/rabbitmq"
)

// mode is one way of running the crawl, with issue 10's bar for it.
type mode struct {
	name   string   // as the table shows it
	flags  []string // trawl flags, beside the server's
	server string   // the server it needs, or ""
	bar    float64  // pages/s as a share of the fetch limit, at least
	idle   time.Duration
	key    string // the name -modes knows it by, if not its server's
	noIdle bool   // its idle cost is its server's mode's (not measured again)
}

// modes are the five of issue 10, in its order.
var modes = []mode{
	{name: "--broker=memory", flags: []string{"--broker=memory"}, bar: 0.75},
	{name: "embedded default", bar: 0.5},
	{name: "--broker=redis", server: "redis", bar: 0.5},
	{name: "--broker=nats", server: "nats", bar: 0.4},
	{name: "--broker=rabbitmq (stock)", server: "rabbitmq", bar: 0.35},
	// Issue 24: one Redis, eight partitions, one site (one host, so one
	// partition with work): its CPU model within 5% of --broker=redis's.
	{name: "--broker=redis --partitions 8", flags: []string{"--partitions=8"}, server: "redis", bar: 0.5, key: "redis8", noIdle: true},
}

// partitionsBar is issue 24's bar: the CPU model of --partitions 8 on one
// Redis is at least this share of --broker=redis's.
const partitionsBar = 0.95

// Idle bars (issue 10).
const (
	idleRateBar  = 10.0 // requests per second, at most
	idleConnsBar = 2    // connections, at most
)

// result is what one mode measured.
type result struct {
	mode mode
	runs []*run
	err  error       // the mode could not be measured (some runs may have been)
	idle *idleResult // nil without a server
}

// run is one crawl of a mode, between two measures of the fetch limit.
type run struct {
	fetch     float64       // the fetch limit, pages/s: the mean of the measures before and after
	crawl     window        // the crawl, as the site saw it
	items     int           // lines of the item file
	problems  []string      // what makes the crawl incomplete or wrong
	brokerCPU time.Duration // the server's CPU over the crawl's window; -1 if no server
	summary   string        // trawl's summary line

	// CPU over the crawl's window, and per page of the fetch limit (the
	// mean of the measures before and after): the model ratio.
	windowCPU struct{ site, worker, broker time.Duration }
	fetchCPU  time.Duration // site + fetch loop, per page
	fetchSite time.Duration // the site's alone, per page of the fetch limit
}

// perPage is d per page of the crawl, in µs.
func (r *run) perPage(d time.Duration) float64 {
	return micros(d / time.Duration(max(1, r.crawl.Requests)))
}

// micros is d in µs.
func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// cpuRatio is what the ratio would be if the machine were idle and every
// process CPU-bound: the fetch limit's CPU per page (the site's and the
// loop's) over the crawl's (the site's, the worker's and the broker
// server's), all measured in this run. Other load on the machine changes
// it little, unlike the wall-clock ratio.
func (r *run) cpuRatio() float64 {
	w := r.windowCPU
	crawl := float64(w.site+w.worker+w.broker) / float64(r.crawl.Requests)
	if crawl <= 0 {
		return 0
	}
	return float64(r.fetchCPU) / crawl
}

// ratio is the crawl's pages/s over the fetch limit's.
func (r *run) ratio() float64 {
	if r.fetch > 0 {
		return r.crawl.Rate() / r.fetch
	}
	return 0
}

// idleResult is the idle cost of one server.
type idleResult struct {
	count float64 // requests per second
	conns int     // held for at least half the window (see heldConns)
	most  int     // the most at any sample
	over  float64 // share of the samples above conns
	unit  string
	err   error
}

// idleSample is how often the idle window samples the connections held.
const idleSample = 250 * time.Millisecond

// heldConns sums up the connections sampled through an idle window: held,
// the count the worker held for at least half of it (the median), the
// most at any sample, and the share of the samples above held. A single
// reading at the window's end counted what was open at that instant: a
// pooled connection opened when two of the worker's timers overlapped,
// and closed within seconds, read as one the worker holds.
func heldConns(samples []int) (held, most int, over float64) {
	if len(samples) == 0 {
		return 0, 0, 0
	}
	s := slices.Sorted(slices.Values(samples))
	held, most = s[(len(s)-1)/2], s[len(s)-1]
	n := 0
	for _, c := range s {
		if c > held {
			n++
		}
	}
	return held, most, float64(n) / float64(len(s))
}

func benchMain(ctx context.Context, args []string) error {
	var c common
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	c.flags(fs, 10000)
	idleFor := fs.Duration("idle", 10*time.Second, "how long the idle cost is measured, per server")
	only := fs.String("modes", "", "comma-separated modes to run (memory, default, redis, nats, rabbitmq, redis8; default all)")
	runs := fs.Int("runs", 3, "crawls per mode; the table shows their median")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *idleFor <= 0 || *runs < 1 {
		return errors.New("-idle and -runs must be positive")
	}
	selected := modes
	if *only != "" {
		selected = nil
		for w := range strings.SplitSeq(*only, ",") {
			found := false
			for _, m := range modes {
				if key(m) == strings.TrimSpace(w) {
					selected, found = append(selected, m), true
				}
			}
			if !found {
				return fmt.Errorf("-modes: unknown mode %q", w)
			}
		}
	}
	if err := c.setup(ctx); err != nil {
		return err
	}
	var results []*result
	defer func() {
		keep := false
		for _, r := range results {
			keep = keep || r.err != nil || (r.idle != nil && r.idle.err != nil)
			for _, one := range r.runs {
				keep = keep || len(one.problems) > 0
			}
		}
		c.cleanup(keep)
	}()

	s, stopSite, err := serveSite(ctx, c.pages, c.latency)
	if err != nil {
		return err
	}
	defer stopSite()

	started := time.Now().UTC()
	load := loadavg()
	for _, m := range selected {
		if ctx.Err() != nil {
			break
		}
		m.idle = *idleFor
		results = append(results, c.runMode(ctx, s, m, *runs))
	}
	fmt.Printf("make bench-crawl, %s to %s, %s; load average %s before, %s after; %s, one worker, --concurrency %d --per-host %d, median of %d crawls per mode\n\n",
		started.Format("2006-01-02 15:04"), time.Now().UTC().Format("15:04 UTC"), c.version(ctx), load, loadavg(), c.siteDesc(), c.concurrency, c.concurrency, *runs)
	printTable(os.Stdout, results, c.pages)
	return ctx.Err()
}

// key is the name -modes knows a mode by.
func key(m mode) string {
	switch {
	case m.key != "":
		return m.key
	case m.server != "":
		return m.server
	case len(m.flags) == 0:
		return "default"
	}
	return "memory"
}

// runMode starts the mode's server, crawls runs times, each crawl between
// two measures of the fetch limit, measures the idle cost, and removes the
// server.
func (c *common) runMode(ctx context.Context, s *site, m mode, runs int) *result {
	r := &result{mode: m}
	logf("%s: start", m.name)
	var srv *server
	if m.server != "" {
		var err error
		if srv, err = startServer(ctx, m.server); err != nil {
			r.err = err
			return r
		}
		defer srv.close()
	}
	before, err := fetchLimit(ctx, s, c.pages, c.concurrency)
	if err != nil {
		r.err = err
		return r
	}
	for i := range runs {
		one := &run{brokerCPU: -1}
		if r.err = c.crawl(ctx, s, m, srv, one); r.err != nil {
			return r
		}
		after, err := fetchLimit(ctx, s, c.pages, c.concurrency)
		if err != nil {
			r.err = err
			return r
		}
		keepLog(filepath.Join(c.crawlDir(m), "crawl.log"), i+1)
		one.fetch = (before.Rate() + after.Rate()) / 2
		one.fetchCPU = (before.perPage() + after.perPage()) / 2
		one.fetchSite = (before.site/time.Duration(before.Requests) + after.site/time.Duration(after.Requests)) / 2
		before = after
		r.runs = append(r.runs, one)
		logf("%s: crawl %d of %d: %.0f pages/s, %.2f of the fetch limit (%.0f pages/s), CPU model %.2f; trawl says %s",
			m.name, i+1, runs, one.crawl.Rate(), one.ratio(), one.fetch, one.cpuRatio(), one.summary)
		logf("%s: crawl %d of %d: CPU µs per page: site %.0f, worker %.0f, broker server %.0f; fetch limit: site %.0f, loop %.0f",
			m.name, i+1, runs, one.perPage(one.windowCPU.site), one.perPage(one.windowCPU.worker), one.perPage(one.windowCPU.broker),
			micros(one.fetchSite), micros(one.fetchCPU-one.fetchSite))
	}
	if srv != nil && !m.noIdle {
		r.idle = c.idle(ctx, m, srv)
		if r.idle.err == nil {
			logf("%s: idle %.1f %s/s, %d connections (at most %d, above %d in %.0f%% of the samples)",
				m.name, r.idle.count, r.idle.unit, r.idle.conns, r.idle.most, r.idle.conns, 100*r.idle.over)
		}
	}
	return r
}

// crawlDir is the mode's scratch directory: the trawl process's working
// directory and data directory, the item file and the stderr logs.
func (c *common) crawlDir(m mode) string {
	return filepath.Join(c.dir, key(m))
}

// keepLog copies a crawl's stderr log beside it under another name, so
// that the next crawl of the mode does not overwrite it.
func keepLog(path string, n int) {
	if b, err := os.ReadFile(path); err == nil {
		_ = os.WriteFile(strings.TrimSuffix(path, ".log")+fmt.Sprintf("-%d.log", n), b, 0o644)
	}
}

// trawlCmd is a trawl process in dir, its stderr in dir/name.log. On ctx's
// end it gets SIGTERM, then SIGKILL after 30 s.
func (c *common) trawlCmd(ctx context.Context, dir, name string, args ...string) (*exec.Cmd, *os.File, error) {
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.CommandContext(ctx, c.trawl, args...)
	cmd.Dir, cmd.Env, cmd.Stderr = dir, trawlEnv(), logf
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	return cmd, logf, nil
}

// tail returns the last lines of the file at path.
func tail(path string, lines int) string {
	b, _ := os.ReadFile(path)
	l := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(l[max(0, len(l)-lines):], "\n")
}

// crawl runs one `trawl crawl` of the mode and fills in r.
func (c *common) crawl(ctx context.Context, s *site, m mode, srv *server, r *run) error {
	idle := 3 * time.Second
	if m.server == "rabbitmq" {
		idle = max(idle, rabbitmq.MinIdleTimeout) // shorter, and it warns
	}
	flags := m.flags
	if srv != nil {
		flags = append(slices.Clip(flags), srv.flags...)
	}
	p, err := c.newCrawl(ctx, s, c.crawlDir(m), "bench", idle, flags...)
	if err != nil {
		return err
	}
	defer p.close()
	const every = 100 * time.Millisecond
	site := startSampler(procCPU(os.Getpid()), every)
	var broker *sampler
	if srv != nil {
		broker = startSampler(srv.cpu, every)
	}
	err = p.start()
	var worker *sampler
	if err == nil {
		worker = startSampler(procCPU(p.cmd.Process.Pid), every)
		err = p.wait()
	}
	siteSamples, workerSamples := site.stop(), worker.stop()
	var brokerSamples []sample
	if broker != nil {
		brokerSamples = broker.stop()
	}
	r.summary = p.summary()
	if err != nil {
		return err
	}
	r.crawl = s.window()
	if r.windowCPU.site, err = cpuOver(siteSamples, r.crawl.First, r.crawl.Last); err != nil {
		return fmt.Errorf("the site's CPU: %w", err)
	}
	if r.windowCPU.worker, err = cpuOver(workerSamples, r.crawl.First, r.crawl.Last); err != nil {
		return fmt.Errorf("the worker's CPU: %w", err)
	}
	if broker != nil {
		if r.brokerCPU, err = cpuOver(brokerSamples, r.crawl.First, r.crawl.Last); err != nil {
			return fmt.Errorf("%s server's CPU: %w", srv.kind, err)
		}
		r.windowCPU.broker = r.brokerCPU
	}
	r.items, r.problems, err = p.check(s)
	return err
}

// crawlProc is one `trawl crawl` of the whole test site, as the bench and
// the soak run it: one worker, the crawl flushed first, --concurrency and
// --per-host at the run's concurrency, its items in dir/items.jsonl and
// its stderr in dir/crawl.log.
type crawlProc struct {
	cmd    *exec.Cmd
	log    *os.File
	items  string
	args   []string
	ctx    context.Context // ends after -timeout
	cancel context.CancelFunc
}

// newCrawl prepares the crawl of s named name in dir, with flags before
// the start URL, and resets the site's counts; start runs it. idle is its
// --idle-timeout. The caller closes it.
func (c *common) newCrawl(ctx context.Context, s *site, dir, name string, idle time.Duration, flags ...string) (*crawlProc, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	p := &crawlProc{items: filepath.Join(dir, "items.jsonl")}
	p.args = append([]string{"crawl", "--flush", "--name", name, "--data-dir", dir, "--out", p.items,
		"--concurrency", fmt.Sprint(c.concurrency), "--per-host", fmt.Sprint(c.concurrency),
		"--idle-timeout", idle.String(), "--progress-interval", "0"}, flags...)
	p.args = append(p.args, s.URL+"/")
	p.ctx, p.cancel = context.WithTimeout(ctx, c.timeout)
	var err error
	if p.cmd, p.log, err = c.trawlCmd(p.ctx, dir, "crawl", p.args...); err != nil {
		p.cancel()
		return nil, err
	}
	s.reset()
	return p, nil
}

// start starts the process.
func (p *crawlProc) start() error { return p.cmd.Start() }

// wait waits for the process to exit; an error names the command and
// carries the end of its stderr.
func (p *crawlProc) wait() error {
	if err := p.cmd.Wait(); err != nil {
		return fmt.Errorf("trawl %s: %w (%v)\n%s", strings.Join(p.args, " "), err, p.ctx.Err(), tail(p.log.Name(), 20))
	}
	return nil
}

// summary is trawl's "crawl done" line.
func (p *crawlProc) summary() string { return summaryLine(p.log.Name()) }

// check returns how many items the crawl wrote and what makes it
// incomplete or wrong: problems the site found, an item count other than
// one per page.
func (p *crawlProc) check(s *site) (items int, problems []string, err error) {
	if err := s.Verify(); err != nil {
		probs := strings.Split(err.Error(), "\n")
		problems = append(problems, fmt.Sprintf("the site: %d problems, first: %s", len(probs), probs[0]))
	}
	b, err := os.ReadFile(p.items)
	if err != nil {
		return 0, problems, err
	}
	items = bytes.Count(b, []byte("\n"))
	if want := s.Expected(); items != want {
		problems = append(problems, fmt.Sprintf("%d items, want %d", items, want))
	}
	return items, problems, nil
}

// close ends the crawl's timeout and closes its log.
func (p *crawlProc) close() {
	p.cancel()
	p.log.Close()
}

// summaryLine is trawl's summary from its stderr log: the "crawl done"
// line, or a worker's "worker done" or, for a worker stopped as a service
// is, "worker stopped (SIGTERM)".
func summaryLine(path string) string {
	b, _ := os.ReadFile(path)
	for line := range strings.Lines(string(b)) {
		for _, what := range []string{"crawl done: ", "worker done: ", "worker stopped (SIGTERM): "} {
			if _, rest, ok := strings.Cut(line, "trawl: "+what); ok {
				rest, _, _ = strings.Cut(rest, "; pages not done")
				return strings.TrimSpace(rest)
			}
		}
	}
	return "(no summary line)"
}

// idle runs `trawl worker --idle-timeout 0` of the crawl just done (its
// queues empty) and counts what reaches the server.
func (c *common) idle(ctx context.Context, m mode, srv *server) *idleResult {
	res := &idleResult{unit: srv.countUnit}
	dir := c.crawlDir(m)
	args := append([]string{"worker", "--name", "bench", "--data-dir", dir, "--out", filepath.Join(dir, "idle.jsonl"),
		"--concurrency", fmt.Sprint(c.concurrency), "--per-host", fmt.Sprint(c.concurrency),
		"--idle-timeout", "0", "--progress-interval", "0"}, m.flags...)
	args = append(args, srv.flags...)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	cmd, logFile, err := c.trawlCmd(wctx, dir, "idle", args...)
	if err != nil {
		res.err = err
		return res
	}
	defer logFile.Close()
	if err := cmd.Start(); err != nil {
		res.err = err
		return res
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }() // owned here: read below in every case

	// Warm-up: until the worker holds a connection, then 2 s more for it
	// to open its queues.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, conns, err := srv.requests(ctx)
		if err == nil && conns > 0 {
			break
		}
		if time.Now().After(deadline) {
			res.err = fmt.Errorf("idle worker: no connection to %s after 30 s (last: %v)\n%s", srv.kind, err, tail(logFile.Name(), 10))
			stop()
			<-exited
			return res
		}
		select {
		case err := <-exited:
			res.err = fmt.Errorf("idle worker exited: %v\n%s", err, tail(logFile.Name(), 10))
			return res
		case <-time.After(100 * time.Millisecond):
		}
	}
	wait := func(d time.Duration) error {
		select {
		case err := <-exited:
			return fmt.Errorf("idle worker exited: %v\n%s", err, tail(logFile.Name(), 10))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
			return nil
		}
	}
	if res.err = wait(2 * time.Second); res.err != nil {
		return res
	}
	// The window: the connections sampled each idleSample, the requests
	// counted between its first and last readings.
	n0, _, err := srv.requests(ctx)
	t0 := time.Now()
	n1, t1, conns := n0, t0, []int(nil)
	for err == nil && res.err == nil && t1.Sub(t0) < m.idle {
		if res.err = wait(min(idleSample, m.idle-t1.Sub(t0))); res.err == nil {
			var c int
			n1, c, err = srv.requests(ctx)
			t1 = time.Now()
			conns = append(conns, c)
		}
	}
	if err != nil {
		res.err = err
	} else if res.err == nil {
		res.count = float64(n1-n0) / t1.Sub(t0).Seconds()
		res.conns, res.most, res.over = heldConns(conns)
	}
	stop()
	if err := <-exited; err != nil && res.err == nil && !isSignalExit(err) {
		res.err = fmt.Errorf("idle worker on SIGTERM: %v\n%s", err, tail(logFile.Name(), 10))
	}
	return res
}

// isSignalExit tells whether err is the exit of a process stopped by
// SIGTERM through its command's context: trawl exits 0 after SIGTERM,
// having given back its work, and Wait then returns the context's error
// (exec.Cmd.Cancel); 130 is its exit after SIGINT.
func isSignalExit(err error) bool {
	if errors.Is(err, context.Canceled) {
		return true
	}
	var ee *exec.ExitError
	return errors.As(err, &ee) && (ee.ExitCode() == 130 || ee.ExitCode() == -1)
}

// sample is a CPU reading.
type sample struct {
	at  time.Time
	cpu time.Duration
	err error
}

// sampler reads a cpuMeter on a ticker until stopped.
type sampler struct {
	cancel  context.CancelFunc
	done    chan struct{}
	samples []sample
}

func startSampler(m cpuMeter, every time.Duration) *sampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &sampler{cancel: cancel, done: make(chan struct{})}
	read := func() {
		v, err := m()
		s.samples = append(s.samples, sample{at: time.Now(), cpu: v, err: err})
	}
	read()
	go func() { // owned by stop
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				read()
				return
			case <-t.C:
				read()
			}
		}
	}()
	return s
}

// stop ends the sampling and returns the samples (none from a nil sampler).
func (s *sampler) stop() []sample {
	if s == nil {
		return nil
	}
	s.cancel()
	<-s.done
	return s.samples
}

// cpuOver returns the CPU used from the last reading at or before from
// to the first at or after to. Failed readings are skipped (the last of a
// process that has exited, say).
func cpuOver(samples []sample, from, to time.Time) (time.Duration, error) {
	var a, b *sample
	var lastErr error
	for i := range samples {
		sm := &samples[i]
		if sm.err != nil {
			lastErr = sm.err
			continue
		}
		if !sm.at.After(from) {
			a = sm
		}
		if b == nil && !sm.at.Before(to) {
			b = sm
		}
	}
	if a == nil || b == nil {
		return 0, fmt.Errorf("no reading around the crawl's window (%d readings; last error: %v)", len(samples), lastErr)
	}
	return b.cpu - a.cpu, nil
}

// median returns the median of f over runs (the mean of the middle two
// for an even count), and the smallest and largest.
func median(runs []*run, f func(*run) float64) (med, lo, hi float64) {
	v := make([]float64, len(runs))
	for i, r := range runs {
		v[i] = f(r)
	}
	slices.Sort(v)
	n := len(v)
	if n == 0 {
		return 0, 0, 0
	}
	if n%2 == 1 {
		med = v[n/2]
	} else {
		med = (v[n/2-1] + v[n/2]) / 2
	}
	return med, v[0], v[n-1]
}

// printTable prints the results as a Markdown table, then the problems.
func printTable(w io.Writer, results []*result, pages int) {
	fmt.Fprintln(w, "| mode | fetch limit pages/s | crawl pages/s | crawl / fetch (min–max) | bar | | CPU model | broker CPU s per 1,000 pages | worker CPU s per 1,000 pages | idle requests/s | idle connections | idle bar |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |")
	var notes []string
	byKey := map[string][]*run{} // -modes may name a mode twice, to interleave
	for _, r := range results {
		byKey[key(r.mode)] = append(byKey[key(r.mode)], r.runs...)
		if r.err != nil {
			notes = append(notes, fmt.Sprintf("%s: %v", r.mode.name, r.err))
		}
		if len(r.runs) == 0 {
			fmt.Fprintf(w, "| %s | | failed | | ≥ %.2f | MISS | | | | | | |\n", r.mode.name, r.mode.bar)
			continue
		}
		fetch, _, _ := median(r.runs, func(r *run) float64 { return r.fetch })
		crawl, _, _ := median(r.runs, func(r *run) float64 { return r.crawl.Rate() })
		ratio, lo, hi := median(r.runs, (*run).ratio)
		worker, _, _ := median(r.runs, func(r *run) float64 { return r.windowCPU.worker.Seconds() * 1000 / float64(r.crawl.Requests) })
		model, _, _ := median(r.runs, (*run).cpuRatio)
		verdict := pass(ratio >= r.mode.bar)
		for i, one := range r.runs {
			if len(one.problems) > 0 {
				verdict = "MISS (incomplete)"
				notes = append(notes, fmt.Sprintf("%s, crawl %d: incomplete: %s", r.mode.name, i+1, strings.Join(one.problems, "; ")))
			}
		}
		cpu := "—" // no broker server
		switch {
		case r.runs[0].brokerCPU >= 0:
			per1k, _, _ := median(r.runs, func(r *run) float64 { return r.brokerCPU.Seconds() * 1000 / float64(r.crawl.Requests) })
			cpu = fmt.Sprintf("%.3f", per1k)
		case key(r.mode) == "default":
			cpu = "in the worker"
		}
		idleRate, idleConns, idleVerdict := "—", "—", ""
		if i := r.idle; i != nil {
			if i.err != nil {
				idleRate, idleVerdict = "failed", "MISS"
				notes = append(notes, fmt.Sprintf("%s idle: %v", r.mode.name, i.err))
			} else {
				idleRate = fmt.Sprintf("%.1f %s", i.count, i.unit)
				idleConns = fmt.Sprint(i.conns)
				if i.most > i.conns {
					idleConns += fmt.Sprintf(" (%d in %.0f%%)", i.most, 100*i.over)
				}
				idleVerdict = pass(i.count <= idleRateBar && i.conns <= idleConnsBar)
			}
		}
		fmt.Fprintf(w, "| %s | %.0f | %.0f | **%.2f** (%.2f–%.2f) | ≥ %.2f | %s | %.2f | %s | %.3f | %s | %s | %s |\n",
			r.mode.name, fetch, crawl, ratio, lo, hi, r.mode.bar, verdict, model, cpu, worker, idleRate, idleConns, idleVerdict)
	}
	fmt.Fprintf(w, "\nPages/s: requests the site served (%d pages, /, and robots.txt for a crawl) from the first request to the end of the last; "+
		"each crawl is compared with the mean of the fetch limits measured just before and just after it. "+
		"CPU model: the fetch limit's CPU per page (the site's and the loop's) over the crawl's (the site's, the worker's and the broker server's), "+
		"what the ratio would be on an idle machine if all were CPU-bound; load from elsewhere moves it far less than the wall-clock ratio. "+
		"CPU figures are over the crawl's window. Idle bar: ≤ %.0f requests/s and ≤ %d connections "+
		"(held for at least half the window, sampled every %v; in parentheses the most seen and the share of the samples above the count held).\n",
		pages, idleRateBar, idleConnsBar, idleSample)
	one, _, _ := median(byKey["redis"], (*run).cpuRatio)
	eight, _, _ := median(byKey["redis8"], (*run).cpuRatio)
	if one > 0 && eight > 0 {
		fmt.Fprintf(w, "\n--partitions 8 on one Redis: CPU model %.3f against --broker=redis's %.3f (medians of %d and %d crawls), %.3f of it (issue 24's bar: at least %.2f): %s\n",
			eight, one, len(byKey["redis8"]), len(byKey["redis"]), eight/one, partitionsBar, pass(eight/one >= partitionsBar))
	}
	for _, n := range notes {
		fmt.Fprintf(w, "\n%s\n", n)
	}
}

func pass(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}
