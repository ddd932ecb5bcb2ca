package redis_test

import (
	"testing"

	"github.com/trawlhq/trawl/broker/brokertest"
	"github.com/trawlhq/trawl/internal/integration"
)

// TestClusterReplicatedConformance runs the conformance suite on a Redis
// Cluster of three primaries with a replica each (make test-cluster).
func TestClusterReplicatedConformance(t *testing.T) {
	brokertest.Run(t, suiteConfig(integration.StartRedisFailoverCluster(t).Client(t)))
}

// TestClusterReplicatedClaimPublish runs TestClaimPublish's cases on a
// Redis Cluster of three primaries with a replica each (make
// test-cluster).
func TestClusterReplicatedClaimPublish(t *testing.T) {
	c := integration.StartRedisFailoverCluster(t).Client(t)
	for _, f := range filters {
		t.Run(f.kind, func(t *testing.T) { testClaimPublish(t, c, f.new) })
	}
}
