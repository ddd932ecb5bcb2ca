package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// trawlEnv runs trawl in a fresh folder with env (KEY=VALUE) added to the
// environment; a bare KEY removes KEY from it. The tests run in parallel:
// the child's environment is theirs to set, the test process's is not.
func trawlEnv(t *testing.T, env []string, args ...string) result {
	t.Helper()
	return runTrawl(t, t.TempDir(), env, time.Minute, args...)
}

// writeConfig writes a config file and returns its path.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "trawl.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// configLines maps each setting trawl config printed to its line.
func configLines(t *testing.T, stdout string) map[string]string {
	t.Helper()
	lines := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
		if strings.HasPrefix(l, "#") {
			continue
		}
		k, _, ok := strings.Cut(l, " = ")
		if !ok {
			t.Fatalf("trawl config printed %q, want KEY = VALUE # SOURCE", l)
		}
		lines[k] = l
	}
	return lines
}

// TestConfigPrecedence (issue 12): a flag given beats the config file,
// which beats TRAWL_* variables, which beat the defaults; trawl config says
// which gave each value, and a crawl obeys the same order (the file's
// --include, with a comma inside, is used rather than the environment's).
func TestConfigPrecedence(t *testing.T) {
	t.Parallel()
	// json is a flag of trawl stats only: trawl config ignores it.
	cfg := writeConfig(t, "concurrency = 32\nper-host = 7\ndelay = \"2s\"\ninclude = [\"a,b\", \"c\"]\njson = true\n")
	env := []string{"TRAWL_CONCURRENCY=5", "TRAWL_PER_HOST=3", "TRAWL_MAX_PAGES=9", "TRAWL_DELAY=1s"}
	r := trawlEnv(t, env, "config", "--config", cfg, "--per-host", "4")
	if r.code != 0 {
		t.Fatalf("trawl config: exit %d; stderr:\n%s", r.code, r.stderr)
	}
	got := configLines(t, r.stdout)
	for key, want := range map[string]string{
		"concurrency": "concurrency = 32 # file",
		"per-host":    "per-host = 4 # flag",
		"delay":       `delay = "2s" # file`,
		"include":     `include = ["a,b", "c"] # file`,
		"max-pages":   "max-pages = 9 # env",
		"retry-times": "retry-times = 3 # default",
	} {
		if got[key] != want {
			t.Errorf("%s: trawl config printed %q, want %q", key, got[key], want)
		}
	}

	// TRAWL_CONFIG names the file when --config is not given.
	r = trawlEnv(t, append(env, "TRAWL_CONFIG="+cfg), "config")
	if got := configLines(t, r.stdout)["concurrency"]; got != "concurrency = 32 # file" {
		t.Errorf("with TRAWL_CONFIG: %q, want the file's 32", got)
	}

	// A crawl takes the file's include over the environment's.
	base := numberSite(t)
	cfg = writeConfig(t, "include = ['p/[0-9]{1,3}$']\nidle-timeout = \"300ms\"\n")
	out := filepath.Join(t.TempDir(), "items.jsonl")
	r = trawlEnv(t, []string{"TRAWL_INCLUDE=nothing-matches"}, "crawl", "--config", cfg, "--out", out, base+"/")
	if r.code != 0 {
		t.Fatalf("crawl with --config: exit %d; stderr:\n%s", r.code, r.stderr)
	}
	want := []string{"/", "/p/1", "/p/11", "/p/111", "/p/22", "/p/221", "/p/333"}
	if got := paths(readItems(t, out), base); !slices.Equal(got, want) {
		t.Errorf("crawl with the file's include crawled %v, want %v", got, want)
	}
}

// TestConfigBadFile (issue 12): an unknown key, a value of the wrong type
// and a missing file are usage errors (exit 2) naming the key or the file,
// before anything is crawled.
func TestConfigBadFile(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, text, msg string }{
		{"unknown key", "concurency = 3\n", `unknown key "concurency" (did you mean concurrency?`},
		{"table", "[redis]\nurl = \"redis://x\"\n", `unknown key "redis"`},
		{"bad value", "concurrency = \"many\"\n", `key "concurrency"`},
		{"list for a scalar", "delay = [\"1s\"]\n", `key "delay"`},
		{"not toml", "concurrency = \n", "trawl.toml"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := trawl(t, time.Minute, "crawl", "--config", writeConfig(t, c.text), "http://192.0.2.1/")
			if r.code != 2 || !strings.Contains(r.stderr, c.msg) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", r.code, r.stderr, c.msg)
			}
		})
	}
	r := trawl(t, time.Minute, "config", "--config", "/nonexistent/trawl.toml")
	if r.code != 2 || !strings.Contains(r.stderr, "/nonexistent/trawl.toml") {
		t.Errorf("missing file: exit %d, stderr %q; want 2 naming the file", r.code, r.stderr)
	}
}

// TestConfigRedacts (issue 12): trawl config never prints a URL's password
// nor a credential header's value, whether from the file, the environment
// or a flag, and keeps the rest of the value.
func TestConfigRedacts(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, "redis-url = \"redis://app:s3cret-file@redis.example:6379/0\"\n"+
		"header = [\"Authorization: Bearer s3cret-token\", \"X-Team: crawl\"]\n")
	r := trawlEnv(t, []string{"TRAWL_AMQP_URL=amqp://bob:s3cret-env@mq.example:5672/"},
		"config", "--config", cfg, "--proxy", "http://carol:s3cret-flag@proxy.example:3128")
	if r.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	if strings.Contains(r.stdout, "s3cret") {
		t.Errorf("trawl config printed a secret:\n%s", r.stdout)
	}
	got := configLines(t, r.stdout)
	for key, want := range map[string]string{
		"redis-url": `redis-url = "redis://app:xxxxx@redis.example:6379/0" # file`,
		"amqp-url":  `amqp-url = "amqp://bob:xxxxx@mq.example:5672/" # env`,
		"proxy":     `proxy = "http://carol:xxxxx@proxy.example:3128" # flag`,
		"header":    `header = ["Authorization: xxxxx", "X-Team: crawl"] # file`,
	} {
		if got[key] != want {
			t.Errorf("%s: printed %q, want %q", key, got[key], want)
		}
	}
}
