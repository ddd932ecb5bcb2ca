package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trawlhq/trawl/engine"
)

// source is a crawl given as snapshots, one per read; the last repeats.
// It keeps a saved history like a HistoryStore of a deployment.
type source struct {
	mu       sync.Mutex
	snaps    []Snapshot
	saved    map[int][]byte // by slot
	saves    int
	requeued int
	paused   bool
}

func (s *source) SetPaused(_ context.Context, paused bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.paused = paused
	return nil
}

func (s *source) Snapshot(context.Context) (Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := s.snaps[0]
	if len(s.snaps) > 1 {
		s.snaps = s.snaps[1:]
	}
	snap.Paused = s.paused
	return snap, nil
}

func (s *source) Requeue(context.Context) (int, error) { s.requeued++; return 3, nil }

func (s *source) LoadHistory(_ context.Context, slot int) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.saved[slot] == nil {
		return nil, ErrNoHistory
	}
	return s.saved[slot], nil
}

func (s *source) SaveHistory(_ context.Context, slot int, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if slot < 0 || slot >= HistorySlots {
		panic(fmt.Sprintf("slot %d out of range", slot))
	}
	if s.saved == nil {
		s.saved = map[int][]byte{}
	}
	s.saved[slot] = append([]byte(nil), data...)
	s.saves++
	return nil
}

func getJSON(t *testing.T, h http.Handler, path string, v any) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, rec.Body)
	}
}

// TestStateShowsTheStats: the totals are the stats' figures, every stat is
// served as read, queues are summed into the history, a worker past its
// heartbeat is lost (not dropped) and one that left is stopped.
func TestStateShowsTheStats(t *testing.T) {
	now := time.Now()
	stats := map[string]int64{
		engine.StatResponses: 120, engine.StatItems: 110, engine.StatErrors: 7, engine.StatRetries: 4,
		engine.StatDeadLetters: 2, engine.StatErrorKindPrefix + "fetch": 5, engine.StatErrorKindPrefix + "redirect": 2,
		"books:requests/ready": 30, "books:requests/in_flight": 5, "books:requests/dead": 2,
	}
	src := &source{snaps: []Snapshot{{
		Stats:  stats,
		Queues: []Queue{{Name: "books:requests", Ready: 30, InFlight: 5, Delayed: -1, Dead: 2}, {Name: "books:start_urls", Ready: 1, Delayed: -1}},
		Workers: []engine.WorkerStatus{
			{ID: "a", Host: "h1", PID: 11, Heartbeat: now},
			{ID: "b", Host: "h2", PID: 22, Heartbeat: now.Add(-engine.PresenceTTL - time.Second)},
			{ID: "c", Host: "h3", PID: 33, Heartbeat: now.Add(-time.Hour), Stopped: true},
		},
		DeadLetters: []DeadLetter{{Queue: "books:requests", What: "http://x/1", Reason: "too many deliveries"}},
	}}}
	d := New(src, Config{Crawl: "books"})
	d.Sample(context.Background())

	var st State
	getJSON(t, d, "/api/state", &st)
	want := Totals{Pages: 120, Items: 110, Errors: 7, Retries: 4, DeadLetters: 2, ErrorsByKind: map[string]int64{"fetch": 5, "redirect": 2}}
	if st.Totals.Pages != want.Pages || st.Totals.Items != want.Items || st.Totals.Errors != want.Errors ||
		st.Totals.Retries != want.Retries || st.Totals.DeadLetters != want.DeadLetters ||
		len(st.Totals.ErrorsByKind) != 2 || st.Totals.ErrorsByKind["fetch"] != 5 || st.Totals.ErrorsByKind["redirect"] != 2 {
		t.Errorf("totals = %+v, want %+v", st.Totals, want)
	}
	if len(st.Stats) != len(stats) {
		t.Errorf("stats served: %d, want %d", len(st.Stats), len(stats))
	}
	for k, v := range stats {
		if st.Stats[k] != v {
			t.Errorf("stats[%q] = %d, want %d", k, st.Stats[k], v)
		}
	}
	states := map[int]string{}
	for _, w := range st.Workers {
		states[w.PID] = w.State
	}
	if states[11] != "running" || states[22] != "lost" || states[33] != "stopped" || len(states) != 3 {
		t.Errorf("worker states = %v, want 11 running, 22 lost, 33 stopped", states)
	}
	if st.Status != "running" || st.Stalled {
		t.Errorf("status %q stalled %v, want running", st.Status, st.Stalled)
	}
	if !st.CanRequeue || len(st.DeadLetters) != 1 {
		t.Errorf("can_requeue %v, dead letters %v", st.CanRequeue, st.DeadLetters)
	}
	var h []Point
	getJSON(t, d, "/api/history", &h)
	if len(h) != 1 || h[0].Ready != 31 || h[0].InFlight != 5 || h[0].Dead != 2 || h[0].Delayed != -1 {
		t.Errorf("history = %+v, want one point, ready 31, in flight 5, dead 2, delayed unknown", h)
	}
}

