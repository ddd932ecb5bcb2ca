package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	natsbroker "github.com/trawlhq/trawl/broker/nats"
	"github.com/trawlhq/trawl/dashboard"
	"github.com/trawlhq/trawl/internal/browsertest"
	"github.com/trawlhq/trawl/internal/trawlbin"
)

// TestDashboardAddr: an address off loopback without a token is refused
// in one line; with a token (flag or variable), or on loopback, the
// command goes on (here, to say there is no crawl).
func TestDashboardAddr(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		env  []string
		code int
		want string
	}{
		{[]string{"--addr", "0.0.0.0:0"}, nil, 2, "--addr 0.0.0.0:0 is not a loopback address: give --token"},
		{[]string{"--addr", ":0"}, nil, 2, "is not a loopback address"},
		{[]string{"--addr", "192.0.2.1:8080"}, nil, 2, "is not a loopback address"},
		{[]string{"--addr", "nonsense"}, nil, 2, "--addr \"nonsense\": want host:port"},
		{[]string{"--addr", "0.0.0.0:0", "--token", "s3cret"}, nil, 1, "no crawl in"},
		{[]string{"--addr", "0.0.0.0:0"}, []string{"TRAWL_DASHBOARD_TOKEN=s3cret"}, 1, "no crawl in"},
		{[]string{"--addr", "127.0.0.1:0"}, nil, 1, "no crawl in"},
		{[]string{"--addr", "[::1]:0"}, nil, 1, "no crawl in"},
	} {
		r := runTrawl(t, t.TempDir(), c.env, 30*time.Second, append([]string{"dashboard"}, c.args...)...)
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		if r.code != c.code || len(lines) != 1 || !strings.Contains(lines[0], c.want) {
			t.Errorf("dashboard %v (env %v): exit %d, stderr:\n%s\nwant exit %d and one line with %q", c.args, c.env, r.code, r.stderr, c.code, c.want)
		}
		if strings.Contains(r.stderr, "s3cret") {
			t.Errorf("dashboard %v: the token is on stderr", c.args)
		}
	}
}

// TestDashboardDefaultMode: on the default mode's data directory, after a
// crawl, the dashboard's API serves the figures trawl stats prints, the
// crawl's worker (stopped) and settings, and its page.
func TestDashboardDefaultMode(t *testing.T) {
	t.Parallel()
	site := startTestsite(t, "--pages", "100", "--no-traps")
	dir := t.TempDir()
	out := filepath.Join(dir, "items.jsonl")
	if r := trawlIn(t, dir, 2*time.Minute, "crawl", "--name", "books", "--out", out, "--idle-timeout", "1s", "--allow-private", site+"/"); r.code != 0 {
		t.Fatalf("crawl: exit %d: %s", r.code, r.stderr)
	}
	want := statsJSON(t, dir, "--name", "books")
	base := trawlbin.Serve(t, trawlBin, dir, "dashboard", "--addr", "127.0.0.1:0", "--name", "books")

	var st dashboard.State
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	until(t, ctx, "the dashboard's first sample", func() bool {
		resp, err := http.Get(base + "api/state")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
		return st.Time > 0
	})
	if st.Error != "" {
		t.Errorf("the dashboard failed to read the crawl: %s", st.Error)
	}
	if len(st.Stats) != len(want) {
		t.Errorf("the dashboard serves %d figures, trawl stats %d:\n%v\n%v", len(st.Stats), len(want), st.Stats, want)
	}
	for k, v := range want {
		if got, ok := st.Stats[k]; !ok || got != v {
			t.Errorf("%s: the dashboard says %d, trawl stats %d", k, got, v)
		}
	}
	if items := int64(lines(out)); st.Totals.Items != want["item_scraped_count"] || st.Totals.Items != items || st.Totals.Pages != want["downloader/response_count"] {
		t.Errorf("totals %+v; trawl stats %d items, %d pages; %d written", st.Totals, want["item_scraped_count"], want["downloader/response_count"], items)
	}
	if len(st.Workers) != 1 || st.Workers[0].State != "stopped" || st.Workers[0].Pages != want["downloader/response_count"] {
		t.Errorf("workers %+v, want the crawl's, stopped, with its %d pages", st.Workers, want["downloader/response_count"])
	}
	if st.Settings == nil || st.Status != "idle" {
		t.Errorf("settings %v, status %q; want the crawl's settings, idle", st.Settings, st.Status)
	}

	resp, err := http.Get(base)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "<title>trawl · books</title>") {
		t.Errorf("GET /: %d\n%s", resp.StatusCode, body)
	}

	// The dashboard does not hold the data directory: a crawl can run
	// in it again meanwhile.
	if r := trawlIn(t, dir, 2*time.Minute, "crawl", "--name", "books", "--out", out, "--idle-timeout", "1s", "--allow-private", "--allow-empty", site+"/"); r.code != 0 {
		t.Errorf("a crawl beside the dashboard: exit %d: %s", r.code, r.stderr)
	}
}

