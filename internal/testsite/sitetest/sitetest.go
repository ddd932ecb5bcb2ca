// Package sitetest serves a test site (internal/testsite) for the length
// of a test.
package sitetest

import (
	"context"
	"testing"

	"github.com/trawlhq/trawl/internal/testsite"
)

// Serve serves a site made from cfg on a loopback port until t ends, and
// returns it with its base URL (no trailing slash). It fails t if the site
// cannot listen.
func Serve(t testing.TB, cfg testsite.Config) (*testsite.Site, string) {
	t.Helper()
	site := testsite.New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	base, wait, err := site.Serve(ctx, "127.0.0.1:0")
	if err != nil {
		cancel()
		t.Fatalf("serve the test site: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := wait(); err != nil {
			t.Errorf("test site: %v", err)
		}
	})
	return site, base
}
