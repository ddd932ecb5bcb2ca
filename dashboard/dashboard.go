// Package dashboard serves a live web page, and the JSON API behind it,
// for one crawl: its workers (lost ones included), its busiest hosts
// (pages, errors, current delay; added up from the workers' records), its
// totals (the figures of trawl stats), its queues (delayed messages
// apart), dead letters and settings, and charts of pages, items and
// errors per second and of queue depths over the last hour. The page is
// plain HTML and JavaScript embedded in the binary; it polls the API
// every second.
//
// A Dashboard reads the crawl through a Source, samples it every
// Config.Every while its Run goroutine runs, and keeps the samples of the
// last hour. When the Source is also a HistoryStore, the samples are
// saved with the crawl every saveEvery, at their own resolution, in a ring
// of five-minute segments (see history.go), and loaded again at start, so
// that a dashboard restarted mid-crawl shows the hour before it, short of
// the last saveEvery at most.
//
// The API:
//
//	GET  /api/state          the latest sample (see State)
//	GET  /api/history?since= the samples after since (Unix milliseconds)
//	POST /api/requeue        requeue every dead letter (Source a Requeuer)
//	POST /api/pause          pause every worker (Source a Pauser)
//	POST /api/resume         resume them
//
// With Config.Token set, every request needs it: the header
// "Authorization: Bearer TOKEN", or ?token=TOKEN (the page passes on the
// one of its own URL). POSTs from other sites are refused
// (http.CrossOriginProtection).
package dashboard

import (
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/trawlhq/trawl/engine"
)

// Source is what a dashboard reads of a crawl.
type Source interface {
	// Snapshot reads the crawl as it is now.
	Snapshot(ctx context.Context) (Snapshot, error)
}

// Requeuer is implemented by sources whose dead letters can be sent
// back to their queues.
type Requeuer interface {
	// Requeue moves every dead letter back to its queue and says how
	// many moved.
	Requeue(ctx context.Context) (int, error)
}

// Pauser is implemented by sources that can pause and resume every
// worker of the crawl (engine.SetPaused).
type Pauser interface {
	SetPaused(ctx context.Context, paused bool) error
}

// HistoryStore is implemented by sources that keep the dashboard's
// history with the crawl: HistorySlots values, numbered from 0, of at
// most about 16 KiB each.
type HistoryStore interface {
	// LoadHistory returns what SaveHistory last saved in slot, or an
	// error wrapping ErrNoHistory.
	LoadHistory(ctx context.Context, slot int) ([]byte, error)
	SaveHistory(ctx context.Context, slot int, data []byte) error
}

// Snapshot is a crawl at one moment, as a Source reads it.
type Snapshot struct {
	// Stats are the figures trawl stats prints: the shared counters and
	// the queues' counts, keyed as there.
	Stats       map[string]int64
	Queues      []Queue
	Workers     []engine.WorkerStatus
	DeadLetters []DeadLetter // the first few
	// Settings are the crawl's stored settings, or nil.
	Settings any
	// Paused says the crawl is paused (see Pauser).
	Paused bool
}

// Queue is a queue's depth, as trawl stats counts it: Ready includes the
// Delayed ones (not yet due: a retry's back-off). Delayed is -1 where the
// queue has no such count (Redis's start URLs).
type Queue struct {
	Name     string `json:"name"`
	Ready    int64  `json:"ready"`
	InFlight int64  `json:"in_flight"`
	Delayed  int64  `json:"delayed"`
	Dead     int64  `json:"dead"`
}

// DeadLetter is a dead-lettered page.
type DeadLetter struct {
	Queue  string `json:"queue"`
	What   string `json:"what"` // its URL, or its payload
	Reason string `json:"reason"`
}

// Config configures a Dashboard.
type Config struct {
	Crawl string // the crawl's name, for the page's title
	// Every is how often the crawl is sampled (default 1s).
	Every time.Duration
	// StallAfter marks the crawl stalled when requests are queued and no
	// page was fetched for that long (default 2m).
	StallAfter time.Duration
	// Token, if set, is required of every request.
	Token  string
	Logger *slog.Logger
}

// keep is how much history a dashboard keeps and shows.
const keep = time.Hour

// Point is one sample of the history.
type Point struct {
	T            int64   `json:"t"` // Unix milliseconds
	PagesPerSec  float64 `json:"pages_per_sec"`
	ItemsPerSec  float64 `json:"items_per_sec"`
	ErrorsPerSec float64 `json:"errors_per_sec"`
	Ready        int64   `json:"ready"`
	InFlight     int64   `json:"in_flight"`
	Delayed      int64   `json:"delayed"`
	Dead         int64   `json:"dead"`
}