// TestDashboardDefaultModeInBrowser: the page in a headless chromium on
// the default mode (embedded NATS in the data directory): while the crawl
// runs, through its server, it lists the crawl's process; after it, on
// the store itself, it shows the item count trawl stats gives.
func TestDashboardDefaultModeInBrowser(t *testing.T) {
	t.Parallel()
	browsertest.Chromium(t)
	site := startTestsite(t, "--pages", "300", "--latency", "50ms", "--no-traps")
	dir := t.TempDir()
	out := filepath.Join(dir, "items.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	crawl, _ := startIn(t, ctx, dir, "crawl", "--name", "books", "--out", out, "--concurrency", "2",
		"--idle-timeout", "2s", "--allow-private", site+"/")
	exited := make(chan error, 1)
	go func() { exited <- crawl.Wait() }()
	until(t, ctx, "the crawl to write an item", func() bool { return lines(out) > 0 })
	base := trawlbin.Serve(t, trawlBin, dir, "dashboard", "--addr", "127.0.0.1:0", "--name", "books")
	tab := browsertest.Open(t, base, 2*time.Minute)
	pid := strconv.Itoa(crawl.Process.Pid)
	browsertest.WaitFor(t, "the page to list the crawl's process "+pid, time.Minute, func() bool {
		return browsertest.Eval[bool](t, tab, `!!document.querySelector('#workers tr[data-pid="`+pid+`"]')`)
	})
	if err := <-exited; err != nil {
		t.Fatalf("crawl: %v", err)
	}
	want := statsJSON(t, dir, "--name", "books")["item_scraped_count"]
	if want == 0 || want != int64(lines(out)) {
		t.Fatalf("trawl stats says %d items, the crawl wrote %d", want, lines(out))
	}
	browsertest.WaitFor(t, "the page to show trawl stats' item count", time.Minute, func() bool {
		return browsertest.Number(t, tab, "t-items") == want
	})
}

// TestDashboardWaitsPlainly: a default-mode dashboard whose data directory
// another process holds waits for it, saying so in a plain line (stderr is
// not a terminal: no carriage return, no erase code), and stops quietly.
func TestDashboardWaitsPlainly(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if r := trawlIn(t, dir, time.Minute, "seed", "--name", "books", "https://example.com/"); r.code != 0 {
		t.Fatalf("seed: exit %d: %s", r.code, r.stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dash, stderr := startIn(t, ctx, dir, "dashboard", "--name", "books", "--addr", "127.0.0.1:0")
	until(t, ctx, "the dashboard to start", func() bool { return strings.Contains(stderr.String(), "Ctrl-C stops it") })
	var holder *natsbroker.Embedded
	until(t, ctx, "the data directory free of the dashboard's reads", func() bool {
		// The dashboard holds it while it reads it.
		var err error
		holder, err = natsbroker.StartEmbedded(ctx, natsbroker.EmbeddedConfig{Dir: filepath.Join(dir, ".trawl", "books", "nats")})
		return err == nil
	})
	until(t, ctx, "the dashboard to say it waits", func() bool { return strings.Contains(stderr.String(), "waiting up to") })
	holder.Shutdown()
	dash.Process.Signal(os.Interrupt)
	dash.Wait()
	if got := stderr.String(); strings.ContainsAny(got, "\r\x1b") || strings.Contains(got, "level=WARN") {
		t.Errorf("stderr not a terminal, want plain lines and no warning:\n%q", got)
	}
}
