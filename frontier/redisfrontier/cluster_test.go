package redisfrontier_test

import (
	"fmt"
	"testing"

	"github.com/trawlhq/trawl/frontier"
	"github.com/trawlhq/trawl/frontier/frontiertest"
	"github.com/trawlhq/trawl/internal/integration"
)

// TestClusterReplicatedConformance runs the frontier's suite on a Redis
// Cluster of three primaries with a replica each (make test-cluster), with
// one partition and with three.
func TestClusterReplicatedConformance(t *testing.T) {
	c := integration.StartRedisFailoverCluster(t).Client(t)
	for _, parts := range []int{1, 3} {
		for _, bloom := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/partitions=%d", map[bool]string{false: "set", true: "bloom"}[bloom], parts), func(t *testing.T) {
				frontiertest.Run(t, frontiertest.Harness{New: func(t *testing.T, crawl string, _ *frontiertest.Faults) frontier.Frontier {
					fr, _ := openCrawl(t, c, crawl, bloom, parts)
					return fr
				}})
			})
		}
	}
}
