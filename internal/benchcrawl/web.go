package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/rabbitmq"
)

// webMode is one way of running the crawl in bench-web, with its bar.
type webMode struct {
	name    string
	key     string   // the name -modes knows it by
	flags   []string // trawl flags, beside the servers'
	server  string   // the broker server it needs, or ""
	filter  bool     // a Redis server for the duplicate filter too (NATS with several workers)
	workers int
	bar     float64 // pages/s as a share of the fetch limit, at least
}

var webModes = []webMode{
	{name: "--broker=memory", key: "memory", flags: []string{"--broker=memory"}, workers: 1, bar: 0.9},
	{name: "embedded default", key: "default", workers: 1, bar: 0.9},
	{name: "--broker=redis", key: "redis", server: "redis", workers: 1, bar: 0.9},
	{name: "--broker=nats", key: "nats", server: "nats", workers: 1, bar: 0.9},
	{name: "--broker=rabbitmq", key: "rabbitmq", server: "rabbitmq", workers: 1, bar: 0.8},
	// Several workers split the queues into twice as many partitions,
	// which they share out: each host is fetched by one worker (its
	// partition's), as the README recommends.
	{name: "--broker=redis, 4 workers, --partitions 8", key: "redis4", flags: []string{"--partitions", "8"}, server: "redis", workers: 4, bar: 0.85},
	{name: "--broker=nats, 4 workers, --partitions 8 (Redis filter)", key: "nats4", flags: []string{"--partitions", "8"}, server: "nats", filter: true, workers: 4, bar: 0.85},
}

// partitions is the --partitions of m's crawls (1 without the flag).
func (m webMode) partitions() int {
	i := slices.Index(m.flags, "--partitions")
	if i < 0 || i+1 >= len(m.flags) {
		return 1
	}
	n, err := strconv.Atoi(m.flags[i+1])
	if err != nil {
		return 1
	}
	return n
}

// Bars of issue 26 beside the pages/s ratio.
const (
	webCPUBar      = 2.0  // worker CPU per page over the loop's, at most
	webCommandsBar = 10.0 // Redis commands per page, at most
	webRSSBar      = 2048 // bytes of worker RSS per host, 1,000 to 10,000 hosts, at most
)

// webFlags are bench-web's settings.
type webFlags struct {
	trawl       string
	cfg         webConfig
	rssHosts    int
	concurrency int
	perHost     int
	timeout     time.Duration
	crawlLimit  time.Duration
	bloomFP     float64 // --bloom-fp-rate of the crawls whose filter is a local Bloom filter
	repeat      int     // crawls per mode, each followed by a loop
	trace       string  // a directory for each run's requests, or ""
	traces      int
	dir         string
	cpuProfile  string // a directory for the trawl processes' CPU profiles (TRAWL_CPUPROFILE), or ""
	profiled    int    // crawls profiled so far
}

// loopRun is one run of the fetch limit.
type loopRun struct {
	w     window
	cpu   time.Duration // the loop processes', over their lives
	twice int           // URLs it fetched twice (its retries of timeouts)
	use   siteUse
	conns connStats
	load  string // /proc/loadavg when it started
	procs int    // processes the loop ran in
	// concurrency is each process's
	concurrency int
	// split is, for several workers, the loop of the crawl's shape run
	// just after this one: one process per worker at a worker's
	// concurrency, each over the hosts of that worker's partitions (nil:
	// one worker, or it failed: splitErr).
	split    *loopRun
	splitErr error
}

func (l *loopRun) perPage() time.Duration { return l.cpu / time.Duration(max(1, l.w.Requests)) }

// webRun is one crawl of a mode and the runs of the fetch limit just
// before and just after it: the machine's load moves the loop's pages/s
// by 2× between runs of the bench (518 to 1,237), so a crawl is compared
// with its neighbours only, and the two say how much the machine moved.
type webRun struct {
	mode          webMode
	hosts         int
	before, after *loopRun // nil: not run (the memory check has none)
	crawl         window
	use           siteUse
	conns         connStats
	workerCPU     time.Duration // the workers' over their lives
	brokerCPU     time.Duration // the broker server's over the crawl's window; -1 without one
	commands      int64         // Redis commands (in scripts too), NATS messages or RabbitMQ socket reads; -1 unknown
	unit          string
	rss           int64 // the first worker's largest RSS seen
	tally         tally
	summary       string
	err           error
	load          string // /proc/loadavg when the crawl started
}

// loops are the runs of the fetch limit beside r's crawl.
func (r *webRun) loops() []*loopRun {
	var ls []*loopRun
	for _, l := range []*loopRun{r.before, r.after} {
		if l != nil && l.w.Rate() > 0 {
			ls = append(ls, l)
		}
	}
	return ls
}

// loopRate is the mean pages/s of the loops beside r's crawl.
func (r *webRun) loopRate() float64 { return meanRate(r.loops()) }

func (r *webRun) ratio() float64 {
	if r.loopRate() == 0 {
		return 0
	}
	return r.crawl.Rate() / r.loopRate()
}

