package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/trawlhq/trawl/internal/testsite"
)

// trawlImage builds the test variant of the container image
// (deploy/test.Dockerfile: the static binary FROM scratch, which needs no
// registry) and returns its tag; the image is removed when t ends. It
// skips, saying why, under -short or where Docker is not running.
func trawlImage(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: builds and runs a container image")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("no docker command: the image test needs Docker")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Skipf("Docker is not running (docker info: %v: %s)", err, bytes.TrimSpace(out))
	}
	dir := t.TempDir()
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", filepath.Join(dir, "trawl"), "./cmd/trawl")
	build.Dir = "../.."
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build: %v\n%s", err, out)
	}
	df, err := os.ReadFile("../../deploy/test.Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), df, 0o644); err != nil {
		t.Fatal(err)
	}
	tag := "trawl-test/trawl:" + Name(t)
	if out, err := exec.CommandContext(ctx, "docker", "build", "-q", "-t", tag, dir).CombinedOutput(); err != nil {
		t.Fatalf("docker build (FROM scratch, no pull): %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("docker", "rmi", "-f", tag).CombinedOutput(); err != nil {
			t.Logf("docker rmi %s: %v: %s", tag, err, out)
		}
	})
	return tag
}

// dockerRun runs the image with the host's network (the test site listens
// on the host's loopback) and returns its stdout; the container is removed
// however the run ends.
func dockerRun(t *testing.T, image, name string, args ...string) string {
	t.Helper()
	return dockerRunArgs(t, name, append([]string{image}, args...)...)
}

// urlsOf returns the url of each JSON line of out, failing t on a line that
// is not an item or a URL written twice.
func urlsOf(t *testing.T, out string, seen map[string]bool) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var it struct {
			URL    string `json:"url"`
			Status int    `json:"status"`
		}
		if err := json.Unmarshal(sc.Bytes(), &it); err != nil || it.URL == "" {
			t.Fatalf("not an item: %q (%v)", sc.Text(), err)
		}
		if seen[it.URL] {
			t.Errorf("two items for %s", it.URL)
		}
		seen[it.URL] = true
	}
}

// serveTestsite serves the test site on the host's loopback for the
// containers to crawl.
func serveTestsite(t *testing.T, pages int) (*testsite.Site, string) {
	t.Helper()
	site := testsite.New(testsite.Config{Pages: pages, Links: 8, Seed: 3})
	ctx, cancel := context.WithCancel(context.Background())
	url, wait, err := site.Serve(ctx, "127.0.0.1:0")
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = wait() })
	return site, url
}

// TestImageCrawl (issue 12): the container image's binary, static on an
// empty base, crawls the test site on its own (the embedded default mode)
// and writes one item per expected page, never a forbidden one.
func TestImageCrawl(t *testing.T) {
	image := trawlImage(t)
	site, url := serveTestsite(t, 200)
	out := dockerRun(t, image, Name(t), "crawl", "--allow-private", "--idle-timeout", "1s", url+"/")
	seen := map[string]bool{}
	urlsOf(t, out, seen)
	if len(seen) != site.Expected() {
		t.Errorf("%d items, want one per expected page: %d", len(seen), site.Expected())
	}
	if err := site.Verify(); err != nil {
		t.Errorf("site: %v", err)
	}
}

// TestImageWorkersRedis (issue 12): as deploy/compose.yaml runs them, two
// containers of the image share a crawl through Redis, configured by
// TRAWL_* variables only: together they write one item per expected page,
// none twice.
func TestImageWorkersRedis(t *testing.T) {
	image := trawlImage(t)
	redisURL := Redis(t)
	site, url := serveTestsite(t, 300)
	name := Name(t)
	env := []string{"-e", "TRAWL_BROKER=redis", "-e", "TRAWL_REDIS_URL=" + redisURL, "-e", "TRAWL_NAME=" + name,
		"-e", "TRAWL_ALLOW_PRIVATE=true", "-e", "TRAWL_IDLE_TIMEOUT=5s"}
	runs := [][]string{{"crawl", url + "/"}, {"worker"}}
	var wg sync.WaitGroup
	outs := make([]string, len(runs))
	for i, cmd := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			args := append(append(slices.Clone(env), image), cmd...)
			outs[i] = dockerRunArgs(t, fmt.Sprintf("%s-%d", name, i), args...)
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for i, o := range outs {
		before := len(seen)
		urlsOf(t, o, seen)
		t.Logf("container %d (%s) wrote %d items", i, runs[i][0], len(seen)-before)
	}
	if len(seen) != site.Expected() {
		t.Errorf("%d items from two containers, want one per expected page: %d", len(seen), site.Expected())
	}
	if err := site.Verify(); err != nil {
		t.Errorf("site: %v", err)
	}
}

// dockerRunArgs runs docker run with args (options, image, command) on
// the host's network and returns its stdout.
func dockerRunArgs(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", name).Run() })
	cmd := exec.CommandContext(ctx, "docker", append([]string{"run", "--rm", "--name", name, "--network", "host"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Errorf("docker run %v: %v; stderr:\n%s", args, err, errb.String())
	}
	return out.String()
}

// TestImageComposeSettings (issue 12): every trawl service of
// deploy/compose.yaml, run in the image with its environment and its
// command's flags, is accepted by the binary (trawl config with the same
// flags exits 0), and the broker it names comes from the environment.
func TestImageComposeSettings(t *testing.T) {
	image := trawlImage(t)
	data, err := os.ReadFile("../../deploy/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(data, &compose); err != nil {
		t.Fatalf("deploy/compose.yaml: %v", err)
	}
	n := 0
	for name, svc := range compose.Services {
		if !strings.Contains(svc.Image, "TRAWL_IMAGE") {
			continue // a broker
		}
		n++
		var args []string
		for k, v := range svc.Environment {
			args = append(args, "-e", k+"="+os.Expand(v, composeDefault))
		}
		args = append(args, image, "config")
		if len(svc.Command) > 1 {
			args = append(args, svc.Command[1:]...) // the command's flags
		}
		out := dockerRunArgs(t, Name(t), args...)
		want := fmt.Sprintf("broker = %q # env", svc.Environment["TRAWL_BROKER"])
		if !strings.Contains(out, want+"\n") {
			t.Errorf("%s: trawl config printed no line %q:\n%s", name, want, out)
		}
	}
	if n != 6 {
		t.Errorf("%d trawl services in deploy/compose.yaml, want a worker and a tool for each of 3 brokers", n)
	}
}

// composeDefault expands ${VAR:-default} as compose does, when VAR is unset.
func composeDefault(v string) string {
	name, def, _ := strings.Cut(v, ":-")
	if s, ok := os.LookupEnv(name); ok {
		return s
	}
	return def
}
