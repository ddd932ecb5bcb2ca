package deployment_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/trawlhq/trawl/deployment"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/integration"
)

// TestAwaitCrawlCountsOnlyTheBrokersQueues: a worker waiting for its crawl
// to begin (AwaitCrawl) on Redis counts the broker's queues, not Redis's
// start-URL and item lists as if they were the broker's (a queue's keys
// and those lists share a name at one partition): a list there failed the
// wait with WRONGTYPE (in a clean-clone CI, the start URLs another
// process seeded between the wait's two counts). The item list, made
// before the crawl's settings, stands in for that list deterministically:
// the wait ends, as for a crawl that does not exist, with ErrNoCrawl.
func TestAwaitCrawlCountsOnlyTheBrokersQueues(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a Redis server")
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cfg := deployment.Config{Broker: "redis", RedisURL: integration.Redis(t), Stderr: io.Discard}
	d, err := deployment.Open(ctx, cfg, engine.Config{Name: integration.Name(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Items == nil {
		t.Fatal("a Redis deployment has no item list")
	}
	if err := d.Items.Write(ctx, []any{map[string]string{"title": "left"}}); err != nil {
		t.Fatal(err)
	}
	if err := d.AwaitCrawl(ctx, 300*time.Millisecond); !errors.Is(err, deployment.ErrNoCrawl) {
		t.Errorf("AwaitCrawl with only an item list in Redis: %v, want an error wrapping ErrNoCrawl", err)
	}
}
