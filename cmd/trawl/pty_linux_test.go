package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/trawlhq/trawl/internal/syncbuf"
	"github.com/trawlhq/trawl/internal/testsite"
	"github.com/trawlhq/trawl/internal/testsite/sitetest"
)

// openPTY opens a pseudo-terminal: its controlling side and its terminal.
func openPTY(t *testing.T) (ptm, pts *os.File) {
	t.Helper()
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, ptm.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		ptm.Close()
		t.Skipf("unlockpt: %v", e)
	}
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, ptm.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		ptm.Close()
		t.Skipf("ptsname: %v", e)
	}
	pts, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		ptm.Close()
		t.Skipf("open pts: %v", err)
	}
	return ptm, pts
}

// TestProgressOnTerminal (9.3): with stderr on a terminal, the crawl
// redraws one live status line, erases it, and ends with its summary;
// with stderr not a terminal, it logs progress lines instead (see
// TestSummaryLine).
func TestProgressOnTerminal(t *testing.T) {
	t.Parallel()
	_, url := sitetest.Serve(t, testsite.Config{Pages: 200, Links: 4, Seed: 9, NoTraps: true, Latency: 15 * time.Millisecond})
	ptm, pts := openPTY(t)
	defer ptm.Close()
	out := filepath.Join(t.TempDir(), "items.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, trawlBin, "crawl", "--concurrency", "2", "--idle-timeout", "300ms", "--out", out, url+"/")
	cmd.Dir = t.TempDir()
	cmd.Stderr = pts
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pts.Close() // the child has it; EOF (EIO) on ptm once it exits
	var screen bytes.Buffer
	copied := make(chan struct{})
	go func() { io.Copy(&screen, ptm); close(copied) }()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("crawl: %v", err)
	}
	<-copied
	s := screen.String()
	if !regexp.MustCompile(`\r\x1b\[Kpages \d+  items \d+  queued \d+`).MatchString(s) {
		t.Errorf("no live status line on the terminal:\n%q", s)
	}
	if strings.Contains(s, "trawl: crawled ") {
		t.Errorf("progress log lines on a terminal:\n%q", s)
	}
	sum := regexp.MustCompile(`trawl: crawl done: \d+ pages fetched, (\d+) items written`).FindStringSubmatch(s)
	if sum == nil || sum[1] != fmt.Sprint(lines(out)) {
		t.Errorf("summary %v, want one naming the %d items written:\n%q", sum, lines(out), s)
	}
}

// TestInterruptOnTerminal (issue 27.10): after Ctrl-C on a terminal, the
// stop message starts a line of its own: the terminal echoed ^C onto the
// live status line, which must not swallow it.
func TestInterruptOnTerminal(t *testing.T) {
	t.Parallel()
	_, url := sitetest.Serve(t, testsite.Config{Pages: 2000, Links: 4, Seed: 9, NoTraps: true, Latency: 15 * time.Millisecond})
	ptm, pts := openPTY(t)
	defer ptm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, trawlBin, "crawl", "--concurrency", "2", "--out", os.DevNull, url+"/")
	cmd.Dir = t.TempDir()
	cmd.Stderr = pts
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pts.Close()
	screen := new(syncbuf.Buffer)
	copied := make(chan struct{})
	go func() { io.Copy(screen, ptm); close(copied) }()
	for !strings.Contains(screen.String(), "\x1b[Kpages ") {
		if ctx.Err() != nil {
			t.Fatalf("no status line on the terminal:\n%q", screen.String())
		}
		time.Sleep(20 * time.Millisecond) // polling an observable condition
	}
	cmd.Process.Signal(os.Interrupt)
	cmd.Wait()
	<-copied
	s := screen.String()
	i := strings.Index(s, "trawl crawl: stopping")
	if i < 0 {
		t.Fatalf("no stop message:\n%q", s)
	}
	if line := s[strings.LastIndexAny(s[:i], "\n")+1 : i]; strings.Contains(line, "pages ") {
		t.Errorf("the stop message shares the status line %q:\n%q", line, s)
	}
}
