package redis_test

import (
	"testing"

	"github.com/trawlhq/trawl/dedup/deduptest"
	"github.com/trawlhq/trawl/internal/integration"
)

// TestClusterReplicated runs the filters' suite on a Redis Cluster of
// three primaries with a replica each (make test-cluster).
func TestClusterReplicated(t *testing.T) {
	c := integration.StartRedisFailoverCluster(t).Client(t)
	t.Run("set", func(t *testing.T) { deduptest.Run(t, setSuite(c, newKeyFor(t))) })
	t.Run("bloom", func(t *testing.T) { deduptest.Run(t, bloomSuite(c, newKeyFor(t))) })
}
