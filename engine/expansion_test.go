package engine

import (
	"net/url"
	"testing"

	"github.com/trawlhq/trawl/broker/memory"
	"github.com/trawlhq/trawl/dedup"
	"github.com/trawlhq/trawl/dedup/local"
	"github.com/trawlhq/trawl/frontier"
	"github.com/trawlhq/trawl/internal/linkscan"
)

// TestExpansionParent: a page's expansion carries its parent's
// fingerprint to a frontier that keeps marks (Compose: a page's expanded
// mark is of it, and without it a redelivered page would not be rechecked),
// and leaves it unset for a frontier.Markless one (Memory), which reads
// none.
func TestExpansionParent(t *testing.T) {
	mb, _ := memory.New(memory.Config{})
	defer mb.Close()
	f, _ := local.New(local.Config{})
	defer f.Close()
	parent := &Request{URL: "http://example.com/a"}
	pu, _ := url.Parse(parent.URL)
	bu, _ := url.Parse("http://example.com/b")
	for _, tc := range []struct {
		name       string
		fr         frontier.Frontier
		wantParent bool
	}{
		{"composed", frontier.Compose(mb, f, frontier.ComposeConfig{}), true},
		{"memory", frontier.NewMemory(mb, f), false},
	} {
		c, err := NewOn(tc.fr, Config{Name: "t"})
		if err != nil {
			t.Fatal(err)
		}
		lk := linkscan.FromURL(bu, bu.String())
		p, err := c.expansion(parent, []link{{r: &Request{URL: bu.String()}, lk: &lk}}, nil)
		c.kit.fetcher.Close()
		if err != nil {
			t.Fatal(err)
		}
		var want dedup.Fingerprint
		if tc.wantParent {
			want = c.fp.Fingerprint(parent.Method, pu, nil, nil)
		}
		if p.Parent != want {
			t.Errorf("%s: Parent %x, want %x", tc.name, p.Parent, want)
		}
		if len(p.Links) != 1 || p.Links[0].Known || p.Links[0].Fingerprint == (dedup.Fingerprint{}) {
			t.Errorf("%s: links %+v, want the one link with its fingerprint", tc.name, p.Links)
		}
	}
}
