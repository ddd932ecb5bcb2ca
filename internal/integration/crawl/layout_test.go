package crawl_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

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
