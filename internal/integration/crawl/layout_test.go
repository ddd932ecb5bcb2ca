package crawl_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/internal/integration"
	"github.com/trawlhq/trawl/internal/redislayout"
	"github.com/trawlhq/trawl/internal/testsite"
)

// TestRedisStartDeadLetterRequeue (issue 22): the start URLs' dead letters
// go back where they came from, in the form they came in. A malformed
// start URL dead-lettered by a worker and a start URL buried by hand are
// requeued into the list {NAME}:start_urls (before, the broker's requeue
// made it a sorted set of dead-letter records: trawl seed and stats then
// failed WRONGTYPE and workers never finished); afterwards trawl seed
// works, the requeued start URL is crawled and the malformed one is
// dead-lettered again.
func TestRedisStartDeadLetterRequeue(t *testing.T) {
	t.Parallel()
	site, url := serveSite(t, testsite.Config{Pages: 30, Links: 3, Seed: 23, NoTraps: true})
	name := integration.Name(t)
	client := integration.RedisClient(t)
	ctx := t.Context()
	keys := redislayout.StartKeys(name)
	if err := client.RPush(ctx, keys.List, "not a url").Err(); err != nil {
		t.Fatal(err)
	}
	w := start(t, append([]string{"worker"}, redisArgs(t, name)...)...)
	if code := w.wait(t, 2*time.Minute); code != 1 { // no page could be fetched
		t.Fatalf("worker exit %d, want 1:\n%s", code, w.stderr.String())
	}
	rec, _ := json.Marshal(map[string]any{"reason": "by hand", "payload": url, "bytes": len(url), "whole": true})
	if err := client.RPush(ctx, keys.Dead, rec).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := client.LLen(ctx, keys.Dead).Result(); err != nil || n != 2 {
		t.Fatalf("%s holds %d dead letters (err %v), want 2: the worker's and the one buried by hand", keys.Dead, n, err)
	}

	code, out, stderr := runOut(t, append([]string{"deadletter", "requeue"}, redisArgs(t, name)...)...)
	if code != 0 || out != "requeued 2 dead letters\n" {
		t.Fatalf("deadletter requeue: exit %d, stdout %q, want 2 requeued; stderr: %s", code, out, stderr)
	}
	got, err := client.LRange(ctx, keys.List, 0, -1).Result()
	if typ := client.Type(ctx, keys.List).Val(); err != nil || typ != "list" || strings.Join(got, " ") != "not a url "+url {
		t.Fatalf("after requeue %s is a %s holding %q (err %v); want the list [not a url %s]", keys.List, typ, got, err, url)
	}
	mustRun(t, append([]string{"seed"}, redisArgs(t, name, url+"page/1")...)...)
	mustRun(t, append([]string{"stats"}, redisArgs(t, name)...)...)

	w = start(t, append([]string{"worker"}, redisArgs(t, name)...)...)
	if code := w.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("worker after requeue: exit %d:\n%s", code, w.stderr.String())
	}
	if err := site.Verify(); err != nil {
		t.Errorf("the requeued start URL's site: %v", err)
	}
	if recs, err := client.LRange(ctx, keys.Dead, 0, -1).Result(); err != nil || len(recs) != 1 || !strings.Contains(recs[0], `"payload":"not a url"`) {
		t.Errorf("%s holds %q (err %v); want the malformed start URL again", keys.Dead, recs, err)
	}
}

