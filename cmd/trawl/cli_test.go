package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trawlhq/trawl/internal/syncbuf"
	"github.com/trawlhq/trawl/internal/testsite"
	"github.com/trawlhq/trawl/internal/testsite/sitetest"
)

// numberSite serves "/" linking to /p/1, /p/22, … /p/55555, and /p/N
// linking to /p/(10N+1) below a million: which pages a crawl reaches
// depends on how many digits its --include lets through. /book has an h1
// and a price; /missing answers 404.
func numberSite(t *testing.T) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<html><title>home</title><body>`)
		for _, p := range []string{"/p/1", "/p/22", "/p/333", "/p/4444", "/p/55555", "/book"} {
			fmt.Fprintf(w, `<a href="%s">x</a>`, p)
		}
		fmt.Fprint(w, `</body></html>`)
	})
	mux.HandleFunc("/p/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.PathValue("n"))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, `<html><title>p%d</title><body>`, n)
		if n < 1e6 {
			fmt.Fprintf(w, `<a href="/p/%d">next</a>`, 10*n+1)
		}
		fmt.Fprint(w, `</body></html>`)
	})
	mux.HandleFunc("/robots.txt", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "User-agent: *\nDisallow: /private\n")
	})
	mux.HandleFunc("/book", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<html><title>book</title><body><h1>A Light in the Attic</h1><p class="price_color">£51.77</p><a href="/missing">gone</a></body></html>`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

type item struct {
	URL      string              `json:"url"`
	Status   int                 `json:"status"`
	Referrer string              `json:"referrer"`
	Fields   map[string][]string `json:"fields"`
}

// readItems reads a JSON Lines file of page items.
func readItems(t *testing.T, path string) []item {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []item
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var it item
		if err := json.Unmarshal(sc.Bytes(), &it); err != nil {
			t.Fatalf("bad item line %q: %v", sc.Text(), err)
		}
		out = append(out, it)
	}
	return out
}

// paths returns the sorted paths of items' URLs.
func paths(items []item, base string) []string {
	var out []string
	for _, it := range items {
		out = append(out, strings.TrimPrefix(it.URL, base))
	}
	slices.Sort(out)
	return out
}

// crawlItems runs a crawl writing to a file and returns its items.
func crawlItems(t *testing.T, args ...string) ([]item, result) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "items.jsonl")
	r := trawl(t, time.Minute, append([]string{"crawl", "--idle-timeout", "300ms", "--out", out}, args...)...)
	if r.code != 0 {
		t.Fatalf("trawl crawl %v: exit %d; stderr:\n%s", args, r.code, r.stderr)
	}
	return readItems(t, out), r
}

// TestFlagValuesWhole (9.1): a regex or a selector with a comma is one
// value: --include 'p/[0-9]{1,3}$' crawls exactly the pages the same regex
// without a comma crawls, and --extract 'r=h1,.price_color' extracts both.
func TestFlagValuesWhole(t *testing.T) {
	t.Parallel()
	base := numberSite(t)
	braces, _ := crawlItems(t, "--include", `p/[0-9]{1,3}$`, base+"/")
	plain, _ := crawlItems(t, "--include", `p/[0-9][0-9]?[0-9]?$`, base+"/")
	want := []string{"/", "/p/1", "/p/11", "/p/111", "/p/22", "/p/221", "/p/333"}
	if got := paths(braces, base); !slices.Equal(got, want) {
		t.Errorf("--include 'p/[0-9]{1,3}$' crawled %v, want %v", got, want)
	}
	if got := paths(plain, base); !slices.Equal(got, want) {
		t.Errorf("--include 'p/[0-9][0-9]?[0-9]?$' crawled %v, want %v", got, want)
	}

	excl, _ := crawlItems(t, "--exclude", `p/[0-9]{2,}|book`, "--max-depth", "1", base+"/")
	if got, want := paths(excl, base), []string{"/", "/p/1"}; !slices.Equal(got, want) {
		t.Errorf("--exclude 'p/[0-9]{2,}|book' crawled %v, want %v", got, want)
	}

	books, _ := crawlItems(t, "--extract", "r=h1,.price_color", base+"/book")
	if len(books) != 1 {
		t.Fatalf("%d items, want the book alone: %v", len(books), books)
	}
	if got, want := books[0].Fields["r"], []string{"A Light in the Attic", "£51.77"}; !slices.Equal(got, want) {
		t.Errorf("--extract 'r=h1,.price_color' gave %q, want %q", got, want)
	}
}