// TestRates: the rates are the stats' growth over the time between samples.
func TestRates(t *testing.T) {
	d := New(&source{snaps: []Snapshot{{}}}, Config{})
	t0 := time.Now()
	d.record(t0, Snapshot{Stats: map[string]int64{engine.StatResponses: 100, engine.StatItems: 50}})
	d.record(t0.Add(2*time.Second), Snapshot{Stats: map[string]int64{engine.StatResponses: 140, engine.StatItems: 60, engine.StatErrors: 4}})
	p := d.History(0)[1]
	if p.PagesPerSec != 20 || p.ItemsPerSec != 5 || p.ErrorsPerSec != 2 {
		t.Errorf("rates = %v pages/s %v items/s %v errors/s, want 20, 5, 2", p.PagesPerSec, p.ItemsPerSec, p.ErrorsPerSec)
	}
	if got := d.History(p.T); len(got) != 0 {
		t.Errorf("History(since the last) = %v, want none", got)
	}
}

// TestStallAndETA: a crawl with requests queued and no page fetched for
// StallAfter is stalled; while its frontier shrinks it has an ETA.
func TestStallAndETA(t *testing.T) {
	d := New(&source{snaps: []Snapshot{{}}}, Config{StallAfter: time.Minute})
	snap := func(pages, ready int64) Snapshot {
		return Snapshot{Stats: map[string]int64{engine.StatResponses: pages}, Queues: []Queue{{Name: "q", Ready: ready}}}
	}
	t0 := time.Now()
	d.record(t0, snap(0, 100))
	d.record(t0.Add(10*time.Second), snap(50, 80)) // 2 requests/s off the frontier
	st := d.Current()
	if st.Stalled || st.Status != "running" {
		t.Fatalf("a progressing crawl: status %q", st.Status)
	}
	if st.ETASeconds != 40 {
		t.Errorf("ETA %vs, want 40s (80 left at 2/s)", st.ETASeconds)
	}
	d.record(t0.Add(69*time.Second), snap(50, 80))
	if d.Current().Stalled {
		t.Error("stalled 59s after the last page, StallAfter 1m")
	}
	d.record(t0.Add(71*time.Second), snap(50, 80))
	if st := d.Current(); !st.Stalled || st.Status != "stalled" || st.StalledFor < 60 {
		t.Errorf("61s without a page, requests queued: status %q stalled %v for %vs", st.Status, st.Stalled, st.StalledFor)
	}
	d.record(t0.Add(72*time.Second), snap(50, 0))
	if st := d.Current(); st.Stalled || st.Status != "idle" {
		t.Errorf("nothing queued: status %q, want idle", st.Status)
	}
}

