package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trawlhq/trawl/internal/testsite"
	"github.com/trawlhq/trawl/internal/testsite/sitetest"
)

// TestOutFullDisk (issue 28 row 1): --out on a 300 KB filesystem that
// fills up mid-crawl is a failing sink, not failing pages. The crawl
// exits 1 within --failure-timeout, its summary says "failed" and counts
// no dead letter, and the file ends in a whole line; once space is freed
// the same command completes the crawl, every item in the file exactly
// once and every line valid JSON. Before, 1,738 of 3,299 pages were
// dead-lettered, the summary said "0 dead letters", the second run said
// "already crawled", and the file ended in a torn line. It mounts a
// tmpfs, so it runs as root only.
func TestOutFullDisk(t *testing.T) {
	t.Parallel()
	disk := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(disk, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", disk, "tmpfs", 0, "size=300k"); err != nil {
		t.Skipf("mounting a small tmpfs needs root: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(disk, syscall.MNT_DETACH) })
	site, url := sitetest.Serve(t, testsite.Config{Pages: 3000, Links: 10, Seed: 28, NoTraps: true})
	dir := t.TempDir()
	out := filepath.Join(disk, "items.jsonl")
	args := []string{"crawl", "--name", "full", "--out", out, "--concurrency", "16", "--failure-timeout", "5s", "--idle-timeout", "500ms", url + "/"}

	began := time.Now()
	r := trawlIn(t, dir, 3*time.Minute, args...)
	t.Logf("on a full disk, after %v: exit %d: %s", time.Since(began).Round(time.Millisecond), r.code, lastLine(r.stderr))
	if r.code != 1 {
		t.Errorf("crawl on a full disk: exit %d, want 1", r.code)
	}
	if strings.Contains(r.stderr, " done") || !strings.Contains(r.stderr, "failed") {
		t.Errorf("the summary of a crawl whose sink failed does not say failed, or says done:\n%s", r.stderr)
	}
	if !strings.Contains(r.stderr, ", 0 dead letters,") {
		t.Errorf("pages dead-lettered for a full disk:\n%s", r.stderr)
	}
	if !strings.Contains(r.stderr, "no space left on device") {
		t.Errorf("the failure is not named:\n%s", r.stderr)
	}
	jsonItems(t, out)

	if err := syscall.Mount("tmpfs", disk, "tmpfs", syscall.MS_REMOUNT, "size=16m"); err != nil {
		t.Fatalf("free space: %v", err)
	}
	r = trawlIn(t, dir, 3*time.Minute, args...)
	if r.code != 0 || !strings.Contains(r.stderr, "crawl done") {
		t.Fatalf("the same command with space freed: exit %d:\n%s", r.code, r.stderr)
	}
	got := jsonItems(t, out)
	twice := 0
	if err := site.Verify(); err != nil {
		for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
			if errors.Is(e, testsite.ErrDuplicate) {
				twice++
			} else {
				t.Error(e)
			}
		}
	}
	t.Logf("%d items, %d pages fetched twice", got, twice)
	if twice > 2*16 {
		t.Errorf("%d pages fetched twice, want at most 2 × --concurrency", twice)
	}
}

// jsonItems checks that the JSON Lines file at path ends in a whole line and
// holds every item once, each line valid JSON, and returns their number.
func jsonItems(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Errorf("%s ends in a torn line: %q", path, data[max(0, len(data)-60):])
	}
	seen := map[string]bool{}
	for i, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		var it struct {
			URL string `json:"url"`
		}
		if err := json.Unmarshal([]byte(l), &it); err != nil || it.URL == "" {
			t.Errorf("%s line %d is not an item: %q (%v)", path, i+1, l, err)
			continue
		}
		if seen[it.URL] {
			t.Errorf("item %s written twice", it.URL)
		}
		seen[it.URL] = true
	}
	return len(seen)
}
