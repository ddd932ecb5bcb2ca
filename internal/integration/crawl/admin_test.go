package crawl_test

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trawlhq/trawl/internal/integration"
	"github.com/trawlhq/trawl/internal/testsite"
)

// TestRedisDeadLetterStarts (issues 27.9, 28.11): start URLs Redis keeps
// as rejected are listed by "deadletter list" as URLs with their reason,
// their passwords redacted, not as "unparseable dead letter" JSON.
func TestRedisDeadLetterStarts(t *testing.T) {
	t.Parallel()
	const pw = "Pl4ntedS3cret"
	_, url := serveSite(t, testsite.Config{Pages: 5, Links: 2, NoTraps: true})
	name := integration.Name(t)
	client := integration.RedisClient(t)
	if err := client.RPush(t.Context(), "{"+name+"}:start_urls", "ftp://u:"+pw+"@example.com/", `{"url":"gopher://u:`+pw+`@example.com/x"}`, url).Err(); err != nil {
		t.Fatal(err)
	}
	w := start(t, append([]string{"worker"}, redisArgs(t, name)...)...)
	if code := w.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("worker: exit %d:\n%s", code, w.stderr.String())
	}
	code, out, stderr := runOut(t, append([]string{"deadletter", "list"}, redisArgs(t, name)...)...)
	if code != 0 || strings.Contains(out+stderr, pw) || strings.Contains(out, "unparseable") {
		t.Fatalf("deadletter list: exit %d, want 0, no password, no unparseable record; stdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	for _, want := range []string{
		"{" + name + "}:start_urls\tftp://u:xxxxx@example.com/\t",
		"{" + name + "}:start_urls\tgopher://u:xxxxx@example.com/x\t",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("deadletter list lacks a line starting %q:\n%s", want, out)
		}
	}
}

// TestRedisOnlyBadStarts: a worker whose only start URL is not one
// fails saying where the reason is (it said "no page could be fetched",
// and nothing of the dead letter).
func TestRedisOnlyBadStarts(t *testing.T) {
	t.Parallel()
	name := integration.Name(t)
	if err := integration.RedisClient(t).RPush(t.Context(), "{"+name+"}:start_urls", `{"url": "http://127.0.0.1:1/", "priority": "high"}`).Err(); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runOut(t, append([]string{"worker", "--out", "/dev/null"}, redisArgs(t, name)...)...)
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if want := "trawl: no page could be fetched; the crawl's 1 dead letter says why: trawl deadletter list"; code != 1 || lines[len(lines)-1] != want {
		t.Errorf("worker of a bad start URL: exit %d, want 1 and the last line %q; stderr:\n%s", code, want, stderr)
	}
	code, out, _ := runOut(t, append([]string{"deadletter", "list"}, redisArgs(t, name)...)...)
	if want := `"priority" is a string, want a whole number`; code != 0 || !strings.Contains(out, want) {
		t.Errorf("deadletter list: exit %d, want 0 and the reason %q; stdout:\n%s", code, want, out)
	}
}

// TestRedisWorkerSIGTERM (issue 27.4): a service worker (--idle-timeout=0)
// stopped by SIGTERM, as systemd, Kubernetes and docker stop it, exits 0
// after a graceful stop, and loses nothing: a worker started later
// finishes the crawl with every page fetched once.
func TestRedisWorkerSIGTERM(t *testing.T) {
	t.Parallel()
	site, url := serveSite(t, testsite.Config{Pages: pages(), Links: 10, Seed: 17, NoTraps: true, Latency: time.Millisecond})
	name := integration.Name(t)
	mustRun(t, append([]string{"seed"}, redisArgs(t, name, url)...)...)
	a := start(t, append([]string{"worker"}, redisArgs(t, name, "--idle-timeout=0")...)...)
	a.waitItems(t, site.Expected()/4, 2*time.Minute)
	a.cmd.Process.Signal(syscall.SIGTERM)
	if code := a.wait(t, time.Minute); code != 0 {
		t.Errorf("exit %d after SIGTERM, want 0:\n%s", code, a.stderr.String())
	}
	if d, _ := union(t, a); d >= site.Expected() {
		t.Fatalf("the crawl finished before the stop (%d items); nothing was tested", d)
	}
	b := start(t, append([]string{"worker"}, redisArgs(t, name)...)...)
	if code := b.wait(t, 5*time.Minute); code != 0 {
		t.Fatalf("resuming worker exit %d:\n%s", code, b.stderr.String())
	}
	if err := site.Verify(); err != nil {
		t.Errorf("site (every page exactly once across the stop): %v", err)
	}
	if distinct, dups := union(t, a, b); distinct != site.Expected() || dups != 0 {
		t.Errorf("items: %d distinct (want %d), %d duplicates (want 0)", distinct, site.Expected(), dups)
	}
}