// TestEmptyCrawlSaysWhy (9.2, 9.7): a crawl that writes no item says why
// and exits 1 (0 with --allow-empty); the rerun of a finished crawl says
// it has nothing to do; --flush starts again, --out included.
func TestEmptyCrawlSaysWhy(t *testing.T) {
	t.Parallel()
	base := numberSite(t)
	for _, c := range []struct {
		name, url, why string
	}{
		{"404", base + "/missing", "trawl: no item: the start URL answered 404 Not Found"},
		{"robots", base + "/private", "trawl: no item: the start URL is disallowed by robots.txt"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := trawl(t, time.Minute, "crawl", "--idle-timeout", "300ms", c.url)
			if r.code != 1 || lastLine(r.stderr) != c.why {
				t.Errorf("exit %d, want 1, with the last line %q; stderr:\n%s", r.code, c.why, r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("stdout %q, want no item", r.stdout)
			}
			r = trawl(t, time.Minute, "crawl", "--idle-timeout", "300ms", "--allow-empty", c.url)
			if r.code != 0 || lastLine(r.stderr) != c.why {
				t.Errorf("--allow-empty: exit %d, want 0, with the last line %q; stderr:\n%s", r.code, c.why, r.stderr)
			}
		})
	}

	dir := t.TempDir()
	out := filepath.Join(dir, "items.jsonl")
	args := []string{"crawl", "--idle-timeout", "300ms", "--out", out, base + "/book"}
	if r := trawlIn(t, dir, time.Minute, args...); r.code != 0 || lines(out) != 1 {
		t.Fatalf("first run: exit %d, %d items, want 0 and 1; stderr:\n%s", r.code, lines(out), r.stderr)
	}
	r := trawlIn(t, dir, time.Minute, args...)
	const again = "trawl: no item: already crawled: nothing to do (use --flush to start again)"
	if r.code != 1 || lastLine(r.stderr) != again {
		t.Errorf("rerun: exit %d, want 1 with %q; stderr:\n%s", r.code, again, r.stderr)
	}
	r = trawlIn(t, dir, time.Minute, append([]string{"crawl", "--flush"}, args[1:]...)...)
	if r.code != 0 || lines(out) != 1 {
		t.Errorf("rerun with --flush: exit %d, %d items in --out, want 0 and 1 (the file starts empty); stderr:\n%s", r.code, lines(out), r.stderr)
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndexByte(s, '\n')+1:]
}

var summaryRE = regexp.MustCompile(`^trawl: crawl done: (\d+) pages? fetched, (\d+) items? written, (\d+) errors?( \([^)]*\))?, \d+ retr(?:y|ies), (\d+) dead letters?, (\d+) duplicates? filtered, ([0-9]+h)?([0-9]+m)?[0-9.]+[mµn]?s, [0-9.]+ pages/s$`)

// limitRE is the summary of a crawl stopped at --max-pages with requests
// queued: summaryRE's figures, then the backlog.
var limitRE = regexp.MustCompile(`^trawl: crawl stopped at --max-pages (\d+): (\d+) pages? fetched, (\d+) items? written, (\d+) errors?( \([^)]*\))?, \d+ retr(?:y|ies), (\d+) dead letters?, (\d+) duplicates? filtered, ([0-9]+h)?([0-9]+m)?[0-9.]+[mµn]?s, [0-9.]+ pages/s; (\d+) requests? still queued \(the same command again fetches up to \d+ more\)$`)

// TestSummaryLine (9.3): every crawl ends with one summary line whose item
// count is the number of lines written, with --max-pages too, and whose
// page count is the one the engine logs; with stderr not a terminal, a
// progress line comes at a steady interval. A crawl stopped by --max-pages
// with requests queued says so, and how many (it said "crawl done").

