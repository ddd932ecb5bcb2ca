package crawl_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trawlhq/trawl/internal/integration"
	"github.com/trawlhq/trawl/internal/testsite"
)

// deployment returns the flags of a process of crawl name, given more.
type deployment func(name string, more ...string) []string

// settingsArgs are the flags of a process of crawl name on the shared
// Redis, without --allow-private: the crawl's settings decide it.
func settingsArgs(t *testing.T) deployment {
	redis := integration.Redis(t)
	return func(name string, more ...string) []string {
		return flags([]string{"--broker=redis", "--redis-url", redis, "--name", name,
			"--idle-timeout=2s", "--concurrency=8", "--per-host=16"}, more...)
	}
}

// natsSettingsArgs are settingsArgs on NATS JetStream (settings in its
// KV bucket, the filter in Redis).
func natsSettingsArgs(t *testing.T) deployment {
	nats, redis := integration.NATS(t), integration.Redis(t)
	return func(name string, more ...string) []string {
		return flags([]string{"--broker=nats", "--nats-url", nats, "--redis-url", redis, "--name", name,
			"--idle-timeout=2s", "--concurrency=8", "--per-host=16"}, more...)
	}
}

// rabbitSettingsArgs are settingsArgs on RabbitMQ (settings and presence
// in the deployment's Redis).
func rabbitSettingsArgs(t *testing.T) deployment {
	srv := sharedRabbit(t)
	redis := integration.Redis(t)
	return func(name string, more ...string) []string {
		return flags([]string{"--broker=rabbitmq", "--amqp-url", srv.URL, "--amqp-management-url", srv.ManagementURL,
			"--redis-url", redis, "--name", name, "--idle-timeout=2s", "--concurrency=8", "--per-host=16"}, more...)
	}
}

func TestRedisJoiningWorkerAdoptsSettings(t *testing.T) {
	t.Parallel()
	joiningWorkerAdopts(t, settingsArgs(t))
}

func TestNATSJoiningWorkerAdoptsSettings(t *testing.T) {
	t.Parallel()
	joiningWorkerAdopts(t, natsSettingsArgs(t))
}

func TestRabbitMQJoiningWorkerAdoptsSettings(t *testing.T) {
	t.Parallel()
	joiningWorkerAdopts(t, rabbitSettingsArgs(t))
}

func TestRedisPurgeRefusedWhileWorkersRun(t *testing.T) {
	t.Parallel()
	purgeRefused(t, settingsArgs(t), true)
}

func TestNATSPurgeRefusedWhileWorkersRun(t *testing.T) {
	t.Parallel()
	purgeRefused(t, natsSettingsArgs(t), false)
}

func TestRabbitMQPurgeRefusedWhileWorkersRun(t *testing.T) {
	t.Parallel()
	purgeRefused(t, rabbitSettingsArgs(t), true)
}

// joiningWorkerAdopts is issue 13.1's failing scenario:
// a crawl of a loopback site runs with --allow-private and a second
// worker joins without it. It used to refuse every page (1,540 of 2,018
// lost). Now it adopts the crawl's settings, says so, and fetches its
// share: every page fetched exactly once, no error logged. Then a worker
// given an --include the crawl does not have refuses to start, naming
// the flag and both values.
func joiningWorkerAdopts(t *testing.T, args deployment) {
	site, url := serveSite(t, testsite.Config{Pages: 2000, Links: 10, Seed: 31, NoTraps: true, Latency: 5 * time.Millisecond})
	name := integration.Name(t)
	a := start(t, append([]string{"crawl"}, args(name, "--allow-private", "--log-level=info", url)...)...)
	a.waitStderr(t, "crawl settings stored with the crawl", time.Minute)
	a.waitItems(t, 20, time.Minute)
	b := start(t, append([]string{"worker"}, args(name, "--log-level=info")...)...)
	for i, p := range []*proc{a, b} {
		if code := p.wait(t, 5*time.Minute); code != 0 {
			t.Fatalf("process %d exit %d:\n%s", i, code, p.stderr.String())
		}
	}
	if err := site.Verify(); err != nil {
		t.Errorf("site: %v", err)
	}
	distinct, dups := union(t, a, b)
	if distinct != site.Expected() || dups != 0 {
		t.Errorf("items: %d distinct (want %d), %d duplicates (want 0)", distinct, site.Expected(), dups)
	}
	got := len(b.items(t))
	if got == 0 {
		t.Errorf("the joining worker wrote no item:\n%s", b.stderr.String())
	}
	errb := b.stderr.String()
	if !strings.Contains(errb, "crawl settings adopted from the crawl") || !strings.Contains(errb, "allow-private=true") {
		t.Errorf("the joining worker did not say it adopted allow-private=true:\n%s", errb)
	}
	if strings.Contains(errb, "level=ERROR") || strings.Contains(errb, "refused") {
		t.Errorf("the joining worker refused pages:\n%s", errb)
	}
	t.Logf("joining worker wrote %d of %d items", got, site.Expected())

	code, stderr := run(t, append([]string{"worker"}, args(name, "--include", "/nope/")...)...)
	if code != 1 {
		t.Errorf("worker with a contradicting --include: exit %d, want 1", code)
	}
	oneLine(t, stderr, `--include: the crawl has (none), this worker was given "/nope/"`)
}

// purgeRefused is issue 13.13: a purge under a
// running crawl used to restart it silently (1,112-1,199 duplicate items).
// While a worker runs, purge is refused, naming the live worker count,
// and nothing is deleted; once the worker exited, purge works; purge
// --force purges under a running worker, with a warning.
func purgeRefused(t *testing.T, args deployment, redis bool) {
	_, url := serveSite(t, testsite.Config{Pages: 50, Links: 4, NoTraps: true})
	name := integration.Name(t)
	client := integration.RedisClient(t)
	w := start(t, append([]string{"crawl"}, args(name, "--allow-private", "--idle-timeout=0", url)...)...)
	w.waitItems(t, 1, time.Minute)

	code, stderr := run(t, append([]string{"purge"}, args(name)...)...)
	if code == 0 {
		t.Fatal("purge while a worker runs: exit 0")
	}
	oneLine(t, stderr, "1 live worker")
	t.Logf("refused: %s", stderr)
	keys, err := client.Keys(t.Context(), "{"+name+"}:*").Result()
	if redis && (err != nil || !slices.Contains(keys, "{"+name+"}:meta") || len(keys) < 3) {
		t.Errorf("after the refused purge the crawl's keys are %q (%v), want its settings and more", keys, err)
	}

	w.cmd.Process.Signal(interrupt)
	if code := w.wait(t, time.Minute); code != 130 {
		t.Fatalf("worker exit %d after SIGINT, want 130:\n%s", code, w.stderr.String())
	}
	if code, stderr := run(t, append([]string{"purge"}, args(name)...)...); code != 0 {
		t.Fatalf("purge after the worker exited: exit %d:\n%s", code, stderr)
	}
	if keys, err := client.Keys(t.Context(), "{"+name+"}:*").Result(); redis && (err != nil || len(keys) != 0) {
		t.Errorf("after the purge the crawl's keys %q are left (%v)", keys, err)
	}

	w2 := start(t, append([]string{"crawl"}, args(name, "--allow-private", "--idle-timeout=0", url)...)...)
	w2.waitItems(t, 1, time.Minute)
	code, stderr = run(t, append([]string{"purge", "--force"}, args(name)...)...)
	if code != 0 || !strings.Contains(stderr, "purging while workers run") {
		t.Errorf("purge --force under a running worker: exit %d, stderr:\n%s", code, stderr)
	}
}