// TestRedisUnknownCrawl (issue 27.3): stats, items, deadletter and purge
// of a crawl that does not exist on Redis (a typo in --name) exit 1
// saying so, as the embedded mode does, instead of showing an empty
// crawl; a crawl seeded, or fed by hand, exists.
func TestRedisUnknownCrawl(t *testing.T) {
	t.Parallel()
	unknownCrawl(t, redisDeployment(t), "redis")

	byHand := integration.Name(t) + "-byhand"
	if err := integration.RedisClient(t).RPush(t.Context(), "{"+byHand+"}:start_urls", "http://127.0.0.1:1/").Err(); err != nil {
		t.Fatal(err)
	}
	mustRun(t, append([]string{"stats"}, redisArgs(t, byHand)...)...)

	// A worker started before the crawl is seeded waits for it, up to
	// its --idle-timeout, saying why, then crawls it.
	site, url := serveSite(t, testsite.Config{Pages: 30, Links: 4, Seed: 5, NoTraps: true})
	early := integration.Name(t) + "-early"
	w := start(t, append([]string{"worker"}, redisArgs(t, early, "--idle-timeout=2m")...)...)
	w.waitStderr(t, "no crawl "+early+" on redis yet: waiting up to --idle-timeout 2m0s for trawl seed or trawl crawl to begin it", time.Minute)
	mustRun(t, append([]string{"seed"}, redisArgs(t, early, url)...)...)
	deadline := time.Now().Add(2 * time.Minute)
	for len(w.items(t)) < site.Expected() && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond) // polling the items file
	}
	if err := site.Verify(); err != nil {
		t.Errorf("the worker started before the seed: %v", err)
	}
}

// TestNATSUnknownCrawl is TestRedisUnknownCrawl on NATS JetStream.
func TestNATSUnknownCrawl(t *testing.T) {
	t.Parallel()
	unknownCrawl(t, natsArgs(t, integration.NATS(t)), "nats")
}

// TestRabbitMQUnknownCrawl is TestRedisUnknownCrawl on RabbitMQ, whose
// crawl settings are kept in the deployment's Redis.
func TestRabbitMQUnknownCrawl(t *testing.T) {
	t.Parallel()
	unknownCrawl(t, rabbitArgs(t, sharedRabbit(t)), "rabbitmq")
}

// unknownCrawl checks that the admin commands refuse a crawl never seeded
// on the deployment args, and take it once seeded.
func unknownCrawl(t *testing.T, args func(name string, more ...string) []string, brokerName string) {
	name := integration.Name(t)
	// A worker of a crawl that does not exist says so, after waiting for
	// it up to its --idle-timeout, and begins none: the commands below
	// find no crawl (it stored settings and filter marks, and said
	// "nothing to do").
	code, _, stderr := runOut(t, append([]string{"worker", "--out", "/dev/null"}, args(name, "--idle-timeout=1s")...)...)
	if want := "no crawl " + name + " on " + brokerName + " (check --name)"; code != 1 || !strings.Contains(stderr, want) || !strings.Contains(stderr, "up to --idle-timeout 1s") {
		t.Errorf("worker of an unknown crawl: exit %d, want 1, a wait and %q; stderr:\n%s", code, want, stderr)
	}
	for _, cmd := range [][]string{{"stats"}, {"items"}, {"deadletter", "list"}, {"purge"}} {
		code, out, stderr := runOut(t, append(cmd, args(name)...)...)
		if want := "no crawl " + name + " on " + brokerName; code != 1 || !strings.Contains(stderr, want) {
			t.Errorf("%v of an unknown crawl: exit %d, want 1 and %q; stdout %q, stderr:\n%s", cmd, code, want, out, stderr)
		}
	}
	// Nor did they leave the duplicate filter's layout behind: it refused
	// a seed of that name with another --dedup (the worker and the
	// commands made a set filter).
	mustRun(t, append([]string{"seed"}, args(name, "--dedup=bloom", "--bloom-capacity=1000", "http://127.0.0.1:1/")...)...)
	mustRun(t, append([]string{"stats"}, args(name)...)...)
}
