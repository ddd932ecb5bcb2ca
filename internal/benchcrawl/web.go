package main

import (
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
	"sync"
	"time"

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
	{name: "--broker=redis, 4 workers", key: "redis4", server: "redis", workers: 4, bar: 0.85},
	{name: "--broker=nats, 4 workers (Redis filter)", key: "nats4", server: "nats", filter: true, workers: 4, bar: 0.85},
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
	dir         string
}

// webRun is one crawl of a mode and the fetch limit measured before it.
type webRun struct {
	mode       webMode
	hosts      int
	loop       window
	loopCPU    time.Duration // the loop process's, over its life
	crawl      window
	workerCPU  time.Duration // the workers' over their lives
	brokerCPU  time.Duration // the broker server's over the crawl's window; -1 without one
	commands   int64         // Redis commands (in scripts too), NATS messages or RabbitMQ socket reads; -1 unknown
	unit       string
	rss        int64 // the first worker's largest RSS seen
	loopTwice  int   // URLs the loop fetched twice (its retries of timeouts)
	tally      tally
	summary    string
	err        error
	loadBefore string
}

func (r *webRun) ratio() float64 {
	if r.loop.Rate() == 0 {
		return 0
	}
	return r.crawl.Rate() / r.loop.Rate()
}

func (r *webRun) cpuPerPage() time.Duration {
	return r.workerCPU / time.Duration(max(1, r.crawl.Requests))
}

func (r *webRun) loopPerPage() time.Duration {
	return r.loopCPU / time.Duration(max(1, r.loop.Requests))
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
	only := fs.String("modes", "", "comma-separated modes (memory, default, redis, nats, rabbitmq, redis4, nats4; default all)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	f.cfg.hang, f.cfg.seed = 2*f.timeout, 1
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
	keep := false
	defer func() { c.cleanup(keep) }()

	started := time.Now().UTC()
	load := loadavg()
	site, err := serveWeb(f.cfg)
	if err != nil {
		return err
	}
	logf("web site: %d hosts, %d URLs (pages and robots.txt), largest host %d pages", f.cfg.hosts, site.expected(), site.size[0])
	var runs []*webRun
	for _, m := range selected {
		if ctx.Err() != nil {
			break
		}
		r := f.runMode(ctx, site, m)
		runs = append(runs, r)
		keep = keep || r.err != nil
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
		big = f.runMode(ctx, bsite, webModes[0])
		big.hosts = cfg.hosts
		bsite.close()
		keep = keep || big.err != nil
	}
	fmt.Printf("make bench-web, %s to %s, %s; load average %s before, %s after; %d hosts (half HTTPS), %d pages and robots.txt files, Zipf sizes up to %d pages, latency median %v (1%% %v, %.2f%% of pages hang once past --timeout %v); --concurrency %d --per-host %d per worker%s; one crawl per mode, each after the loop\n\n",
		started.Format("2006-01-02 15:04"), time.Now().UTC().Format("15:04 UTC"), c.version(ctx), load, loadavg(),
		f.cfg.hosts, site.expected(), site.size[0], f.cfg.median, f.cfg.slow, 100*f.cfg.timeouts, f.timeout, f.concurrency, f.perHost, f.bloomNote())
	printWeb(os.Stdout, runs, big)
	return ctx.Err()
}

// runMode starts the mode's servers, measures the loop, then crawls.
func (f *webFlags) runMode(ctx context.Context, site *webSite, m webMode) *webRun {
	r := &webRun{mode: m, hosts: f.cfg.hosts, brokerCPU: -1, commands: -1, loadBefore: loadavg()}
	logf("%s: start (load %s)", m.name, r.loadBefore)
	var flags []string
	var srv *server
	if m.server != "" {
		var err error
		if srv, err = startServer(ctx, m.server); err != nil {
			r.err = err
			return r
		}
		defer srv.close()
		flags = append(flags, srv.flags...)
		r.unit = srv.countUnit
	}
	if m.filter {
		red, err := startServer(ctx, "redis")
		if err != nil {
			r.err = err
			return r
		}
		defer red.close()
		flags = slices.DeleteFunc(flags, func(s string) bool { return s == "--dedup=local" })
		flags = append(flags, "--dedup=set", red.flags[1], red.flags[2])
	}
	dir := filepath.Join(f.dir, fmt.Sprintf("%s-%d", m.key, f.cfg.hosts))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		r.err = err
		return r
	}
	ca := filepath.Join(dir, "ca.pem")
	if err := site.writeCA(ca); err != nil {
		r.err = err
		return r
	}
	if r.err = f.loop(ctx, site, dir, ca, m.workers, r); r.err != nil {
		return r
	}
	logf("%s: the loop: %.0f pages/s, %.0f µs CPU per page", m.name, r.loop.Rate(), micros(r.loopPerPage()))
	r.err = f.crawl(ctx, site, dir, ca, m, srv, append(slices.Clone(m.flags), flags...), r)
	if r.err == nil {
		logf("%s: %.0f pages/s, %.2f of the loop; %.0f µs worker CPU per page; trawl says %s", m.name, r.crawl.Rate(), r.ratio(), micros(r.cpuPerPage()), r.summary)
	} else {
		logf("%s: %v", m.name, r.err)
	}
	return r
}

