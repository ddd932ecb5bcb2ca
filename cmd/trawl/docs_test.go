package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/trawlhq/trawl/engine"
)

// settingsDoc is the file whose flag table TestSettingsDoc keeps current.
const settingsDoc = "../../docs/settings.md"

// The generated table sits between these lines of settingsDoc.
const (
	tableBegin = "<!-- flags:begin: generated from the binary's flags by TestSettingsDoc; TRAWL_UPDATE_DOCS=1 go test ./cmd/trawl -run TestSettingsDoc rewrites it -->"
	tableEnd   = "<!-- flags:end -->"
)

// scrapySettings names, for a flag, the Scrapy or scrapy-redis setting it
// replaces, where there is one.
var scrapySettings = map[string]string{
	"allow-domain":        "`allowed_domains` (spider attribute)",
	"bloom-capacity":      "`BLOOMFILTER_*` of scrapy-redis-bloomfilter",
	"bloom-fp-rate":       "`BLOOMFILTER_*` of scrapy-redis-bloomfilter",
	"concurrency":         "`CONCURRENT_REQUESTS`",
	"dedup":               "`DUPEFILTER_CLASS` (`RFPDupeFilter`: `set`)",
	"delay":               "`DOWNLOAD_DELAY`",
	"extract":             "the spider's `parse` (`response.css(…)`)",
	"flush":               "`SCHEDULER_FLUSH_ON_START`",
	"header":              "`DEFAULT_REQUEST_HEADERS`",
	"idle-timeout":        "`MAX_IDLE_TIME_BEFORE_CLOSE`",
	"ignore-robots":       "`ROBOTSTXT_OBEY = False`",
	"log-level":           "`LOG_LEVEL`",
	"max-depth":           "`DEPTH_LIMIT`",
	"max-links":           "",
	"max-query-values":    "",
	"max-pages-per-host":  "",
	"partitions":          "",
	"partition-by":        "",
	"max-pages":           "`CLOSESPIDER_PAGECOUNT`",
	"name":                "`SCHEDULER_QUEUE_KEY`, `DUPEFILTER_KEY`, `REDIS_START_URLS_KEY`, `REDIS_ITEMS_KEY` (all derive from it)",
	"no-cookies":          "`COOKIES_ENABLED = False`",
	"order":               "`SCHEDULER_QUEUE_CLASS` (`PriorityQueue`, `FifoQueue`, `LifoQueue`)",
	"out":                 "`FEEDS`; `redis` is `RedisPipeline`",
	"format":              "`FEEDS` format",
	"per-host":            "`CONCURRENT_REQUESTS_PER_DOMAIN`",
	"proxy":               "`HttpProxyMiddleware` (`meta['proxy']`)",
	"redis-url":           "`REDIS_URL` (`REDIS_HOST`, `REDIS_PORT`)",
	"retry-times":         "`RETRY_TIMES`",
	"start-urls-set":      "`REDIS_START_URLS_AS_SET`",
	"timeout":             "`DOWNLOAD_TIMEOUT`",
	"user-agent":          "`USER_AGENT`",
	"sitemaps":            "`SitemapSpider`",
	"error-items":         "`HTTPERROR_ALLOW_ALL` with an errback",
	"allow-private":       "",
	"override-settings":   "",
	"metrics-addr":        "",
	"retry-backoff":       "",
	"failure-timeout":     "",
	"lease":               "",
	"progress-interval":   "`LOGSTATS_INTERVAL`",
	"amqp-url":            "",
	"amqp-durable":        "",
	"amqp-recreate":       "",
	"amqp-management-url": "",
	"nats-url":            "",
	"tls-ca":              "",
	"tls-cert":            "",
	"tls-key":             "",
	"nats-replicas":       "",
	"amqp-queue-type":     "",
	"nats-domain":         "",
	"data-dir":            "`JOBDIR`",
	"broker":              "`SCHEDULER` (`scrapy_redis.scheduler.Scheduler`: `redis`)",
	"allow-empty":         "",
	"config":              "`settings.py`",
	"include":             "`LinkExtractor(allow=…)` of a `CrawlSpider` rule",
	"exclude":             "`LinkExtractor(deny=…)` of a `CrawlSpider` rule",
	"file":                "pushing to `NAME:start_urls` with `redis-cli`",
	"force":               "",
	"json":                "",
	"max":                 "",
	"addr":                "",
	"latency":             "",
	"links":               "",
	"no-traps":            "",
	"pages":               "",
	"seed":                "",
	"token":               "",
	"stall-after":         "",

	// AutoThrottle (AUTOTHROTTLE_DEBUG: --log-level debug is the nearest).
	"autothrottle":                    "`AUTOTHROTTLE_ENABLED`",
	"autothrottle-target-concurrency": "`AUTOTHROTTLE_TARGET_CONCURRENCY`",
	"autothrottle-start-delay":        "`AUTOTHROTTLE_START_DELAY` (Scrapy: 5s)",
	"autothrottle-max-delay":          "`AUTOTHROTTLE_MAX_DELAY`",
}

