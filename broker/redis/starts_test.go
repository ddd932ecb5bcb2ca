package redis_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/broker/redis"
	"github.com/trawlhq/trawl/dedup/local"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/integration"
	"github.com/trawlhq/trawl/internal/redislayout"
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
	recs, err := client.LRange(ctx, redislayout.StartKeys(name).Dead, 0, -1).Result()
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

// TestTakenStartsStay: a batch taken with TakeStarts stays in the start
// URLs until it is dropped: a worker that dies with it (never dropped) leaves it
// for the next take of any worker, at once, at the front of the list and
// in its order; a batch dropped never comes back; dropped twice, or after
// another worker's batch of the same start URLs was dropped, it drops
// nothing more. PendingStarts counts what is not dropped.
func TestTakenStartsStay(t *testing.T) { takenStartsStay(t, integration.RedisClient(t)) }

// TestTakenStartsStayCluster: the same on a Redis Cluster.
func TestTakenStartsStayCluster(t *testing.T) {
	takenStartsStay(t, integration.RedisClusterClient(t))
}

func takenStartsStay(t *testing.T, client goredis.UniversalClient) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	str := func(ps [][]byte, sorted bool) string {
		var out []string
		for _, p := range ps {
			out = append(out, string(p))
		}
		if sorted {
			slices.Sort(out)
		}
		return strings.Join(out, " ")
	}
	pending := func(set bool, starts *redis.StartURLs, want int64, when string) {
		t.Helper()
		if n, err := starts.PendingStarts(ctx); err != nil || n != want {
			t.Errorf("set %v: pending %d, %v %s; want %d", set, n, err, when, want)
		}
	}
	for _, set := range []bool{false, true} {
		name := integration.Name(t)
		starts := redis.NewStartURLs(client, name, set)
		t.Cleanup(func() { starts.Purge(context.Background()) })
		if err := starts.AddStarts(ctx, []byte("a"), []byte("b"), []byte("c"), []byte("d"), []byte("e")); err != nil {
			t.Fatal(err)
		}
		dead, err := starts.TakeStarts(ctx, 2)
		if err != nil || len(dead) != 2 {
			t.Fatalf("set %v: take: %v, %v", set, dead, err)
		}
		pending(set, starts, 5, "with a batch taken")
		// The next worker takes at once what the dead one had.
		next, err := starts.TakeStarts(ctx, 3)
		if err != nil || len(next) != 3 {
			t.Fatalf("set %v: take: %v, %v", set, next, err)
		}
		if !set && str(next, false) != "a b c" {
			t.Errorf("list: the next take got %q, want a b c: the dead worker's batch first, in order", str(next, false))
		}
		if err := starts.DropStarts(ctx, next, nil); err != nil {
			t.Fatal(err)
		}
		pending(set, starts, 2, "after a batch of 3 was dropped")
		// The dead worker's batch dropped late (it was not dead, only slow):
		// what the other batch dropped is not dropped again.
		if err := starts.DropStarts(ctx, dead, nil); err != nil {
			t.Fatal(err)
		}
		// What is left: what neither batch took (in a list, the dead
		// one's were the next one's).
		done := slices.Concat(next, dead)
		left := slices.DeleteFunc([]string{"a", "b", "c", "d", "e"}, func(s string) bool {
			return slices.ContainsFunc(done, func(p []byte) bool { return string(p) == s })
		})
		pending(set, starts, int64(len(left)), "after a batch already dropped was dropped again")
		all, err := starts.TakeStarts(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		if got := str(all, set); got != strings.Join(left, " ") {
			t.Errorf("set %v: left %q, want %q", set, got, left)
		}
	}
}