// loop runs the fetch limit at the workers' concurrency in all.
func (f *webFlags) loop(ctx context.Context, site *webSite, dir, ca string, workers int, r *webRun) error {
	list := filepath.Join(dir, "urls.txt")
	if err := os.WriteFile(list, []byte(strings.Join(site.urls(), "\n")+"\n"), 0o644); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	site.reset()
	cmd := exec.CommandContext(ctx, self, "webfetch", "-urls", list, "-ca", ca,
		"-concurrency", fmt.Sprint(f.concurrency*workers), "-per-host", fmt.Sprint(f.perHost), "-timeout", f.timeout.String())
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("the loop: %w", err)
	}
	r.loop = site.window()
	r.loopCPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	t := site.tally()
	if t.missing > 0 {
		return fmt.Errorf("the loop: %w", t.check())
	}
	r.loopTwice = t.twice
	return nil
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

// crawl runs one crawl of m: `trawl crawl` with every host's home page as
// a start URL and, for more workers, `trawl worker` processes started
// once the site has answered its first request.
func (f *webFlags) crawl(ctx context.Context, site *webSite, dir, ca string, m webMode, srv *server, flags []string, r *webRun) error {
	ctx, cancel := context.WithTimeout(ctx, f.crawlLimit)
	defer cancel()
	idle := 3 * time.Second
	if m.server == "rabbitmq" {
		idle = max(idle, rabbitmq.MinIdleTimeout)
	}
	common := append([]string{"--name", "bench", "--concurrency", fmt.Sprint(f.concurrency), "--per-host", fmt.Sprint(f.perHost),
		"--timeout", f.timeout.String(), "--idle-timeout", idle.String(), "--progress-interval", "0", "--allow-private"}, flags...)
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
	var broker *sampler
	if srv != nil {
		broker = startSampler(srv.cpu, 100*time.Millisecond)
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
		cmd.WaitDelay = 30 * time.Second
		if err := cmd.Start(); err != nil {
			return err
		}
		cmds, logs = append(cmds, cmd), append(logs, lf.Name())
		return nil
	}
	crawlArgs := append(append([]string{"crawl", "--flush"}, common...), site.starts()...)
	if err := start(0, crawlArgs...); err != nil {
		return err
	}
	peak := watchRSS(cmds[0].Process.Pid)
	var errs []error
	if m.workers > 1 {
		if err := site.waitFirst(ctx); err != nil {
			errs = append(errs, err)
		}
		for i := 1; i < m.workers && len(errs) == 0; i++ {
			if err := start(i, append([]string{"worker"}, common...)...); err != nil {
				errs = append(errs, err)
			}
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
	if broker != nil {
		samples = broker.stop()
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	r.crawl = site.window()
	r.tally = site.tally()
	if broker != nil {
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

// printWeb prints the runs as a Markdown table beside issue 26's bars.
func printWeb(w io.Writer, runs []*webRun, big *webRun) {
	fmt.Fprintln(w, "| mode | loop pages/s | crawl pages/s | crawl / loop | bar | | worker CPU µs/page | loop CPU µs/page | ratio | bar | | broker server CPU µs/page | broker requests/page | bar | | worker RSS MiB | fetched twice | |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: | --- |")
	var notes []string
	for _, r := range runs {
		if r.err != nil {
			notes = append(notes, fmt.Sprintf("%s: %v", r.mode.name, r.err))
		}
		if r.tally.robots > 0 {
			notes = append(notes, fmt.Sprintf("%s: %d robots.txt files fetched more than once (the workers share them through Redis; a worker that finds none stored fetches it)", r.mode.name, r.tally.robots))
		}
		if r.loopTwice > 0 {
			notes = append(notes, fmt.Sprintf("%s: the loop before it fetched %d URLs twice (retries after its timeout)", r.mode.name, r.loopTwice))
		}
		if r.crawl.Requests == 0 {
			fmt.Fprintf(w, "| %s | | failed | | ≥ %.2f | MISS | | | | ≤ %.1f | | | | | | | | |\n", r.mode.name, r.mode.bar, webCPUBar)
			continue
		}
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
		fmt.Fprintf(w, "| %s | %.0f | %.0f | **%.2f** | ≥ %.2f | %s | %.0f | %.0f | **%.2f** | ≤ %.1f | %s | %s | %s | %s | %s | %.0f | %d | %s |\n",
			r.mode.name, r.loop.Rate(), r.crawl.Rate(), r.ratio(), r.mode.bar, pass(r.ratio() >= r.mode.bar),
			micros(r.cpuPerPage()), micros(r.loopPerPage()), cpuRatio, webCPUBar, pass(cpuRatio <= webCPUBar),
			brokerCPU, per, cbar, cverdict, float64(r.rss)/(1<<20), r.tally.twice, pass(r.tally.twice == 0))
	}
	if big != nil {
		i := slices.IndexFunc(runs, func(r *webRun) bool { return r.mode.key == "memory" && r.err == nil })
		switch {
		case big.err != nil:
			notes = append(notes, fmt.Sprintf("memory check at %d hosts: %v", big.hosts, big.err))
		case i < 0:
			notes = append(notes, "memory check: no --broker=memory crawl at the first host count to compare with (-modes memory)")
		default:
			small := runs[i]
			per := float64(big.rss-small.rss) / float64(big.hosts-small.hosts)
			fmt.Fprintf(w, "\nWorker RSS, --broker=memory: %.0f MiB at %d hosts, %.0f MiB at %d hosts (%d pages each): **%.0f bytes per host**, bar ≤ %d: %s (at %d hosts: %.0f pages/s, fetched twice %d)\n",
				float64(small.rss)/(1<<20), small.hosts, float64(big.rss)/(1<<20), big.hosts, small.crawl.Requests,
				per, webRSSBar, pass(per <= webRSSBar), big.hosts, big.crawl.Rate(), big.tally.twice)
		}
	}
	fmt.Fprintln(w, "\nPages/s: requests the site served (pages and robots.txt) from the first request to the end of the last, the requests of the pages that hang aside (where their timeout and retry fall is not scheduling); each crawl against the loop run just before it "+
		"(the loop: the same URLs, all known in advance, the same concurrency in all and per host, the same timeout). CPU: user + system over each process's life, TLS included. "+
		"Broker requests: Redis commands from INFO commandstats (those that scripts call included), NATS messages from clients (/connz in_msgs), RabbitMQ socket reads. "+
		"Fetched twice: pages requested more than once, beyond the one retry of a page that hung past the timeout (robots.txt files in the notes). Worker RSS: the first worker's largest.")
	for _, n := range notes {
		fmt.Fprintf(w, "\n%s\n", n)
	}
}
