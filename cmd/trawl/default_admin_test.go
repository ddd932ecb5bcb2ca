package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	natsbroker "github.com/trawlhq/trawl/broker/nats"
	"github.com/trawlhq/trawl/internal/testsite"
	"github.com/trawlhq/trawl/internal/testsite/sitetest"
)

// startTestsite runs "trawl testsite" and returns its URL.
func startTestsite(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, trawlBin, append([]string{"testsite"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("trawl testsite printed no URL: %v", err)
	}
	return strings.TrimSuffix(strings.TrimSpace(line), "/")
}

// statsJSON runs "trawl stats --json" in dir.
func statsJSON(t *testing.T, dir string, args ...string) map[string]int64 {
	t.Helper()
	r := trawlIn(t, dir, 30*time.Second, append([]string{"stats", "--json"}, args...)...)
	if r.code != 0 {
		t.Fatalf("stats: exit %d: %s", r.code, r.stderr)
	}
	m := map[string]int64{}
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		t.Fatalf("stats --json: %v: %q", err, r.stdout)
	}
	return m
}

// until polls cond (an observable state of the processes) until it holds
// or the deadline passes.
func until(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if ctx.Err() != nil {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond) // polling an observable condition
	}
}

// TestDefaultModeAdmin: stats, seed, deadletter and purge work on the
// default mode's data directory (embedded NATS in ./.trawl/NAME), through
// the running crawl while one runs and on the store itself after; their
// numbers agree with the crawl's summary and its output.
func TestDefaultModeAdmin(t *testing.T) {
	t.Parallel()
	site := startTestsite(t, "--pages", "300", "--latency", "20ms")
	var broken atomic.Int64
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		broken.Add(1)
		http.Error(w, "down", http.StatusInternalServerError)
	}))
	defer bad.Close()

	dir := t.TempDir()
	out := filepath.Join(dir, "items.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	crawl, crawlErr := startIn(t, ctx, dir, "crawl", "--name", "books", "--out", out, "--concurrency", "2",
		"--idle-timeout", "0", "--allow-private", "--retry-times", "0", site+"/")
	until(t, ctx, "the crawl to write items", func() bool { return lines(out) >= 5 })

	// While the crawl runs: its counters and its queues.
	var live map[string]int64
	until(t, ctx, "stats to show the running crawl's items", func() bool {
		live = statsJSON(t, dir, "--name", "books")
		return live["item_scraped_count"] > 0
	})
	if _, ok := live["books:requests/ready"]; !ok {
		t.Errorf("stats during the crawl has no queue counts: %v", live)
	}

	// A start URL seeded into the running crawl reaches it: its page fails
	// for good and is dead-lettered, which deadletter list shows.
	brokenURL := bad.URL + "/broken"
	if r := trawlIn(t, dir, 30*time.Second, "seed", "--name", "books", brokenURL); r.code != 0 || !strings.Contains(r.stdout, "seeded 1 start URL into books:start_urls") {
		t.Fatalf("seed into the running crawl: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	until(t, ctx, "the seeded URL's dead letter", func() bool {
		r := trawlIn(t, dir, 30*time.Second, "deadletter", "list", "--name", "books")
		if r.code != 0 {
			t.Fatalf("deadletter list during the crawl: exit %d: %s", r.code, r.stderr)
		}
		return strings.Contains(r.stdout, brokenURL)
	})
	if broken.Load() == 0 {
		t.Error("the seeded URL was dead-lettered without a fetch")
	}

	// purge refuses while the crawl runs: the crawl holds the filter.
	if r := trawlIn(t, dir, 30*time.Second, "purge", "--name", "books"); r.code == 0 || !strings.Contains(r.stderr, "a crawl is running") {
		t.Errorf("purge during the crawl: exit %d, stderr %q; want a refusal", r.code, r.stderr)
	}

	crawl.Process.Signal(os.Interrupt)
	if err := crawl.Wait(); crawl.ProcessState.ExitCode() != 130 {
		t.Fatalf("crawl: %v, want exit 130; stderr:\n%s", err, crawlErr.String())
	}
	m := regexp.MustCompile(`crawl interrupted: (\d+) pages fetched, (\d+) items written, \d+ errors?.*?, (\d+) dead letters?`).FindStringSubmatch(crawlErr.String())
	if m == nil {
		t.Fatalf("no summary line:\n%s", crawlErr.String())
	}
	pages, _ := strconv.ParseInt(m[1], 10, 64)
	items, _ := strconv.ParseInt(m[2], 10, 64)
	dead, _ := strconv.ParseInt(m[3], 10, 64)

	// After the crawl: the store itself, with the same numbers.
	after := statsJSON(t, dir, "--name", "books")
	if after["downloader/response_count"] != pages || after["item_scraped_count"] != items || after["deadletter/count"] != dead {
		t.Errorf("stats after the crawl: pages %d, items %d, dead letters %d; the summary said %d, %d, %d",
			after["downloader/response_count"], after["item_scraped_count"], after["deadletter/count"], pages, items, dead)
	}
	if int64(lines(out)) != items || dead < 1 {
		t.Errorf("%d lines written, %d dead letters; the summary said %d items", lines(out), dead, items)
	}
	if after["books:requests/in_flight"] != 0 {
		t.Errorf("in flight after the crawl: %d", after["books:requests/in_flight"])
	}
	if r := trawlIn(t, dir, 30*time.Second, "deadletter", "list", "--name", "books"); r.code != 0 || !strings.Contains(r.stdout, brokenURL) {
		t.Errorf("deadletter list after the crawl: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, ".trawl", "books", "nats", "client.json")); !os.IsNotExist(err) {
		t.Errorf("the stopped crawl's server address is left behind: %v", err)
	}

	// purge works when no crawl runs, and deletes all of it.
	if r := trawlIn(t, dir, 30*time.Second, "purge", "--name", "books"); r.code != 0 {
		t.Fatalf("purge: exit %d: %s", r.code, r.stderr)
	}
	gone := statsJSON(t, dir, "--name", "books")
	if gone["item_scraped_count"] != 0 || gone["books:requests/ready"] != 0 || gone["books:requests/dead"] != 0 {
		t.Errorf("stats after purge: %v", gone)
	}
	if r := trawlIn(t, dir, 30*time.Second, "deadletter", "list", "--name", "books"); !strings.Contains(r.stdout, "no dead letters") {
		t.Errorf("deadletter list after purge: %q", r.stdout)
	}
}

