package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trawlhq/trawl/internal/gctune"
	"github.com/trawlhq/trawl/internal/syncbuf"
	"github.com/trawlhq/trawl/internal/testsite"
	"github.com/trawlhq/trawl/internal/testsite/sitetest"
	"github.com/trawlhq/trawl/internal/trawlbin"
)

// trawlBin is the trawl binary, built once for the tests that run it as a
// process (exit codes, stderr, signals).
var trawlBin string

// TestMain builds trawlBin, with the race detector if the tests have it,
// and runs the tests four at a time unless -parallel says otherwise: they
// drive trawl processes and servers and mostly wait on them.
func TestMain(m *testing.M) {
	trawlbin.TestMain(m, &trawlBin, trawlbin.Config{Parallel: 4, Race: trawlbin.RaceEnabled})
}

// startIn starts trawl in dir, for a test that works beside it while it
// runs; its stderr may be read meanwhile. It is killed, if still running,
// when the test ends.
func startIn(t *testing.T, ctx context.Context, dir string, args ...string) (*exec.Cmd, *syncbuf.Buffer) {
	t.Helper()
	cmd := exec.CommandContext(ctx, trawlBin, args...)
	cmd.Dir = dir
	stderr := new(syncbuf.Buffer)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, stderr
}

type result struct {
	code           int
	stdout, stderr string
}

func trawl(t *testing.T, timeout time.Duration, args ...string) result {
	t.Helper()
	return trawlIn(t, t.TempDir(), timeout, args...)
}

// trawlIn runs trawl in dir, where the default mode keeps its state.
func trawlIn(t *testing.T, dir string, timeout time.Duration, args ...string) result {
	t.Helper()
	return runTrawl(t, dir, nil, timeout, args...)
}