func (r *webRun) cpuPerPage() time.Duration {
	return r.workerCPU / time.Duration(max(1, r.crawl.Requests))
}

// loopPerPage is the mean CPU per page of the loops beside r's crawl.
func (r *webRun) loopPerPage() time.Duration { return meanPerPage(r.loops()) }

// splitLoops are the loops of the crawl's shape beside r's crawl (see
// loopRun.split): none for one worker.
func (r *webRun) splitLoops() []*loopRun {
	var ls []*loopRun
	for _, l := range r.loops() {
		if l.split != nil && l.split.w.Rate() > 0 {
			ls = append(ls, l.split)
		}
	}
	return ls
}

// meanRate is the mean pages/s of ls, 0 for none.
func meanRate(ls []*loopRun) float64 {
	sum := 0.0
	for _, l := range ls {
		sum += l.w.Rate()
	}
	return sum / float64(max(1, len(ls)))
}

// meanPerPage is the mean CPU per page of ls, 0 for none.
func meanPerPage(ls []*loopRun) time.Duration {
	var sum time.Duration
	for _, l := range ls {
		sum += l.perPage()
	}
	return sum / time.Duration(max(1, len(ls)))
}

// loopInFlight is the loops' mean requests in flight.
func (r *webRun) loopInFlight() float64 {
	ls := r.loops()
	sum := 0.0
	for _, l := range ls {
		sum += l.use.inFlight
	}
	return sum / float64(max(1, len(ls)))
}

// webResult is a mode's crawls.
type webResult struct {
	mode webMode
	runs []*webRun
}

// ok is the crawls that succeeded, by their ratio to the loop.
func (m *webResult) ok() []*webRun {
	var rs []*webRun
	for _, r := range m.runs {
		if r.err == nil && r.crawl.Requests > 0 && r.loopRate() > 0 {
			rs = append(rs, r)
		}
	}
	slices.SortFunc(rs, func(a, b *webRun) int { return cmp.Compare(a.ratio(), b.ratio()) })
	return rs
}

// median is the crawl whose ratio to the loop is the median (the lower
// of the middle two for an even count), or nil if none succeeded.
func (m *webResult) median() *webRun {
	rs := m.ok()
	if len(rs) == 0 {
		return nil
	}
	return rs[(len(rs)-1)/2]
}

