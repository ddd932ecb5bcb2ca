package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/trawlhq/trawl/broker"
)

// WorkerStatus is what a worker records of itself in the crawl's
// metadata each time it announces itself (see broker.Presence), for a
// dashboard to show: a worker that stops announcing keeps its record, so
// that it shows as lost instead of vanishing.
type WorkerStatus struct {
	ID          string    `json:"id"`
	Host        string    `json:"host"`
	PID         int       `json:"pid"`
	Version     string    `json:"version"`
	Started     time.Time `json:"started"`
	Heartbeat   time.Time `json:"heartbeat"` // the worker's clock
	Pages       int64     `json:"pages"`     // responses, this worker's own
	Items       int64     `json:"items"`
	Errors      int64     `json:"errors"`
	InFlight    int64     `json:"in_flight"`
	PagesPerSec float64   `json:"pages_per_sec"` // since the previous heartbeat
	Stopped     bool      `json:"stopped"`       // left the crawl cleanly
	// Paused says the worker takes no new request: the crawl is paused
	// (SetPaused) and its receiver waits for resume.
	Paused bool `json:"paused"`
	// Hosts are this worker's busiest hosts, at most hostsInRecord (100)
	// of the hostTallyCap (1,000) it tallies, with the most pages first.
	Hosts []HostStatus `json:"hosts,omitempty"`
}

// Lost reports whether w stopped announcing itself without leaving: its
// last heartbeat is older than PresenceTTL at now.
func (w WorkerStatus) Lost(now time.Time) bool {
	return !w.Stopped && now.Sub(w.Heartbeat) > PresenceTTL
}

// workerKeyPrefix prefixes the Metadata keys of the workers' records,
// numbered from 0: a worker claims the first free number with
// CreateMeta, so that a reader finds every record without a listing
// (broker.Metadata has none) by reading keys in turn up to the first
// missing one.
const workerKeyPrefix = "worker."

// maxWorkerRecords bounds the records a crawl keeps (a worker started
// past it records nothing) and so a reader's reads.
const maxWorkerRecords = 1000

func workerKey(n int) string { return workerKeyPrefix + strconv.Itoa(n) }

// heartbeat is a worker's record and where it is kept.
type heartbeat struct {
	m      broker.Metadata
	key    string // "" until claimed
	status WorkerStatus
}

// newHeartbeat returns the record of this worker, named id.
func (c *Crawler) newHeartbeat(id string) *heartbeat {
	host, _ := os.Hostname()
	return &heartbeat{m: c.metadata(), status: WorkerStatus{
		ID: id, Host: host, PID: os.Getpid(), Version: buildVersion(), Started: time.Now(),
	}}
}

// beat writes this worker's record, claiming a key first; stopped marks
// it as having left. A failure is logged: the record is for watching, not
// for crawling.
func (c *Crawler) beat(ctx context.Context, h *heartbeat, stopped bool) {
	if h.m == nil {
		return
	}
	s := &h.status
	now := time.Now()
	pages := c.stats.Get(StatResponses)
	if !s.Heartbeat.IsZero() {
		if dt := now.Sub(s.Heartbeat).Seconds(); dt > 0 {
			s.PagesPerSec = float64(pages-s.Pages) / dt
		}
	}
	s.Heartbeat, s.Pages, s.Stopped = now, pages, stopped
	s.Items, s.Errors, s.InFlight = c.stats.Get(StatItems), c.stats.Get(StatErrors), c.stats.InFlight()
	s.Paused = c.pause.isParked()
	s.Hosts = c.hostsForRecord(ctx)
	data, err := json.Marshal(s)
	if err != nil {
		return
	}
	if h.key != "" {
		err = h.m.SetMeta(ctx, c.cfg.Name, h.key, data)
	} else {
		err = errors.New("no free worker record")
		for n := 0; n < maxWorkerRecords; n++ {
			e := h.m.CreateMeta(ctx, c.cfg.Name, workerKey(n), data)
			if errors.Is(e, broker.ErrExists) {
				continue
			}
			if err = e; err == nil {
				h.key = workerKey(n)
			}
			break
		}
	}
	if err != nil {
		c.log.Debug("recording this worker's status failed", "crawl", c.cfg.Name, "err", err)
	}
}

// Workers returns the records of crawl's workers kept in m (see
// WorkerStatus), in the order they joined; none where m keeps none.
func Workers(ctx context.Context, m broker.Metadata, crawl string) ([]WorkerStatus, error) {
	var out []WorkerStatus
	for n := 0; n < maxWorkerRecords; n++ {
		data, err := m.GetMeta(ctx, crawl, workerKey(n))
		if errors.Is(err, broker.ErrNotFound) {
			break
		}
		if err != nil {
			return out, fmt.Errorf("crawl %q: read worker %d: %w", crawl, n, err)
		}
		var w WorkerStatus
		if err := json.Unmarshal(data, &w); err != nil {
			continue // a later version's record, or garbage: not a worker shown
		}
		out = append(out, w)
	}
	return out, nil
}

// StoredSettings returns crawl's settings kept in m, or an error
// wrapping broker.ErrNotFound when it has none yet.
func StoredSettings(ctx context.Context, m broker.Metadata, crawl string) (Settings, error) {
	raw, err := m.GetMeta(ctx, crawl, settingsKey)
	if err != nil {
		return Settings{}, err
	}
	return DecodeSettings(raw)
}

// buildVersion is the main module's version and commit, as far as the
// binary knows them.
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " " + s.Value[:12]
		}
	}
	return v
}