// TestHistorySurvivesARestart: a dashboard sampling every second for
// two hours, then stopped without a last save, and a new one over the
// same store shows the last hour at the same one-second resolution, every
// point as it was (rates to 0.01/s), short of the last saveEvery at most;
// the store holds at most HistorySlots values of under 16 KiB each.
func TestHistorySurvivesARestart(t *testing.T) {
	src := &source{}
	d := New(src, Config{})
	ctx := context.Background()
	end := time.Now()
	start := end.Add(-2 * time.Hour)
	for i := 0; ; i++ {
		at := start.Add(time.Duration(i) * time.Second)
		if at.After(end) {
			break
		}
		d.record(at, Snapshot{Stats: map[string]int64{engine.StatResponses: int64(i * (i % 7)), engine.StatItems: int64(3 * i)},
			Queues: []Queue{{Name: "q", Ready: int64(i), InFlight: int64(i % 5), Delayed: int64(i % 3), Dead: int64(i / 100)}}})
		d.save(ctx, at)
	}
	if len(src.saved) > HistorySlots {
		t.Errorf("%d slots saved, want at most %d", len(src.saved), HistorySlots)
	}
	for slot, v := range src.saved {
		if len(v) > 16<<10 {
			t.Errorf("slot %d holds %d bytes, want under 16 KiB", slot, len(v))
		}
	}
	if want := int(2 * time.Hour / saveEvery); src.saves < want || src.saves > want+2*int(2*time.Hour/segmentLen) {
		t.Errorf("%d saves over two hours, want one every %v", src.saves, saveEvery)
	}
	before := d.History(0)
	if len(before) < 3600 {
		t.Fatalf("the first dashboard keeps %d points, want the last hour's", len(before))
	}

	d2 := New(src, Config{})
	d2.load(ctx, end)
	after := d2.History(0)
	lost := before[len(before)-1].T - after[len(after)-1].T
	if lost < 0 || lost > saveEvery.Milliseconds() {
		t.Errorf("the restarted dashboard's history ends %d ms before the first's, want at most %v", lost, saveEvery)
	}
	if len(after) < len(before)-int(saveEvery/time.Second) || after[0].T != before[0].T {
		t.Fatalf("restarted: %d points from %d, want the first's %d from %d, short of %v at most", len(after), after[0].T, len(before), before[0].T, saveEvery)
	}
	for i, p := range after {
		j := sort.Search(len(before), func(j int) bool { return before[j].T >= p.T })
		if j == len(before) {
			t.Fatalf("restarted point %d = %+v: the first dashboard had none at that time", i, p)
		}
		q := before[j]
		if p.T != q.T || p.Ready != q.Ready || p.InFlight != q.InFlight || p.Delayed != q.Delayed || p.Dead != q.Dead ||
			math.Abs(p.PagesPerSec-q.PagesPerSec) > 0.006 || math.Abs(p.ItemsPerSec-q.ItemsPerSec) > 0.006 {
			t.Fatalf("restarted point %d = %+v, want %+v", i, p, q)
		}
		if i > 0 && p.T-after[i-1].T > 1000 {
			t.Fatalf("restarted: %d ms between points %d and %d, want the 1 s of the samples", p.T-after[i-1].T, i-1, i)
		}
	}
}

// TestToken: with a token, requests without it are refused; with it, in
// the header or the query, served.
func TestToken(t *testing.T) {
	d := New(&source{snaps: []Snapshot{{}}}, Config{Token: "s3cret"})
	for _, c := range []struct {
		path, auth string
		want       int
	}{
		{"/api/state", "", http.StatusUnauthorized},
		{"/", "", http.StatusUnauthorized},
		{"/api/state?token=wrong", "", http.StatusUnauthorized},
		{"/api/state", "Bearer wrong", http.StatusUnauthorized},
		{"/api/state?token=s3cret", "", http.StatusOK},
		{"/api/state", "Bearer s3cret", http.StatusOK},
		{"/?token=s3cret", "", http.StatusOK},
	} {
		r := httptest.NewRequest("GET", c.path, nil)
		if c.auth != "" {
			r.Header.Set("Authorization", c.auth)
		}
		rec := httptest.NewRecorder()
		d.ServeHTTP(rec, r)
		if rec.Code != c.want {
			t.Errorf("GET %s (Authorization %q): %d, want %d", c.path, c.auth, rec.Code, c.want)
		}
		if strings.Contains(rec.Body.String(), "s3cret") {
			t.Errorf("GET %s: the token is in the response", c.path)
		}
	}
}

