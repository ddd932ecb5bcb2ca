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