func TestSummaryLine(t *testing.T) {
	t.Parallel()
	site, url := sitetest.Serve(t, testsite.Config{Pages: 300, Links: 5, Seed: 3, Latency: 2 * time.Millisecond})
	for _, extra := range [][]string{nil, {"--max-pages", "10"}} {
		t.Run(fmt.Sprint(extra), func(t *testing.T) {
			t.Parallel()
			out := filepath.Join(t.TempDir(), "items.jsonl")
			args := append([]string{"crawl", "--idle-timeout", "500ms", "--log-level", "info", "--progress-interval", "100ms", "--out", out}, extra...)
			r := trawl(t, 2*time.Minute, append(args, url+"/")...)
			if r.code != 0 {
				t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
			}
			var sum []string
			for _, l := range strings.Split(r.stderr, "\n") {
				if strings.HasPrefix(l, "trawl: crawl done") || strings.HasPrefix(l, "trawl: crawl stopped") {
					sum = append(sum, l)
				}
			}
			if len(sum) != 1 {
				t.Fatalf("%d summary lines, want 1; stderr:\n%s", len(sum), r.stderr)
			}
			re := summaryRE
			if len(extra) > 0 {
				re = limitRE
			}
			m := re.FindStringSubmatch(sum[0])
			if m == nil {
				t.Fatalf("summary %q does not match %v", sum[0], re)
			}
			if len(extra) > 0 {
				if m[1] != "10" || m[len(m)-1] == "0" {
					t.Errorf("--max-pages 10: summary %q; want the limit and the requests queued", sum[0])
				}
				m = m[1:] // the figures, as summaryRE's
			}
			if items, _ := strconv.Atoi(m[2]); items != lines(out) || items == 0 {
				t.Errorf("summary says %d items, %d lines written: %s", items, lines(out), sum[0])
			}
			if len(extra) > 0 && m[1] != "10" {
				t.Errorf("--max-pages 10: summary says %s pages: %s", m[1], sum[0])
			}
			if want := "pages=" + m[1] + " items=" + m[2] + " errors=" + m[3]; !strings.Contains(r.stderr, "msg=\"crawl stopped\" crawl=trawl "+want) {
				t.Errorf("the engine's log should say %s like the summary; stderr:\n%s", want, r.stderr)
			}
			// Issue 27.10: pages/s, as the summary; "queued" is the
			// backlog, of which the ready ones with the items written
			// never exceed the site (what this run enqueued would, past
			// half the crawl).
			progressRE := regexp.MustCompile(`(?m)^trawl: crawled \d+ pages? \(at [0-9.]+ pages/s\), (\d+) queued \((\d+) ready\), (\d+) items?, \d+ errors?$`)
			progress := progressRE.FindAllStringSubmatch(r.stderr, -1)
			if len(extra) == 0 && len(progress) == 0 {
				t.Errorf("no progress line; stderr:\n%s", r.stderr)
			}
			for _, p := range progress {
				queued, _ := strconv.Atoi(p[1])
				ready, _ := strconv.Atoi(p[2])
				items, _ := strconv.Atoi(p[3])
				if items+ready > site.Expected() || ready > queued {
					t.Errorf("progress line %q: %d items written and %d ready of %d queued, more than the site's %d pages or the queued: not the backlog", p[0], items, ready, queued, site.Expected())
				}
			}
		})
	}
}