// runTrawl runs trawl in dir with env (KEY=VALUE) added to the
// environment (a bare KEY removes KEY from it), and fails t if it runs
// longer than timeout.
func runTrawl(t *testing.T, dir string, env []string, timeout time.Duration, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, trawlBin, args...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = os.Environ()
		for _, kv := range env {
			key, _, _ := strings.Cut(kv, "=")
			cmd.Env = slices.DeleteFunc(cmd.Env, func(e string) bool { return strings.HasPrefix(e, key+"=") })
			if strings.Contains(kv, "=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("trawl %v: timed out; stderr:\n%s", args, errb.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{code, out.String(), errb.String()}
}

// TestCrawl5000 is the foundation's acceptance test: the default crawl of a
// 5000-page test site fetches every reachable page exactly once, never a
// robots-disallowed or external URL, retries the flaky pages, stops by
// itself with exit 0 and writes one JSON line per page.
func TestCrawl5000(t *testing.T) {
	t.Parallel()
	pages := 5000
	if testing.Short() {
		pages = 500
	}
	site, url := sitetest.Serve(t, testsite.Config{Pages: pages, Links: 10, Seed: 1})
	out := filepath.Join(t.TempDir(), "items.jsonl")
	r := trawl(t, 5*time.Minute, "crawl", "--out", out, "--idle-timeout", "1s", url+"/")
	if r.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	if err := site.Verify(); err != nil {
		t.Errorf("site: %v", err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var p struct {
			URL    string `json:"url"`
			Status int    `json:"status"`
		}
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			t.Fatalf("bad JSON line %q: %v", sc.Text(), err)
		}
		if seen[p.URL] {
			t.Errorf("two items for %s", p.URL)
		}
		seen[p.URL] = true
	}
	if len(seen) != site.Expected() {
		t.Errorf("%d JSON lines, want one per expected page: %d", len(seen), site.Expected())
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"malformed url", []string{"crawl", "ht!tp://x y"}, 2, "bad start URL"},
		{"relative url", []string{"crawl", "/just/a/path"}, 2, "bad start URL"},
		{"json start url, unknown field", []string{"crawl", `{"url": "http://example.com/", "bogus": 1}`}, 2, `unknown field "bogus"`},
		{"json start url, meta not a string", []string{"crawl", `{"url": "http://example.com/", "meta": {"a": 1}}`}, 2, `start url json: "meta" holds a number, want strings as its values (JSON {"url": "http…", "meta": {"name": "value"}, "priority": N, "headers": {"Name": "value"}})`},
		{"unknown broker", []string{"crawl", "--broker=kafka", "http://example.com/"}, 2, "--broker"},
		{"bad duration", []string{"crawl", "--delay=soon", "http://example.com/"}, 2, `"--delay" flag: want a duration such as 5s or 1m30s, not "soon"`},
		{"unknown flag", []string{"crawl", "--nope", "http://example.com/"}, 2, "unknown flag"},
		// strconv's "strconv.ParseBool: parsing \"yes\": invalid syntax"
		// said in words.
		{"not a boolean", []string{"crawl", "--allow-private=yes", "http://example.com/"}, 2, `invalid argument "yes" for "--allow-private" flag: want true or false, not "yes"`},
		{"not a whole number", []string{"crawl", "--concurrency=x", "http://example.com/"}, 2, `invalid argument "x" for "--concurrency" flag: want a whole number, not "x"`},
		{"not a number", []string{"crawl", "--bloom-fp-rate=low", "http://example.com/"}, 2, `want a number, not "low"`},
		// time's "time: missing unit in duration \"5\"" said in words.
		{"a duration without a unit", []string{"crawl", "--delay=5", "http://example.com/"}, 2, `invalid argument "5" for "--delay" flag: want a duration such as 5s or 1m30s, not "5"`},
		{"a duration's unknown unit", []string{"crawl", "--lease=5q", "http://example.com/"}, 2, `want a duration such as 5s or 1m30s, not "5q"`},
		// --ignore-robots: an unreachable robots.txt defers the page
		// for minutes (RFC 9309), which is not what this case tests.
		{"unreachable site", []string{"crawl", "--idle-timeout=100ms", "--ignore-robots", "http://127.0.0.1:1/"}, 1, "no page could be fetched"},
		{"worker without shared broker", []string{"worker"}, 2, "shared broker"},
		{"unknown command", []string{"crawll"}, 2, `unknown command "crawll"`},
		{"extra argument", []string{"stats", "extra"}, 2, `unknown command "extra" for "trawl stats"`},
		{"negative depth", []string{"crawl", "--max-depth=-1", "http://example.com/"}, 2, "--max-depth must not be negative"},
		{"negative pages", []string{"crawl", "--max-pages=-1", "http://example.com/"}, 2, "--max-pages must not be negative"},
		{"negative retries", []string{"crawl", "--retry-times=-1", "http://example.com/"}, 2, "--retry-times -1: want 0 or more"},
		{"zero back-off", []string{"crawl", "--retry-backoff=0", "http://example.com/"}, 2, "--retry-backoff 0s: want a positive duration"},
		// A 0 the engine or the broker would take for its default (30s,
		// 10,000 links, trawl's User-Agent, 16, 8) is refused, never
		// reinterpreted.
		{"zero lease", []string{"crawl", "--lease=0", "http://example.com/"}, 2, "--lease 0s: want a positive duration"},
		{"zero links", []string{"crawl", "--max-links=0", "http://example.com/"}, 2, "--max-links 0: want 1 or more"},
		{"empty user agent", []string{"crawl", "--user-agent=", "http://example.com/"}, 2, `--user-agent "": want one line of text, not empty`},
		{"zero concurrency", []string{"crawl", "--concurrency=0", "http://example.com/"}, 2, "--concurrency 0: want 1 or more"},
		{"zero per host", []string{"worker", "--broker=redis", "--per-host=0"}, 2, "--per-host 0: want 1 or more"},
		{"negative failure timeout", []string{"crawl", "--failure-timeout=-1s", "http://example.com/"}, 2, "--failure-timeout -1s must not be negative"},
		{"autothrottle target 0", []string{"crawl", "--autothrottle", "--autothrottle-target-concurrency=0", "http://example.com/"}, 2, "--autothrottle-target-concurrency 0: want a number above 0"},
		{"nats replicas above 5", []string{"crawl", "--broker=nats", "--nats-replicas=7", "http://example.com/"}, 2, "--nats-replicas 7: want 1 to 5"},
		{"quorum queues without fifo", []string{"crawl", "--broker=rabbitmq", "--amqp-queue-type=quorum", "http://example.com/"}, 2, "add --order fifo"},
		{"unknown queue type", []string{"crawl", "--amqp-queue-type=stream", "http://example.com/"}, 2, `--amqp-queue-type "stream": want classic or quorum`},
		{"bad node in amqp url list", []string{"crawl", "--amqp-url=amqp://a:5672/,http://b/", "http://example.com/"}, 2, "--amqp-url http://b/"},
		{"autothrottle start above max", []string{"crawl", "--autothrottle-start-delay=2m", "http://example.com/"}, 2, "--autothrottle-max-delay 1m0s: want 0 < start ≤ max"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := trawl(t, time.Minute, c.args...)
			if r.code != c.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", r.code, c.code, r.stderr)
			}
			// A usage error is one line; a crawl that ran ends with its
			// summary line, then the error.
			// A crawl slower than the progress interval (a loaded machine)
			// logs progress lines before it.
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			for c.code == 1 && len(lines) > 1 && strings.HasPrefix(lines[0], "trawl: crawled ") {
				lines = lines[1:]
			}
			if c.code == 1 && len(lines) == 2 && strings.HasPrefix(lines[0], "trawl: crawl failed: 0 pages fetched") {
				lines = lines[1:]
			}
			if len(lines) != 1 || !strings.HasPrefix(lines[0], "trawl: ") || !strings.Contains(lines[0], c.msg) {
				t.Errorf("stderr should be one clear line mentioning %q, got:\n%s", c.msg, r.stderr)
			}
		})
	}
}

