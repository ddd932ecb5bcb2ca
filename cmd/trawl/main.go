// Command trawl is a distributed web crawler: workers on any number of
// machines share one frontier in a broker and one duplicate filter.
//
// Run "trawl help" for the commands and flags.
//
// This command holds no crawl behaviour: it parses flags, the environment
// and the config file into a deployment.Config and an engine.Config, and
// calls the library, so a library user gets what the CLI does:
//
//   - the backends, the shared counters, per-host limits and settings,
//     the delivery limits and leases, purge: deployment.Open, the one
//     composition root (trawl.Config.Deployment for a library program);
//   - seeding (trawl seed and crawl): engine.Crawler.Seed, which joins the
//     crawl's settings first;
//   - the duplicate filter's persistence: dedup/local's journal;
//   - completion, the summary and its warnings: Crawler.Run (idle exit)
//     and engine.Summarize.
//
// What stays here is presentation: flags, the progress line, the metrics
// listener, the warning about scrapy-redis's unread start_urls key, exit
// codes. It imports no broker or filter backend (TestNoBackendImports).
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/gctune"
)

// startGC sets the garbage collector's policy unless the user set one:
// a crawler allocates a page's body and links per page and keeps little,
// so at Go's default of 100 the collector takes a third of a worker's
// CPU, at 400 a tenth. trawl gives the heap 128 MiB of headroom over what
// is live, within 100 and 400 percent (gctune.Default): 400 while the
// live heap is 32 MiB or less, 100 once it is 128 MiB or more, so that
// state kept per host grows the heap twice over, not five times. An
// explicit GOGC is left as it is; with GOMEMLIMIT alone the percent is
// 400, bounded by the user's limit (docs/deploy.md). It returns the tuner
// to stop, nil when none runs.
func startGC(lookupEnv func(string) (string, bool)) *gctune.Tuner {
	if _, ok := lookupEnv("GOGC"); ok {
		return nil
	}
	if _, ok := lookupEnv("GOMEMLIMIT"); ok {
		debug.SetGCPercent(gctune.Default.Max)
		return nil
	}
	return gctune.Start(gctune.Default)
}

func main() {
	gc := startGC(os.LookupEnv)
	// go-redis logs connection failures through a global logger; the
	// command reports them itself, in one line.
	goredis.SetLogger(quietRedis{})
	stop := startCPUProfile(os.Getenv("TRAWL_CPUPROFILE"), os.Stderr)
	stopMem := startMemProfile(os.Getenv("TRAWL_MEMPROFILE"), 100*time.Millisecond, os.Stderr)
	code := run(os.Args[1:], os.Stdout, os.Stderr)
	stopMem()
	stop()
	gc.Stop()
	os.Exit(code)
}

// startCPUProfile writes a CPU profile of the whole process to path until
// stop is called, for profiling a worker where it runs (make bench-web's
// -cpu-profile). An empty path profiles nothing; a profile that cannot
// start says why in one line and the command runs without it.
func startCPUProfile(path string, stderr io.Writer) (stop func()) {
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		if err = pprof.StartCPUProfile(f); err != nil {
			f.Close()
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "trawl: TRAWL_CPUPROFILE: %v\n", err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(stderr, "trawl: TRAWL_CPUPROFILE: %v\n", err)
		}
	}
}

// startMemProfile samples the live heap (as of the last collection) every
// interval and keeps a heap profile taken when it was largest, which stop
// writes to path with one line on stderr saying how large it was: at exit
// a crawl's state is already garbage, so a profile taken then would show
// nothing of what a worker holds at its peak. An empty path profiles
// nothing; a profile that cannot be written says why in one line.
func startMemProfile(path string, interval time.Duration, stderr io.Writer) (stop func()) {
	if path == "" {
		return func() {}
	}
	var (
		done    = make(chan struct{})
		exited  = make(chan struct{})
		best    uint64
		profile bytes.Buffer
	)
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	take := func() {
		metrics.Read(sample)
		if live := sample[0].Value.Uint64(); profile.Len() == 0 || live > best+best/20 {
			best = live
			profile.Reset()
			_ = pprof.Lookup("heap").WriteTo(&profile, 0) // a write to memory does not fail
		}
	}
	go func() {
		defer close(exited)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				take()
			}
		}
	}()
	return func() {
		close(done)
		<-exited
		take()
		if err := os.WriteFile(path, profile.Bytes(), 0o644); err != nil {
			fmt.Fprintf(stderr, "trawl: TRAWL_MEMPROFILE: %v\n", err)
			return
		}
		fmt.Fprintf(stderr, "trawl: TRAWL_MEMPROFILE: heap profile at the largest live heap, %.1f MiB, written to %s\n", float64(best)/(1<<20), path)
	}
}

