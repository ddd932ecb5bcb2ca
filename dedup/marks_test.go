package dedup_test

import (
	"net/url"
	"testing"

	"github.com/trawlhq/trawl/dedup"
)

// Marks are stored by filters that outlive a worker's version: their
// derivation is pinned, and they never collide with each other or with the
// fingerprint they derive from.
func TestMarks(t *testing.T) {
	u, _ := url.Parse("https://example.com/a")
	fp := dedup.Fingerprinter{}.Fingerprint("GET", u, nil, nil)
	pub, exp := dedup.PublishedMark(fp), dedup.ExpandedMark(fp)
	if pub == fp || exp == fp || pub == exp {
		t.Fatalf("marks collide: fp %v, published %v, expanded %v", fp, pub, exp)
	}
	if dedup.PublishedMark(fp) != pub || dedup.ExpandedMark(fp) != exp {
		t.Fatal("marks are not deterministic")
	}
	if dedup.PublishedMark(pub) == pub {
		t.Fatal("a mark of a mark equals it")
	}
	// The first 16 bytes of sha256(16 zero bytes || domain), computed with
	// sha256sum: the derivation documented in PublishedMark and ExpandedMark.
	var zero dedup.Fingerprint
	if got, want := dedup.PublishedMark(zero).String(), "c9b4e9469c426ad50d63bc589298eea7"; got != want {
		t.Errorf("PublishedMark(0) = %s, want %s", got, want)
	}
	if got, want := dedup.ExpandedMark(zero).String(), "4f343aadc1087275ce9c26a20c96b203"; got != want {
		t.Errorf("ExpandedMark(0) = %s, want %s", got, want)
	}
}