// TestOutQueueDefault: in the default mode, --out queue writes the items
// into the data directory's store, where "trawl items" takes them: every
// item once, as JSON lines; a second call finds none.
func TestOutQueueDefault(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	written := crawlToQueue(t, dir, 60)
	if written < 50 {
		t.Fatalf("the crawl wrote %d items; want the site's pages", written)
	}
	if got := statsJSON(t, dir, "--name", "q"); got["item_scraped_count"] != int64(written) {
		t.Errorf("stats: %d items; the summary said %d", got["item_scraped_count"], written)
	}
	first := trawlIn(t, dir, time.Minute, "items", "--name", "q", "--max", "10")
	rest := trawlIn(t, dir, time.Minute, "items", "--name", "q")
	if first.code != 0 || rest.code != 0 {
		t.Fatalf("items: exit %d, %d: %s%s", first.code, rest.code, first.stderr, rest.stderr)
	}
	seen := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(first.stdout+rest.stdout), "\n") {
		var it struct {
			URL    string `json:"url"`
			Status int    `json:"status"`
		}
		if err := json.Unmarshal([]byte(l), &it); err != nil || it.URL == "" {
			t.Fatalf("item line %q: %v", l, err)
		}
		if seen[it.URL] {
			t.Errorf("item %s taken twice", it.URL)
		}
		seen[it.URL] = true
	}
	if strings.Count(first.stdout, "\n") != 10 || len(seen) != written {
		t.Errorf("--max 10 took %d; both calls took %d distinct items, want %d", strings.Count(first.stdout, "\n"), len(seen), written)
	}
	if !strings.Contains(rest.stderr, "taken from q:items") {
		t.Errorf("items should say what it took from where: %q", rest.stderr)
	}
	if again := trawlIn(t, dir, time.Minute, "items", "--name", "q"); again.code != 0 || again.stdout != "" || !strings.Contains(again.stderr, "0 items taken") {
		t.Errorf("items on an empty queue: exit %d, stdout %q, stderr %q", again.code, again.stdout, again.stderr)
	}
}