func webMain(ctx context.Context, args []string) error {
	var f webFlags
	fs := flag.NewFlagSet("web", flag.ContinueOnError)
	fs.StringVar(&f.trawl, "trawl", "", "the trawl binary (default: go build ./cmd/trawl into a temporary directory)")
	fs.IntVar(&f.cfg.hosts, "hosts", 1000, "hosts of the site, each on a loopback address 127.0.x.y")
	fs.IntVar(&f.cfg.pages, "pages", 20000, "pages of the site in all, about")
	fs.IntVar(&f.cfg.maxHost, "max-host", 200, "pages of the largest host, at most: at --per-host 2 and 100 ms a host serves 20 pages/s, so its size bounds the run's length")
	fs.DurationVar(&f.cfg.median, "latency", 100*time.Millisecond, "median latency of a request (log-normal, σ 0.5)")
	fs.DurationVar(&f.cfg.slow, "slow", 2*time.Second, "the latency of 1% of the requests")
	fs.Float64Var(&f.cfg.timeouts, "timeouts", 0.0005, "share of the pages whose first request hangs past -fetch-timeout")
	fs.IntVar(&f.rssHosts, "rss-hosts", 10000, "hosts of the memory check's site: one --broker=memory crawl at this many hosts, the same pages (0: no check)")
	fs.IntVar(&f.concurrency, "concurrency", 256, "--concurrency of each worker; the loop's is this times the workers")
	fs.IntVar(&f.perHost, "per-host", 2, "--per-host of the crawls and the loop")
	fs.DurationVar(&f.timeout, "fetch-timeout", 10*time.Second, "the crawls' --timeout and the loop's")
	fs.DurationVar(&f.crawlLimit, "crawl-limit", 10*time.Minute, "give up on one crawl after this long")
	fs.Float64Var(&f.bloomFP, "bloom-fp-rate", 1e-12, "--bloom-fp-rate of the crawls with a local filter (0: trawl's default, 1e-6): the check that every page was requested is of the engine, and at 1e-6 a Bloom filter's false positive leaves a page of ~21,000 unrequested in about 1 crawl of 270")
	fs.IntVar(&f.repeat, "repeat", 2, "crawls per mode, each followed by a loop; the table gives the median ratio to the loop and the smallest and largest")
	fs.StringVar(&f.trace, "trace", "", "write each run's requests to this directory (run-N.tsv: host, page, start and end in s from the window's start, timed, connection; then the connections closed)")
	fs.StringVar(&f.cpuProfile, "cpu-profile", "", "write a CPU profile of each trawl process to this directory (MODE-N-wI.pprof: crawl N, worker I; go tool pprof bin/trawl FILE)")
	only := fs.String("modes", "", "comma-separated modes (memory, default, redis, nats, rabbitmq, redis4, nats4; default all)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if f.repeat < 1 {
		return fmt.Errorf("-repeat %d: want at least 1", f.repeat)
	}
	f.cfg.hang, f.cfg.seed = 2*f.timeout, 1
	if f.cpuProfile != "" {
		var err error
		if f.cpuProfile, err = filepath.Abs(f.cpuProfile); err != nil {
			return err
		}
		if err := os.MkdirAll(f.cpuProfile, 0o755); err != nil {
			return err
		}
	}
	selected := webModes
	if *only != "" {
		selected = nil
		for w := range strings.SplitSeq(*only, ",") {
			i := slices.IndexFunc(webModes, func(m webMode) bool { return m.key == strings.TrimSpace(w) })
			if i < 0 {
				return fmt.Errorf("-modes: unknown mode %q", w)
			}
			selected = append(selected, webModes[i])
		}
	}
	c := common{trawl: f.trawl, pages: 1, concurrency: 1, timeout: f.crawlLimit}
	if err := c.setup(ctx); err != nil {
		return err
	}
	f.trawl, f.dir = c.trawl, c.dir
	keep := f.trace != "" // the workers' items and logs beside the trace
	defer func() { c.cleanup(keep) }()

	started := time.Now().UTC()
	load := loadavg()
	site, err := serveWeb(f.cfg)
	if err != nil {
		return err
	}
	site.tracing = f.trace != ""
	site.conns.tracing = site.tracing
	logf("web site: %d hosts, %d URLs (pages and robots.txt), largest host %d pages: at --per-host %d it alone takes %.1fs at least",
		f.cfg.hosts, site.expected(), site.size[0], f.perHost, f.topBound(site).Seconds())
	var results []*webResult
	var prev *loopRun // the last loop, at prevWorkers workers' concurrency
	prevWorkers := 0
	for _, m := range selected {
		if ctx.Err() != nil {
			break
		}
		res := &webResult{mode: m}
		results = append(results, res)
		if prev == nil || prevWorkers != m.workers {
			if prev, err = f.loop(ctx, site, m); err != nil {
				res.runs = append(res.runs, &webRun{mode: m, err: err})
				keep, prev = true, nil
				continue
			}
			prevWorkers = m.workers
		}
		prev = f.runMode(ctx, site, res, prev)
		for _, r := range res.runs {
			keep = keep || r.err != nil
		}
		if prev == nil {
			prevWorkers = 0
		}
	}
	site.close()
	var big *webRun
	if f.rssHosts > 0 && ctx.Err() == nil {
		cfg := f.cfg
		cfg.hosts = f.rssHosts
		bsite, err := serveWeb(cfg)
		if err != nil {
			return err
		}
		logf("memory check: %d hosts, %d URLs", cfg.hosts, bsite.expected())
		big = &webRun{mode: webModes[0], hosts: cfg.hosts, brokerCPU: -1, commands: -1, load: loadavg()}
		big.err = f.crawl(ctx, bsite, webModes[0], nil, webModes[0].flags, big)
		bsite.close()
		keep = keep || big.err != nil
	}
	fmt.Printf("make bench-web, %s to %s, %s; load average %s before, %s after; %d hosts (half HTTPS), %d pages and robots.txt files, Zipf sizes up to %d pages (the largest host alone takes %.1fs at least), latency median %v (1%% %v, %.2f%% of pages hang once past --timeout %v); --concurrency %d --per-host %d per worker%s; %d crawl(s) per mode, each between two loops\n\n",
		started.Format("2006-01-02 15:04"), time.Now().UTC().Format("15:04 UTC"), c.version(ctx), load, loadavg(),
		f.cfg.hosts, site.expected(), site.size[0], f.topBound(site).Seconds(), f.cfg.median, f.cfg.slow, 100*f.cfg.timeouts, f.timeout, f.concurrency, f.perHost, f.bloomNote(), f.repeat)
	printWeb(os.Stdout, results, big)
	return ctx.Err()
}

// topBound is the least time the site's largest host takes at --per-host.
func (f *webFlags) topBound(site *webSite) time.Duration { return site.topBound(f.perHost) }

// runMode crawls -repeat times, each crawl on fresh servers (a crawl's
// state in a server, its stored robots.txt files among it, would serve
// the next), after the loop before (prev) and followed by one; it
// returns the last loop, nil if it failed.
func (f *webFlags) runMode(ctx context.Context, site *webSite, res *webResult, prev *loopRun) *loopRun {
	m := res.mode
	for i := range f.repeat {
		if ctx.Err() != nil {
			break
		}
		r := &webRun{mode: m, hosts: f.cfg.hosts, before: prev, brokerCPU: -1, commands: -1, load: loadavg()}
		res.runs = append(res.runs, r)
		logf("%s: crawl %d of %d (load %s)", m.name, i+1, f.repeat, r.load)
		r.err = f.serveAndCrawl(ctx, site, m, r)
		if r.err != nil {
			logf("%s: %v", m.name, r.err)
		} else {
			logf("%s: %.0f pages/s; %.0f µs worker CPU per page; trawl says %s", m.name, r.crawl.Rate(), micros(r.cpuPerPage()), r.summary)
			logf("%s: the site: %v; %v", m.name, r.use, r.conns)
		}
		next, err := f.loop(ctx, site, m)
		if err != nil {
			r.err = errors.Join(r.err, err)
			return nil
		}
		r.after, prev = next, next
		if r.err == nil {
			logf("%s: %.2f of the loops before and after (%.0f and %.0f pages/s)", m.name, r.ratio(), r.before.w.Rate(), r.after.w.Rate())
			if ls := r.splitLoops(); len(ls) > 0 {
				logf("%s: %.2f of the %d-process loops' pages/s; worker CPU %.2f of theirs per page (%.2f of the one-process loops')",
					m.name, r.crawl.Rate()/meanRate(ls), m.workers, float64(r.cpuPerPage())/float64(meanPerPage(ls)), float64(r.cpuPerPage())/float64(r.loopPerPage()))
			}
		}
	}
	return prev
}