// settingsTable renders the flags of every command as a Markdown table.
func settingsTable() string {
	root := newRoot(&options{stdout: os.Stdout, stderr: os.Stderr})
	type row struct {
		f    *pflag.Flag
		cmds []string
	}
	rows := map[string]*row{}
	add := func(cmd string, f *pflag.Flag) {
		if f.Name == "help" || f.Name == "version" {
			return
		}
		// A flag of the same name but another meaning in another
		// command (items --max, deadletter --max) gets a row of its own.
		id := f.Name + "\x00" + f.Usage
		r := rows[id]
		if r == nil {
			r = &row{f: f}
			rows[id] = r
		}
		if !f.Hidden && !slices.Contains(r.cmds, cmd) {
			r.cmds = append(r.cmds, cmd)
		}
	}
	root.PersistentFlags().VisitAll(func(f *pflag.Flag) { add("all", f) })
	for _, c := range root.Commands() {
		if c.Name() == "config" || c.Name() == "completion" || c.Name() == "help" {
			continue
		}
		c.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) { add(c.Name(), f) })
	}
	names := make([]string, 0, len(rows))
	for n := range rows {
		names = append(names, n)
	}
	slices.Sort(names)
	esc := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	var b strings.Builder
	b.WriteString("| flag | default | environment | config key | commands | replaces | meaning |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, id := range names {
		r := rows[id]
		n := r.f.Name
		def := r.f.DefValue
		switch {
		case def == "[]" || def == "" || strings.Contains(r.f.Usage, "(required"):
			def = ""
		default:
			def = "`" + def + "`"
		}
		env := "`TRAWL_" + strings.ToUpper(strings.ReplaceAll(n, "-", "_")) + "`"
		key := "`" + n + "`"
		if n == "config" {
			key = "(none)"
		}
		cmds := strings.Join(r.cmds, ", ")
		if len(r.cmds) > 5 {
			cmds = "every command that opens a crawl"
		}
		fmt.Fprintf(&b, "| `--%s` | %s | %s | %s | %s | %s | %s |\n", n, esc(def), env, key, cmds, scrapySettings[n], esc(r.f.Usage))
	}
	return b.String()
}

// TestSettingsDoc: docs/settings.md lists every flag of the binary with
// its default, variable and config key, exactly as the binary has them, and
// every flag has an entry (maybe empty) in scrapySettings, so that a new
// flag is not left out of the table. TRAWL_UPDATE_DOCS=1 rewrites the table.
func TestSettingsDoc(t *testing.T) {
	t.Parallel()
	want := settingsTable()
	data, err := os.ReadFile(settingsDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	before, rest, ok1 := strings.Cut(doc, tableBegin+"\n")
	_, after, ok2 := strings.Cut(rest, tableEnd)
	if !ok1 || !ok2 {
		t.Fatalf("%s: no table between %q and %q", settingsDoc, tableBegin, tableEnd)
	}
	if got := rest[:len(rest)-len(after)-len(tableEnd)]; got != want {
		if os.Getenv("TRAWL_UPDATE_DOCS") == "1" {
			if err := os.WriteFile(settingsDoc, []byte(before+tableBegin+"\n"+want+tableEnd+after), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s rewritten", settingsDoc)
		} else {
			t.Errorf("%s is out of date with the binary's flags: run TRAWL_UPDATE_DOCS=1 go test ./cmd/trawl -run TestSettingsDoc", settingsDoc)
		}
	}
	root := newRoot(&options{stdout: os.Stdout, stderr: os.Stderr})
	keys := configKeys(root)
	keys.VisitAll(func(f *pflag.Flag) {
		if _, ok := scrapySettings[f.Name]; !ok {
			t.Errorf("flag --%s has no entry in scrapySettings (docs_test.go): say which Scrapy setting it replaces, or none", f.Name)
		}
	})
}

// TestDocsListTheSettings: where README.md and docs/deploy.md list the
// settings stored with a crawl, they list each of engine.SettingNames
// (deploy.md's list lacked --max-links, --partitions, --partition-by and
// two more).
func TestDocsListTheSettings(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ file, from, to string }{
		{"../../README.md", "belong to the crawl, not to a", "stores them with"},
		{"../../docs/deploy.md", "The crawl's settings (", ") are stored"},
	} {
		data, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		_, rest, ok1 := strings.Cut(string(data), c.from)
		list, _, ok2 := strings.Cut(rest, c.to)
		if !ok1 || !ok2 {
			t.Errorf("%s: no list of the settings between %q and %q", c.file, c.from, c.to)
			continue
		}
		for _, n := range engine.SettingNames {
			if !strings.Contains(list, "`--"+n+"`") {
				t.Errorf("%s's list of the crawl's settings lacks --%s:\n%s", c.file, n, list)
			}
		}
	}
}