// TestMetricsAddr: --metrics-addr serves the crawl's families while it
// runs (counters, the fetch histogram, the embedded broker's queue gauges,
// the local filter's size, the Go collector), not the old catch-all.
func TestMetricsAddr(t *testing.T) {
	t.Parallel()
	_, url := sitetest.Serve(t, testsite.Config{Pages: 200, Links: 5, Seed: 3, NoTraps: true, Latency: 20 * time.Millisecond})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // the crawl listens there; another process taking it meanwhile fails the test loudly
	dir := t.TempDir()
	out := filepath.Join(dir, "items.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	crawl, crawlErr := startIn(t, ctx, dir, "crawl", "--out", out, "--concurrency", "2", "--idle-timeout", "0", "--metrics-addr", addr, url+"/")
	until(t, ctx, "items", func() bool { return lines(out) >= 10 })
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v; stderr:\n%s", err, crawlErr.String())
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(body)
	for _, want := range []string{
		"# TYPE trawl_requests_total counter",
		"# TYPE trawl_responses_total counter",
		`trawl_responses_total{crawl="trawl",status="200"}`,
		"# TYPE trawl_items_total counter",
		"# TYPE trawl_fetch_duration_seconds histogram",
		`trawl_fetch_duration_seconds_bucket{crawl="trawl",le="0.05"}`,
		"# TYPE trawl_in_flight_pages gauge",
		`trawl_queue_messages{crawl="trawl",queue="trawl:requests",state="ready"}`,
		"# TYPE trawl_filter_entries gauge",
		"go_goroutines",
		"process_resident_memory_bytes",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(text, "trawl_stat_total") {
		t.Error("/metrics still serves trawl_stat_total")
	}
	crawl.Process.Signal(os.Interrupt)
	crawl.Wait()
}

// TestDefaultModeAdminKeepsLease: a command reaching a running crawl opens
// its queues with the crawl's lease, not its own flags' (the last broker to
// open a NATS queue sets the consumers' AckWait): stats and seed without
// --lease leave a crawl run with --lease 2m at 2m.
func TestDefaultModeAdminKeepsLease(t *testing.T) {
	t.Parallel()
	_, url := sitetest.Serve(t, testsite.Config{Pages: 200, Links: 5, Seed: 3, NoTraps: true, Latency: 20 * time.Millisecond})
	dir := t.TempDir()
	out := filepath.Join(dir, "items.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	crawl, _ := startIn(t, ctx, dir, "crawl", "--out", out, "--concurrency", "2", "--idle-timeout", "0", "--lease", "2m", url+"/")
	until(t, ctx, "items", func() bool { return lines(out) >= 5 })
	statsJSON(t, dir)
	if r := trawlIn(t, dir, 30*time.Second, "seed", url+"/?again"); r.code != 0 {
		t.Fatalf("seed: exit %d: %s", r.code, r.stderr)
	}
	nc, err := natsbroker.ConnectRunning(ctx, filepath.Join(dir, ".trawl", "trawl", "nats"), natsbroker.ConnectConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	consumers := 0
	for name := range js.StreamNames(ctx).Name() {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		for info := range s.ListConsumers(ctx).Info() {
			consumers++
			if info.Config.AckWait != 2*time.Minute {
				t.Errorf("consumer %s > %s: AckWait %v, want the crawl's lease 2m", name, info.Name, info.Config.AckWait)
			}
		}
	}
	if consumers == 0 {
		t.Fatal("no consumer found: nothing was checked")
	}
	crawl.Process.Signal(os.Interrupt)
	crawl.Wait()
}

// TestDefaultModeDirectoryInUse: a crawl whose data directory another
// process holds without serving it (a command) waits, saying so, and runs
// once it is free; a second crawl on a directory whose crawl runs is
// refused at once.
func TestDefaultModeDirectoryInUse(t *testing.T) {
	t.Parallel()
	_, url := sitetest.Serve(t, testsite.Config{Pages: 100, Links: 4, Seed: 3, NoTraps: true, Latency: 10 * time.Millisecond})
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	holder, err := natsbroker.StartEmbedded(ctx, natsbroker.EmbeddedConfig{Dir: filepath.Join(dir, ".trawl", "trawl", "nats")})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "items.jsonl")
	crawl, crawlErr := startIn(t, ctx, dir, "crawl", "--out", out, "--concurrency", "2", "--idle-timeout", "0", url+"/")
	until(t, ctx, "the crawl to say it waits", func() bool { return strings.Contains(crawlErr.String(), "waiting up to") })
	holder.Shutdown()
	until(t, ctx, "the crawl to run once the directory is free", func() bool { return lines(out) >= 5 })

	second := trawlIn(t, dir, time.Minute, "crawl", "--out", filepath.Join(dir, "second.jsonl"), url+"/")
	if second.code == 0 || !strings.Contains(second.stderr, "a crawl is running in .trawl/trawl") {
		t.Errorf("a second crawl on a running crawl's directory: exit %d, stderr %q; want a refusal naming it", second.code, second.stderr)
	}
	crawl.Process.Signal(os.Interrupt)
	if err := crawl.Wait(); crawl.ProcessState.ExitCode() != 130 {
		t.Errorf("crawl: %v; stderr:\n%s", err, crawlErr.String())
	}
}

// TestDefaultModeNoCrawl: stats, deadletter, items and purge of a crawl
// that never ran say so, and create nothing.
func TestDefaultModeNoCrawl(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, args := range [][]string{{"stats"}, {"deadletter", "list"}, {"items"}, {"purge"}} {
		r := trawlIn(t, dir, time.Minute, append(args, "--name", "typo")...)
		if r.code != 1 || !strings.Contains(r.stderr, "no crawl in .trawl/typo") {
			t.Errorf("%v: exit %d, stderr %q; want exit 1 and no crawl in .trawl/typo", args, r.code, r.stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, ".trawl")); !os.IsNotExist(err) {
		t.Errorf("a command on a crawl that never ran created its directory: %v", err)
	}
}

// crawlToQueue crawls a test site of pages in dir, crawl q, with --out
// queue, and returns the items the summary says it wrote.
func crawlToQueue(t *testing.T, dir string, pages int) int {
	t.Helper()
	_, url := sitetest.Serve(t, testsite.Config{Pages: pages, Links: 4, Seed: 3, NoTraps: true})
	r := trawlIn(t, dir, time.Minute, "crawl", "--name", "q", "--out", "queue", "--idle-timeout", "300ms", url+"/")
	if r.code != 0 {
		t.Fatalf("crawl: exit %d: %s", r.code, r.stderr)
	}
	m := regexp.MustCompile(`(\d+) items? written`).FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("no summary: %s", r.stderr)
	}
	written, _ := strconv.Atoi(m[1])
	return written
}

// TestItemsClosedPipeLosesNothing (issue 28 row 6): "trawl items | head
// -1" five times loses no item. Each call's reader reads once, as head
// does, keeps the first line and closes the pipe; trawl acknowledges an
// item only once its reader took it, gives the rest back uncounted, and
// exits 0, not 141 (SIGPIPE). Then every item is taken exactly once.
// Before, the items trawl had written into the pipe were acknowledged
// and lost with the reader (40 in the five calls).
func TestItemsClosedPipeLosesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	written := crawlToQueue(t, dir, 100)
	seen := map[string]int{}
	take := func(line string) {
		var it struct {
			URL string `json:"url"`
		}
		if err := json.Unmarshal([]byte(line), &it); err != nil || it.URL == "" {
			t.Fatalf("item line %q: %v", line, err)
		}
		seen[it.URL]++
	}
	for i := range 5 {
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(trawlBin, "items", "--name", "q")
		cmd.Dir = dir
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = pw, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pw.Close()
		buf := make([]byte, 64<<10)
		n, err := pr.Read(buf)
		if err != nil {
			t.Fatalf("head %d: read: %v", i, err)
		}
		first, _, _ := strings.Cut(string(buf[:n]), "\n")
		take(first)
		pr.Close()
		err = cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("items | head -1, call %d: exit %d (%v): %s", i, code, err, stderr.String())
		}
	}
	rest := trawlIn(t, dir, time.Minute, "items", "--name", "q")
	if rest.code != 0 {
		t.Fatalf("items: exit %d: %s", rest.code, rest.stderr)
	}
	for _, l := range strings.Split(strings.TrimSpace(rest.stdout), "\n") {
		take(l)
	}
	// An item the reader read just before it closed the pipe may be given
	// back before trawl saw the pipe drained, and taken again: at most one
	// per closed pipe (trawl writes the next only once the last was read),
	// seen once in 20 runs under load. Taken twice, never lost.
	again := 0
	for u, n := range seen {
		if n > 2 {
			t.Errorf("item %s taken %d times", u, n)
		}
		if n == 2 {
			again++
			t.Logf("item %s taken twice: read as the pipe closed, given back", u)
		}
	}
	if again > 5 {
		t.Errorf("%d items taken twice after five closed pipes, want at most one each", again)
	}
	if len(seen) != written {
		t.Errorf("%d distinct items taken after five closed pipes, want all %d: %d lost", len(seen), written, written-len(seen))
	}
}
