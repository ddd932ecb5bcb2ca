package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trawlhq/trawl/internal/testsite"
	"github.com/trawlhq/trawl/internal/testsite/sitetest"
)

// TestRefusedAtParse (issue 28, smaller points): values that would fail
// late, or mean something else than meant, are refused at parse time
// (exit 2) with a line that says what to give instead.
func TestRefusedAtParse(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"name escapes .trawl", []string{"--name", "../../x"}, `--name "../../x": want a name without /`},
		{"name is ..", []string{"--name", ".."}, `--name "..": want a name without /`},
		{"CR LF in user agent", []string{"--user-agent", "bot\r\nX-Evil: 1"}, `--user-agent "bot\r\nX-Evil: 1": want one line of text`},
		{"wildcard domain", []string{"--allow-domain", "*"}, `--allow-domain "*": want a domain name such as example.com`},
		{"URL as domain", []string{"--allow-domain", "http://x/"}, `--allow-domain "http://x/": want a domain name`},
		{"metrics port alone", []string{"--metrics-addr", "9090"}, `--metrics-addr "9090": want HOST:PORT`},
		{"out in a missing folder", []string{"--out", "no/such/folder/items.jsonl"}, "--out no/such/folder/items.jsonl: no folder no/such/folder (create it first)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			r := trawlIn(t, dir, time.Minute, append(append([]string{"crawl"}, c.args...), "http://127.0.0.1:1/")...)
			if r.code != 2 || !strings.Contains(lastLine(r.stderr), c.want) {
				t.Errorf("exit %d, want 2 and a line with %q; stderr:\n%s", r.code, c.want, r.stderr)
			}
			if _, err := os.Stat(filepath.Join(dir, "no")); err == nil {
				t.Error("--out created a missing folder")
			}
		})
	}
	r := trawl(t, time.Minute, "crawl", "--allow-domain", "example.com", "--allow-domain", "127.0.0.1", "--allow-domain", "bücher.de", "--out", os.DevNull, "--ignore-robots", "--retry-times", "0", "--idle-timeout", "100ms", "--allow-empty", "http://127.0.0.1:1/")
	if r.code == 2 { // 1: the site is unreachable
		t.Errorf("good --allow-domain values refused: exit %d; stderr:\n%s", r.code, r.stderr)
	}
}

// TestMetricsEveryInterface (issue 28): --metrics-addr :PORT says, in one
// line, that it serves every interface.
func TestMetricsEveryInterface(t *testing.T) {
	t.Parallel()
	r := trawl(t, time.Minute, "crawl", "--metrics-addr", ":0", "--ignore-robots", "--retry-times", "0", "--idle-timeout", "100ms", "--allow-empty", "http://127.0.0.1:1/")
	const want = "trawl: warning: --metrics-addr :0 serves /metrics on every interface, to anyone who reaches this machine; 127.0.0.1:0 keeps it local"
	if r.code == 2 || strings.Count(r.stderr, want) != 1 { // 1: the site is unreachable
		t.Errorf("exit %d, want 1 and one line %q; stderr:\n%s", r.code, want, r.stderr)
	}
}

// TestDamagedStatsOnce (issue 28): a damaged stats.json is said once, set
// aside, and counted again, not warned about every second.
func TestDamagedStatsOnce(t *testing.T) {
	t.Parallel()
	_, url := sitetest.Serve(t, testsite.Config{Pages: 120, Links: 3, Seed: 5, NoTraps: true, Latency: 25 * time.Millisecond})
	dir := t.TempDir()
	stats := filepath.Join(dir, ".trawl", "trawl", "stats.json")
	if err := os.MkdirAll(filepath.Dir(stats), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stats, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := trawlIn(t, dir, 2*time.Minute, "crawl", "--concurrency", "1", "--idle-timeout", "300ms", "--out", os.DevNull, url+"/")
	if r.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	if n := strings.Count(r.stderr, "stats.json: damaged"); n != 1 {
		t.Errorf("%d warnings about the damaged stats.json, want 1; stderr:\n%s", n, r.stderr)
	}
	if !strings.Contains(r.stderr, "crawl done: ") || strings.Contains(r.stderr, "crawl done: 0 pages") {
		t.Fatalf("no pages crawled; stderr:\n%s", r.stderr)
	}
	s := statsJSON(t, dir)
	if s["downloader/response_count"] == 0 {
		t.Errorf("trawl stats after the crawl: %v, want the crawl's counters", s)
	}
}
