package crawl_test

import (
	"strings"
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