func TestEnvFlags(t *testing.T) {
	t.Parallel()
	r := trawlEnv(t, []string{"TRAWL_BROKER=kafka"}, "crawl", "http://example.com/")
	if r.code != 2 || !strings.Contains(r.stderr, "kafka") {
		t.Errorf("TRAWL_BROKER=kafka should be rejected like --broker=kafka; exit %d, stderr %s", r.code, r.stderr)
	}
}

// TestInterrupt: SIGINT stops the crawl cleanly: exit 130, a hint to
// resume, and every item line written whole.
func TestInterrupt(t *testing.T) {
	t.Parallel()
	_, url := sitetest.Serve(t, testsite.Config{Pages: 2000, Links: 5, NoTraps: true, Latency: 5 * time.Millisecond})
	out := filepath.Join(t.TempDir(), "items.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd, errb := startIn(t, ctx, t.TempDir(), "crawl", "--concurrency", "4", "--out", out, url+"/")
	for lines(out) < 50 {
		if ctx.Err() != nil {
			t.Fatal("no progress")
		}
		time.Sleep(10 * time.Millisecond) // polling an observable condition
	}
	cmd.Process.Signal(os.Interrupt)
	err := cmd.Wait()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 130 {
		t.Fatalf("exit: %v, want 130; stderr:\n%s", err, errb.String())
	}
	if !strings.Contains(errb.String(), "resume") {
		t.Errorf("stderr should say how to resume:\n%s", errb.String())
	}
	data, _ := os.ReadFile(out)
	for _, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if !json.Valid([]byte(l)) {
			t.Fatalf("torn item line %q", l)
		}
	}
	if n := lines(out); n >= 2001 {
		t.Errorf("the crawl finished (%d items) before the signal; nothing was tested", n)
	}
}

func lines(path string) int {
	data, _ := os.ReadFile(path)
	return bytes.Count(data, []byte("\n"))
}

