package engine

import (
	"errors"
	"log/slog"
	"net/url"
	"testing"

	"github.com/trawlhq/trawl/internal/linkscan"
)

// TestPageKitBuild: the kit is its configuration's (robots.txt obeyed
// unless ignored, trusted hosts trusted, extraction compiled), a bad
// extraction rule fails the build, and a build keeps the link extraction
// a benchmark swapped in.
func TestPageKitBuild(t *testing.T) {
	links := func(*url.URL, []byte, int) (string, []linkscan.Link, int) { return "swapped", nil, 0 }
	k := pageKit{extractLinks: links}
	log := slog.New(slog.DiscardHandler)
	cc, err := Config{Name: "kit", TrustedHosts: []string{"intranet.example"}, Extract: map[string]string{"title": "title"}}.compile()
	if err != nil {
		t.Fatal(err)
	}
	if err := k.build(cc, log); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.fetcher.Close() })
	if k.robots == nil || k.scope == nil || len(k.extract) != 1 {
		t.Errorf("kit built with robots %v, scope %v, %d extractions; want robots, a scope and 1", k.robots, k.scope, len(k.extract))
	}
	if !k.fetcher.guard.trusts("intranet.example") {
		t.Error("a trusted host is not trusted by the fetcher")
	}
	if title, _, _ := k.extractLinks(nil, nil, 0); title != "swapped" {
		t.Error("build replaced the link extraction")
	}
	ignoring := *cc
	ignoring.IgnoreRobots = true
	k.fetcher.Close()
	if err := k.build(&ignoring, log); err != nil {
		t.Fatal(err)
	}
	if k.robots != nil {
		t.Error("robots.txt kept with IgnoreRobots")
	}
	bad := *cc
	bad.Extract = map[string]string{"f": "p::nonsense("}
	if err := k.build(&bad, log); !errors.Is(err, ErrBadExtract) {
		t.Errorf("build with a bad extraction rule = %v, want ErrBadExtract", err)
	}
}
