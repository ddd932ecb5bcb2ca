package main

import (
	"go/build"
	"slices"
	"testing"
)

// TestNoBackendImports holds the command to the composition root: it opens
// a crawl through package deployment, as a library program does, and
// imports no broker or filter backend itself (issue 22). A command that
// opened a backend on its own would keep invariants the library lacks.
func TestNoBackendImports(t *testing.T) {
	pkg, err := build.Default.Import("github.com/trawlhq/trawl/cmd/trawl", ".", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pkg.Imports, "github.com/trawlhq/trawl/deployment") {
		t.Errorf("cmd/trawl does not import the composition root, package deployment; imports: %v", pkg.Imports)
	}
	for _, backend := range []string{
		"github.com/trawlhq/trawl/broker/memory",
		"github.com/trawlhq/trawl/broker/redis",
		"github.com/trawlhq/trawl/broker/nats",
		"github.com/trawlhq/trawl/broker/rabbitmq",
		"github.com/trawlhq/trawl/dedup/local",
		"github.com/trawlhq/trawl/dedup/redis",
	} {
		if slices.Contains(pkg.Imports, backend) {
			t.Errorf("cmd/trawl imports the backend %s: open it through package deployment", backend)
		}
	}
}