// TestResumeDefault: the default crawl (embedded broker, local filter in
// ./.trawl) stopped with SIGINT at about half and run again with the same
// command fetches every page exactly once in total.
func TestResumeDefault(t *testing.T) {
	t.Parallel()
	pages := 5000
	if testing.Short() {
		pages = 500
	}
	site, url := sitetest.Serve(t, testsite.Config{Pages: pages, Links: 10, Seed: 5, NoTraps: true, Latency: time.Millisecond})
	dir := t.TempDir()
	out := filepath.Join(dir, "items.jsonl")
	args := []string{"crawl", "--out", out, "--idle-timeout", "1s", url + "/"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	first, errb := startIn(t, ctx, dir, args...)
	for lines(out) < site.Expected()/2 {
		if ctx.Err() != nil {
			t.Fatalf("no progress: %s", errb.String())
		}
		time.Sleep(10 * time.Millisecond) // polling an observable condition
	}
	first.Process.Signal(os.Interrupt)
	if err := first.Wait(); err == nil || first.ProcessState.ExitCode() != 130 {
		t.Fatalf("first run: %v, want exit 130; stderr:\n%s", err, errb.String())
	}
	half := lines(out)
	if half >= site.Expected() {
		t.Fatalf("the first run finished (%d items); nothing was tested", half)
	}
	second := exec.CommandContext(ctx, trawlBin, args...)
	second.Dir = dir
	errb = new(syncbuf.Buffer)
	second.Stderr = errb
	if err := second.Run(); err != nil {
		t.Fatalf("second run: %v; stderr:\n%s", err, errb.String())
	}
	if err := site.Verify(); err != nil {
		t.Errorf("site, over both runs: %v", err)
	}
	if n := lines(out); n != site.Expected() {
		t.Errorf("%d items over both runs (%d in the first), want %d", n, half, site.Expected())
	}
}

// TestCPUProfile: TRAWL_CPUPROFILE's profile is written when the command
// ends (a gzipped pprof file); one that cannot be created says why in one
// line and profiles nothing; no path profiles nothing.
func TestCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	var stderr strings.Builder
	startCPUProfile(path, &stderr)()
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("profile: %d bytes, %v; want a gzipped pprof file", len(b), err)
	}
	startCPUProfile(filepath.Join(path, "no", "such"), &stderr)()
	if got := stderr.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, "TRAWL_CPUPROFILE") {
		t.Errorf("stderr %q, want one line naming TRAWL_CPUPROFILE", got)
	}
	startCPUProfile("", &stderr)()
}

// TestMemProfile: TRAWL_MEMPROFILE's heap profile is written when the
// command ends (a gzipped pprof file) with one line saying how large the
// live heap was; one that cannot be written says why in one line; no path
// profiles nothing.
func TestMemProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "heap.pprof")
	var stderr strings.Builder
	startMemProfile(path, time.Millisecond, &stderr)()
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("profile: %d bytes, %v; want a gzipped pprof file", len(b), err)
	}
	if got := stderr.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, "MiB, written to "+path) {
		t.Errorf("stderr %q, want one line giving the live heap and the file", got)
	}
	stderr.Reset()
	startMemProfile(filepath.Join(path, "no", "such"), time.Millisecond, &stderr)()
	if got := stderr.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, "TRAWL_MEMPROFILE") || strings.Contains(got, "written") {
		t.Errorf("stderr %q, want one line naming TRAWL_MEMPROFILE and its error", got)
	}
	stderr.Reset()
	startMemProfile("", time.Millisecond, &stderr)()
	if stderr.Len() != 0 {
		t.Errorf("no path: stderr %q, want nothing", stderr.String())
	}
}