// TestPasswordsRedacted (9.8, 13.9): a password planted in every URL flag
// and in a start URL reaches no output: items, logs at debug level,
// summaries and the error of every path (parse errors, refused
// connections, an unreachable site).
func TestPasswordsRedacted(t *testing.T) {
	t.Parallel()
	const pw = "Pl4ntedS3cret"
	var (
		mu   sync.Mutex
		auth []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, p, _ := r.BasicAuth()
		mu.Lock()
		auth = append(auth, p)
		mu.Unlock()
		fmt.Fprint(w, `<html><title>t</title><a href="/next">n</a><a href="/gone">g</a></html>`)
	}))
	// The cases run in parallel, after this function returns: the
	// server and the check of what it saw are cleanups, which wait for them.
	t.Cleanup(func() {
		srv.Close()
		mu.Lock()
		defer mu.Unlock()
		if !slices.Contains(auth, pw) {
			t.Errorf("the site saw passwords %q: the credentials must still be used to fetch pages", auth)
		}
	})
	withCreds := strings.Replace(srv.URL, "http://", "http://user:"+pw+"@", 1) + "/"

	cases := []struct {
		name string
		code int
		args []string
		env  string // TRAWL_REDIS_URL, unset if empty
	}{
		{"redis bad port", 2, []string{"stats", "--broker=redis", "--redis-url", "redis://u:" + pw + "@127.0.0.1:x/0"}, ""},
		{"redis bad escape", 2, []string{"stats", "--broker=redis", "--redis-url", "redis://u:" + pw + "%zz@127.0.0.1/0"}, ""},
		{"redis env bad port", 2, []string{"stats", "--broker=redis"}, "redis://u:" + pw + "@127.0.0.1:x/0"},
		{"redis refused", 1, []string{"stats", "--broker=redis", "--redis-url", "redis://u:" + pw + "@127.0.0.1:1/0"}, ""},
		{"amqp bad port", 2, []string{"stats", "--broker=rabbitmq", "--amqp-url", "amqp://u:" + pw + "@127.0.0.1:x/"}, ""},
		{"amqp bad escape", 2, []string{"stats", "--broker=rabbitmq", "--amqp-url", "amqp://u:" + pw + "%zz@127.0.0.1/"}, ""},
		{"amqp refused", 1, []string{"stats", "--broker=rabbitmq", "--amqp-url", "amqp://u:" + pw + "@127.0.0.1:1/"}, ""},
		{"management bad port", 2, []string{"stats", "--broker=rabbitmq", "--amqp-management-url", "http://u:" + pw + "@127.0.0.1:x/"}, ""},
		{"management bad escape", 2, []string{"stats", "--broker=rabbitmq", "--amqp-management-url", "http://u:" + pw + "%zz@127.0.0.1/"}, ""},
		{"nats bad port", 2, []string{"stats", "--broker=nats", "--nats-url", "nats://u:" + pw + "@127.0.0.1:x"}, ""},
		{"nats bad escape", 2, []string{"stats", "--broker=nats", "--nats-url", "nats://u:" + pw + "%zz@127.0.0.1:4222"}, ""},
		{"nats refused", 1, []string{"stats", "--broker=nats", "--nats-url", "nats://u:" + pw + "@127.0.0.1:1"}, ""},
		{"nats second url", 2, []string{"seed", "--broker=nats", "--nats-url", "nats://127.0.0.1:1,nats://u:" + pw + "@h:x", "http://example.com/"}, ""},
		{"proxy bad port", 2, []string{"crawl", "--proxy", "http://u:" + pw + "@127.0.0.1:x", "http://example.com/"}, ""},
		{"proxy bad escape", 2, []string{"crawl", "--proxy", "http://u:" + pw + "%zz@127.0.0.1:3128", "http://example.com/"}, ""},
		{"unreachable site", 1, []string{"crawl", "--log-level=debug", "--idle-timeout=100ms", "--ignore-robots", "http://u:" + pw + "@127.0.0.1:1/"}, ""},
		{"bad start url", 2, []string{"crawl", "http://u:" + pw + "@127.0.0.1:x/"}, ""},
		{"crawl", 0, []string{"crawl", "--log-level=debug", "--idle-timeout=300ms", withCreds}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			env := "TRAWL_REDIS_URL"
			if c.env != "" {
				env += "=" + c.env
			}
			r := trawlEnv(t, []string{env}, c.args...)
			if r.code != c.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", r.code, c.code, r.stderr)
			}
			if strings.Contains(r.stdout+r.stderr, pw) {
				t.Errorf("the password is printed:\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			}
			if c.code != 0 && !strings.HasPrefix(lastLine(r.stderr), "trawl: ") {
				t.Errorf("no error line; stderr:\n%s", r.stderr)
			}
			if c.name == "crawl" && !strings.Contains(r.stdout, `"url":"`+srv.URL+`/next"`) {
				t.Errorf("items should name the pages without credentials:\n%s", r.stdout)
			}
		})
	}
}

// TestOutDevNull (9.9): --out /dev/null works (fsync there fails with
// EINVAL, which once made a good crawl exit 2, the usage-error code).
func TestOutDevNull(t *testing.T) {
	t.Parallel()
	base := numberSite(t)
	r := trawl(t, time.Minute, "crawl", "--idle-timeout", "300ms", "--out", os.DevNull, base+"/book")
	if r.code != 0 || !strings.HasPrefix(lastLine(r.stderr), "trawl: crawl done: 2 pages fetched, 1 item written") {
		t.Errorf("exit %d, want 0 and a summary; stderr:\n%s", r.code, r.stderr)
	}
}

