package redis_test

import (
	"net/url"
	"os/exec"
	"regexp"
	"strconv"
	"testing"

	"github.com/trawlhq/trawl/internal/integration"
)

// BenchmarkLPushBaseline runs redis-benchmark -P 16 -t lpush against the
// server the other benchmarks use, in the same run, as the yardstick for
// the broker's throughput (the bar: a quarter of it).
func BenchmarkLPushBaseline(b *testing.B) {
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		b.Skip("redis-benchmark not installed (Debian package redis-tools)")
	}
	u, err := url.Parse(integration.Redis(b))
	if err != nil {
		b.Fatal(err)
	}
	out, err := exec.CommandContext(b.Context(), bin, "-h", u.Hostname(), "-p", u.Port(),
		"-P", "16", "-t", "lpush", "-n", "1000000", "-q").CombinedOutput()
	if err != nil {
		b.Fatalf("redis-benchmark: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`LPUSH: ([0-9.]+) requests per second`).FindSubmatch(out)
	if m == nil {
		b.Fatalf("redis-benchmark said: %s", out)
	}
	rate, _ := strconv.ParseFloat(string(m[1]), 64)
	b.ReportMetric(rate, "lpush/s")
}