// TestRedisOutRedisItems (issue 22): trawl items reads the items of --out
// redis (before, it read the broker queue under the same key and failed
// WRONGTYPE on the list), and of --out queue, which on Redis writes the
// same list.
func TestRedisOutRedisItems(t *testing.T) {
	t.Parallel()
	for _, out := range []string{"redis", "queue"} {
		t.Run(out, func(t *testing.T) {
			site, url := serveSite(t, testsite.Config{Pages: 40, Links: 3, Seed: 24, NoTraps: true})
			name := integration.Name(t)
			mustRun(t, append([]string{"crawl"}, redisArgs(t, name, url, "--out", out)...)...)
			code, stdout, stderr := runOut(t, append([]string{"items"}, redisArgs(t, name)...)...)
			if code != 0 {
				t.Fatalf("items: exit %d: %s", code, stderr)
			}
			lines := strings.Split(strings.TrimSpace(stdout), "\n")
			if len(lines) != site.Expected() {
				t.Errorf("--out %s, then trawl items: %d items, want %d; stderr: %s", out, len(lines), site.Expected(), stderr)
			}
			for _, l := range lines {
				if !json.Valid([]byte(l)) {
					t.Fatalf("items: %q is not a JSON item", l)
				}
			}
			client := integration.RedisClient(t)
			if n := client.Exists(context.WithoutCancel(t.Context()), redislayout.Items(name)).Val(); n != 0 {
				t.Errorf("after trawl items, %s is still there", redislayout.Items(name))
			}
		})
	}
}

// TestRedisStartsWrongType (issue 22): start URLs in a set (scrapy-redis's
// SADD habit) without --start-urls-set: the worker says so in one line
// naming the flag and exits 1 within --idle-timeout + 10s (before, it
// warned every 1.2s and never exited).
func TestRedisStartsWrongType(t *testing.T) {
	t.Parallel()
	_, url := serveSite(t, testsite.Config{Pages: 5, Links: 2, NoTraps: true})
	name := integration.Name(t)
	client := integration.RedisClient(t)
	key := redislayout.StartKeys(name).List
	if err := client.SAdd(t.Context(), key, url).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Del(context.WithoutCancel(t.Context()), key) })
	w := start(t, append([]string{"worker"}, redisArgs(t, name, "--idle-timeout=2s")...)...)
	if code := w.wait(t, 12*time.Second); code != 1 {
		t.Fatalf("worker exit %d, want 1:\n%s", code, w.stderr.String())
	}
	stderr := w.stderr.String()
	if strings.Count(stderr, "--start-urls-set") != 1 || !strings.Contains(stderr, key+" is a set") {
		t.Errorf("want one line naming %s as a set and --start-urls-set; stderr:\n%s", key, stderr)
	}
	// With the flag, the same set is read.
	w = start(t, append([]string{"worker"}, redisArgs(t, name, "--start-urls-set")...)...)
	if code := w.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("worker --start-urls-set: exit %d:\n%s", code, w.stderr.String())
	}
}

// TestRedisStartsRetyped: a start-URL key made a set under a running
// worker that reads a list ends the worker (exit 1) with one line naming
// the key and --start-urls-set, instead of a warning every second forever.
func TestRedisStartsRetyped(t *testing.T) {
	t.Parallel()
	_, url := serveSite(t, testsite.Config{Pages: 5, Links: 2, NoTraps: true})
	name := integration.Name(t)
	client := integration.RedisClient(t)
	key := redislayout.StartKeys(name).List
	if err := client.RPush(t.Context(), key, url).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Del(context.WithoutCancel(t.Context()), key) })
	w := start(t, append([]string{"worker"}, redisArgs(t, name, "--idle-timeout=1h")...)...)
	w.waitItems(t, 1, time.Minute) // running: past the check at start
	if err := client.Del(t.Context(), key).Err(); err != nil {
		t.Fatal(err)
	}
	if err := client.SAdd(t.Context(), key, url+"again").Err(); err != nil {
		t.Fatal(err)
	}
	if code := w.wait(t, time.Minute); code != 1 {
		t.Fatalf("worker exit %d, want 1:\n%s", code, w.stderr.String())
	}
	stderr := w.stderr.String()
	if strings.Count(stderr, "--start-urls-set") != 1 || !strings.Contains(stderr, key+" is a set") {
		t.Errorf("want one line naming %s as a set and --start-urls-set; stderr:\n%s", key, stderr)
	}
}

