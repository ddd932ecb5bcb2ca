package crawl_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trawlhq/trawl/internal/integration"
	"github.com/trawlhq/trawl/internal/testsite"
)

var workerSummary = regexp.MustCompile(`(?m)^trawl: worker done: (\d+) pages? fetched, (\d+) items? written, (\d+) errors?`)

// TestRedisCLIAgrees (9.3, 9.12): on Redis, a worker's summary line, the
// items it wrote and "trawl stats" give the same numbers; "deadletter
// list" says there are none; "purge" leaves no key of the crawl.
func TestRedisCLIAgrees(t *testing.T) {
	t.Parallel()
	site, url := serveSite(t, testsite.Config{Pages: 200, Links: 5, Seed: 21, NoTraps: true})
	name := integration.Name(t)
	mustRun(t, append([]string{"seed"}, redisArgs(t, name, url)...)...)
	w := start(t, append([]string{"worker"}, redisArgs(t, name)...)...)
	if code := w.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("worker exit %d:\n%s", code, w.stderr.String())
	}
	if err := site.Verify(); err != nil {
		t.Error(err)
	}
	m := workerSummary.FindStringSubmatch(w.stderr.String())
	if m == nil {
		t.Fatalf("no summary line:\n%s", w.stderr.String())
	}
	pages, _ := strconv.Atoi(m[1])
	items, _ := strconv.Atoi(m[2])
	if n := len(w.items(t)); n != items || items == 0 {
		t.Errorf("summary: %d items; written: %d", items, n)
	}

	code, out, stderr := runOut(t, append([]string{"stats", "--json"}, redisArgs(t, name)...)...)
	if code != 0 {
		t.Fatalf("stats: exit %d: %s", code, stderr)
	}
	var stats map[string]int64
	if err := json.Unmarshal([]byte(out), &stats); err != nil {
		t.Fatalf("stats --json: %v: %s", err, out)
	}
	if stats["item_scraped_count"] != int64(items) || stats["downloader/response_count"] != int64(pages) {
		t.Errorf("stats say %d items, %d pages; the summary %d, %d", stats["item_scraped_count"], stats["downloader/response_count"], items, pages)
	}

	code, out, stderr = runOut(t, append([]string{"deadletter", "list"}, redisArgs(t, name)...)...)
	if want := "no dead letters in {" + name + "}:requests or {" + name + "}:start_urls\n"; code != 0 || out != want {
		t.Errorf("deadletter list: exit %d, stdout %q, want %q; stderr: %s", code, out, want, stderr)
	}

	// purge deletes exactly the crawl's layout: a key beside it, under
	// the same hash tag, stays.
	client := integration.RedisClient(t)
	mine := "{" + name + "}:mine"
	if err := client.Set(t.Context(), mine, "not trawl's", 0).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Del(context.WithoutCancel(t.Context()), mine) })
	before, err := client.Keys(t.Context(), "{"+name+"}:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	code, out, stderr = runOut(t, append([]string{"purge"}, redisArgs(t, name)...)...)
	if code != 0 || !strings.Contains(out, "purged") {
		t.Fatalf("purge: exit %d: %s %s", code, out, stderr)
	}
	if left, err := client.Keys(t.Context(), "{"+name+"}:*").Result(); err != nil || len(left) != 1 || left[0] != mine {
		t.Errorf("after purge, keys %v are left (err %v), want only %s; before: %d keys", left, err, mine, len(before))
	}
}

