package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker"
)

// TestZipfSizes: sizes fall with rank, each between 1 and the largest
// allowed, summing to about the pages asked for.
func TestZipfSizes(t *testing.T) {
	s := zipfSizes(1000, 20000, 200)
	sum := 0
	for r, n := range s {
		if n < 1 || n > 200 {
			t.Fatalf("host %d: %d pages, want 1 to 200", r, n)
		}
		if r > 0 && n > s[r-1] {
			t.Fatalf("host %d has %d pages, more than host %d's %d", r, n, r-1, s[r-1])
		}
		sum += n
	}
	if sum < 19900 || sum > 20100 {
		t.Errorf("%d pages in all, want about 20000", sum)
	}
	if s[0] != 200 || s[999] > 10 {
		t.Errorf("largest %d, smallest %d: want 200 and a handful", s[0], s[999])
	}
}

// TestHostQueues: the loop's scheduler hands out every URL once, never
// more than perHost of one host at once, and the hosts with room first.
func TestHostQueues(t *testing.T) {
	var urls []string
	for h := range 5 {
		for p := range 10 * (h + 1) {
			urls = append(urls, fmt.Sprintf("http://127.0.0.%d:80/p/%d", h+1, p))
		}
	}
	path := filepath.Join(t.TempDir(), "urls")
	if err := os.WriteFile(path, []byte(strings.Join(urls, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	q, err := readHostQueues(path, 2)
	if err != nil {
		t.Fatal(err)
	}
	// The first take of each slot: 2 per host, the 5 hosts before any
	// host's third.
	hosts := map[*hostQueue]int{}
	var first []*hostQueue
	for range 10 {
		h, _ := q.take()
		hosts[h]++
		first = append(first, h)
	}
	for _, n := range hosts {
		if n != 2 {
			t.Fatalf("a host got %d of the first 10 slots, want 2", n)
		}
	}
	for _, h := range first {
		q.done(h)
	}
	var (
		mu     sync.Mutex
		seen   = map[string]int{}
		active = map[*hostQueue]int{}
		wg     sync.WaitGroup
	)
	for range 8 {
		wg.Go(func() {
			for {
				h, u := q.take()
				if h == nil {
					return
				}
				mu.Lock()
				seen[u]++
				active[h]++
				if active[h] > 2 {
					t.Errorf("%d requests to one host at once, want at most 2", active[h])
				}
				mu.Unlock()
				runtime.Gosched()
				mu.Lock()
				active[h]--
				mu.Unlock()
				q.done(h)
			}
		})
	}
	wg.Wait()
	if len(seen) != len(urls)-10 {
		t.Errorf("%d URLs handed out after the first 10, want %d", len(seen), len(urls)-10)
	}
	for u, n := range seen {
		if n != 1 {
			t.Errorf("%s handed out %d times", u, n)
		}
	}
}

// TestLocalFilter: the modes whose filter is a local Bloom filter (no
// server, or --dedup=local) are the ones the bench gives its low
// false-positive rate; a Redis filter is left at its own.
func TestLocalFilter(t *testing.T) {
	for _, c := range []struct {
		m     webMode
		flags []string
		want  bool
	}{
		{webModes[0], []string{"--broker=memory"}, true},
		{webModes[1], nil, true},
		{webModes[2], []string{"--broker=redis", "--redis-url", "redis://x"}, false},
		{webModes[3], []string{"--broker=nats", "--nats-url", "nats://x", "--dedup=local"}, true},
		{webModes[6], []string{"--broker=nats", "--nats-url", "nats://x", "--dedup=set", "--redis-url", "redis://x"}, false},
	} {
		if got := localFilter(c.m, c.flags); got != c.want {
			t.Errorf("%s %v: local filter %v, want %v", c.m.name, c.flags, got, c.want)
		}
	}
}

// TestWebRunRatio: a crawl is compared with the mean of the loops just
// before and after it, and a mode's row is its median crawl, failed
// crawls aside.
func TestWebRunRatio(t *testing.T) {
	t0 := time.Unix(0, 0)
	win := func(pages int) window { return window{First: t0, Last: t0.Add(time.Second), Requests: pages} }
	loop := func(pages int) *loopRun { return &loopRun{w: win(pages), cpu: time.Duration(pages) * time.Millisecond} }
	r := &webRun{before: loop(800), after: loop(1200), crawl: win(900)}
	if got := r.ratio(); got != 0.9 {
		t.Errorf("ratio %v, want 900 / mean(800, 1200) = 0.9", got)
	}
	if got := r.loopPerPage(); got != time.Millisecond {
		t.Errorf("loop CPU per page %v, want 1ms", got)
	}
	alone := &webRun{before: loop(1000), crawl: win(900)}
	if got := alone.ratio(); got != 0.9 {
		t.Errorf("one loop: ratio %v, want 0.9", got)
	}
	res := &webResult{runs: []*webRun{
		{before: loop(1000), after: loop(1000), crawl: win(700)},
		{before: loop(1000), after: loop(1000), crawl: win(990), err: errWebIncomplete},
		{before: loop(1000), after: loop(1000), crawl: win(950)},
		{before: loop(1000), after: loop(1000), crawl: win(800)},
		{before: loop(1000), after: loop(1000), crawl: win(1100)},
	}}
	if got := res.median().ratio(); got != 0.8 {
		t.Errorf("median %v of 0.7, 0.8, 0.95, 1.1 (and a failed 0.99), want the lower middle 0.8", got)
	}
	if ok := res.ok(); len(ok) != 4 || ok[0].ratio() != 0.7 || ok[3].ratio() != 1.1 {
		t.Errorf("the crawls that succeeded, by ratio: %d, want 4 from 0.7 to 1.1", len(ok))
	}
}

// TestConnCounts: the site counts the connections a client opens, its
// full and resumed TLS handshakes, and the idle connections the client
// closes, as bench-web reports them.
func TestConnCounts(t *testing.T) {
	s, err := serveWeb(webConfig{hosts: 2, pages: 4, maxHost: 2, seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.ca)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ClientSessionCache: tls.NewLRUClientSessionCache(4)}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	get := func(u string) {
		t.Helper()
		resp, err := client.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	https := s.base[1] + "/robots.txt"
	get(https)
	get(https) // the same connection
	get(s.base[0] + "/robots.txt")
	if got := s.conns.read(); got.accepted != 2 || got.full != 1 || got.resumed != 0 {
		t.Fatalf("after 3 requests on 2 connections: %v, want 2 connections, 1 full handshake", got)
	}
	tr.CloseIdleConnections()
	get(https) // a new connection, resumed
	if got := s.conns.read(); got.accepted != 3 || got.full != 1 || got.resumed != 1 {
		t.Fatalf("after the client closed its connections and asked again: %v, want 3 connections, 1 full and 1 resumed handshake", got)
	}
	// The server sees the client's two closes in its own time.
	for deadline := time.Now().Add(10 * time.Second); s.conns.read().clientIdle < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("%v: want 2 closed by the client within 10 s", s.conns.read())
		}
		runtime.Gosched()
	}
	if got := s.conns.read(); got.idleTimeout != 0 || got.mid != 0 {
		t.Errorf("%v: want none closed by the site's idle timeout or busy", got)
	}
}

// TestTallyTwiceWhy: a run that fetches a page twice says how: the first
// request cut by its client (a timeout) and the second served, with the
// gap between them; a page served twice says served. The count alone
// could not tell a retry after an error from a delivery handed out twice.
func TestTallyTwiceWhy(t *testing.T) {
	s, err := serveWeb(webConfig{hosts: 1, pages: 3, maxHost: 3, median: 300 * time.Millisecond, slow: 300 * time.Millisecond, seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	get := func(u string, timeout time.Duration) error {
		t.Helper()
		client := &http.Client{Timeout: timeout}
		resp, err := client.Get(u)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	// The site notes a request once its handler returns, in its own time
	// (it sees a client go away later still).
	noted := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); s.window().Requests < n; {
			if time.Now().After(deadline) {
				t.Fatalf("the site noted %d requests within 10 s, want %d", s.window().Requests, n)
			}
			runtime.Gosched()
		}
	}
	home := s.base[0] + "/"
	// The first request is cut once the site is handling it (not at a
	// fixed timeout, which a loaded machine can pass before the request
	// reaches the site, which then notes nothing); a trial whose request
	// the site did not see cut is void (the site is reset).
	for trial := 1; ; trial++ {
		ctx, cut := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, home, nil)
			if err == nil {
				var resp *http.Response
				if resp, err = http.DefaultClient.Do(req); err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
			done <- err
		}()
		for s.inFlight.Load() == 0 && len(done) == 0 {
			runtime.Gosched()
		}
		cut()
		err := <-done
		noted(1)
		s.mu.Lock()
		seenCut := s.firsts[[2]int{0, 0}].cut
		s.mu.Unlock()
		if err != nil && seenCut {
			break
		}
		// Served before the cut, or the site wrote its answer before it
		// saw the client go (a loaded machine): void.
		if trial == 5 {
			t.Fatalf("in 5 trials the site did not see a request cut while it handled it, a page of 300 ms latency (last: client error %v, site saw a cut %v)", err, seenCut)
		}
		s.reset()
	}
	for _, u := range []string{home, s.base[0] + "/p/1", s.base[0] + "/p/1"} {
		if err := get(u, 0); err != nil {
			t.Fatal(err)
		}
	}
	noted(4)
	tl := s.tally()
	if tl.twice != 2 {
		t.Fatalf("tally: %d pages fetched twice, want 2", tl.twice)
	}
	for _, want := range []string{"of the 2 pages fetched twice, 1 first requests cut by the client, 1 served",
		"host 0 page 0: ", " cut (conn ", "host 0 page 1: ", " served (conn ", " then "} {
		if !strings.Contains(tl.why, want) {
			t.Errorf("why: %q, want it to say %q", tl.why, want)
		}
	}
	if err := tl.check(); err == nil || !strings.Contains(err.Error(), tl.why) {
		t.Errorf("check: %v, want the account %q in it", err, tl.why)
	}
	s.reset()
	if tl := s.tally(); tl.why != "" {
		t.Errorf("after a reset: why %q, want none", tl.why)
	}
}

// TestSplitByHost: the loop of the crawl's shape gives each host to one
// of its processes, as host affinity gives it to one worker (hosts of a
// partition p together, in list p mod 4), so that the four processes,
// each holding at most -per-host requests of a host at once, hold at
// most -per-host of it together. A split by URL (the i-th URL to list i
// mod 4) would hand a host's pages to several processes and let them
// fetch it four times as fast as the crawl may.
func TestSplitByHost(t *testing.T) {
	const hosts, procs, parts, perHost = 200, 4, 8, 2
	var urls []string
	for h := range hosts {
		for p := range 1 + h%7 {
			urls = append(urls, fmt.Sprintf("https://127.0.%d.%d:4430/p/%d", h/250, 1+h%250, p))
		}
	}
	lists := splitByHost(urls, procs, parts)
	if len(lists) != procs {
		t.Fatalf("%d lists, want %d", len(lists), procs)
	}
	in := map[string]int{}        // URL -> its list
	hostIn := map[string]int{}    // host -> its list
	partIn := map[int]int{}       // partition -> its list
	hostsOf := make([]int, procs) // hosts in each list
	for i, l := range lists {
		for _, s := range l {
			if j, ok := in[s]; ok {
				t.Fatalf("%s in lists %d and %d", s, j, i)
			}
			in[s] = i
			u, err := url.Parse(s)
			if err != nil {
				t.Fatal(err)
			}
			if j, ok := hostIn[u.Host]; ok && j != i {
				t.Fatalf("host %s in lists %d and %d", u.Host, j, i)
			} else if !ok {
				hostsOf[i]++
			}
			hostIn[u.Host] = i
			p := broker.PartitionOf(broker.PartitionKey(u.Host, broker.PartitionByHost), parts)
			if j, ok := partIn[p]; ok && j != i {
				t.Fatalf("partition %d's hosts in lists %d and %d, want one list as one worker holds a partition", p, j, i)
			}
			partIn[p] = i
		}
	}
	if len(in) != len(urls) {
		t.Fatalf("%d URLs in the lists, want %d", len(in), len(urls))
	}
	if len(partIn) != parts {
		t.Errorf("%d partitions among the lists, want %d", len(partIn), parts)
	}
	for i, n := range hostsOf {
		if n < hosts/procs/2 {
			t.Errorf("list %d has %d hosts of %d, want about a quarter", i, n, hosts)
		}
	}
	// Each list's loop takes what it can without giving any slot back:
	// per host, at most perHost of the four together.
	taken := map[string]int{}
	for i, l := range lists {
		path := filepath.Join(t.TempDir(), fmt.Sprint("urls-", i))
		if err := os.WriteFile(path, []byte(strings.Join(l, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		q, err := readHostQueues(path, perHost)
		if err != nil {
			t.Fatal(err)
		}
		free := 0 // takes that do not wait
		for _, h := range q.ready {
			free += min(perHost, len(h.urls))
		}
		for range free {
			_, s := q.take()
			u, _ := url.Parse(s)
			taken[u.Host]++
		}
	}
	for h, n := range taken {
		if n > perHost {
			t.Errorf("host %s: %d requests at once across the loop's processes, want at most %d", h, n, perHost)
		}
	}
	if len(taken) != hosts {
		t.Errorf("%d hosts taken from, want %d", len(taken), hosts)
	}
	// Fewer partitions than processes (a crawl without --partitions):
	// still each host in one list, and every list used.
	for i, l := range splitByHost(urls, procs, 1) {
		if len(l) == 0 {
			t.Errorf("one partition: list %d empty", i)
		}
	}
}

// TestSplitReport: for 4 workers the report prints the crawl's CPU per
// page against the loop of its shape beside the bar's (one loop process),
// and the two loops' ratio, from the loops run beside the crawl; a mode
// of one worker has no such row.
func TestSplitReport(t *testing.T) {
	t0 := time.Unix(0, 0)
	win := func(pages int) window { return window{First: t0, Last: t0.Add(time.Second), Requests: pages} }
	// One loop process: 1,000 pages/s, 100 µs a page; four: 800 pages/s,
	// 150 µs a page.
	loop := func() *loopRun {
		return &loopRun{w: win(1000), cpu: 100 * time.Millisecond, procs: 1, concurrency: 1024,
			split: &loopRun{w: win(800), cpu: 120 * time.Millisecond, procs: 4, concurrency: 256}}
	}
	four := &webRun{mode: webModes[5], before: loop(), after: loop(), crawl: win(900), workerCPU: 270 * time.Millisecond}
	one := &webRun{mode: webModes[2], before: &loopRun{w: win(1000), cpu: 100 * time.Millisecond}, crawl: win(900), workerCPU: 180 * time.Millisecond}
	if got := len(four.splitLoops()); got != 2 {
		t.Fatalf("%d loops of the crawl's shape beside the crawl, want 2", got)
	}
	if n := webModes[5].partitions(); n != 8 {
		t.Errorf("%s: %d partitions, want 8", webModes[5].name, n)
	}
	var b strings.Builder
	printWeb(&b, []*webResult{{mode: one.mode, runs: []*webRun{one}}, {mode: four.mode, runs: []*webRun{four}}}, nil)
	out := b.String()
	// 300 µs a page: 2.00 of the four loop processes' 150, 3.00 of the
	// one's 100 (the bar's figure, unchanged); the loops' ratio 1.50;
	// pages/s 900 / 800.
	want := "| " + webModes[5].name + ", 4 processes × 256 | 800–800 | 1.12 | 150 | 100 | 1.50 | | 300 | **2.00** | 3.00 |"
	if !strings.Contains(out, want) {
		t.Errorf("report lacks the row\n%s\nin\n%s", want, out)
	}
	if !strings.Contains(out, "| 300 | 100 | **3.00** | ≤ 2.0 | MISS |") {
		t.Errorf("report lost the bar's figure (300 µs a page against the one-process loop's 100):\n%s", out)
	}
	_, split, _ := strings.Cut(out, "against a loop of their shape")
	if rows := strings.Count(split, "\n| --broker"); rows != 1 {
		t.Errorf("%d rows against a loop of the crawl's shape, want 1 (none for one worker):\n%s", rows, out)
	}
}

// TestSummaryLine: the summary of a crawl's log, and of a worker's (the
// 4-worker modes start workers only): a worker says "worker done", or
// "worker stopped (SIGTERM)" when stopped as bench-web stops them.
func TestSummaryLine(t *testing.T) {
	for what, log := range map[string]string{
		"crawl":   "time=x level=INFO msg=start\ntrawl: crawl done: 10 pages, 0 errors\n",
		"worker":  "trawl: worker done: 10 pages, 0 errors\ntrawl: no item: none\n",
		"stopped": "trawl: worker stopped (SIGTERM): 10 pages, 0 errors; pages not done are back in the queue\n",
	} {
		path := filepath.Join(t.TempDir(), "trawl.log")
		if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := summaryLine(path); got != "10 pages, 0 errors" {
			t.Errorf("%s log: summary %q, want %q", what, got, "10 pages, 0 errors")
		}
	}
}

// TestSharing: bench-web seeds the 4-worker crawls once every worker's
// log last said it prefers its share among them all; a worker that last
// saw fewer workers, or logged no share yet, is not counted.
func TestSharing(t *testing.T) {
	dir := t.TempDir()
	logs := make([]string, 3)
	line := func(parts string, w int) string {
		return fmt.Sprintf("time=x level=INFO msg=\"%s%s of 8: %d workers\" own=[]\n", shareLine, parts, w)
	}
	for i, text := range []string{
		line("0, 1, 2, 3, 4, 5, 6, 7", 1) + line("0, 3, 6", 3), // settled
		line("1, 4, 7", 3),    // settled
		line("0, 2, 4, 6", 2), // saw two so far
	} {
		logs[i] = filepath.Join(dir, fmt.Sprint("w", i))
		if err := os.WriteFile(logs[i], []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if n := sharing(logs); n != 2 {
		t.Fatalf("%d workers sharing among 3, want 2 (the third last saw 2)", n)
	}
	if err := os.WriteFile(logs[2], []byte(line("0, 2, 4, 6", 2)+line("2, 5", 3)+"time=y level=INFO msg=other\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n := sharing(logs); n != 3 {
		t.Fatalf("%d workers sharing among 3 after the third saw them all, want 3", n)
	}
	if err := os.WriteFile(logs[0], []byte(line("0, 3, 6", 3)+line("0, 1, 2, 3, 4, 5, 6, 7", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if n := sharing(logs); n != 2 {
		t.Fatalf("%d workers sharing after the first last saw itself alone, want 2", n)
	}
}

// TestServed: the 4-worker crawls end when the site has served every
// URL as often as a crawl asks (a hanging page twice) with nothing in
// progress; a stall with URLs not served is an error, not a wait to the
// crawl's limit.
func TestServed(t *testing.T) {
	s, err := serveWeb(webConfig{hosts: 2, pages: 4, maxHost: 2, seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	urls := s.urls()
	left, _, _ := s.served()
	if left != len(urls) {
		t.Fatalf("%d URLs left before any request, want %d", left, len(urls))
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.ca)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	for _, u := range urls[1:] {
		resp, err := client.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if left, _, n := s.served(); left != 1 || n != int64(len(urls)-1) {
		t.Fatalf("served: %d left after %d requests, want 1 after %d", left, n, len(urls)-1)
	}
	err = s.waitServed(context.Background(), 200*time.Millisecond)
	if !errors.Is(err, errWebIncomplete) {
		t.Fatalf("waitServed with one URL never asked for: %v, want %v", err, errWebIncomplete)
	}
	resp, err := client.Get(urls[0])
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err := s.waitServed(context.Background(), time.Minute); err != nil {
		t.Fatalf("waitServed after every URL: %v", err)
	}
}
