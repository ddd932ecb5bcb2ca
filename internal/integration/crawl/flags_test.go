package crawl_test

import (
	"slices"
	"testing"
)

func TestFlagsGivesEachFlagOnce(t *testing.T) {
	base := []string{"--broker=redis", "--redis-url", "redis://x", "--allow-private", "--idle-timeout=2s", "--per-host=16"}
	got := flags(base, "--per-host=2", "--redis-url=redis://y", "--allow-private", "http://site/")
	want := []string{"--broker=redis", "--idle-timeout=2s", "--per-host=2", "--redis-url=redis://y", "--allow-private", "http://site/"}
	if !slices.Equal(got, want) {
		t.Errorf("flags = %q, want %q", got, want)
	}
}
