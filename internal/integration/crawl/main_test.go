// Package crawl_test runs whole crawls with several trawl processes against
// real brokers: work sharing, kill -9, resume after SIGINT, bad input.
package crawl_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trawlhq/trawl/dedup"
	"github.com/trawlhq/trawl/internal/integration"
	"github.com/trawlhq/trawl/internal/syncbuf"
	"github.com/trawlhq/trawl/internal/testsite"
	"github.com/trawlhq/trawl/internal/testsite/sitetest"
	"github.com/trawlhq/trawl/internal/trawlbin"
)

// trawlBin is the trawl binary the tests run as processes.
var trawlBin string

// TestMain builds trawlBin and runs the tests four at a time unless
// -parallel says otherwise (they drive trawl processes and servers and
// mostly wait on them), through integration.Run, which removes the
// containers and checks for leaked goroutines.
func TestMain(m *testing.M) {
	trawlbin.TestMain(m, &trawlBin, trawlbin.Config{Parallel: 4, Run: integration.Run})
}

// serveSite serves a test site for the test and returns it with the URL
// of its root page.
func serveSite(t *testing.T, o testsite.Config) (*testsite.Site, string) {
	t.Helper()
	site, base := sitetest.Serve(t, o)
	return site, base + "/"
}

// proc is a trawl process.
type proc struct {
	cmd    *exec.Cmd
	out    string // its items file
	stderr *syncbuf.Buffer
	done   chan error
}

// start runs trawl with args; its items go to a file of its own.
func start(t *testing.T, args ...string) *proc {
	t.Helper()
	p := &proc{out: filepath.Join(t.TempDir(), "items.jsonl"), stderr: new(syncbuf.Buffer), done: make(chan error, 1)}
	p.cmd = exec.Command(trawlBin, append(args, "--out", p.out)...)
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("stderr of %v:\n%s", args, p.stderr.String())
		}
	})
	return p
}

// waitStderr waits until p's stderr contains want, and returns how long
// that took.
func (p *proc) waitStderr(t *testing.T, want string, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for !strings.Contains(p.stderr.String(), want) {
		if time.Since(start) > timeout {
			t.Fatalf("%v: no %q on stderr within %v; stderr:\n%s", p.cmd.Args, want, timeout, p.stderr.String())
		}
		select {
		case err := <-p.done:
			p.done <- err
			if !strings.Contains(p.stderr.String(), want) {
				t.Fatalf("%v exited (%v) without %q on stderr:\n%s", p.cmd.Args, err, want, p.stderr.String())
			}
		case <-time.After(50 * time.Millisecond):
		}
	}
	return time.Since(start)
}

// wait waits for p to exit and returns its exit code.
func (p *proc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err // keep it for the cleanup
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(timeout):
		// A goroutine dump tells where it hangs.
		p.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case err := <-p.done:
			p.done <- err
		case <-time.After(5 * time.Second):
		}
		t.Fatalf("%v did not exit within %v; stderr:\n%s", p.cmd.Args, timeout, p.stderr.String())
		return -1
	}
}

// items returns the URLs of the items p wrote.
func (p *proc) items(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(p.out)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var urls []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var it struct {
			URL string `json:"url"`
		}
		if err := json.Unmarshal(sc.Bytes(), &it); err != nil {
			continue // a line torn by kill -9
		}
		urls = append(urls, it.URL)
	}
	return urls
}

// waitItems waits until p wrote at least n items.
func (p *proc) waitItems(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		data, _ := os.ReadFile(p.out)
		if bytes.Count(data, []byte("\n")) >= n {
			return
		}
		time.Sleep(20 * time.Millisecond) // polling an observable condition
	}
	t.Fatalf("%v wrote fewer than %d items in %v; stderr:\n%s", p.cmd.Args, n, timeout, p.stderr.String())
}

// waitItemsOf waits until procs together wrote n items, or fails after
// timeout.
func waitItemsOf(t *testing.T, n int, timeout time.Duration, procs ...*proc) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		total := 0
		for _, p := range procs {
			data, _ := os.ReadFile(p.out)
			total += bytes.Count(data, []byte("\n"))
		}
		if total >= n {
			return
		}
		time.Sleep(20 * time.Millisecond) // polling an observable condition
	}
	t.Fatalf("%d workers wrote fewer than %d items in %v", len(procs), n, timeout)
}

// union counts the distinct pages (canonical URLs) of the items of procs,
// and the items of a page already seen.
func union(t *testing.T, procs ...*proc) (distinct, dups int) {
	seen := map[string]bool{}
	for i, p := range procs {
		for _, u := range p.items(t) {
			c, err := dedup.CanonicalURL(u)
			if err != nil {
				t.Errorf("item url %q: %v", u, err)
			}
			if seen[c] {
				dups++
				t.Logf("proc %d: second item for %s", i, u)
			}
			seen[c] = true
		}
	}
	return len(seen), dups
}

// run runs trawl to completion and returns its exit code and stderr.
func run(t *testing.T, args ...string) (int, string) {
	t.Helper()
	code, _, stderr := runOut(t, args...)
	return code, stderr
}

// runOut runs trawl to completion and returns its exit code, stdout and
// stderr.
func runOut(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, trawlBin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String(), errb.String()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, out.String(), errb.String()
}

// pages is the size of the test site of the multi-process crawls: 2000
// pages, 500 with -short. Enough for every worker to take a share and to
// be stopped, killed or cut off from its broker mid-crawl; the 5000-page
// acceptance crawl through the binary is cmd/trawl's TestCrawl5000. These
// crawls run in parallel on a 2-CPU machine, where 5000 pages each made
// the package the longest of make test.
func pages() int {
	if testing.Short() {
		return 500
	}
	return 2000
}

// mustRun runs trawl to completion and fails t unless it exits 0.
func mustRun(t *testing.T, args ...string) {
	t.Helper()
	if code, stderr := run(t, args...); code != 0 {
		t.Fatalf("trawl %v: exit %d; stderr:\n%s", args, code, stderr)
	}
}

func oneLine(t *testing.T, stderr, want string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], want) {
		t.Errorf("want one line mentioning %q, got:\n%s", want, stderr)
	}
}

// flags returns the flags of base and then more, less those of base that
// more gives again: each flag is given once, as a user would give it
// (trawl takes a repeated flag's last value). A flag of base is "--name",
// "--name=value" or "--name" then its value.
func flags(base []string, more ...string) []string {
	given := map[string]bool{}
	for _, a := range more {
		if name, ok := flagName(a); ok {
			given[name] = true
		}
	}
	out := make([]string, 0, len(base)+len(more))
	for i := 0; i < len(base); i++ {
		name, _ := flagName(base[i])
		// "--name value": the value is the next argument, not a flag.
		valued := !strings.Contains(base[i], "=") && i+1 < len(base) && !strings.HasPrefix(base[i+1], "-")
		if given[name] {
			if valued {
				i++
			}
			continue
		}
		out = append(out, base[i])
		if valued {
			i++
			out = append(out, base[i])
		}
	}
	return append(out, more...)
}

// flagName returns the name of arg, "--name" or "--name=value".
func flagName(arg string) (string, bool) {
	if !strings.HasPrefix(arg, "--") {
		return "", false
	}
	name, _, _ := strings.Cut(arg, "=")
	return name, true
}
