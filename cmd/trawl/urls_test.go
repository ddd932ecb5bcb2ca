package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestHostileURLs (issue 27.1): twenty URL forms a generated password
// makes, with / # ? @ % , and spaces in the user and the password, IPv6
// hosts and bad ports, given to every flag that takes a URL and as start
// URLs: the password reaches no output, and every refusal at parse time
// says what to fix.
func TestHostileURLs(t *testing.T) {
	t.Parallel()
	const pw = "Pl4ntedS3cret"
	const h = "127.0.0.1:1" // refuses connections
	forms := []string{
		"bob:se/" + pw + "@" + h,
		"bob:se#" + pw + "@" + h,
		"bob:se?" + pw + "@" + h,
		"bob:se@" + pw + "@" + h,
		"bob:se " + pw + "@" + h,
		"bob:se%" + pw + "@" + h,
		"bob:" + pw + "%@" + h,
		"bob:12/" + pw + "@" + h,
		"bob:" + pw + "/@" + h,
		"bob:" + pw + ",x@" + h,
		"bo/b:" + pw + "@" + h,
		"bo#b:" + pw + "@" + h,
		"bo?b:" + pw + "@" + h,
		"bo b:" + pw + "@" + h,
		"b@b:" + pw + "@" + h,
		"bob:" + pw + "@[::1]:1",
		"bob:" + pw + "@[::1:1",
		"bob:" + pw + "@::1:1",
		"bob:" + pw + "@127.0.0.1:x",
		"bob:" + pw + "@127.0.0.1:99999",
		":" + pw + "/x?y#z@" + h,
	}
	crawl := []string{"crawl", "--ignore-robots", "--retry-times", "0", "--idle-timeout", "100ms"}
	targets := []struct {
		name, scheme string
		args         func(u string) []string
	}{
		{"redis-url", "redis", func(u string) []string { return []string{"stats", "--broker=redis", "--redis-url", u} }},
		{"amqp-url", "amqp", func(u string) []string { return []string{"stats", "--broker=rabbitmq", "--amqp-url", u} }},
		{"amqp-management-url", "http", func(u string) []string {
			return []string{"stats", "--broker=rabbitmq", "--amqp-url", "amqp://" + h + "/", "--amqp-management-url", u}
		}},
		{"nats-url", "nats", func(u string) []string { return []string{"stats", "--broker=nats", "--nats-url", u} }},
		{"proxy", "http", func(u string) []string { return append(crawl, "--proxy", u, "http://"+h+"/") }},
		{"crawl start URL", "http", func(u string) []string { return append(crawl, u) }},
		{"seed start URL", "http", func(u string) []string { return []string{"seed", u} }},
	}
	fix := regexp.MustCompile(`must be percent-encoded|goes in brackets|want 1 to 65535`)
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			for _, f := range forms {
				u := tg.scheme + "://" + f + "/"
				r := trawl(t, time.Minute, tg.args(u)...)
				if strings.Contains(r.stdout+r.stderr, pw) {
					t.Errorf("%s: the password is printed:\nstdout:\n%s\nstderr:\n%s", u, r.stdout, r.stderr)
				}
				if r.code == 2 && !fix.MatchString(lastLine(r.stderr)) {
					t.Errorf("%s: refused without saying what to fix: %s", u, lastLine(r.stderr))
				}
				if r.code == 0 && tg.name != "seed start URL" {
					t.Errorf("%s: exit 0, want a refusal or a failed connection; stderr:\n%s", u, r.stderr)
				}
			}
		})
	}
}

