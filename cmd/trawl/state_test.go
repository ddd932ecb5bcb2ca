package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trawlhq/trawl/internal/testsite"
	"github.com/trawlhq/trawl/internal/testsite/sitetest"
)

// TestDamagedStoreSaysSo (issue 28, row 4): the default mode's request
// stream truncated while the crawl was stopped: the same command again
// exits non-zero naming the stream's files and --flush, never "crawl done"
// with pages missing (before: exit 0, "crawl done", half the site never
// fetched) nor "already crawled"; --flush then crawls the site whole.
func TestDamagedStoreSaysSo(t *testing.T) {
	t.Parallel()
	site, url := sitetest.Serve(t, testsite.Config{Pages: 1000, Links: 5, Seed: 7, NoTraps: true, Latency: 5 * time.Millisecond})
	dir := t.TempDir()
	out := filepath.Join(dir, "items.jsonl")
	args := []string{"crawl", "--concurrency", "4", "--idle-timeout", "300ms", "--out", out, url + "/"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd, errb := startIn(t, ctx, dir, args...)
	until(t, ctx, "the crawl to write items", func() bool { return lines(out) >= 50 })
	cmd.Process.Signal(os.Interrupt)
	if cmd.Wait(); cmd.ProcessState.ExitCode() != 130 {
		t.Fatalf("interrupted crawl: exit %d, want 130; stderr:\n%s", cmd.ProcessState.ExitCode(), errb.String())
	}
	blks, _ := filepath.Glob(filepath.Join(dir, ".trawl", "trawl", "nats", "jetstream", "*", "streams", "*requests*", "msgs", "*.blk"))
	var blk string
	var size int64
	for _, p := range blks {
		if fi, err := os.Stat(p); err == nil && fi.Size() > size {
			blk, size = p, fi.Size()
		}
	}
	if size == 0 {
		t.Fatalf("no block of the request stream holding messages among %v", blks)
	}
	if err := os.Truncate(blk, size/2); err != nil {
		t.Fatal(err)
	}
	r := trawlIn(t, dir, time.Minute, args...)
	stream, _ := filepath.Rel(dir, filepath.Dir(filepath.Dir(blk))) // as the data directory is named: relative
	if r.code == 0 || !strings.Contains(r.stderr, "damaged") || !strings.Contains(r.stderr, stream) || !strings.Contains(r.stderr, "--flush") {
		t.Errorf("rerun on a truncated request stream: exit %d, want non-zero naming the damage, %s and --flush; stderr:\n%s", r.code, stream, r.stderr)
	}
	if strings.Contains(r.stderr, "crawl done") || strings.Contains(r.stderr, "already crawled") {
		t.Errorf("rerun on a truncated request stream took it for a crawl done:\n%s", r.stderr)
	}
	site.Reset()
	r = trawlIn(t, dir, 2*time.Minute, append([]string{"crawl", "--flush"}, args[1:]...)...)
	if r.code != 0 {
		t.Fatalf("--flush: exit %d; stderr:\n%s", r.code, r.stderr)
	}
	if err := site.Verify(); err != nil {
		t.Errorf("--flush: not the whole site once: %v", err)
	}
}

// TestDeletedFilterSaysSo (issue 28, row 5): the default mode's duplicate
// filter deleted between runs: the same command again exits non-zero
// naming the filter's file and --flush (before: exit 0, every page
// fetched and written again).
func TestDeletedFilterSaysSo(t *testing.T) {
	t.Parallel()
	base := numberSite(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "items.jsonl")
	args := []string{"crawl", "--idle-timeout", "300ms", "--out", out, base + "/"}
	if r := trawlIn(t, dir, time.Minute, args...); r.code != 0 || lines(out) == 0 {
		t.Fatalf("first run: exit %d, %d items; stderr:\n%s", r.code, lines(out), r.stderr)
	}
	first := lines(out)
	files, _ := filepath.Glob(filepath.Join(dir, ".trawl", "trawl", "dupefilter.bloom*"))
	if len(files) == 0 {
		t.Fatal("no filter file after the crawl")
	}
	for _, f := range files {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	r := trawlIn(t, dir, time.Minute, args...)
	if r.code == 0 || !strings.Contains(r.stderr, "state was lost") || !strings.Contains(r.stderr, "dupefilter.bloom") || !strings.Contains(r.stderr, "--flush") {
		t.Errorf("rerun without the filter: exit %d, want non-zero naming the lost filter's file and --flush; stderr:\n%s", r.code, r.stderr)
	}
	if n := lines(out); n != first {
		t.Errorf("rerun without the filter wrote %d items again", n-first)
	}
}