// TestSmallGaps (9.12): --out help lists every value; --version and
// "trawl version" agree; a refused private address names --allow-private;
// the embedded NATS server's banner stays out of the debug log; each
// command's help lists the flags it uses and no other.
func TestSmallGaps(t *testing.T) {
	t.Parallel()
	t.Run("out help", func(t *testing.T) {
		t.Parallel()
		r := trawl(t, time.Minute, "crawl", "--help")
		i := strings.Index(r.stdout, "--out string")
		if i < 0 {
			t.Fatalf("no --out in the help:\n%s", r.stdout)
		}
		line := r.stdout[i : i+strings.IndexByte(r.stdout[i:], '\n')]
		for _, v := range []string{"- for stdout", "FILE", "redis", "queue"} {
			if !strings.Contains(line, v) {
				t.Errorf("--out help %q does not mention %q", line, v)
			}
		}
	})
	t.Run("crawl help", func(t *testing.T) {
		t.Parallel()
		// A start URL given to several workers at once is fetched once
		// (issue 27.6): the help no longer asks to seed on one machine.
		r := trawl(t, time.Minute, "crawl", "--help")
		if !strings.Contains(r.stdout, "given to several workers at once\n(trawl crawl URL on every machine) is fetched once") {
			t.Errorf("crawl --help does not say that a start URL given to several workers is fetched once:\n%s", r.stdout)
		}
	})
	t.Run("version", func(t *testing.T) {
		t.Parallel()
		a, b := trawl(t, time.Minute, "--version"), trawl(t, time.Minute, "version")
		if a.code != 0 || b.code != 0 || a.stdout != b.stdout || !strings.HasPrefix(a.stdout, "trawl ") || !strings.Contains(a.stdout, runtime.Version()) {
			t.Errorf("--version: %d %q; version: %d %q; want the same line naming %s", a.code, a.stdout, b.code, b.stdout, runtime.Version())
		}
	})
	t.Run("allow-private", func(t *testing.T) {
		t.Parallel()
		other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "<title>x</title>") }))
		defer other.Close()
		site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, `<title>x</title><a href="%s/secret">other port</a>`, other.URL)
		}))
		defer site.Close()
		r := trawl(t, time.Minute, "crawl", "--idle-timeout", "300ms", "--log-level=debug", site.URL+"/")
		const want = "trawl: 1 page refused: private, loopback or link-local address (--allow-private allows them)"
		if r.code != 0 || !strings.Contains(r.stderr, "\n"+want+"\n") || !strings.Contains(r.stderr, "(forbidden_address 1)") {
			t.Errorf("exit %d, want 0 with the line %q; stderr:\n%s", r.code, want, r.stderr)
		}
		for _, banner := range []string{"Starting nats-server", "Server is ready", "JETSTREAM", "Version:"} {
			if strings.Contains(r.stderr, banner) {
				t.Errorf("the NATS banner (%q) is in the debug log:\n%s", banner, r.stderr)
			}
		}
	})
	t.Run("help", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			cmd        string
			has, hasnt []string
		}{
			{"crawl", []string{"--include", "--out", "--broker", "--log-level"}, nil},
			{"worker", []string{"--include", "--out", "--broker"}, nil},
			{"purge", []string{"--broker", "--name", "--redis-url"}, []string{"--out", "--include", "--concurrency", "--flush", "--addr"}},
			{"stats", []string{"--json", "--broker"}, []string{"--out", "--max-pages", "--extract"}},
			{"deadletter", []string{"--max", "--broker"}, []string{"--out", "--allow-private"}},
			{"seed", []string{"--file", "--broker"}, []string{"--out", "--metrics-addr"}},
			{"testsite", []string{"--pages", "--addr"}, []string{"--broker", "--name", "--out", "--concurrency"}},
			{"repartition", []string{"--partitions", "--broker"}, []string{"--out", "--concurrency"}},
		} {
			r := trawl(t, time.Minute, c.cmd, "--help")
			for _, f := range c.has {
				if !strings.Contains(r.stdout, f+" ") {
					t.Errorf("%s --help lacks %s", c.cmd, f)
				}
			}
			for _, f := range c.hasnt {
				if strings.Contains(r.stdout, f+" ") {
					t.Errorf("%s --help lists %s, which it does not use", c.cmd, f)
				}
			}
		}
		// A flag a command refuses to run without has no default to show.
		r := trawl(t, time.Minute, "repartition", "--help")
		if line := regexp.MustCompile(`(?m)^ +--partitions .*$`).FindString(r.stdout); !strings.Contains(line, "required") || strings.Contains(line, "(default") {
			t.Errorf("repartition --help: %q, want --partitions required, with no default", line)
		}
	})
}

