package broker_test

import (
	"errors"
	"testing"

	"github.com/trawlhq/trawl/broker"
)

// TestPartitionOfGolden pins the partition of a few keys: a crawl's queued
// messages sit where PartitionOf put them, so a version that placed them
// elsewhere would strand them. The figures come from another
// implementation of CRC-32 (Python's zlib.crc32), not from this one.
func TestPartitionOfGolden(t *testing.T) {
	for _, g := range []struct {
		key  string
		want [4]int // among 2, 3, 4 and 12 partitions
	}{
		{"example.com", [4]int{1, 2, 1, 5}},
		{"www.example.com", [4]int{1, 0, 3, 3}},
		{"127.0.0.2", [4]int{0, 0, 2, 6}},
		{"a.b.example.co.uk", [4]int{1, 1, 3, 7}},
		{"golang.org", [4]int{1, 1, 3, 7}},
	} {
		for i, n := range []int{2, 3, 4, 12} {
			if got := broker.PartitionOf(g.key, n); got != g.want[i] {
				t.Errorf("PartitionOf(%q, %d) = %d, want %d", g.key, n, got, g.want[i])
			}
		}
	}
	for _, n := range []int{0, 1, 3} {
		if got := broker.PartitionOf("", n); got != 0 {
			t.Errorf("PartitionOf(\"\", %d) = %d, want 0", n, got)
		}
	}
	if got := broker.PartitionOf("example.com", 1); got != 0 {
		t.Errorf("PartitionOf(example.com, 1) = %d, want 0", got)
	}
}

func TestPartitionKey(t *testing.T) {
	for _, c := range []struct {
		host string
		by   broker.PartitionBy
		want string
	}{
		{"WWW.Example.COM:8080", broker.PartitionByHost, "www.example.com"},
		{"www.example.com.", broker.PartitionByHost, "www.example.com"},
		{"www.example.com", broker.PartitionByDomain, "example.com"},
		{"a.b.example.co.uk:443", broker.PartitionByDomain, "example.co.uk"},
		{"example.co.uk", broker.PartitionByDomain, "example.co.uk"},
		{"co.uk", broker.PartitionByDomain, "co.uk"},
		{"localhost:8080", broker.PartitionByDomain, "localhost"},
		{"127.0.0.2:8080", broker.PartitionByDomain, "127.0.0.2"},
		{"[::1]:8080", broker.PartitionByDomain, "::1"},
	} {
		if got := broker.PartitionKey(c.host, c.by); got != c.want {
			t.Errorf("PartitionKey(%q, %v) = %q, want %q", c.host, c.by, got, c.want)
		}
	}
}

func TestParsePartitionBy(t *testing.T) {
	for _, s := range []string{"host", "domain"} {
		p, err := broker.ParsePartitionBy(s)
		if err != nil || p.String() != s {
			t.Errorf("ParsePartitionBy(%q) = %v, %v", s, p, err)
		}
	}
	if _, err := broker.ParsePartitionBy("url"); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("ParsePartitionBy(url) = %v, want ErrInvalid", err)
	}
}