// TestRequeueRefusesCrossSite: the requeue action is a POST that another
// site's page cannot send; the page's own can.
func TestRequeueRefusesCrossSite(t *testing.T) {
	src := &source{snaps: []Snapshot{{}}}
	d := New(src, Config{})
	post := func(site string) int {
		r := httptest.NewRequest("POST", "/api/requeue", nil)
		r.Header.Set("Sec-Fetch-Site", site)
		rec := httptest.NewRecorder()
		d.ServeHTTP(rec, r)
		return rec.Code
	}
	if code := post("cross-site"); code != http.StatusForbidden || src.requeued != 0 {
		t.Errorf("cross-site POST: %d, requeued %d times; want 403, none", code, src.requeued)
	}
	if code := post("same-origin"); code != http.StatusOK || src.requeued != 1 {
		t.Errorf("same-origin POST: %d, requeued %d times; want 200, once", code, src.requeued)
	}
	rec := httptest.NewRecorder()
	d.ServeHTTP(rec, httptest.NewRequest("GET", "/api/requeue", nil))
	if rec.Code == http.StatusOK || src.requeued != 1 {
		t.Errorf("GET /api/requeue: %d, requeued %d times; want refused", rec.Code, src.requeued)
	}
}

// TestPage: the page and its assets are served, the crawl's name escaped.
func TestPage(t *testing.T) {
	d := New(&source{snaps: []Snapshot{{}}}, Config{Crawl: "<b>books</b>"})
	for _, p := range []string{"/", "/static/app.js", "/static/style.css"} {
		rec := httptest.NewRecorder()
		d.ServeHTTP(rec, httptest.NewRequest("GET", p, nil))
		if rec.Code != http.StatusOK {
			t.Errorf("GET %s: %d", p, rec.Code)
		}
		if p == "/" && (strings.Contains(rec.Body.String(), "<b>books") || !strings.Contains(rec.Body.String(), "&lt;b&gt;books")) {
			t.Errorf("the crawl's name is not escaped: %s", rec.Body)
		}
	}
}

// failing is a source whose reads fail.
type failing struct{}

func (failing) Snapshot(context.Context) (Snapshot, error) {
	return Snapshot{}, errors.New("dial redis://user:hunter2@db:6379: refused")
}

// TestErrorNamesNoPassword: a failed read is shown without the password
// of the URL its error names.
func TestErrorNamesNoPassword(t *testing.T) {
	d := New(failing{}, Config{})
	d.Sample(context.Background())
	st := d.Current()
	if st.Error == "" || strings.Contains(st.Error, "hunter2") {
		t.Errorf("error = %q, want one without the password", st.Error)
	}
}

// TestPauseResume: POST /api/pause pauses the crawl through the source
// and the state says so at once (a paused crawl is not stalled, whatever
// its queue); /api/resume undoes it; another site cannot do either.
func TestPauseResume(t *testing.T) {
	src := &source{snaps: []Snapshot{{Queues: []Queue{{Name: "q", Ready: 5}}, Workers: []engine.WorkerStatus{{PID: 7, Heartbeat: time.Now(), Paused: true}}}}}
	d := New(src, Config{StallAfter: time.Nanosecond})
	post := func(path, site string) int {
		r := httptest.NewRequest("POST", path, nil)
		r.Header.Set("Sec-Fetch-Site", site)
		rec := httptest.NewRecorder()
		d.ServeHTTP(rec, r)
		return rec.Code
	}
	if code := post("/api/pause", "cross-site"); code != http.StatusForbidden || src.paused {
		t.Fatalf("cross-site pause: %d, paused %v", code, src.paused)
	}
	if code := post("/api/pause", "same-origin"); code != http.StatusOK || !src.paused {
		t.Fatalf("pause: %d, paused %v", code, src.paused)
	}
	var st State
	getJSON(t, d, "/api/state", &st)
	if !st.Paused || st.Status != "paused" || st.Stalled || !st.CanPause || len(st.Workers) != 1 || st.Workers[0].State != "paused" {
		t.Errorf("after pause: paused %v, status %q, stalled %v, can_pause %v, workers %+v", st.Paused, st.Status, st.Stalled, st.CanPause, st.Workers)
	}
	if code := post("/api/resume", "same-origin"); code != http.StatusOK || src.paused {
		t.Fatalf("resume: %d, paused %v", code, src.paused)
	}
	getJSON(t, d, "/api/state", &st)
	if st.Paused || st.Status == "paused" {
		t.Errorf("after resume: paused %v, status %q", st.Paused, st.Status)
	}
}

