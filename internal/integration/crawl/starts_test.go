package crawl_test

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trawlhq/trawl/internal/integration"
	"github.com/trawlhq/trawl/internal/redislayout"
)

// TestRedisStartsKill9: a worker killed with SIGKILL right after it took a
// batch of start URLs from {NAME}:start_urls, before it could move them
// into the frontier, loses none of them: another worker fetches every
// seeded page (a batch taken stays in the list until it is in the
// frontier). The victim reaches Redis through a proxy that, as soon as
// the reply to the take has come back, forwards nothing more from the
// victim: it is killed between the take and the publish, every time.
// Before start URLs were leased, the batch (up to 256) was lost for good.
func TestRedisStartsKill9(t *testing.T) {
	t.Parallel()
	const n = 2000
	var (
		mu   sync.Mutex
		hits = map[string]int{}
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits[r.URL.Path]++
		mu.Unlock()
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<html><head><title>%s</title></head><body>no links</body></html>", r.URL.Path)
	}))
	t.Cleanup(srv.Close)

	name := integration.Name(t)
	client := integration.RedisClient(t)
	ctx := t.Context()
	key := redislayout.StartKeys(name).List
	urls := make([]any, n)
	for i := range urls {
		urls[i] = fmt.Sprintf("%s/p/%d", srv.URL, i)
	}
	if err := client.RPush(ctx, key, urls...).Err(); err != nil {
		t.Fatal(err)
	}

	proxy := newTakeProxy(t, integration.Redis(t))
	victim := start(t, append([]string{"worker"}, redisArgs(t, name, "--lease=2s", "--redis-url", proxy.url)...)...)
	select {
	case <-proxy.taken:
	case err := <-victim.done:
		victim.done <- err
		t.Fatalf("the victim exited (%v) before taking start urls:\n%s", err, victim.stderr.String())
	case <-time.After(time.Minute):
		t.Fatalf("the victim took no start urls within a minute:\n%s", victim.stderr.String())
	}
	victim.cmd.Process.Kill()
	victim.wait(t, 10*time.Second)
	if left, err := client.LLen(ctx, key).Result(); err != nil || left != n {
		t.Fatalf("%d start urls left of %d (%v): the victim's batch left the list before it was in the frontier", left, n, err)
	}

	survivor := start(t, append([]string{"worker"}, redisArgs(t, name, "--lease=2s")...)...)
	if code := survivor.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("survivor exit %d:\n%s", code, survivor.stderr.String())
	}
	mu.Lock()
	defer mu.Unlock()
	var missing []string
	for _, u := range urls {
		p := strings.TrimPrefix(u.(string), srv.URL)
		if hits[p] == 0 {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d of %d start urls never fetched (lost with the victim), such as %q", len(missing), n, missing[:min(3, len(missing))])
	}
	if distinct, _ := union(t, victim, survivor); distinct != n {
		t.Errorf("items of %d distinct pages, want %d", distinct, n)
	}
	mustRun(t, append([]string{"purge", "--force"}, redisArgs(t, name)...)...)
	if keys, err := client.Keys(ctx, "{"+name+"}:*").Result(); err != nil || len(keys) > 0 {
		t.Errorf("keys left after purge: %q, %v", keys, err)
	}
}

// takeProxy is a TCP proxy to Redis that stops forwarding anything from
// its clients once a client took start URLs (a command naming start_urls
// that pops or runs a script, answered by a non-empty array). The reply
// itself goes through: the client holds the start URLs and can do nothing
// more with them.
type takeProxy struct {
	url    string
	taken  chan struct{} // closed at the take
	frozen chan struct{} // closed at the take, before its reply is forwarded
	once   sync.Once
}

func newTakeProxy(t *testing.T, redisURL string) *takeProxy {
	t.Helper()
	u, err := url.Parse(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	backend := u.Host
	u.Host = ln.Addr().String()
	p := &takeProxy{url: u.String(), taken: make(chan struct{}), frozen: make(chan struct{})}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", backend)
			if err != nil {
				c.Close()
				continue
			}
			track(c)
			track(s)
			var awaiting sync.Mutex // held between a take command and its reply
			take := make(chan bool, 1)
			wg.Add(2)
			go func() { // client -> server
				defer wg.Done()
				defer s.Close()
				buf := make([]byte, 64<<10)
				for {
					k, err := c.Read(buf)
					if k > 0 {
						select {
						case <-p.frozen:
							return // drop it: the client is cut off
						default:
						}
						cmd := bytes.ToLower(buf[:k])
						isTake := bytes.Contains(cmd, []byte("start_urls")) && !bytes.Contains(cmd, []byte("start_urls:dead")) &&
							(bytes.Contains(cmd, []byte("lrange")) || bytes.Contains(cmd, []byte("srandmember")) ||
								bytes.Contains(cmd, []byte("lpop")) || bytes.Contains(cmd, []byte("spop")) || bytes.Contains(cmd, []byte("eval")))
						if isTake {
							awaiting.Lock()
							take <- true
							awaiting.Unlock()
						}
						if _, err := s.Write(buf[:k]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
			go func() { // server -> client
				defer wg.Done()
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					k, err := s.Read(buf)
					if k > 0 {
						awaiting.Lock()
						var isTake bool
						select {
						case isTake = <-take:
						default:
						}
						awaiting.Unlock()
						r := buf[:k]
						if isTake && r[0] == '*' && !bytes.HasPrefix(r, []byte("*0\r")) && !bytes.HasPrefix(r, []byte("*-1\r")) {
							p.once.Do(func() { close(p.frozen); close(p.taken) })
						}
						if _, err := c.Write(r); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return p
}

// TestRedisProgressCountsStarts: start URLs in {NAME}:start_urls, taken by
// a worker, are in its progress line's queued count all along: a batch
// taken stays in the list until it is in the frontier (StartURLs.Counts
// counts it ready there), and then its requests are the frontier's
// (leased: in progress, read ahead). Five start URLs of a site that holds
// every page: the worker fetches two at once, and every progress line
// says 5 queued, never fewer (the session 14 note suspected taken start
// URLs were missing from it).
func TestRedisProgressCountsStarts(t *testing.T) {
	t.Parallel()
	const starts = 5
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		select { // every page waits until the test has its lines
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	name := integration.Name(t)
	var urls []string
	for i := range starts {
		urls = append(urls, fmt.Sprintf("%s/s/%d", srv.URL, i))
	}
	mustRun(t, append([]string{"seed"}, redisArgs(t, name, urls...)...)...)
	w := start(t, append([]string{"worker"}, redisArgs(t, name, "--concurrency=2", "--per-host=2", "--progress-interval=100ms", "--idle-timeout=0")...)...)
	line := regexp.MustCompile(`(?m)^trawl: crawled 0 pages \(at [0-9.]+ pages/s\), (\d+) queued \((\d+) ready\)`)
	deadline := time.Now().Add(time.Minute)
	var got [][]string
	for len(got) < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than 5 progress lines within a minute:\n%s", w.stderr.String())
		}
		select {
		case err := <-w.done:
			w.done <- err
			t.Fatalf("the worker exited (%v):\n%s", err, w.stderr.String())
		case <-time.After(100 * time.Millisecond):
		}
		got = line.FindAllStringSubmatch(w.stderr.String(), -1)
	}
	for _, m := range got {
		if m[1] != strconv.Itoa(starts) {
			t.Errorf("progress line %q: want %d queued (the start URLs, taken or not)", m[0], starts)
		}
	}
	t.Logf("first and last progress lines: %q, %q", got[0][0], got[len(got)-1][0])
}