// quietRedis discards go-redis's internal log.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// exitError carries an exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageError marks bad flags or arguments (exit 2).
func usageError(format string, a ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, a...)}
}

// asUsage marks err, from flag parsing or argument checks, as a usage
// error (exit 2). Exit codes follow from error types, never from the
// wording of a message.
func asUsage(err error) error {
	if err == nil {
		return nil
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	return &exitError{code: 2, err: err}
}

// run is main without the process: it returns the exit code. Exit codes:
// 0 done (or stopped by SIGTERM), 1 failed (or a crawl wrote no item),
// 2 usage error, 130 interrupted (SIGINT).
func run(args []string, stdout, stderr io.Writer) int {
	// No password in a URL reaches stderr, whatever prints it.
	stderr = redactWriter{stderr}
	o := &options{stdout: stdout, stderr: stderr}
	root := newRoot(o)
	ctx, stop := signalContext(stderr, stopping(root, args))
	defer stop()

	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	code := 1
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	fmt.Fprintf(stderr, "trawl: %s\n", hint(oneLine(err.Error()), err))
	return code
}

// hint adds what to do to the message of err, where the engine cannot
// know the flag.
func hint(msg string, err error) string {
	if errors.Is(err, engine.ErrForbiddenAddress) {
		return msg + " (private, loopback and link-local addresses are refused; --allow-private allows them)"
	}
	if errors.Is(err, engine.ErrSettingsConflict) {
		return msg + "; a crawl's settings are stored when it is first seeded (trawl seed or trawl crawl): to start it again with new ones, run trawl crawl --flush with them (or trawl purge, then trawl seed with them)"
	}
	return connHint(plainParse(msg), err)
}

// durationErr is time.ParseDuration's text for a value that does not
// parse ("time: missing unit in duration \"5\"").
var durationErr = regexp.MustCompile(`time: (?:invalid duration|missing unit in duration|unknown unit "[^"]*" in duration) ("[^"]*")`)

// parseErr is strconv's text for a value that does not parse, as pflag,
// the config file and TRAWL_* variables pass it on (flattened to text).
var parseErr = regexp.MustCompile(`strconv\.Parse(Bool|Int|Uint|Float): parsing ("[^"]*"): (invalid syntax|value out of range)`)

// plainParse says what a flag wants where msg has strconv's "strconv.ParseBool:
// parsing "yes": invalid syntax": `want true or false, not "yes"`, or
// time's "time: missing unit in duration "5"": `want a duration such as
// 5s or 1m30s, not "5"`.
func plainParse(msg string) string {
	msg = durationErr.ReplaceAllString(msg, "want a duration such as 5s or 1m30s, not $1")
	return parseErr.ReplaceAllStringFunc(msg, func(m string) string {
		sub := parseErr.FindStringSubmatch(m)
		if sub[3] == "value out of range" {
			return sub[2] + " is out of range"
		}
		want := "a whole number"
		switch sub[1] {
		case "Bool":
			want = "true or false"
		case "Float":
			want = "a number"
		}
		return "want " + want + ", not " + sub[2]
	})
}

// redactWriter redacts the passwords of URLs written through it. Each
// Write is redacted whole: log records and messages are written in one.
type redactWriter struct{ w io.Writer }

func (r redactWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(r.w, engine.Redact(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// File lets isTerminal see the file under the writer.
func (r redactWriter) File() (*os.File, bool) {
	f, ok := r.w.(*os.File)
	return f, ok
}

func oneLine(s string) string { return strings.ReplaceAll(strings.TrimSpace(s), "\n", "; ") }

// errTerminated is the cause of a context ended by SIGTERM: the stop a
// service manager (systemd, Kubernetes, docker) asks for, which a
// graceful stop answers with exit 0. SIGINT (Ctrl-C) interrupts: 130.
var errTerminated = errors.New("stopped by SIGTERM")

// stopping is what the first signal says for the command args run,
// naming it: a command that crawls finishes its pages in flight; the
// others (the test site that make demo stops after its crawl, the
// dashboard) just stop.
func stopping(root *cobra.Command, args []string) string {
	c, _, err := root.Find(args)
	if err != nil || c == root {
		return "trawl: stopping (signal again to exit at once)"
	}
	if c.Name() == "crawl" || c.Name() == "worker" {
		return "trawl " + c.Name() + ": stopping: finishing pages in flight (signal again to exit at once)"
	}
	return "trawl " + c.Name() + ": stopping (signal again to exit at once)"
}

// signalContext ends its context on the first SIGINT or SIGTERM (its
// cause errTerminated), saying says; a second one exits at once.
func signalContext(stderr io.Writer, says string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		var sig os.Signal
		select {
		case sig = <-ch:
		case <-done:
			return
		}
		nl := ""
		if f, ok := stderrFile(stderr); ok && isTerminal(f) {
			// The terminal echoed ^C on the progress line: end it first.
			nl = "\n"
		}
		fmt.Fprintln(stderr, nl+says)
		if sig == syscall.SIGTERM {
			cancel(errTerminated)
		} else {
			cancel(context.Canceled)
		}
		select {
		case <-ch:
			fmt.Fprintln(stderr, "trawl: exiting at once; unacknowledged pages return to the queue after their lease")
			os.Exit(130)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel(nil)
	}
}

func newRoot(o *options) *cobra.Command {
	// Every option gets its default; each command then shows and takes
	// only the flags it uses.
	o.addFlags(pflag.NewFlagSet("defaults", pflag.ContinueOnError))
	var root *cobra.Command
	root = &cobra.Command{
		Use:           "trawl",
		Short:         "A distributed web crawler",
		Long:          "trawl crawls the web with workers on any number of machines sharing one frontier (Redis, RabbitMQ, NATS JetStream or in memory) and one duplicate filter.",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.settle(cmd.Flags(), configKeys(root)); err != nil {
				return err
			}
			return o.setup()
		},
	}
	o.addLogFlags(root.PersistentFlags())
	root.PersistentFlags().StringVar(&o.configPath, "config", "", "TOML file of settings, keyed by flag name (concurrency = 32, include = [\"a\", \"b\"]); flags given beat it, it beats TRAWL_* variables (default: TRAWL_CONFIG)")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return asUsage(err) })
	// Cobra would print the help for an unknown command and exit 0.
	root.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		{
			msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				msg += "; did you mean " + strings.Join(s, " or ") + "?"
			}
			return usageError("%s", msg)
		}
	}
	root.Args = cobra.ArbitraryArgs
	root.AddCommand(
		newCrawlCmd(o, true),
		newCrawlCmd(o, false),
		newSeedCmd(o),
		newStatsCmd(o),
		newDashboardCmd(o),
		newPurgeCmd(o),
		newRepartitionCmd(o),
		newDeadLetterCmd(o),
		newItemsCmd(o),
		newTestsiteCmd(o),
		newVersionCmd(o),
		newConfigCmd(o),
	)
	root.Version = version()
	root.SetVersionTemplate("trawl {{.Version}}\n")
	for _, c := range root.Commands() {
		if args := c.Args; args != nil {
			c.Args = func(cmd *cobra.Command, a []string) error { return asUsage(args(cmd, a)) }
		}
	}
	return root
}

// bindEnv sets every flag without a source yet (not given on the command
// line nor in the config file) from TRAWL_NAME (upper case, dashes as
// underscores), if set, and records it in sources. A repeatable flag takes
// one value per line of the variable.
func bindEnv(fs *pflag.FlagSet, sources map[string]string) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || sources[f.Name] != "" || f.Name == "config" {
			return
		}
		env := "TRAWL_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		v, ok := os.LookupEnv(env)
		if !ok {
			return
		}
		if sv, isSlice := f.Value.(pflag.SliceValue); isSlice {
			// A regex or a selector may hold commas: one value per line.
			if err := sv.Replace(strings.Split(strings.TrimSpace(v), "\n")); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", env, err))
			}
			sources[f.Name] = fromEnv
			return
		}
		if err := f.Value.Set(v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", env, v, err))
		}
		sources[f.Name] = fromEnv
	})
	if err := errors.Join(errs...); err != nil {
		return &exitError{code: 2, err: err}
	}
	return nil
}

// newLogger logs text to w at level.
func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}
