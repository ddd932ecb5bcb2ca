package main

import (
	"strings"
	"testing"
	"time"
)

// TestPartitionsRefusedStoresNothing: the embedded default (one queue)
// refuses trawl crawl --partitions 2 and stores nothing: the same crawl
// run again without the flag is not refused, and stores its own settings
// (one partition). (The count was stored before the refusal, and refused
// every run after it.) The refusal names the flag given, not a count the
// crawl has.
func TestPartitionsRefusedStoresNothing(t *testing.T) {
	t.Parallel()
	url := numberSite(t) + "/"
	dir := t.TempDir()
	refused := trawlIn(t, dir, time.Minute, "crawl", "--partitions", "2", "--allow-private", "--idle-timeout", "500ms", "--out", "a.jsonl", url)
	if refused.code == 0 || !strings.Contains(refused.stderr, "partitions") {
		t.Fatalf("crawl --partitions 2 on the embedded default: exit %d, want refused naming the partitions; stderr:\n%s", refused.code, refused.stderr)
	}
	// Nothing is stored: the refusal speaks of the flag given, not of a
	// count "the crawl has" (it said "the crawl has 2"), and says what to
	// do.
	if msg := strings.TrimSpace(refused.stderr); strings.Contains(msg, "the crawl has") || !strings.Contains(msg, "given --partitions 2, the broker has 1") ||
		!strings.Contains(msg, "the embedded default") || !strings.HasSuffix(msg, "run without --partitions") || strings.Count(msg, "\n") > 0 {
		t.Errorf("the refusal of a new crawl's --partitions 2 on the embedded default: want one line naming the flag given, the broker's one queue and the remedy; stderr:\n%s", refused.stderr)
	}
	again := trawlIn(t, dir, time.Minute, "crawl", "--allow-private", "--idle-timeout", "500ms", "--log-level", "info", "--out", "b.jsonl", url)
	if again.code != 0 {
		t.Fatalf("the crawl again without --partitions: exit %d, want 0; stderr:\n%s", again.code, again.stderr)
	}
	if !strings.Contains(again.stderr, "crawl settings stored with the crawl") || !strings.Contains(again.stderr, "partitions=1") {
		t.Errorf("the crawl again without --partitions found settings stored (want its own stored, one partition); stderr:\n%s", again.stderr)
	}
}