// Worker is a worker as the API shows it.
type Worker struct {
	engine.WorkerStatus
	State string `json:"state"` // running, paused, lost or stopped
}

// Host is a host's figures across the crawl's workers, from their
// records (engine.WorkerStatus.Hosts, renewed each heartbeat): pages and
// errors are summed over every worker that reported the host; the delay
// is the largest a running worker reports, else the one reported last.
type Host struct {
	Host   string `json:"host"`
	Pages  int64  `json:"pages"`
	Errors int64  `json:"errors"`
	// Untallied bounds the fetches the workers' tallies may have missed
	// (see engine.HostStatus).
	Untallied int64   `json:"untallied,omitempty"`
	DelayMs   float64 `json:"delay_ms"` // -1: unknown
	Workers   int     `json:"workers"`  // how many reported the host
}

// hostsShown is how many hosts, those with the most pages, the state
// carries.
const hostsShown = 100

// mergeHosts adds up the hosts of the workers' records at now.
func mergeHosts(ws []engine.WorkerStatus, now time.Time) []Host {
	type merged struct {
		Host
		running bool
		at      time.Time
	}
	byName := map[string]*merged{}
	for _, w := range ws {
		running := !w.Stopped && !w.Lost(now)
		for _, h := range w.Hosts {
			m := byName[h.Host]
			if m == nil {
				m = &merged{Host: Host{Host: h.Host, DelayMs: -1}}
				byName[h.Host] = m
			}
			m.Pages += h.Pages
			m.Errors += h.Errors
			m.Untallied += h.Untallied
			m.Workers++
			switch {
			case h.DelayMs < 0:
			case running && (!m.running || h.DelayMs > m.DelayMs),
				!running && !m.running && w.Heartbeat.After(m.at):
				m.DelayMs, m.running, m.at = h.DelayMs, running, w.Heartbeat
			}
		}
	}
	out := make([]Host, 0, len(byName))
	for _, m := range byName {
		out = append(out, m.Host)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Pages != out[j].Pages {
			return out[i].Pages > out[j].Pages
		}
		return out[i].Host < out[j].Host
	})
	return out[:min(len(out), hostsShown)]
}

// Totals are the headline figures, taken from the stats.
type Totals struct {
	Pages        int64            `json:"pages"`
	Items        int64            `json:"items"`
	Errors       int64            `json:"errors"`
	ErrorsByKind map[string]int64 `json:"errors_by_kind"`
	Retries      int64            `json:"retries"`
	DeadLetters  int64            `json:"dead_letters"`
}

// State is what GET /api/state returns.
type State struct {
	Crawl       string           `json:"crawl"`
	Time        int64            `json:"time"`            // Unix milliseconds of the sample
	Error       string           `json:"error,omitempty"` // why the last sample failed
	Status      string           `json:"status"`          // running, paused, stalled, idle or unknown
	Paused      bool             `json:"paused"`
	Stalled     bool             `json:"stalled"`
	StalledFor  float64          `json:"stalled_for_seconds,omitempty"`
	ETASeconds  float64          `json:"eta_seconds,omitempty"` // while the frontier shrinks
	Totals      Totals           `json:"totals"`
	Stats       map[string]int64 `json:"stats"`
	Queues      []Queue          `json:"queues"`
	Workers     []Worker         `json:"workers"`
	Hosts       []Host           `json:"hosts"` // the most pages first (see Host)
	DeadLetters []DeadLetter     `json:"dead_letters"`
	Settings    any              `json:"settings"`
	CanRequeue  bool             `json:"can_requeue"`
	CanPause    bool             `json:"can_pause"`
}

// Dashboard is an http.Handler serving the page and its API.
type Dashboard struct {
	src Source
	cfg Config
	log *slog.Logger
	mux http.Handler

	mu           sync.Mutex
	state        State
	history      []Point
	prev         map[string]int64 // the stats of the previous sample
	prevAt       time.Time
	lastProgress time.Time // when the pages count last grew (or the start)
	lastSaved    time.Time
	savedUpTo    int64 // the T of the last point saved
}

//go:embed static
var static embed.FS

var page = template.Must(template.ParseFS(static, "static/index.html"))