// TestHostsMerged: the hosts of every worker's record are added up, the
// most pages first; a host's delay is the largest a running worker
// reports (a lost worker's stale delay is not shown over it), else the
// one reported last.
func TestHostsMerged(t *testing.T) {
	now := time.Now()
	ws := []engine.WorkerStatus{
		{Heartbeat: now, Hosts: []engine.HostStatus{{Host: "a", Pages: 10, Errors: 1, DelayMs: 50}, {Host: "b", Pages: 3, DelayMs: 5}}},
		{Heartbeat: now, Hosts: []engine.HostStatus{{Host: "a", Pages: 5, Errors: 2, DelayMs: 80, Untallied: 4}}},
		{Heartbeat: now.Add(-time.Hour), Hosts: []engine.HostStatus{{Host: "a", Pages: 1, DelayMs: 999}, {Host: "c", Pages: 30, DelayMs: 7}}}, // lost
		{Heartbeat: now.Add(-time.Minute), Stopped: true, Hosts: []engine.HostStatus{{Host: "c", Pages: 2, DelayMs: 9}, {Host: "d", Pages: 1, DelayMs: -1}}},
	}
	src := &source{snaps: []Snapshot{{Workers: ws}}}
	d := New(src, Config{})
	d.Sample(context.Background())
	var st State
	getJSON(t, d, "/api/state", &st)
	want := []Host{
		{Host: "c", Pages: 32, DelayMs: 9, Workers: 2},
		{Host: "a", Pages: 16, Errors: 3, Untallied: 4, DelayMs: 80, Workers: 3},
		{Host: "b", Pages: 3, DelayMs: 5, Workers: 1},
		{Host: "d", Pages: 1, DelayMs: -1, Workers: 1},
	}
	if len(st.Hosts) != len(want) {
		t.Fatalf("hosts = %+v, want %+v", st.Hosts, want)
	}
	for i := range want {
		if st.Hosts[i] != want[i] {
			t.Errorf("host %d = %+v, want %+v", i, st.Hosts[i], want[i])
		}
	}
}

// stoppingSource is a HistoryStore whose reads fail with their context's
// error once the dashboard is stopped, as a deployment opened per read does.
type stoppingSource struct {
	source
	loads int
}

func (s *stoppingSource) LoadHistory(ctx context.Context, slot int) ([]byte, error) {
	s.loads++
	return nil, fmt.Errorf("embedded broker: %w", ctx.Err())
}

// TestLoadStopsQuietly: a dashboard stopped while it loads its saved
// history stops loading, and warns of nothing: the reads it cut short did
// not fail (a stopped default-mode dashboard warned once a slot, "server
// not ready within 10s: context canceled").
func TestLoadStopsQuietly(t *testing.T) {
	var logged strings.Builder
	src := &stoppingSource{}
	d := New(src, Config{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d.load(ctx, time.Now())
	if logged.Len() > 0 {
		t.Errorf("a stopped load logged:\n%s", logged.String())
	}
	if src.loads > 1 {
		t.Errorf("a stopped load read %d slots, want it to stop at the first", src.loads)
	}
}