// serveAndCrawl starts the servers of m, crawls, and stops them.
func (f *webFlags) serveAndCrawl(ctx context.Context, site *webSite, m webMode, r *webRun) error {
	var flags []string
	var srv *server
	if m.server != "" {
		var err error
		if srv, err = startServer(ctx, m.server); err != nil {
			return err
		}
		defer srv.close()
		flags = append(flags, srv.flags...)
		r.unit = srv.countUnit
	}
	if m.filter {
		red, err := startServer(ctx, "redis")
		if err != nil {
			return err
		}
		defer red.close()
		flags = slices.DeleteFunc(flags, func(s string) bool { return s == "--dedup=local" })
		flags = append(flags, "--dedup=set", red.flags[1], red.flags[2])
	}
	return f.crawl(ctx, site, m, srv, append(slices.Clone(m.flags), flags...), r)
}

// saveTrace writes the site's requests of the run to -trace, if given.
func (f *webFlags) saveTrace(site *webSite, name string) {
	if f.trace == "" {
		return
	}
	f.traces++
	path := filepath.Join(f.trace, fmt.Sprintf("run-%d-%s.tsv", f.traces, name))
	if err := site.writeTrace(path); err != nil {
		logf("-trace: %v", err)
	}
}

// runDir is the directory of what a run at workers workers' concurrency
// keeps: the site's CA, the loop's URL list, the workers' logs.
func (f *webFlags) runDir(site *webSite, name string) (dir, ca string, err error) {
	dir = filepath.Join(f.dir, fmt.Sprintf("%s-%d", name, site.cfg.hosts))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	ca = filepath.Join(dir, "ca.pem")
	return dir, ca, site.writeCA(ca)
}

// loop runs the fetch limit at m's workers' concurrency in all, in one
// process; for several workers, then the loop of the crawl's shape
// (splitLoop) as its split.
func (f *webFlags) loop(ctx context.Context, site *webSite, m webMode) (*loopRun, error) {
	name := fmt.Sprintf("loop%d", m.workers)
	l, err := f.runLoop(ctx, site, name, [][]string{site.urls()}, f.concurrency*m.workers)
	if err != nil || m.workers < 2 {
		return l, err
	}
	if l.split, l.splitErr = f.splitLoop(ctx, site, m); l.splitErr != nil {
		logf("%s: %v", name, l.splitErr)
	}
	return l, nil
}

// splitLoop runs the fetch limit in the crawl's shape: m.workers
// processes at one worker's concurrency each, each over the hosts that
// host affinity gives one worker (splitByHost), so that the cap per host
// holds across them as it does across the workers. Beside the loop of
// one process at the concurrency in all, it tells what running m.workers
// Go runtimes on this machine costs a page, apart from the crawler.
func (f *webFlags) splitLoop(ctx context.Context, site *webSite, m webMode) (*loopRun, error) {
	return f.runLoop(ctx, site, fmt.Sprintf("loop%dx%d", m.workers, f.concurrency), splitByHost(site.urls(), m.workers, m.partitions()), f.concurrency)
}

// splitByHost splits urls into procs lists as host affinity splits a
// crawl's hosts among procs workers: a URL's host is in partition
// broker.PartitionOf of its partition key among parts, and partition p
// is the worker's of index p mod procs. Every URL of a host is in one
// list. With fewer partitions than procs, hosts are split into procs
// partitions.
func splitByHost(urls []string, procs, parts int) [][]string {
	parts = max(parts, procs)
	lists := make([][]string, procs)
	for _, s := range urls {
		host := s
		if u, err := url.Parse(s); err == nil {
			host = u.Host
		}
		i := broker.PartitionOf(broker.PartitionKey(host, broker.PartitionByHost), parts) % procs
		lists[i] = append(lists[i], s)
	}
	return lists
}