// TestRedisKeyNames (9.4): trawl names the Redis keys it really uses, and
// a scrapy-redis user's push to NAME:start_urls (not read: trawl's key is
// hash-tagged) brings one warning naming the right key, from a running
// worker and from stats.
func TestRedisKeyNames(t *testing.T) {
	t.Parallel()
	site, url := serveSite(t, testsite.Config{Pages: 30, Links: 3, Seed: 22, NoTraps: true})
	name := integration.Name(t)
	code, out, stderr := runOut(t, append([]string{"seed"}, redisArgs(t, name, url)...)...)
	if want := "seeded 1 start URL into {" + name + "}:start_urls\n"; code != 0 || out != want {
		t.Fatalf("seed: exit %d, stdout %q, want %q; stderr: %s", code, out, want, stderr)
	}
	client := integration.RedisClient(t)
	if err := client.LPush(t.Context(), name+":start_urls", url+"page/1").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Del(context.WithoutCancel(t.Context()), name+":start_urls") })
	want := "trawl: warning: " + name + ":start_urls holds 1 entry that trawl never reads; trawl's start URLs are at {" + name + "}:start_urls"

	code, out, stderr = runOut(t, append([]string{"stats"}, redisArgs(t, name)...)...)
	if code != 0 || !strings.Contains(out, "{"+name+"}:start_urls/ready") || !strings.Contains(out, "{"+name+"}:requests/ready") {
		t.Errorf("stats should name the keys {%s}:start_urls and {%s}:requests: exit %d\n%s", name, name, code, out)
	}
	if strings.Count(stderr, want) != 1 {
		t.Errorf("stats: want one warning %q; stderr:\n%s", want, stderr)
	}

	w := start(t, append([]string{"worker"}, redisArgs(t, name)...)...)
	if code := w.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("worker exit %d:\n%s", code, w.stderr.String())
	}
	if n := strings.Count(w.stderr.String(), want); n != 1 {
		t.Errorf("worker: %d warnings %q, want 1; stderr:\n%s", n, want, w.stderr.String())
	}
	if err := site.Verify(); err != nil {
		t.Error(err)
	}
}

// TestRedisDeadLetterRequeueAll (13.2): "deadletter requeue" without --max
// moves every dead letter of both queues back, not the first 100 of each:
// a dead letter left behind is a page never fetched. With --max it moves
// at most that many per queue.
func TestRedisDeadLetterRequeueAll(t *testing.T) {
	t.Parallel()
	name := integration.Name(t)
	client := integration.RedisClient(t)
	ctx := t.Context()
	bury := func(queue string, n int) {
		key := "{" + name + "}:" + queue + ":dead"
		vs := make([]any, n)
		for i := range vs {
			u := fmt.Sprintf("http://127.0.0.1:1/%s/%d", queue, i)
			vs[i] = "4:test0:" + u     // the broker's: reason "test", priority 0
			if queue == "start_urls" { // the start URLs' own
				vs[i] = fmt.Sprintf(`{"reason":"test","payload":%q,"bytes":%d,"whole":true}`, u, len(u))
			}
		}
		if err := client.RPush(ctx, key, vs...).Err(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			client.Del(context.Background(), key, "{"+name+"}:"+queue, "{"+name+"}:"+queue+":seq", "{"+name+"}:"+queue+":notify")
		})
	}
	dead := func(queue string) int64 {
		n, err := client.LLen(ctx, "{"+name+"}:"+queue+":dead").Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	bury("requests", 2345)
	bury("start_urls", 150)

	code, out, stderr := runOut(t, append([]string{"deadletter", "requeue", "--max", "40"}, redisArgs(t, name)...)...)
	if code != 0 || out != "requeued 80 dead letters\n" {
		t.Errorf("deadletter requeue --max 40: exit %d, stdout %q, want 80 requeued; stderr: %s", code, out, stderr)
	}
	code, out, stderr = runOut(t, append([]string{"deadletter", "requeue"}, redisArgs(t, name)...)...)
	if code != 0 || out != "requeued 2415 dead letters\n" {
		t.Errorf("deadletter requeue: exit %d, stdout %q, want all 2,415 left requeued; stderr: %s", code, out, stderr)
	}
	if r, s := dead("requests"), dead("start_urls"); r != 0 || s != 0 {
		t.Errorf("after deadletter requeue, %d dead letters left in requests and %d in start_urls, want none", r, s)
	}
	if n, err := client.LLen(ctx, "{"+name+"}:start_urls").Result(); err != nil || n != 150 {
		t.Errorf("after deadletter requeue, the list {%s}:start_urls holds %d start URLs (err %v), want 150", name, n, err)
	}
}
