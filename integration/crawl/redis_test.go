package crawl_test

import (
	"strings"
	"testing"
	"time"

	"github.com/trawlhq/trawl/integration"
	"github.com/trawlhq/trawl/internal/testsite"
)

// redisArgs are the flags of a worker of crawl name on the shared Redis.
func redisArgs(t *testing.T, name string, more ...string) []string {
	return append([]string{"--broker=redis", "--redis-url", integration.Redis(t), "--name", name,
		"--allow-private", "--idle-timeout=2s", "--concurrency=16", "--per-host=16"}, more...)
}

// redisDeployment is redisArgs in the shape threeWorkers and kill9 take.
func redisDeployment(t *testing.T) func(name string, more ...string) []string {
	return func(name string, more ...string) []string { return redisArgs(t, name, more...) }
}

func TestRedisThreeWorkers(t *testing.T) { threeWorkers(t, redisDeployment(t)) }
func TestRedisKill9(t *testing.T)        { kill9(t, redisDeployment(t)) }

// TestRedisResume: every worker stopped with SIGINT halfway; a worker
// started later finishes the crawl without fetching anything twice.
func TestRedisResume(t *testing.T) {
	site, url := serveSite(t, testsite.Options{Pages: pages(), Links: 10, Seed: 13, NoTraps: true, Latency: time.Millisecond})
	name := integration.Name(t)
	mustRun(t, append([]string{"seed"}, redisArgs(t, name, url)...)...)
	a := start(t, append([]string{"worker"}, redisArgs(t, name)...)...)
	b := start(t, append([]string{"worker"}, redisArgs(t, name)...)...)
	a.waitItems(t, site.Expected()/4, 2*time.Minute)
	for _, p := range []*proc{a, b} {
		p.cmd.Process.Signal(interrupt)
	}
	for _, p := range []*proc{a, b} {
		if code := p.wait(t, time.Minute); code != 130 {
			t.Errorf("exit %d after SIGINT, want 130:\n%s", code, p.stderr.String())
		}
	}
	if d, _ := union(t, a, b); d >= site.Expected() {
		t.Fatalf("the crawl finished before the stop (%d items); nothing was tested", d)
	}
	c := start(t, append([]string{"worker"}, redisArgs(t, name)...)...)
	if code := c.wait(t, 5*time.Minute); code != 0 {
		t.Fatalf("resuming worker exit %d:\n%s", code, c.stderr.String())
	}
	if err := site.Verify(); err != nil {
		t.Errorf("site (every page exactly once across the stop): %v", err)
	}
	distinct, dups := union(t, a, b, c)
	if distinct != site.Expected() || dups != 0 {
		t.Errorf("items: %d distinct (want %d), %d duplicates (want 0)", distinct, site.Expected(), dups)
	}
}

// TestRedisBadInput: garbage pushed by hand into the start URLs is
// rejected with a log line and the crawl goes on; an unreachable Redis and
// a wrong password each give one clear line.
func TestRedisBadInput(t *testing.T) {
	site, url := serveSite(t, testsite.Options{Pages: 50, Links: 4, NoTraps: true})
	name := integration.Name(t)
	client := integration.RedisClient(t)
	if err := client.RPush(t.Context(), "{"+name+"}:start_urls", "\x80\x04garbage", "not a url", url).Err(); err != nil {
		t.Fatal(err)
	}
	w := start(t, append([]string{"worker"}, redisArgs(t, name)...)...)
	if code := w.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, w.stderr.String())
	}
	if err := site.Verify(); err != nil {
		t.Error(err)
	}
	if n := strings.Count(w.stderr.String(), "start url rejected"); n != 2 {
		t.Errorf("%d rejections logged, want 2:\n%s", n, w.stderr.String())
	}

	code, stderr := run(t, "stats", "--broker=redis", "--redis-url=redis://127.0.0.1:1/0")
	if code == 0 {
		t.Error("unreachable Redis: exit 0")
	}
	oneLine(t, stderr, "cannot connect")

	user := integration.Name(t)
	if err := client.Do(t.Context(), "ACL", "SETUSER", user, "on", ">right", "~*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Do(t.Context(), "ACL", "DELUSER", user) })
	wrong := strings.Replace(integration.Redis(t), "redis://", "redis://"+user+":wrong@", 1)
	code, stderr = run(t, "stats", "--broker=redis", "--redis-url="+wrong)
	if code == 0 {
		t.Error("wrong password: exit 0")
	}
	oneLine(t, stderr, "authentication failed")
}