// TestTakenStartsKept: a taken batch dropped but for the payloads that
// could not be moved into the frontier keeps those at the front of the
// list, in order, and drops the others (rejected), even on a server out of
// memory.
func TestTakenStartsKept(t *testing.T) {
	client := integration.RedisClient(t)
	ctx := t.Context()
	name := integration.Name(t)
	starts := redis.NewStartURLs(client, name, false)
	t.Cleanup(func() { starts.Purge(context.Background()) })
	if err := starts.AddStarts(ctx, []byte("a"), []byte("b"), []byte("c"), []byte("d")); err != nil {
		t.Fatal(err)
	}
	b, err := starts.TakeStarts(ctx, 3)
	if err != nil || len(b) != 3 {
		t.Fatalf("take: %v, %v", b, err)
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
		t.Fatalf("AddStarts out of memory: %v, want an OOM error (the test tests nothing)", err)
	}
	err = starts.DropStarts(ctx, b, [][]byte{[]byte("c"), []byte("b")})
	lift()
	if err != nil {
		t.Fatalf("DropStarts out of memory: %v", err)
	}
	all, err := starts.TakeStarts(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(slices.Concat(all...)); got != "bcd" {
		t.Errorf("after the drop: %q, want b c d in order (a dropped)", all)
	}
}

// TestRequeueRejectedStarts: Requeue puts rejected start URLs back into
// the list (or set) as they came in, oldest first and at most max; a
// payload not kept whole (cut at 1 KiB, or not UTF-8, which JSON would
// change) stays with the dead letters, and DeadLetters lists it.
func TestRequeueRejectedStarts(t *testing.T) {
	client := integration.RedisClient(t)
	ctx := t.Context()
	for _, set := range []bool{false, true} {
		name := integration.Name(t)
		s := redis.NewStartURLs(client, name, set)
		t.Cleanup(func() { s.Purge(context.Background()) })
		long := "http://x/" + strings.Repeat("a", 2<<10)
		for _, p := range []string{"bad one", long, "\x80\x04bin", `{"url":"http://x/<&>"}`, "bad two"} {
			if err := s.RejectStart(ctx, []byte(p), "test"); err != nil {
				t.Fatal(err)
			}
		}
		queue := engine.StartQueue(name)
		if _, err := s.Requeue(ctx, "other:start_urls", 10); err == nil {
			t.Error("Requeue of another queue: no error")
		}
		if n, err := s.Requeue(ctx, queue, 2); err != nil || n != 2 {
			t.Fatalf("set %v: Requeue max 2 = %d, %v; want 2", set, n, err)
		}
		if n, err := s.Requeue(ctx, queue, 10); err != nil || n != 1 {
			t.Fatalf("set %v: Requeue = %d, %v; want the 1 whole payload left", set, n, err)
		}
		got, err := s.TakeStarts(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"bad one", `{"url":"http://x/<&>"}`, "bad two"}
		var gs []string
		for _, g := range got {
			gs = append(gs, string(g))
		}
		if set {
			slices.Sort(gs)
			slices.Sort(want)
		}
		if !slices.Equal(gs, want) {
			t.Errorf("set %v: requeued %q, want %q", set, gs, want)
		}
		dls, err := s.DeadLetters(ctx, queue, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(dls) != 2 || dls[0].Reason != "test" || !strings.HasPrefix(string(dls[0].Message.Body), "http://x/aaa") || len(dls[0].Message.Body) != 1<<10 {
			t.Errorf("set %v: dead letters left %d (%v), want the cut URL and the binary payload", set, len(dls), dls)
		}
	}
}

// TestStartsWrongType: a start-URL key of the other type is refused with
// ErrStartsType, by Check and by every command on it, an error the engine
// knows as engine.ErrStartsType (it stops the crawl on it).
func TestStartsWrongType(t *testing.T) {
	client := integration.RedisClient(t)
	ctx := t.Context()
	name := integration.Name(t)
	key := redislayout.StartKeys(name).List
	if err := client.SAdd(ctx, key, "http://x/").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Del(context.Background(), key) })
	s := redis.NewStartURLs(client, name, false)
	_, take := s.TakeStarts(ctx, 1)
	_, pending := s.PendingStarts(ctx)
	for what, err := range map[string]error{"Check": s.Check(ctx), "AddStarts": s.AddStarts(ctx, []byte("http://y/")), "TakeStarts": take, "PendingStarts": pending} {
		if !errors.Is(err, redis.ErrStartsType) || !errors.Is(err, engine.ErrStartsType) || !strings.Contains(err.Error(), key+" is a set") {
			t.Errorf("%s: %v, want ErrStartsType (and engine's) naming %s as a set", what, err, key)
		}
	}
	if err := redis.NewStartURLs(client, name, true).Check(ctx); err != nil {
		t.Errorf("Check of a set, configured as one: %v", err)
	}
}