// TestStartGC: the collector's policy is trawl's (a tuner, starting at
// 400 percent) unless the user set GOGC, which is left as it is, or
// GOMEMLIMIT, under which the percent is 400 and nothing re-sets it.
func TestStartGC(t *testing.T) {
	gogc := func() int {
		s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
		metrics.Read(s)
		return int(s[0].Value.Uint64())
	}
	env := func(vars ...string) func(string) (string, bool) {
		return func(k string) (string, bool) {
			if i := slices.Index(vars, k); i >= 0 {
				return vars[i+1], true
			}
			return "", false
		}
	}
	defer debug.SetGCPercent(debug.SetGCPercent(123))

	if tu := startGC(env("GOGC", "123")); tu != nil || gogc() != 123 {
		t.Errorf("GOGC=123: tuner %v, percent %d; want none and 123", tu, gogc())
	}
	tu := startGC(env("GOMEMLIMIT", "1GiB"))
	if tu != nil || gogc() != gctune.Default.Max {
		t.Errorf("GOMEMLIMIT alone: tuner %v, percent %d; want none and %d", tu, gogc(), gctune.Default.Max)
	}
	tu.Stop() // a nil tuner stops as a no-op

	debug.SetGCPercent(123)
	tu = startGC(env("GOMAXPROCS", "2"))
	if tu == nil || gogc() != gctune.Default.Max {
		t.Errorf("no GOGC or GOMEMLIMIT: tuner %v, percent %d; want a tuner starting at %d", tu, gogc(), gctune.Default.Max)
	}
	tu.Stop()
	if gogc() != 123 {
		t.Errorf("after the tuner's Stop: percent %d, want 123 again", gogc())
	}
}

// TestStoppingSaysWhatStops: the first signal's line names the command
// that stops, and speaks of pages in flight only for one that crawls;
// make demo stops its test site with SIGTERM, which said "finishing pages
// in flight" as its last line, then "trawl: stopping", after the crawl
// had ended.
func TestStoppingSaysWhatStops(t *testing.T) {
	t.Parallel()
	root := newRoot(&options{stdout: os.Stdout, stderr: os.Stderr})
	for args, name := range map[string]string{"crawl http://x/": "crawl", "--log-level info worker": "worker", "worker --broker=redis": "worker"} {
		if got := stopping(root, strings.Fields(args)); !strings.Contains(got, "pages in flight") || !strings.HasPrefix(got, "trawl "+name+": ") {
			t.Errorf("trawl %s: first signal says %q, want trawl %s: and pages in flight", args, got, name)
		}
	}
	for args, name := range map[string]string{"testsite --pages 500": "trawl testsite: ", "dashboard": "trawl dashboard: ", "": "trawl: ", "nosuch": "trawl: "} {
		if got := stopping(root, strings.Fields(args)); strings.Contains(got, "pages") || !strings.Contains(got, "signal again") || !strings.HasPrefix(got, name) {
			t.Errorf("trawl %s: first signal says %q, want %q, no pages and how to exit at once", args, got, name)
		}
	}
}

// TestUsageErrorsLeaveNoStore: trawl crawl without a URL and trawl worker
// without a shared broker are refused before anything is opened: they
// left ./.trawl/trawl behind (an embedded store), a crawl that trawl stats
// then found, instead of saying there is none.
func TestUsageErrorsLeaveNoStore(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"crawl"}, {"worker"}} {
		dir := t.TempDir()
		r := trawlIn(t, dir, time.Minute, args...)
		if r.code != 2 {
			t.Errorf("trawl %v: exit %d, want 2; stderr:\n%s", args, r.code, r.stderr)
		}
		if _, err := os.Stat(filepath.Join(dir, ".trawl")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("trawl %v, refused, left .trawl behind (%v)", args, err)
		}
	}
}

// TestBadDurationFromEnvAndConfig: a duration without its unit in a
// TRAWL_* variable or the config file says what the setting wants, as on
// the command line, not time's 'time: missing unit in duration "5"'.
func TestBadDurationFromEnvAndConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "trawl.toml")
	if err := os.WriteFile(cfg, []byte("delay = 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		env, args []string
		want      string
	}{
		{[]string{"TRAWL_DELAY=5"}, nil, `TRAWL_DELAY="5": want a duration such as 5s or 1m30s, not "5"`},
		{nil, []string{"--config", cfg}, `key "delay": want a duration such as 5s or 1m30s, not "5"`},
	} {
		r := runTrawl(t, dir, c.env, time.Minute, append(append([]string{"crawl"}, c.args...), "http://example.com/")...)
		if r.code == 0 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v %v: exit %d, stderr %q; want %q", c.env, c.args, r.code, r.stderr, c.want)
		}
	}
}
