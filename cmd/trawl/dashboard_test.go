package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trawlhq/trawl/dashboard"
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
