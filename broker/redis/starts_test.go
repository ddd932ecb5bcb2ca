package redis_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker/redis"
	"github.com/trawlhq/trawl/dedup/local"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/integration"
)

// TestRejectedStartsKept feeds a crawl's {NAME}:start_urls list garbage
// and a 5 MB "URL" beside a good start URL: the good one is crawled, the
// others are neither fetched nor lost from sight: each is in
// {NAME}:start_urls:dead with its reason, and counted.
func TestRejectedStartsKept(t *testing.T) {
	client := integration.RedisClient(t)
	name := integration.Name(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "text/html")
		w.Write([]byte("<html></html>"))
	}))
	t.Cleanup(srv.Close)

	starts := redis.NewStartURLs(client, name, false)
	t.Cleanup(func() { starts.Purge(context.Background()) })
	huge := srv.URL + "/" + strings.Repeat("a", 5<<20)
	if err := starts.AddStarts(ctx, []byte("not a url at all"), []byte(huge), []byte(srv.URL+"/ok")); err != nil {
		t.Fatal(err)
	}
	b, err := redis.New(ctx, redis.Config{Client: client, Lease: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.Purge(context.Background(), engine.RequestsQueue(name))
		b.Close()
	})
	f, err := local.New(local.Config{Capacity: 1000, FPRate: 1e-6})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := engine.New(b, f, engine.Config{
		Name: name, IdleTimeout: 300 * time.Millisecond, Starts: starts, IgnoreRobots: true,
		TrustedHosts: []string{srv.Listener.Addr().String()},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("%d fetches, want 1 (the good start URL)", n)
	}
	if n := c.Stats().Get(engine.StatStartURLsRejected); n != 2 {
		t.Errorf("%d start urls counted as rejected, want 2", n)
	}
	recs, err := client.LRange(ctx, redis.CrawlKey(name, "start_urls:dead"), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Fatalf("%d rejected start urls kept, want 2: %q", len(recs), recs)
	}
	var reasons []string
	for _, r := range recs {
		var rec struct {
			Reason  string `json:"reason"`
			Payload string `json:"payload"`
			Bytes   int    `json:"bytes"`
		}
		if err := json.Unmarshal([]byte(r), &rec); err != nil {
			t.Fatalf("record %q: %v", r, err)
		}
		if len(rec.Payload) > 1<<10 {
			t.Errorf("a rejected payload of %d bytes was kept whole", rec.Bytes)
		}
		reasons = append(reasons, rec.Reason)
	}
	if !strings.Contains(reasons[1], "too long") || !strings.Contains(reasons[0], "start url") {
		t.Errorf("reasons %q, want the first to say why, the second to say too long", reasons)
	}
}

// TestReturnStartsOutOfMemory: on a server out of memory (maxmemory,
// noeviction), AddStarts is refused but start URLs taken can be returned,
// to the front of the list in their order (or into the set): a worker
// that took them and cannot move them into the frontier loses none.
func TestReturnStartsOutOfMemory(t *testing.T) {
	client := integration.RedisClient(t)
	ctx := t.Context()
	for _, set := range []bool{false, true} {
		name := integration.Name(t)
		starts := redis.NewStartURLs(client, name, set)
		t.Cleanup(func() { starts.Purge(context.Background()) })
		if err := starts.AddStarts(ctx, []byte("a"), []byte("b"), []byte("c"), []byte("d")); err != nil {
			t.Fatal(err)
		}
		taken, err := starts.TakeStarts(ctx, 3)
		if err != nil || len(taken) != 3 {
			t.Fatalf("take: %q, %v", taken, err)
		}
		lift := func() {
			if err := client.ConfigSet(context.Background(), "maxmemory", "0").Err(); err != nil {
				t.Errorf("lift maxmemory: %v", err)
			}
		}
		t.Cleanup(lift)
		for _, kv := range [][2]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", "1"}} {
			if err := client.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if err := starts.AddStarts(ctx, []byte("e")); err == nil || !strings.Contains(err.Error(), "OOM") {
			lift()
			t.Fatalf("set %v: AddStarts out of memory: %v, want an OOM error (the test tests nothing)", set, err)
		}
		err = starts.ReturnStarts(ctx, taken...)
		lift()
		if err != nil {
			t.Fatalf("set %v: ReturnStarts out of memory: %v", set, err)
		}
		all, err := starts.TakeStarts(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]string, len(all))
		for i, p := range all {
			got[i] = string(p)
		}
		if !set {
			if want := []string{string(taken[0]), string(taken[1]), string(taken[2]), "d"}; strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("list after return: %q, want %q", got, want)
			}
			continue
		}
		slices.Sort(got)
		if strings.Join(got, " ") != "a b c d" {
			t.Errorf("set after return: %q, want a b c d", got)
		}
	}
}
