package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"
)

// The saved history is a ring of HistorySlots segments, each the points of
// segmentLen of wall time (one a second: about 300 points, 15.2 KiB of
// JSON with seven-digit queues and four-digit rates), in slot (segment
// start / segmentLen) mod HistorySlots: the segments of the last hour and
// the one being filled, so that the store holds about HistorySlots × 16
// KiB (about 210 KiB) at most, whatever the crawl's length. Every saveEvery the dashboard saves the segments its new points
// fall in (one, or two when a segment ended meanwhile): a restarted
// dashboard loses at most saveEvery of history, at the resolution it was
// sampled.
const (
	segmentLen = 5 * time.Minute
	// HistorySlots is how many slots a HistoryStore holds.
	HistorySlots = int(keep/segmentLen) + 1
	// saveEvery is how often the history is saved to a HistoryStore.
	saveEvery = 2 * time.Second
)

// ErrNoHistory is returned by a HistoryStore that holds none yet in a slot.
var ErrNoHistory = errors.New("dashboard: no saved history")

// segment is a slot's value: the points of one segmentLen, each as
// [ms after Start, pages/s ×100, items/s ×100, errors/s ×100, ready,
// in flight, delayed, dead], integers only to keep it small.
type segment struct {
	Start  int64      `json:"start"` // Unix milliseconds, a multiple of segmentLen
	Points [][8]int64 `json:"points"`
}

func segmentOf(t int64) int64 { return t - t%segmentLen.Milliseconds() }

func slotOf(start int64) int { return int(start / segmentLen.Milliseconds() % int64(HistorySlots)) }

func centi(f float64) int64 { return int64(math.Round(f * 100)) }

// encodeSegment encodes the points of h in the segment that starts at start.
func encodeSegment(h []Point, start int64) ([]byte, error) {
	end := start + segmentLen.Milliseconds()
	i := sort.Search(len(h), func(i int) bool { return h[i].T >= start })
	seg := segment{Start: start, Points: [][8]int64{}}
	for ; i < len(h) && h[i].T < end; i++ {
		p := h[i]
		seg.Points = append(seg.Points, [8]int64{p.T - start, centi(p.PagesPerSec), centi(p.ItemsPerSec), centi(p.ErrorsPerSec),
			p.Ready, p.InFlight, p.Delayed, p.Dead})
	}
	return json.Marshal(seg)
}

// decodeSegment decodes a slot's value.
func decodeSegment(data []byte) ([]Point, error) {
	var seg segment
	if err := json.Unmarshal(data, &seg); err != nil {
		return nil, err
	}
	out := make([]Point, 0, len(seg.Points))
	for _, v := range seg.Points {
		out = append(out, Point{T: seg.Start + v[0], PagesPerSec: float64(v[1]) / 100, ItemsPerSec: float64(v[2]) / 100,
			ErrorsPerSec: float64(v[3]) / 100, Ready: v[4], InFlight: v[5], Delayed: v[6], Dead: v[7]})
	}
	return out, nil
}

// save writes the segments of the points recorded since the last save,
// every saveEvery, when the source is a HistoryStore.
func (d *Dashboard) save(ctx context.Context, now time.Time) {
	hs, ok := d.src.(HistoryStore)
	if !ok {
		return
	}
	type write struct {
		slot int
		data []byte
	}
	var writes []write
	var err error
	d.mu.Lock()
	if now.Sub(d.lastSaved) >= saveEvery && len(d.history) > 0 {
		d.lastSaved = now
		last := d.history[len(d.history)-1].T
		from := max(segmentOf(d.savedUpTo), segmentOf(d.history[0].T))
		for start := from; start <= last && err == nil; start += segmentLen.Milliseconds() {
			var data []byte
			data, err = encodeSegment(d.history, start)
			writes = append(writes, write{slotOf(start), data})
		}
		d.savedUpTo = last
	}
	d.mu.Unlock()
	for _, w := range writes {
		if err != nil {
			break
		}
		err = hs.SaveHistory(ctx, w.slot, w.data)
	}
	if err != nil && ctx.Err() == nil {
		d.log.Warn("saving the dashboard's history failed", "err", err)
	}
}

// load reads the saved history of the hour before now, if any, before the
// points sampled so far.
func (d *Dashboard) load(ctx context.Context, now time.Time) {
	hs, ok := d.src.(HistoryStore)
	if !ok {
		return
	}
	from := now.Add(-keep).UnixMilli()
	var h []Point
	for slot := range HistorySlots {
		data, err := hs.LoadHistory(ctx, slot)
		if ctx.Err() != nil {
			// Stopped: what was cut short did not fail.
			return
		}
		if errors.Is(err, ErrNoHistory) {
			continue
		}
		if err == nil {
			var ps []Point
			if ps, err = decodeSegment(data); err != nil {
				err = fmt.Errorf("slot %d is unreadable: %w", slot, err)
			}
			for _, p := range ps {
				if p.T >= from {
					h = append(h, p)
				}
			}
		}
		if err != nil {
			d.log.Warn("loading the dashboard's history failed; going on without that part", "err", err)
		}
	}
	sort.Slice(h, func(i, j int) bool { return h[i].T < h[j].T })
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.history) > 0 {
		first := d.history[0].T
		h = h[:sort.Search(len(h), func(i int) bool { return h[i].T >= first })]
	}
	if len(h) > 0 {
		d.savedUpTo = h[len(h)-1].T
	}
	d.history = append(h, d.history...)
}