// New returns a dashboard over src. Call Run to sample the crawl.
func New(src Source, cfg Config) *Dashboard {
	if cfg.Every <= 0 {
		cfg.Every = time.Second
	}
	if cfg.StallAfter <= 0 {
		cfg.StallAfter = 2 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	d := &Dashboard{src: src, cfg: cfg, log: cfg.Logger}
	d.state = State{Crawl: cfg.Crawl, Status: "unknown", Stats: map[string]int64{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", d.serveIndex)
	mux.Handle("GET /static/", http.FileServerFS(static))
	mux.HandleFunc("GET /api/state", d.serveState)
	mux.HandleFunc("GET /api/history", d.serveHistory)
	mux.HandleFunc("POST /api/requeue", d.serveRequeue)
	mux.HandleFunc("POST /api/pause", d.servePause(true))
	mux.HandleFunc("POST /api/resume", d.servePause(false))
	d.mux = http.NewCrossOriginProtection().Handler(mux)
	return d
}

// ServeHTTP serves the page and the API.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if d.cfg.Token != "" && !d.authorized(r) {
		http.Error(w, "trawl dashboard: a token is required (?token= or Authorization: Bearer)", http.StatusUnauthorized)
		return
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Frame-Options", "DENY")
	d.mux.ServeHTTP(w, r)
}

func (d *Dashboard) authorized(r *http.Request) bool {
	got := r.URL.Query().Get("token")
	if h, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		got = h
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(d.cfg.Token)) == 1
}

// Run samples the crawl every Config.Every until ctx ends, loading the
// saved history first and saving it as it goes.
func (d *Dashboard) Run(ctx context.Context) {
	d.load(ctx, time.Now())
	t := time.NewTicker(d.cfg.Every)
	defer t.Stop()
	for {
		d.Sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sample reads the crawl once and records it: Run calls it every
// Config.Every.
func (d *Dashboard) Sample(ctx context.Context) {
	now := time.Now()
	snap, err := d.src.Snapshot(ctx)
	if err != nil {
		if ctx.Err() == nil {
			d.log.Warn("reading the crawl failed", "err", err)
		}
		d.mu.Lock()
		d.state.Error = oneLine(err.Error())
		d.mu.Unlock()
		return
	}
	d.mu.Lock()
	d.record(now, snap)
	d.mu.Unlock()
	d.save(ctx, now)
}

// record makes snap, read at now, the state, and adds it to the history.
func (d *Dashboard) record(now time.Time, snap Snapshot) {
	st := State{
		Crawl: d.cfg.Crawl, Time: now.UnixMilli(), Stats: snap.Stats, Queues: snap.Queues,
		DeadLetters: snap.DeadLetters, Settings: snap.Settings, Totals: totals(snap.Stats),
	}
	if st.Stats == nil {
		st.Stats = map[string]int64{}
	}
	_, st.CanRequeue = d.src.(Requeuer)
	_, st.CanPause = d.src.(Pauser)
	st.Paused = snap.Paused
	for _, w := range snap.Workers {
		s := "running"
		switch {
		case w.Stopped:
			s = "stopped"
		case w.Lost(now):
			s = "lost"
		case w.Paused:
			s = "paused"
		}
		st.Workers = append(st.Workers, Worker{WorkerStatus: w, State: s})
	}
	st.Hosts = mergeHosts(snap.Workers, now)
	p := Point{T: now.UnixMilli(), Delayed: -1}
	for _, q := range snap.Queues {
		p.Ready += q.Ready
		p.InFlight += q.InFlight
		p.Dead += q.Dead
		if q.Delayed >= 0 {
			p.Delayed = max(p.Delayed, 0) + q.Delayed
		}
	}
	if d.prev != nil {
		if dt := now.Sub(d.prevAt).Seconds(); dt > 0 {
			rate := func(k string) float64 { return max(0, float64(snap.Stats[k]-d.prev[k])/dt) }
			p.PagesPerSec, p.ItemsPerSec, p.ErrorsPerSec = rate(engine.StatResponses), rate(engine.StatItems), rate(engine.StatErrors)
		}
	}
	if d.prev == nil || snap.Stats[engine.StatResponses] != d.prev[engine.StatResponses] || d.lastProgress.IsZero() {
		d.lastProgress = now
	}
	d.prev, d.prevAt = snap.Stats, now
	d.history = append(d.history, p)
	cut := 0
	for cut < len(d.history) && d.history[cut].T < now.Add(-keep).UnixMilli() {
		cut++
	}
	d.history = d.history[cut:]

	queued := p.Ready + p.InFlight
	if snap.Paused {
		d.lastProgress = now // a paused crawl does not stall
	}
	switch idle := now.Sub(d.lastProgress); {
	case snap.Paused:
		st.Status = "paused"
	case queued > 0 && idle >= d.cfg.StallAfter:
		st.Status, st.Stalled, st.StalledFor = "stalled", true, idle.Seconds()
	case queued > 0:
		st.Status = "running"
	default:
		st.Status = "idle"
	}
	st.ETASeconds = eta(d.history, now)
	d.state = st
}

// etaWindow is how far back the frontier's shrinking is measured.
const etaWindow = time.Minute

// eta is how long the frontier (ready and in flight) takes to empty at the
// rate it shrank over the last etaWindow; 0 unless it shrank.
func eta(h []Point, now time.Time) float64 {
	if len(h) < 2 {
		return 0
	}
	last := h[len(h)-1]
	first := last
	for i := len(h) - 1; i >= 0 && h[i].T >= now.Add(-etaWindow).UnixMilli(); i-- {
		first = h[i]
	}
	dt := float64(last.T-first.T) / 1000
	shrunk := float64((first.Ready + first.InFlight) - (last.Ready + last.InFlight))
	if dt <= 0 || shrunk <= 0 || last.Ready+last.InFlight == 0 {
		return 0
	}
	return float64(last.Ready+last.InFlight) / (shrunk / dt)
}

// totals picks the headline figures out of stats.
func totals(stats map[string]int64) Totals {
	t := Totals{
		Pages: stats[engine.StatResponses], Items: stats[engine.StatItems], Errors: stats[engine.StatErrors],
		Retries: stats[engine.StatRetries], DeadLetters: stats[engine.StatDeadLetters],
		ErrorsByKind: map[string]int64{},
	}
	for k, v := range stats {
		if kind, ok := strings.CutPrefix(k, engine.StatErrorKindPrefix); ok {
			t.ErrorsByKind[kind] = v
		}
	}
	return t
}

// Current returns the latest state.
func (d *Dashboard) Current() State {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.state
}

// History returns the samples after since (Unix milliseconds).
func (d *Dashboard) History(since int64) []Point {
	d.mu.Lock()
	defer d.mu.Unlock()
	i := sort.Search(len(d.history), func(i int) bool { return d.history[i].T > since })
	return append([]Point{}, d.history[i:]...)
}

func (d *Dashboard) serveIndex(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'")
	if err := page.Execute(w, struct{ Crawl string }{d.cfg.Crawl}); err != nil {
		d.log.Debug("serving the page", "err", err)
	}
}

func (d *Dashboard) serveState(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, d.Current())
}

func (d *Dashboard) serveHistory(w http.ResponseWriter, r *http.Request) {
	var since int64
	if s := r.URL.Query().Get("since"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			http.Error(w, "since: want Unix milliseconds", http.StatusBadRequest)
			return
		}
		since = v
	}
	writeJSON(w, d.History(since))
}

func (d *Dashboard) serveRequeue(w http.ResponseWriter, r *http.Request) {
	rq, ok := d.src.(Requeuer)
	if !ok {
		http.Error(w, "this broker cannot requeue dead letters", http.StatusNotImplemented)
		return
	}
	n, err := rq.Requeue(r.Context())
	if err != nil {
		d.log.Warn("requeueing dead letters failed", "requeued", n, "err", err)
		http.Error(w, fmt.Sprintf("requeued %d dead letters, then: %s", n, oneLine(err.Error())), http.StatusBadGateway)
		return
	}
	d.Sample(r.Context())
	writeJSON(w, map[string]int{"requeued": n})
}

func (d *Dashboard) servePause(paused bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, ok := d.src.(Pauser)
		if !ok {
			http.Error(w, "this deployment cannot pause the crawl", http.StatusNotImplemented)
			return
		}
		if err := p.SetPaused(r.Context(), paused); err != nil {
			d.log.Warn("pausing or resuming the crawl failed", "paused", paused, "err", err)
			http.Error(w, oneLine(err.Error()), http.StatusBadGateway)
			return
		}
		d.Sample(r.Context())
		writeJSON(w, map[string]bool{"paused": paused})
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(v)
}

// oneLine makes an error one line, its URLs' passwords redacted.
func oneLine(s string) string {
	return engine.Redact(strings.ReplaceAll(strings.TrimSpace(s), "\n", "; "))
}