// runLoop runs the fetch limit: a process for each of lists, each GETting
// its URLs at concurrency, started together; the loop's window is the
// site's, its CPU the processes' sum.
func (f *webFlags) runLoop(ctx context.Context, site *webSite, name string, lists [][]string, concurrency int) (*loopRun, error) {
	dir, ca, err := f.runDir(site, name)
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var cmds []*exec.Cmd
	sizes := make([]string, len(lists))
	for i, urls := range lists {
		list := filepath.Join(dir, fmt.Sprintf("urls-%d.txt", i))
		if err := os.WriteFile(list, []byte(strings.Join(urls, "\n")+"\n"), 0o644); err != nil {
			return nil, err
		}
		cmd := exec.CommandContext(ctx, self, "webfetch", "-urls", list, "-ca", ca,
			"-concurrency", fmt.Sprint(concurrency), "-per-host", fmt.Sprint(f.perHost), "-timeout", f.timeout.String())
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		cmds, sizes[i] = append(cmds, cmd), fmt.Sprint(len(urls))
	}
	l := &loopRun{load: loadavg(), procs: len(cmds), concurrency: concurrency}
	site.reset()
	var errs []error
	for _, cmd := range cmds {
		if err := cmd.Start(); err != nil {
			errs = append(errs, err)
			break
		}
	}
	for _, cmd := range cmds {
		if cmd.Process == nil {
			continue
		}
		if err := cmd.Wait(); err != nil {
			errs = append(errs, err)
		}
		l.cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("the loop %s: %w", name, err)
	}
	l.w, l.use, l.conns = site.window(), site.use(), site.conns.read()
	f.saveTrace(site, name)
	t := site.tally()
	if t.missing > 0 {
		return nil, fmt.Errorf("the loop %s: %w", name, t.check())
	}
	l.twice = t.twice
	shape := fmt.Sprint(concurrency)
	if len(cmds) > 1 {
		shape = fmt.Sprintf("%d processes × %d (URLs %s)", len(cmds), concurrency, strings.Join(sizes, ", "))
	}
	logf("the loop at %s: %.0f pages/s, %.0f µs CPU per page (load %s); the site: %v; %v", shape, l.w.Rate(), micros(l.perPage()), l.load, l.use, l.conns)
	return l, nil
}

// bloomNote is the header's word on the local filters' false-positive rate.
func (f *webFlags) bloomNote() string {
	if f.bloomFP <= 0 {
		return ""
	}
	return fmt.Sprintf(", --bloom-fp-rate %g where the filter is local", f.bloomFP)
}

// localFilter tells whether a crawl of m with flags filters with a local
// Bloom filter (trawl's default without Redis), whose false positives
// are links never followed: by design, not the engine's loss.
func localFilter(m webMode, flags []string) bool {
	return m.server == "" || slices.Contains(flags, "--dedup=local")
}

