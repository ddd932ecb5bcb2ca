package engine_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/broker/memory"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/testsite"
	"github.com/trawlhq/trawl/internal/testsite/sitetest"
)

// partitioned is a memory broker that says it has n partitions and
// records the keys of what is published to the requests queue.
type partitioned struct {
	*memory.Broker
	n    int
	mu   sync.Mutex
	keys []string
}

func (p *partitioned) Partitions() int { return p.n }

func (p *partitioned) Publish(ctx context.Context, queue string, msgs ...broker.Message) error {
	if queue == engine.RequestsQueue("trawl") {
		p.mu.Lock()
		for _, m := range msgs {
			p.keys = append(p.keys, m.Key)
		}
		p.mu.Unlock()
	}
	return p.Broker.Publish(ctx, queue, msgs...)
}

// TestPartitionSettings: the partition count and key are stored with the
// crawl; a worker whose broker has another count refuses to start, and
// stores nothing; one
// insisting on another count is refused even with OverrideSettings; one
// that leaves them out adopts them; every request published carries its
// partition key.
func TestPartitionSettings(t *testing.T) {
	_, url := sitetest.Serve(t, testsite.Config{Pages: 30, Links: 4, Seed: 3})
	mb, f := newBackends(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// A broker without partitions cannot carry a crawl of 3.
	c, err := engine.New(mb, f, engine.Config{Partitions: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Seed(ctx); !errors.Is(err, engine.ErrPartitions) {
		t.Fatalf("Seed of 3 partitions on a broker of 1 = %v, want ErrPartitions", err)
	}
	// Refused, it stored nothing (it stored the 3 before it refused).
	if raw, err := mb.GetMeta(ctx, "trawl", "settings"); !errors.Is(err, broker.ErrNotFound) {
		t.Errorf("the refused worker left settings stored: %s (%v); want none", raw, err)
		if err := mb.PurgeMeta(ctx, "trawl"); err != nil {
			t.Fatal(err)
		}
	}

	b := &partitioned{Broker: mb, n: 3}
	cfg := engine.Config{Partitions: 3, PartitionBy: broker.PartitionByDomain, IdleTimeout: 500 * time.Millisecond,
		Fetch: engine.FetchConfig{AllowPrivate: true}}
	first, err := engine.New(b, f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Seed(ctx, engine.StartURL{URL: url + "/"}); err != nil {
		t.Fatal(err)
	}
	raw, err := mb.GetMeta(ctx, "trawl", "settings")
	if err != nil {
		t.Fatal(err)
	}
	if s := string(raw); !strings.Contains(s, `"version":2`) || !strings.Contains(s, `"partitions":3`) || !strings.Contains(s, `"partition_by":"domain"`) {
		t.Errorf("stored settings %s: want version 2, 3 partitions by domain", s)
	}

	insist := engine.Config{Partitions: 2, OverrideSettings: true}
	second, err := engine.New(&partitioned{Broker: mb, n: 2}, f, insist)
	if err != nil {
		t.Fatal(err)
	}
	var se *engine.SettingsError
	if err := second.Seed(ctx); !errors.As(err, &se) || !se.Fixed || !strings.Contains(err.Error(), "--partitions: the crawl has 3, this worker was given 2") {
		t.Fatalf("overriding the partitions = %v, want a refusal naming them", err)
	}

	// A worker that leaves them out adopts them, and crawls.
	joiner, err := engine.New(b, f, engine.Config{Adopt: engine.SettingNames, IdleTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := joiner.Run(ctx); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.keys) < 30 {
		t.Fatalf("%d requests published, want the site's 30 at least", len(b.keys))
	}
	for _, k := range b.keys {
		if k != "127.0.0.1" {
			t.Fatalf("a request was published with key %q, want 127.0.0.1 (its host's registrable domain: the address)", k)
		}
	}
}

// TestSettingsOfOnePartitionAreVersion1: settings without partitions are
// written as version 1, which workers before partitions read.
func TestSettingsOfOnePartitionAreVersion1(t *testing.T) {
	enc, err := engine.SettingsOf(engine.Config{}).Encode()
	if err != nil {
		t.Fatal(err)
	}
	if s := string(enc); !strings.Contains(s, `"version":1`) || strings.Contains(s, "partition") {
		t.Errorf("default settings encode as %s, want version 1 without partitions", s)
	}
	s, err := engine.DecodeSettings([]byte(`{"version":1,"max_depth":3}`))
	if err != nil || s.Partitions != 1 || s.PartitionBy != broker.PartitionByHost {
		t.Errorf("settings stored before partitions decode as %d partitions by %v (%v), want 1 by host", s.Partitions, s.PartitionBy, err)
	}
}