// TestRedisLayout (issue 22) runs every command and output mode that
// touches Redis against a server of its own that reports every write
// (keyspace notifications), and checks that each key written is in the
// crawl's layout (redislayout.Keys) and is only ever written as one of its
// entry's types, and one type for its life.
func TestRedisLayout(t *testing.T) {
	t.Parallel()
	srv := integration.RedisContainer(t)
	client := srv.Client(t)
	checkLayout(t, []goredis.UniversalClient{client}, client, func(name string, more ...string) []string {
		return flags([]string{"--broker=redis", "--redis-url", srv.URL, "--name", name,
			"--allow-private", "--idle-timeout=2s", "--concurrency=8"}, more...)
	})
}

// TestRedisClusterLayout is TestRedisLayout on a Redis Cluster of three
// primaries with a replica each (make test-cluster): every node reports
// the writes it takes.
func TestRedisClusterLayout(t *testing.T) {
	c := integration.StartRedisFailoverCluster(t)
	var nodes []goredis.UniversalClient
	for _, a := range c.Addrs {
		n := goredis.NewClient(&goredis.Options{Addr: a})
		t.Cleanup(func() { n.Close() })
		nodes = append(nodes, n)
	}
	checkLayout(t, nodes, c.Client(t), func(name string, more ...string) []string {
		return flags([]string{"--broker=redis", "--redis-url", c.URL(), "--name", name,
			"--allow-private", "--idle-timeout=3s", "--concurrency=8"}, more...)
	})
}

// eventTypes maps a keyspace event to the type of the key it wrote; ""
// for the events of any type (deleting, expiring).
var eventTypes = map[string]string{
	"set": "string", "setrange": "string", "incrby": "string", "incrbyfloat": "string", "append": "string", "setbit": "string",
	"lpush": "list", "rpush": "list", "lpop": "list", "rpop": "list", "linsert": "list", "lset": "list", "ltrim": "list", "lrem": "list", "lmove": "list",
	"sadd": "set", "srem": "set", "spop": "set", "smove": "set",
	"zadd": "zset", "zincr": "zset", "zrem": "zset", "zremrangebyscore": "zset", "zremrangebyrank": "zset", "zpopmin": "zset", "zpopmax": "zset",
	"hset": "hash", "hdel": "hash", "hincrby": "hash", "hincrbyfloat": "hash",
	"del": "", "expire": "", "expired": "", "persist": "", "evicted": "", "new": "",
}

// keyWatch records the keys written on a set of Redis nodes, by type.
type keyWatch struct {
	mu     sync.Mutex
	types  map[string]map[string]bool // key -> types it was written as
	events map[string][]string        // key -> a few of its events, for messages
	odd    []string                   // events of no known type
	marks  map[string]bool            // sync keys seen
	cond   *sync.Cond
}

// watchKeys turns on keyspace events on every node and records them until
// t ends.
func watchKeys(t *testing.T, nodes []goredis.UniversalClient) *keyWatch {
	w := &keyWatch{types: map[string]map[string]bool{}, events: map[string][]string{}, marks: map[string]bool{}}
	w.cond = sync.NewCond(&w.mu)
	ctx := t.Context()
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // after the Close calls below (cleanups run last first)
	for _, n := range nodes {
		if err := n.ConfigSet(ctx, "notify-keyspace-events", "EA").Err(); err != nil {
			t.Fatal(err)
		}
		ps := n.PSubscribe(ctx, "__keyevent@*__:*")
		if _, err := ps.Receive(ctx); err != nil { // subscribed
			t.Fatal(err)
		}
		ch := ps.Channel()
		wg.Go(func() {
			for m := range ch {
				w.record(m.Channel[strings.LastIndexByte(m.Channel, ':')+1:], m.Payload)
			}
		})
		t.Cleanup(func() { ps.Close() })
	}
	return w
}

func (w *keyWatch) record(event, key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if strings.HasPrefix(key, "layout-test-sync:") {
		w.marks[key] = true
		w.cond.Broadcast()
		return
	}
	typ, ok := eventTypes[event]
	if !ok {
		w.odd = append(w.odd, event+" "+key)
		return
	}
	if len(w.events[key]) < 8 {
		w.events[key] = append(w.events[key], event)
	}
	if typ == "" {
		return
	}
	if w.types[key] == nil {
		w.types[key] = map[string]bool{}
	}
	w.types[key][typ] = true
}