// crawl runs one crawl of m with every host's home page as a start URL:
// `trawl crawl` for one worker; for more, `trawl worker` processes that
// serve until stopped, then `trawl seed` once they have shared out the
// partitions.
func (f *webFlags) crawl(ctx context.Context, site *webSite, m webMode, srv *server, flags []string, r *webRun) error {
	ctx, cancel := context.WithTimeout(ctx, f.crawlLimit)
	defer cancel()
	dir, ca, err := f.runDir(site, m.key)
	if err != nil {
		return err
	}
	idle := 3 * time.Second
	if m.server == "rabbitmq" {
		idle = max(idle, rabbitmq.MinIdleTimeout)
	}
	common := append([]string{"--name", "bench", "--concurrency", fmt.Sprint(f.concurrency), "--per-host", fmt.Sprint(f.perHost),
		"--timeout", f.timeout.String(), "--progress-interval", "0", "--allow-private"}, flags...)
	if f.bloomFP > 0 && localFilter(m, flags) {
		common = append(common, "--bloom-fp-rate", fmt.Sprint(f.bloomFP))
	}
	env := append(trawlEnv(), "SSL_CERT_FILE="+ca)
	site.reset()
	if srv != nil && srv.scripted != nil {
		if _, err := srv.scripted(ctx, true); err != nil {
			return err
		}
	}
	var n0 int64
	if srv != nil && srv.scripted == nil {
		var err error
		if n0, _, err = srv.requests(ctx); err != nil {
			return err
		}
	}
	var serverCPU *sampler
	if srv != nil {
		serverCPU = startSampler(srv.cpu, 100*time.Millisecond)
	}
	var (
		cmds []*exec.Cmd
		logs []string
	)
	start := func(i int, args ...string) error {
		wdir := filepath.Join(dir, fmt.Sprint("w", i))
		if err := os.MkdirAll(wdir, 0o755); err != nil {
			return err
		}
		lf, err := os.Create(filepath.Join(wdir, "trawl.log"))
		if err != nil {
			return err
		}
		defer lf.Close()
		args = append(args, "--data-dir", wdir, "--out", filepath.Join(wdir, "items.jsonl"))
		cmd := exec.CommandContext(ctx, f.trawl, args...)
		cmd.Dir, cmd.Env, cmd.Stderr = wdir, env, lf
		if f.cpuProfile != "" {
			cmd.Env = append(slices.Clone(env), "TRAWL_CPUPROFILE="+filepath.Join(f.cpuProfile, fmt.Sprintf("%s-%d-w%d.pprof", m.key, f.profiled, i)))
		}
		cmd.WaitDelay = 30 * time.Second
		if err := cmd.Start(); err != nil {
			return err
		}
		cmds, logs = append(cmds, cmd), append(logs, lf.Name())
		return nil
	}
	f.profiled++
	var errs []error
	if m.workers > 1 {
		// As docs/deploy.md runs workers as services: they serve
		// (--idle-timeout=0) before the crawl is seeded and have shared
		// out its partitions (host affinity) when `trawl seed` adds the
		// start URLs; once the site has served every URL they are
		// stopped with SIGTERM, as a service is (they finish what is in
		// progress and exit 0). The bench once started `trawl crawl` and
		// the others after its first request: that process leased home
		// pages of every host alone for a while, each such host then
		// fetched by two workers; workers started together after a seed
		// do the same until each has read the roster. (--log-level info
		// for the share's line: a few lines a crawl.)
		for i := range m.workers {
			if err := start(i, append([]string{"worker", "--idle-timeout", "0", "--log-level", "info"}, common...)...); err != nil {
				errs = append(errs, err)
				break
			}
		}
	} else if err := start(0, append(append([]string{"crawl", "--flush", "--idle-timeout", idle.String()}, common...), site.starts()...)...); err != nil {
		return err
	}
	if len(cmds) == 0 {
		return errors.Join(errs...)
	}
	peak := watchRSS(cmds[0].Process.Pid)
	if m.workers > 1 {
		if len(errs) == 0 {
			errs = append(errs, f.seedServed(ctx, site, dir, env, common, logs, r))
		}
		for _, cmd := range cmds {
			_ = cmd.Process.Signal(syscall.SIGTERM) // one that exited already says why below
		}
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("trawl worker %d: %w\n%s", i, err, tail(logs[i], 10)))
		}
		r.workerCPU += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	r.rss = peak()
	r.summary = summaryLine(logs[0])
	var samples []sample
	if serverCPU != nil {
		samples = serverCPU.stop()
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	r.crawl, r.use, r.conns = site.window(), site.use(), site.conns.read()
	f.saveTrace(site, m.key)
	r.tally = site.tally()
	if serverCPU != nil {
		var err error
		if r.brokerCPU, err = cpuOver(samples, r.crawl.First, r.crawl.Last); err != nil {
			return fmt.Errorf("%s server's CPU: %w", srv.kind, err)
		}
	}
	if srv != nil {
		var err error
		if srv.scripted != nil {
			r.commands, err = srv.scripted(ctx, false)
			if by, err := srv.byCommand(ctx); err == nil {
				logf("%s: Redis commands: %s", m.name, by)
			}
		} else {
			var n1 int64
			n1, _, err = srv.requests(ctx)
			r.commands = n1 - n0
			if m.server == "rabbitmq" {
				r.commands = -1 // rabbitmqctl counts open connections only: the crawl's are closed
			}
		}
		if err != nil {
			return err
		}
	}
	return r.tally.check()
}

// seedServed waits until the workers, whose logs are logs, have shared
// out the crawl's partitions, seeds it (the seed's CPU counted in r's),
// and waits until the site has served every URL.
func (f *webFlags) seedServed(ctx context.Context, site *webSite, dir string, env, flags, logs []string, r *webRun) error {
	if err := waitShares(ctx, logs); err != nil {
		return err
	}
	cpu, err := f.seed(ctx, dir, env, flags, site.starts())
	r.workerCPU += cpu
	if err != nil {
		return err
	}
	return site.waitServed(ctx, 3*f.timeout)
}

// shareLine starts what a worker logs when it prefers a share of the
// partitions (engine/affinity.go), followed by "P, Q of N: W workers".
const shareLine = "this worker now prefers partitions "

// sharing returns how many of logs (the workers' stderr) last said the
// worker prefers its share among len(logs) workers.
func sharing(logs []string) int {
	want := fmt.Sprintf(": %d workers", len(logs))
	n := 0
	for _, path := range logs {
		b, _ := os.ReadFile(path)
		i := bytes.LastIndex(b, []byte(shareLine))
		if i < 0 {
			continue
		}
		line, _, _ := bytes.Cut(b[i:], []byte("\n"))
		if bytes.Contains(line, []byte(want)) {
			n++
		}
	}
	return n
}

// waitShares waits until every worker of logs says it prefers its share
// of the partitions among them all (sharing), or ctx ends.
func waitShares(ctx context.Context, logs []string) error {
	// A worker reads the roster 0.5, 1.5 and 3 s after it starts and at
	// each announcement (every 4-5 s): a minute is ample.
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	begin, said := time.Now(), false
	for {
		n := sharing(logs)
		if n == len(logs) {
			return nil
		}
		if !said && time.Since(begin) > 5*time.Second {
			said = true
			logf("waiting for the %d workers to share out the partitions before seeding (%d say so in their logs so far)", len(logs), n)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the workers did not share out the partitions (%d of %d said so): %w", n, len(logs), ctx.Err())
		case <-t.C:
		}
	}
}

