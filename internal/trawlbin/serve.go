package trawlbin

import (
	"bufio"
	"context"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/trawlhq/trawl/internal/syncbuf"
)

// Serve runs bin with args in dir (the current directory if ""), a
// command that prints the URL it serves as its first line of stdout
// (trawl dashboard, trawl testsite), and returns that URL. The process is
// stopped when the test ends; its stderr is logged if the test failed.
func Serve(t testing.TB, bin, dir string, args ...string) string {
	t.Helper()
	url, _ := Start(t, bin, dir, args...)
	return url
}

// Start is Serve, and returns too a function that kills the process
// (SIGKILL: it has no chance to tidy up) and waits for it to end.
func Start(t testing.TB, bin, dir string, args ...string) (url string, kill func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	stderr := new(syncbuf.Buffer)
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	kill = func() { once.Do(func() { cancel(); cmd.Wait() }) }
	t.Cleanup(func() {
		kill()
		if t.Failed() {
			t.Logf("stderr of trawl %s:\n%s", strings.Join(args, " "), stderr.String())
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("trawl %s printed no URL: %v; stderr:\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(line), kill
}