// sync returns once every event sent before now by the node of each
// crawl's slot (and of each of its partitions' slots, tags) has been
// recorded: it writes a mark in each slot and waits for it to come back
// (the events of one node come in order).
func (w *keyWatch) sync(t *testing.T, client goredis.UniversalClient, crawls []string, i int) {
	var want []string
	for _, c := range crawls {
		k := fmt.Sprintf("layout-test-sync:{%s}:%d", c, i)
		if err := client.Set(t.Context(), k, "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
		want = append(want, k)
	}
	timeout := time.AfterFunc(time.Minute, func() { w.mu.Lock(); w.cond.Broadcast(); w.mu.Unlock() })
	defer timeout.Stop()
	start := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range want {
		for !w.marks[k] {
			if time.Since(start) >= time.Minute {
				t.Fatalf("the keyspace event of %s did not come within a minute", k)
			}
			w.cond.Wait()
		}
	}
}

// checkLayout runs every command and output mode of trawl that touches
// Redis, on three crawls of different settings, and checks the keys
// written (see TestRedisLayout).
func checkLayout(t *testing.T, nodes []goredis.UniversalClient, client goredis.UniversalClient, args func(string, ...string) []string) {
	ctx := t.Context()
	w := watchKeys(t, nodes)
	_, url := serveSite(t, testsite.Config{Pages: 30, Links: 3, Seed: 25, Latency: time.Millisecond}) // with flaky pages: retries
	suffix := integration.Name(t)
	a, b, c, d := "a-"+suffix, "b-"+suffix, "c-"+suffix, "d-"+suffix
	const dParts = 3 // crawl d's
	tags := []string{a, b, c, d}
	for _, n := range []int{dParts, dParts - 1} { // then repartitioned
		for p := range n {
			tags = append(tags, redislayout.PartitionTag(d, p, n))
		}
	}
	dir := t.TempDir()
	steps := []struct {
		args []string
		by   func() error // instead of args: a write by hand, as an operator would
		code int
	}{
		// a: the defaults, garbage in the start URLs and the frontier.
		{args: append([]string{"seed"}, args(a, url)...)},
		{by: func() error { return client.RPush(ctx, redislayout.StartKeys(a).List, "not a url").Err() }},
		{by: func() error {
			return client.ZAdd(ctx, redislayout.QueueKeys(a+":requests").Ready, goredis.Z{Member: "garbage"}).Err()
		}},
		// A slot of the site's host held by another worker for a
		// moment, as when two workers share it: the worker, which wants
		// the host whole (--autothrottle), asks for it (the want key),
		// then takes it once that slot runs out.
		{by: func() error {
			host := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/")
			now, err := client.Time(ctx).Result()
			if err != nil {
				return err
			}
			key := redislayout.HostKeys(a, host).Slots
			if err := client.HSet(ctx, key, "another worker", fmt.Sprintf("1:%d", now.Add(1500*time.Millisecond).UnixMilli())).Err(); err != nil {
				return err
			}
			return client.PExpire(ctx, key, 1500*time.Millisecond).Err()
		}},
		{args: append([]string{"worker"}, args(a, "--out", "redis", "--autothrottle")...)},
		{args: append([]string{"stats"}, args(a)...)},
		{args: append([]string{"stats", "--json"}, args(a)...)},
		{args: append([]string{"items", "--max", "1"}, args(a)...)},
		{args: append([]string{"items"}, args(a)...)},
		{args: append([]string{"deadletter", "list"}, args(a)...)},
		{args: append([]string{"deadletter", "requeue"}, args(a)...)},
		// Only the requeued garbage: no page could be fetched, exit 1.
		{args: append([]string{"worker"}, args(a, "--out", "queue", "--per-host", "2", "--delay", "1ms")...), code: 1},
		{args: append([]string{"purge"}, args(a)...)},
		// b: a set of start URLs, the Bloom filter, FIFO, items to a file.
		{args: append([]string{"crawl"}, args(b, url, "--start-urls-set", "--dedup", "bloom", "--order", "fifo", "--out", filepath.Join(dir, "b.jsonl"))...)},
		{args: append([]string{"seed"}, args(b, url+"page/1", "--start-urls-set", "--dedup", "bloom", "--order", "fifo")...)},
		{args: append([]string{"worker"}, args(b, "--start-urls-set", "--dedup", "bloom", "--order", "fifo", "--out", filepath.Join(dir, "b.csv"))...)},
		{args: append([]string{"stats"}, args(b, "--start-urls-set", "--dedup", "bloom", "--order", "fifo")...)},
		{args: append([]string{"deadletter", "list"}, args(b, "--start-urls-set", "--dedup", "bloom", "--order", "fifo")...)},
		{args: append([]string{"items"}, args(b, "--start-urls-set", "--dedup", "bloom", "--order", "fifo")...)},
		// c: LIFO, items to stdout, --flush; left in place.
		{args: append([]string{"crawl"}, args(c, url, "--order", "lifo", "--out", "-")...)},
		{args: append([]string{"crawl"}, args(c, url, "--order", "lifo", "--out", "-", "--flush")...)},
		// d: three partitions, the set filter and then the Bloom filter,
		// stopped with requests queued and repartitioned to two.
		{args: append([]string{"crawl"}, args(d, url, "--partitions", "3")...)},
		{args: append([]string{"stats"}, args(d)...)},
		{args: append([]string{"purge"}, args(d)...)},
		{args: append([]string{"crawl"}, args(d, url, "--partitions", "3", "--dedup", "bloom", "--max-pages", "3")...)},
		{args: append([]string{"repartition", "--partitions", "2"}, args(d)...)},
	}
	for i, s := range steps {
		if s.by != nil {
			if err := s.by(); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
		} else {
			code, _, stderr := runOut(t, s.args...)
			if code != s.code { // the keys written are checked all the same
				t.Errorf("step %d, trawl %s: exit %d, want %d:\n%s", i, strings.Join(s.args, " "), code, s.code, stderr)
			}
		}
		w.sync(t, client, tags, i)
	}

	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.odd) > 0 {
		t.Errorf("events this test does not know the type of: %q", w.odd)
	}
	parts := map[string]bool{}
	for key, types := range w.types {
		var crawl string
		for _, n := range []string{a, b, c, d} {
			if strings.HasPrefix(key, "{"+n+"}:") || strings.HasPrefix(key, "{"+n+"#") {
				crawl = n
			}
		}
		entry, ok := redislayout.Match(crawl, key)
		if crawl == "" || !ok {
			t.Errorf("%s (written %v) is not in the layout of crawl %s", key, w.events[key], cmp.Or(crawl, "a, b, c or d"))
			continue
		}
		parts[entry.Part] = true
		if len(types) != 1 {
			t.Errorf("%s was written as %d types: %v (%v)", key, len(types), types, w.events[key])
		}
		for typ := range types {
			if !slices.Contains(entry.Types, typ) {
				t.Errorf("%s was written as a %s; its layout entry %q says %v", key, typ, entry.Part, entry.Types)
			}
		}
	}
	// The test covers the layout: every entry was written, but two that
	// a repartition writes only when cut short.
	unwritten := map[string]bool{
		"requests~repartition*:delayed": true, // nothing nacks a request on its way
		"requests~repartition*:dead":    true, // a lease of a cut-short run running out MaxDeliveries times
	}
	for _, k := range redislayout.Keys {
		if !parts[k.Part] && !unwritten[k.Part] {
			t.Errorf("no key of layout entry %q was written: this test does not cover it", k.Part)
		}
	}
	t.Logf("%d keys written, of %d layout entries", len(w.types), len(parts))
}
