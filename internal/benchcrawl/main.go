package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	tclog "github.com/testcontainers/testcontainers-go/log"
	"github.com/trawlhq/trawl/internal/trawlbin"
)

func main() {
	tclog.SetDefault(tclog.NewNoopLogger()) // its errors reach us as errors
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := dispatch(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "benchcrawl: %v\n", err)
		os.Exit(1)
	}
}

func dispatch(ctx context.Context, args []string) error {
	cmd := "bench"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "bench":
		return benchMain(ctx, args)
	case "soak":
		return soakMain(ctx, args)
	case "fetch":
		return fetchMain(ctx, args)
	case "web":
		return webMain(ctx, args)
	case "webfetch":
		return webFetchMain(ctx, args)
	}
	return fmt.Errorf("unknown command %q: want bench (the default), soak, web, fetch or webfetch", cmd)
}

// common are the flags of bench and soak.
type common struct {
	trawl       string
	pages       int
	concurrency int
	latency     time.Duration
	timeout     time.Duration
	dir         string // scratch directory, removed at the end
}

func (c *common) flags(fs *flag.FlagSet, pages int) {
	fs.StringVar(&c.trawl, "trawl", "", "the trawl binary (default: go build ./cmd/trawl into a temporary directory)")
	fs.IntVar(&c.pages, "pages", pages, "content pages of the test site")
	fs.IntVar(&c.concurrency, "concurrency", 32, "the crawl's --concurrency and --per-host, and the fetch limit's goroutines")
	fs.DurationVar(&c.latency, "latency", 0, "added to every page of the test site (0: none, as issue 10's bars have it): the crawl's concurrency, not its CPU, then sets its pace")
	fs.DurationVar(&c.timeout, "timeout", 8*time.Minute, "give up on one crawl after this long")
}

// setup checks the flags, makes the scratch directory and builds trawl
// unless -trawl names it. The caller removes c.dir.
func (c *common) setup(ctx context.Context) error {
	if c.pages < 1 || c.concurrency < 1 || c.timeout <= 0 || c.latency < 0 {
		return errors.New("-pages, -concurrency and -timeout must be positive, -latency not negative")
	}
	dir, err := os.MkdirTemp("", "trawl-benchcrawl-")
	if err != nil {
		return err
	}
	c.dir = dir
	if c.trawl != "" {
		c.trawl, err = filepath.Abs(c.trawl)
		if err != nil {
			return err
		}
		if _, err := os.Stat(c.trawl); err != nil {
			return fmt.Errorf("-trawl: %w", err)
		}
		return nil
	}
	if c.trawl, err = trawlbin.Build(ctx, dir, false); err != nil {
		return fmt.Errorf("%w (or give -trawl)", err)
	}
	return nil
}

// version is what `trawl --version` says, and the commit of the working
// tree (where the binary is built from, as make builds it).
func (c *common) version(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, c.trawl, "--version").Output()
	v := strings.TrimSpace(string(out))
	if err != nil {
		v = "trawl --version: " + err.Error()
	}
	if out, err := exec.CommandContext(ctx, "git", "describe", "--always", "--dirty").Output(); err == nil {
		v += ", tree at " + strings.TrimSpace(string(out))
	}
	return v
}

// cleanup removes the scratch directory, unless keep: then it says where
// it is, for the logs of a crawl that went wrong.
func (c *common) cleanup(keep bool) {
	if keep {
		logf("kept %s: the logs of each trawl process are in it", c.dir)
		return
	}
	os.RemoveAll(c.dir)
}

// trawlEnv is the environment of a trawl process: this one's, without
// TRAWL_ variables, which would set flags the benchmark does not give.
func trawlEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TRAWL_") {
			env = append(env, kv)
		}
	}
	return env
}

// loadavg is the first three fields of /proc/loadavg.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// logf writes a progress line to stderr.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s benchcrawl: %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// siteDesc describes the test site for a report's header.
func (c *common) siteDesc() string {
	if c.latency > 0 {
		return fmt.Sprintf("%d-page test site (no traps, %v latency)", c.pages, c.latency)
	}
	return fmt.Sprintf("%d-page test site (no traps, no latency)", c.pages)
}
