package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/testsite"
	"github.com/trawlhq/trawl/internal/testsite/sitetest"
)

// TestSeedHelpSettings (issue 27.2): trawl seed --help lists the crawl
// settings seeding stores, and says that it stores them.
func TestSeedHelpSettings(t *testing.T) {
	t.Parallel()
	r := trawl(t, time.Minute, "seed", "--help")
	for _, n := range append(slices.Clone(engine.SettingNames), "override-settings") {
		if !strings.Contains(r.stdout, "--"+n+" ") {
			t.Errorf("seed --help lacks --%s, a setting it stores:\n%s", n, r.stdout)
		}
	}
	// The text says which they are (it named a few in words, and not
	// --partitions, --partition-by or --max-links).
	text, _, _ := strings.Cut(r.stdout, "Usage:")
	text = strings.Join(strings.Fields(text), " ")
	for _, n := range engine.SettingNames {
		if !strings.Contains(text, "--"+n+",") && !strings.Contains(text, "--"+n+".") {
			t.Errorf("seed --help's text does not name --%s, a setting it stores:\n%s", n, text)
		}
	}
	if !strings.Contains(r.stdout, "stores its settings") {
		t.Errorf("seed --help does not say it stores the crawl's settings:\n%s", r.stdout)
	}
}

// TestCrawlSettingsDefaultMode: in the default (embedded) mode the
// crawl's settings are kept in its data directory. A rerun given an
// --include the crawl does not have refuses, naming the flag and both
// values; a rerun without the flag adopts the stored --max-depth and says
// so; --override-settings replaces it with a warning; --flush starts a
// crawl with new settings.
func TestCrawlSettingsDefaultMode(t *testing.T) {
	t.Parallel()
	_, url := sitetest.Serve(t, testsite.Config{Pages: 30, Links: 4, Seed: 3, NoTraps: true})
	dir := t.TempDir()
	run := func(args ...string) result {
		return trawlIn(t, dir, time.Minute, append(append([]string{"crawl", "--out", "/dev/null", "--idle-timeout", "500ms"}, args...), url+"/")...)
	}
	if r := run("--max-depth", "1"); r.code != 0 {
		t.Fatalf("first crawl: exit %d\n%s", r.code, r.stderr)
	}
	r := run("--include", "/nope/")
	if want := `--include: the crawl has (none), this worker was given "/nope/"`; r.code != 1 || !strings.Contains(r.stderr, want) {
		t.Errorf("contradicting --include: exit %d, want 1 and %q:\n%s", r.code, want, r.stderr)
	}
	r = run("--allow-empty", "--log-level", "info")
	if r.code != 0 || !strings.Contains(r.stderr, "crawl settings adopted from the crawl") || !strings.Contains(r.stderr, "max-depth=1") {
		t.Errorf("rerun without flags: exit %d, want the stored max-depth=1 adopted:\n%s", r.code, r.stderr)
	}
	r = run("--allow-empty", "--max-depth", "3")
	if r.code != 1 || !strings.Contains(r.stderr, "--max-depth: the crawl has 1, this worker was given 3") {
		t.Errorf("contradicting --max-depth: exit %d:\n%s", r.code, r.stderr)
	}
	// Issue 27.2: the refusal names both ways out of it.
	for _, way := range []string{"trawl seed", "trawl crawl --flush", "--override-settings"} {
		if !strings.Contains(lastLine(r.stderr), way) {
			t.Errorf("the refusal does not name %q:\n%s", way, r.stderr)
		}
	}
	r = run("--allow-empty", "--max-depth", "3", "--override-settings")
	if r.code != 0 || !strings.Contains(r.stderr, "overriding the crawl's setting") {
		t.Errorf("--override-settings: exit %d, want 0 and a warning:\n%s", r.code, r.stderr)
	}
	r = run("--allow-empty", "--log-level", "info")
	if r.code != 0 || !strings.Contains(r.stderr, "max-depth=3") {
		t.Errorf("after the override: exit %d, want max-depth=3 adopted:\n%s", r.code, r.stderr)
	}
	if r = run("--flush", "--include", "/nope/"); r.code != 0 {
		t.Errorf("--flush with new settings: exit %d:\n%s", r.code, r.stderr)
	}
}