// TestErrorItems (9.13): --error-items writes an item for a broken link
// with its status and the page linking to it; a 404 start URL is then an
// item, not an empty crawl.
func TestErrorItems(t *testing.T) {
	t.Parallel()
	base := numberSite(t)
	items, _ := crawlItems(t, "--error-items", base+"/book")
	got := map[string]string{}
	for _, it := range items {
		got[strings.TrimPrefix(it.URL, base)] = fmt.Sprintf("%d %s", it.Status, strings.TrimPrefix(it.Referrer, base))
	}
	want := map[string]string{"/book": "200 ", "/missing": "404 /book"}
	if !maps.Equal(got, want) {
		t.Errorf("items %v, want %v", got, want)
	}
	items, _ = crawlItems(t, "--error-items", base+"/missing")
	if len(items) != 1 || items[0].Status != 404 {
		t.Errorf("a 404 start URL with --error-items: items %+v, want one with status 404", items)
	}
	items, _ = crawlItems(t, base+"/book")
	if len(items) != 1 || items[0].Referrer != "" {
		t.Errorf("without --error-items: items %+v, want the book alone, no referrer", items)
	}
}

// TestReadmeFlags: every flag a command's --help shows is in README.md,
// so that the README's flag table keeps up with the binary.
func TestReadmeFlags(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	flag := regexp.MustCompile(`(?m)^\s+(?:-\w, )?(--[a-z-]+)`)
	for _, c := range []string{"crawl", "worker", "seed", "stats", "purge", "deadletter", "items", "testsite", "dashboard"} {
		r := trawl(t, time.Minute, c, "--help")
		for _, m := range flag.FindAllStringSubmatch(r.stdout, -1) {
			if m[1] == "--help" {
				continue
			}
			if !regexp.MustCompile(regexp.QuoteMeta(m[1]) + `\b`).Match(readme) {
				t.Errorf("%s %s is not in README.md", c, m[1])
			}
		}
	}
}

// TestTestsiteSaysWhatItServes: trawl testsite prints its URL alone on
// stdout (make demo reads it) and says on stderr what it serves and what
// to do with it, instead of waiting silently.
func TestTestsiteSaysWhatItServes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, trawlBin, "testsite", "--pages", "7")
	var stderr syncbuf.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); cmd.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("trawl testsite printed no URL: %v", err)
	}
	url := strings.TrimSpace(line)
	if !strings.HasPrefix(url, "http://127.0.0.1:") || !strings.HasSuffix(url, "/") {
		t.Fatalf("stdout's first line %q, want the site's URL alone", line)
	}
	want := "trawl testsite: serving 7 pages at " + url
	until(t, ctx, "the testsite's line on stderr", func() bool { return strings.Contains(stderr.String(), "\n") })
	if got := stderr.String(); !strings.HasPrefix(got, want) || !strings.Contains(got, "trawl crawl "+url) || !strings.Contains(got, url+"_testsite/verify") {
		t.Errorf("stderr %q, want a line starting %q naming the command to crawl it and the verify URL", got, want)
	}
	// The errors and retries its traps cause in a correct crawl are
	// explained, not left to look like the crawler's failures.
	until(t, ctx, "the testsite's second line", func() bool { return strings.Count(stderr.String(), "\n") >= 2 })
	if got := stderr.String(); !strings.Contains(got, "2 errors (body_too_large 2)") || !strings.Contains(got, "3 retries") {
		t.Errorf("stderr %q, want the traps' errors and retries explained", got)
	}
}