// seed runs `trawl seed` of starts with the crawl's flags, as a
// deployment of several workers does before it starts them, and returns
// its CPU (the work of a `trawl crawl` that seeds, counted with the
// workers').
func (f *webFlags) seed(ctx context.Context, dir string, env, flags, starts []string) (time.Duration, error) {
	sdir := filepath.Join(dir, "seed")
	if err := os.MkdirAll(sdir, 0o755); err != nil {
		return 0, err
	}
	args := append(append([]string{"seed", "--data-dir", sdir}, flags...), starts...)
	cmd := exec.CommandContext(ctx, f.trawl, args...)
	cmd.Dir, cmd.Env = sdir, env
	out, err := cmd.CombinedOutput()
	var cpu time.Duration
	if cmd.ProcessState != nil {
		cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	if err != nil {
		return cpu, fmt.Errorf("trawl seed: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return cpu, nil
}

// watchRSS samples the RSS of process pid every 100 ms until peak is
// called, which returns the largest reading (VmHWM where readable).
func watchRSS(pid int) (peak func() int64) {
	var mu sync.Mutex
	var most int64
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() { // owned by peak
		defer close(stopped)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			if cur, hwm, err := rss(pid); err == nil {
				mu.Lock()
				most = max(most, cur, hwm)
				mu.Unlock()
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() int64 {
		close(done)
		<-stopped
		mu.Lock()
		defer mu.Unlock()
		return most
	}
}

// printWeb prints the results as a Markdown table beside issue 26's bars.
func printWeb(w io.Writer, results []*webResult, big *webRun) {
	fmt.Fprintln(w, "| mode | loop pages/s, before–after | crawl pages/s | crawl / loop | min–max | bar | | in flight, crawl / loop | connections (TLS full), crawl / loop | load | | worker CPU µs/page | loop CPU µs/page | ratio | bar | | broker server CPU µs/page | broker requests/page | bar | | worker RSS MiB | fetched twice | |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: | --- |")
	var notes []string
	for _, res := range results {
		twice := 0
		for _, r := range res.runs {
			if r.err != nil {
				notes = append(notes, fmt.Sprintf("%s: %v", r.mode.name, r.err))
			}
			if r.tally.robots > 0 {
				notes = append(notes, fmt.Sprintf("%s: %d robots.txt files fetched more than once (the workers share them through Redis; a worker that finds none stored fetches it)", r.mode.name, r.tally.robots))
			}
			for _, l := range r.loops() {
				if l.twice > 0 {
					notes = append(notes, fmt.Sprintf("%s: a loop beside it fetched %d URLs twice (retries after its timeout)", r.mode.name, l.twice))
				}
				if l.split != nil && l.split.twice > 0 {
					notes = append(notes, fmt.Sprintf("%s: a %d-process loop beside it fetched %d URLs twice (retries after its timeout)", r.mode.name, l.split.procs, l.split.twice))
				}
				if l.splitErr != nil {
					notes = append(notes, fmt.Sprintf("%s: a loop of the crawl's shape beside it failed: %v", r.mode.name, l.splitErr))
				}
			}
			twice = max(twice, r.tally.twice)
		}
		r := res.median()
		if r == nil {
			fmt.Fprintf(w, "| %s | | failed | | | ≥ %.2f | MISS | | | | | | | | ≤ %.1f | | | | | | | | |\n", res.mode.name, res.mode.bar, webCPUBar)
			continue
		}
		ok := res.ok()
		cpuRatio := float64(r.cpuPerPage()) / float64(r.loopPerPage())
		brokerCPU, per, cbar, cverdict := "—", "—", "", ""
		if r.brokerCPU >= 0 {
			brokerCPU = fmt.Sprintf("%.0f", micros(r.brokerCPU)/float64(r.crawl.Requests))
		}
		if r.commands >= 0 {
			per = fmt.Sprintf("%.1f %s", float64(r.commands)/float64(r.crawl.Requests), r.unit)
			if r.mode.server == "redis" {
				cbar = fmt.Sprintf("≤ %.0f", webCommandsBar)
				cverdict = pass(float64(r.commands)/float64(r.crawl.Requests) <= webCommandsBar)
			}
		}
		fmt.Fprintf(w, "| %s | %s | %.0f | **%.2f** | %.2f–%.2f (%d) | ≥ %.2f | %s | %.0f / %.0f | %s | %s | | %.0f | %.0f | **%.2f** | ≤ %.1f | %s | %s | %s | %s | %s | %.0f | %d | %s |\n",
			r.mode.name, loopRates(r), r.crawl.Rate(), r.ratio(), ok[0].ratio(), ok[len(ok)-1].ratio(), len(ok), r.mode.bar, pass(r.ratio() >= r.mode.bar),
			r.use.inFlight, r.loopInFlight(), connsCell(r), load1(r.load),
			micros(r.cpuPerPage()), micros(r.loopPerPage()), cpuRatio, webCPUBar, pass(cpuRatio <= webCPUBar),
			brokerCPU, per, cbar, cverdict, float64(r.rss)/(1<<20), twice, pass(twice == 0))
	}
	printSplit(w, results)
	if big != nil {
		i := slices.IndexFunc(results, func(r *webResult) bool { return r.mode.key == "memory" && r.median() != nil })
		switch {
		case big.err != nil:
			notes = append(notes, fmt.Sprintf("memory check at %d hosts: %v", big.hosts, big.err))
		case i < 0:
			notes = append(notes, "memory check: no --broker=memory crawl at the first host count to compare with (-modes memory)")
		default:
			small := results[i].median()
			per := float64(big.rss-small.rss) / float64(big.hosts-small.hosts)
			fmt.Fprintf(w, "\nWorker RSS, --broker=memory: %.0f MiB at %d hosts, %.0f MiB at %d hosts (%d pages each): **%.0f bytes per host**, bar ≤ %d: %s (at %d hosts: %.0f pages/s, fetched twice %d)\n",
				float64(small.rss)/(1<<20), small.hosts, float64(big.rss)/(1<<20), big.hosts, small.crawl.Requests,
				per, webRSSBar, pass(per <= webRSSBar), big.hosts, big.crawl.Rate(), big.tally.twice)
		}
	}
	fmt.Fprintln(w, "\nPages/s: requests the site served (pages and robots.txt) from the first request to the end of the last, the requests of the pages that hang aside (where their timeout and retry fall is not scheduling). "+
		"Each crawl is compared with the mean of the loops run just before and just after it (the loop: the same URLs, all known in advance, the same concurrency in all and per host, the same timeout); "+
		"the row is the crawl with the median ratio (the lower of the middle two), min–max the ratios of the mode's crawls (how many). "+
		"In flight: the site's requests in flight, the mean over the window, of that crawl and of its loops. "+
		"Connections: TCP connections the site accepted (TLS handshakes that verified a certificate, not resumed), the crawl's and its loops' mean. Load: the 1-minute load average when that crawl started, on 2 cores. "+
		"CPU: user + system over each process's life, TLS included. "+
		"Broker requests: Redis commands from INFO commandstats (those that scripts call included), NATS messages from clients (/connz in_msgs), RabbitMQ socket reads. "+
		"Fetched twice: pages requested more than once in any of the mode's crawls, beyond the one retry of a page that hung past the timeout (robots.txt files in the notes). Worker RSS: the first worker's largest.")
	for _, n := range notes {
		fmt.Fprintf(w, "\n%s\n", n)
	}
}

// printSplit prints, for the modes of several workers, their median
// crawl against the loops of its shape (webRun.splitLoops): the CPU bar's
// loop is one process at the concurrency in all, while the crawl's CPU is
// the sum of one Go runtime per worker on the same cores; the loop of the
// crawl's shape runs as many runtimes, so the ratio to it is the crawl's
// code, and the two loops' ratio what the extra runtimes cost the machine.
func printSplit(w io.Writer, results []*webResult) {
	header := false
	for _, res := range results {
		r := res.median()
		if r == nil || len(r.splitLoops()) == 0 {
			continue
		}
		ls := r.splitLoops()
		if !header {
			header = true
			fmt.Fprintln(w, "\nThe same crawls against a loop of their shape (the CPU bar above compares the workers' CPU, summed over their processes, with one loop process at the concurrency in all): "+
				"the loop in one process per worker, each at one worker's concurrency over the hosts host affinity gives that worker (partition mod workers), run just after each loop above.")
			fmt.Fprintln(w)
			fmt.Fprintln(w, "| mode | split loop pages/s, before–after | crawl / split loop | split loop CPU µs/page | one-process loop CPU µs/page | split ÷ one-process loop CPU | | worker CPU µs/page | **CPU ÷ split loop** | CPU ÷ one-process loop (the bar's) |")
			fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |")
		}
		var rates []string
		for _, l := range ls {
			rates = append(rates, fmt.Sprintf("%.0f", l.w.Rate()))
		}
		split, one, crawl := meanPerPage(ls), r.loopPerPage(), r.cpuPerPage()
		fmt.Fprintf(w, "| %s, %d processes × %d | %s | %.2f | %.0f | %.0f | %.2f | | %.0f | **%.2f** | %.2f |\n",
			r.mode.name, ls[0].procs, ls[0].concurrency, strings.Join(rates, "–"), r.crawl.Rate()/meanRate(ls),
			micros(split), micros(one), float64(split)/float64(one), micros(crawl), float64(crawl)/float64(split), float64(crawl)/float64(one))
	}
}

// connsCell is r's connections and full TLS handshakes, and its loops'.
func connsCell(r *webRun) string {
	ls := r.loops()
	var conns, full int64
	for _, l := range ls {
		conns += l.conns.accepted
		full += l.conns.full
	}
	n := int64(max(1, len(ls)))
	return fmt.Sprintf("%d (%d) / %d (%d)", r.conns.accepted, r.conns.full, conns/n, full/n)
}

// loopRates is the pages/s of the loops beside r's crawl, before–after.
func loopRates(r *webRun) string {
	var s []string
	for _, l := range []*loopRun{r.before, r.after} {
		if l != nil {
			s = append(s, fmt.Sprintf("%.0f", l.w.Rate()))
		}
	}
	return strings.Join(s, "–")
}

// load1 is the 1-minute figure of a /proc/loadavg reading.
func load1(load string) string {
	f, _, _ := strings.Cut(load, " ")
	return f
}