// TestDeadLetterList (issues 27.9, 28.11): "deadletter list" shows a dead
// page's URL without the password of the start URL it came from, and
// "trawl deadletter" alone prints its subcommands.
func TestDeadLetterList(t *testing.T) {
	t.Parallel()
	const pw = "Pl4ntedS3cret"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	dir := t.TempDir()
	start := strings.Replace(srv.URL, "http://", "http://u:"+pw+"@", 1) + "/"
	if r := trawlIn(t, dir, time.Minute, "crawl", "--retry-times", "0", "--ignore-robots", "--idle-timeout", "300ms", start); r.code != 1 {
		t.Fatalf("crawl of a site down: exit %d, want 1; stderr:\n%s", r.code, r.stderr)
	}
	r := trawlIn(t, dir, time.Minute, "deadletter", "list")
	// The page, with its user and the password redacted, or without
	// credentials (they are not part of a page's identity).
	redacted := "trawl:requests\t" + strings.Replace(start, ":"+pw+"@", ":xxxxx@", 1) + "\t"
	stripped := "trawl:requests\t" + srv.URL + "/\t"
	if r.code != 0 || !(strings.HasPrefix(r.stdout, redacted) || strings.HasPrefix(r.stdout, stripped)) || strings.Contains(r.stdout+r.stderr, pw) {
		t.Errorf("deadletter list: exit %d, stdout %q, want 0 and a line starting %q or %q, no password; stderr:\n%s", r.code, r.stdout, redacted, stripped, r.stderr)
	}
	// One attempt is one ("after 1 attempts").
	if !strings.Contains(r.stdout, "\tretries exhausted after 1 attempt: ") {
		t.Errorf("deadletter list: the reason of a page tried once should say \"after 1 attempt\"; stdout %q", r.stdout)
	}
	// A list cut at --max says that there are more; a negative --max
	// is refused (list took it for 100, requeue for every one).
	if r := trawlIn(t, dir, time.Minute, "crawl", "--retry-times", "0", "--ignore-robots", "--idle-timeout", "300ms", srv.URL+"/b"); r.code != 1 {
		t.Fatalf("crawl of a second page down: exit %d, want 1; stderr:\n%s", r.code, r.stderr)
	}
	r = trawlIn(t, dir, time.Minute, "deadletter", "list", "--max", "1")
	if want := "trawl: trawl:requests holds more dead letters than the 1 shown (--max N shows N)\n"; r.code != 0 || strings.Count(r.stdout, "\n") != 1 || r.stderr != want {
		t.Errorf("deadletter list --max 1 of 2: exit %d, stdout %q, stderr %q; want 0, one line, and stderr %q", r.code, r.stdout, r.stderr, want)
	}
	if r := trawlIn(t, dir, time.Minute, "deadletter", "list", "--max", "2"); r.code != 0 || strings.Count(r.stdout, "\n") != 2 || r.stderr != "" {
		t.Errorf("deadletter list --max 2 of 2: exit %d, stdout %q, stderr %q; want 0, two lines, nothing on stderr", r.code, r.stdout, r.stderr)
	}
	for _, verb := range []string{"list", "requeue"} {
		if r := trawlIn(t, dir, time.Minute, "deadletter", verb, "--max", "-1"); r.code != 2 || r.stderr != "trawl: --max -1: want 0 or more\n" {
			t.Errorf("deadletter %s --max -1: exit %d, stderr %q; want 2 and a clear line", verb, r.code, r.stderr)
		}
	}
	r = trawlIn(t, dir, time.Minute, "deadletter")
	if r.code != 0 || !strings.Contains(r.stdout, "trawl deadletter list") || !strings.Contains(r.stdout, "trawl deadletter requeue") {
		t.Errorf("deadletter alone: exit %d, want 0 and its subcommands; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
}

// TestSeedSaysOne (issue 27.10): one start URL seeded is "1 start URL".
func TestSeedSaysOne(t *testing.T) {
	t.Parallel()
	r := trawl(t, time.Minute, "seed", "http://127.0.0.1:1/")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "seeded 1 start URL into ") {
		t.Errorf("seed of one URL: exit %d, stdout %q, want \"seeded 1 start URL into …\"; stderr:\n%s", r.code, r.stdout, r.stderr)
	}
}

// TestSeedFileBadLine: a line of seed --file that is not a start URL is
// refused naming the file, its line and the text as given (it was shown
// escaped, "not%20a%20url", which a search of the file does not find);
// a file that cannot be opened is a usage error too (exit 2, not 1).
func TestSeedFileBadLine(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "starts.txt")
	if err := os.WriteFile(file, []byte("# start URLs\nhttp://127.0.0.1:1/\n\nnot a url\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := trawl(t, time.Minute, "seed", "--file", file)
	want := "trawl: --file " + file + `, line 4: bad start URL "not a url": `
	if r.code != 2 || !strings.HasPrefix(r.stderr, want) || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("seed --file with a bad line 4: exit %d, stderr %q; want 2 and one line starting %q", r.code, r.stderr, want)
	}
	r = trawl(t, time.Minute, "seed", "--file", file+".missing")
	if r.code != 2 || !strings.HasPrefix(r.stderr, "trawl: --file: open ") {
		t.Errorf("seed --file of a missing file: exit %d, stderr %q; want 2 and the file named", r.code, r.stderr)
	}
}
