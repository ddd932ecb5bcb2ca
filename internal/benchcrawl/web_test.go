package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// TestZipfSizes: sizes fall with rank, each between 1 and the largest
// allowed, summing to about the pages asked for.
func TestZipfSizes(t *testing.T) {
	s := zipfSizes(1000, 20000, 200)
	sum := 0
	for r, n := range s {
		if n < 1 || n > 200 {
			t.Fatalf("host %d: %d pages, want 1 to 200", r, n)
		}
		if r > 0 && n > s[r-1] {
			t.Fatalf("host %d has %d pages, more than host %d's %d", r, n, r-1, s[r-1])
		}
		sum += n
	}
	if sum < 19900 || sum > 20100 {
		t.Errorf("%d pages in all, want about 20000", sum)
	}
	if s[0] != 200 || s[999] > 10 {
		t.Errorf("largest %d, smallest %d: want 200 and a handful", s[0], s[999])
	}
}

// TestHostQueues: the loop's scheduler hands out every URL once, never
// more than perHost of one host at once, and the hosts with room first.
func TestHostQueues(t *testing.T) {
	var urls []string
	for h := range 5 {
		for p := range 10 * (h + 1) {
			urls = append(urls, fmt.Sprintf("http://127.0.0.%d:80/p/%d", h+1, p))
		}
	}
	path := filepath.Join(t.TempDir(), "urls")
	if err := os.WriteFile(path, []byte(strings.Join(urls, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	q, err := readHostQueues(path, 2)
	if err != nil {
		t.Fatal(err)
	}
	// The first take of each slot: 2 per host, the 5 hosts before any
	// host's third.
	hosts := map[*hostQueue]int{}
	var first []*hostQueue
	for range 10 {
		h, _ := q.take()
		hosts[h]++
		first = append(first, h)
	}
	for _, n := range hosts {
		if n != 2 {
			t.Fatalf("a host got %d of the first 10 slots, want 2", n)
		}
	}
	for _, h := range first {
		q.done(h)
	}
	var (
		mu     sync.Mutex
		seen   = map[string]int{}
		active = map[*hostQueue]int{}
		wg     sync.WaitGroup
	)
	for range 8 {
		wg.Go(func() {
			for {
				h, u := q.take()
				if h == nil {
					return
				}
				mu.Lock()
				seen[u]++
				active[h]++
				if active[h] > 2 {
					t.Errorf("%d requests to one host at once, want at most 2", active[h])
				}
				mu.Unlock()
				runtime.Gosched()
				mu.Lock()
				active[h]--
				mu.Unlock()
				q.done(h)
			}
		})
	}
	wg.Wait()
	if len(seen) != len(urls)-10 {
		t.Errorf("%d URLs handed out after the first 10, want %d", len(seen), len(urls)-10)
	}
	for u, n := range seen {
		if n != 1 {
			t.Errorf("%s handed out %d times", u, n)
		}
	}
}

// TestLocalFilter: the modes whose filter is a local Bloom filter (no
// server, or --dedup=local) are the ones the bench gives its low
// false-positive rate; a Redis filter is left at its own.
func TestLocalFilter(t *testing.T) {
	for _, c := range []struct {
		m     webMode
		flags []string
		want  bool
	}{
		{webModes[0], []string{"--broker=memory"}, true},
		{webModes[1], nil, true},
		{webModes[2], []string{"--broker=redis", "--redis-url", "redis://x"}, false},
		{webModes[3], []string{"--broker=nats", "--nats-url", "nats://x", "--dedup=local"}, true},
		{webModes[6], []string{"--broker=nats", "--nats-url", "nats://x", "--dedup=set", "--redis-url", "redis://x"}, false},
	} {
		if got := localFilter(c.m, c.flags); got != c.want {
			t.Errorf("%s %v: local filter %v, want %v", c.m.name, c.flags, got, c.want)
		}
	}
}
