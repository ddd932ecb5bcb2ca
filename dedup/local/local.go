package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"

	"github.com/trawlhq/trawl/dedup"
)

// Defaults for the zero values of Config.
const (
	DefaultCapacity = 1024
	DefaultFPRate   = 1e-6
)

// maxBits bounds the size of one layer (8 GiB of bits), so that a typo in
// Capacity or FPRate is an error rather than an out-of-memory crash.
const maxBits = 1 << 36

// minJournalLimit is the journal size below which a filter never saves
// itself on its own.
const minJournalLimit = 1 << 20

// Config configures a Filter. The zero value is an unpersisted filter that
// starts at 1024 fingerprints (about 4 KB), grows as needed and keeps its
// false-positive rate under one in a million at any size.
type Config struct {
	// Capacity is the number of fingerprints the first layer holds; 0
	// means DefaultCapacity. When a layer is full the filter adds one
	// twice as large, so Capacity only sets where growth starts: a larger
	// value spends memory up front to save a few layers.
	Capacity uint
	// FPRate bounds the false-positive rate, in (0, 1), at any number of
	// fingerprints; 0 means DefaultFPRate.
	FPRate float64
	// Path is the file the filter is loaded from, if it exists, and saved
	// to. "" means the filter is not persisted. Fingerprints added between
	// saves go to journal files beside it (Path.journal.N), so that they
	// survive a crash.
	Path string
	// JournalLimit is the journal size in bytes past which the filter
	// saves itself to Path and starts a new journal. 0 means the larger of
	// 1 MiB and the size of the filter's bits; negative means never (only
	// Save and Close write Path).
	JournalLimit int64
	// Logger receives lifecycle messages (load, save, growth, torn
	// journal records); nil discards them.
	Logger *slog.Logger
}

// withDefaults returns c with zero values replaced by defaults.
func (c Config) withDefaults() Config {
	if c.Capacity == 0 {
		c.Capacity = DefaultCapacity
	}
	if c.FPRate == 0 {
		c.FPRate = DefaultFPRate
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports every problem with c at once.
func (c Config) Validate() error {
	var errs []error
	if c.FPRate < 0 || c.FPRate >= 1 || math.IsNaN(c.FPRate) {
		errs = append(errs, fmt.Errorf("local filter: false-positive rate %v is not in (0, 1)", c.FPRate))
	} else if d := c.withDefaults(); d.Capacity > maxBits {
		errs = append(errs, fmt.Errorf("local filter: capacity %d is too large", c.Capacity))
	} else if m := layerBits(uint64(d.Capacity), layerRate(d.FPRate, 0)); m > maxBits {
		errs = append(errs, fmt.Errorf("local filter: capacity %d at false-positive rate %v needs %d bits, more than the limit of %d",
			d.Capacity, d.FPRate, m, uint64(maxBits)))
	}
	return errors.Join(errs...)
}

// Filter is a scalable Bloom filter of fingerprints held in memory, with
// a journal on disk when it has a Path. It implements dedup.Filter and
// dedup.Checker; it is safe for concurrent use.
type Filter struct {
	cfg Config // with defaults
	log *slog.Logger

	saveMu sync.Mutex // serializes Save and Close, so files are written in order

	mu        sync.Mutex // guards the fields below
	layers    []*layer   // oldest first; only the last one is added to; nil once closed
	n         uint64     // fingerprints reported new
	closed    bool
	jr        *journal // nil without Path
	compactAt int64    // journal size past which the compactor is woken

	compact  chan struct{} // wakes the compactor; buffered, sends never block
	stop     chan struct{} // closed by Close: the compactor returns
	stopped  chan struct{} // closed by the compactor when it returns
	stopOnce sync.Once
}

// New returns a filter whose false-positive rate stays under cfg.FPRate.
// If cfg.Path names an existing file, the filter is loaded from it, then
// the journal files beside it are replayed; a torn record at the end of a
// journal (a write cut short by a crash) is ignored and logged. A file or
// journal that is not a filter's or is damaged is an error wrapping
// ErrCorrupt, a file made for another FPRate an error wrapping
// ErrMismatch. With a Path, the filter runs a goroutine that saves it when
// the journal passes cfg.JournalLimit, until Close.
func New(cfg Config) (*Filter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	f := &Filter{cfg: cfg, log: cfg.Logger.With("backend", "local")}
	if cfg.Path == "" {
		f.layers = []*layer{f.firstLayer()}
		return f, nil
	}
	if err := f.open(); err != nil {
		return nil, fmt.Errorf("local filter: load %q: %w", cfg.Path, err)
	}
	f.compact = make(chan struct{}, 1)
	f.stop = make(chan struct{})
	f.stopped = make(chan struct{})
	go f.compactor()
	return f, nil
}

// firstLayer returns an empty first layer.
func (f *Filter) firstLayer() *layer {
	return newLayer(uint64(f.cfg.Capacity), layerRate(f.cfg.FPRate, 0))
}

// open loads the file and replays the journals, saves the result if there
// were journals, and starts a new journal.
func (f *Filter) open() error {
	path := f.cfg.Path
	removeTemps(path, f.log)
	s, err := readFile(path)
	switch {
	case errors.Is(err, errNoFile):
		f.layers = []*layer{f.firstLayer()}
	case err != nil:
		return err
	case s.fpRate != f.cfg.FPRate:
		return fmt.Errorf("%w: the file holds a filter for false-positive rate %v, the configuration asks for %v "+
			"(use the same rate, or start a fresh filter)", ErrMismatch, s.fpRate, f.cfg.FPRate)
	default:
		f.layers, f.n = s.layers, s.n
		if s.version == 1 {
			f.log.Info("dedup filter file is in format 1 (fixed size); it is kept as the first layer and rewritten in format 2 on the next save",
				"path", path)
		}
	}
	gens, err := journalFiles(path)
	if err != nil {
		return err
	}
	records := 0
	isNew := make([]bool, 0, 64)
	for _, gen := range gens {
		r, torn, err := replayJournal(path, gen, func(fps []dedup.Fingerprint) {
			if fps == nil {
				f.reset()
				return
			}
			isNew = append(isNew[:0], make([]bool, len(fps))...)
			_ = f.addLocked(fps, isNew, nil) // no journal: cannot fail
		})
		if err != nil {
			return err
		}
		if torn {
			f.log.Warn("dedup filter journal ends in a torn record (a write cut short by a crash); ignored",
				"journal", journalName(path, gen))
		}
		records += r
	}
	next := uint64(1)
	if len(gens) > 0 {
		next = gens[len(gens)-1] + 1
		// Fold the journals into the file now, so that they do not pile up
		// over restarts.
		if err := f.save(f.snapshotLocked()); err != nil {
			f.log.Warn("dedup filter journals kept: saving the filter failed", "err", err)
		} else {
			f.removeJournals(gens[len(gens)-1])
		}
	}
	if f.jr, err = createJournal(path, next); err != nil {
		return err
	}
	f.setCompactAt()
	f.log.Info("dedup filter loaded", "path", path, "fingerprints", f.n, "layers", len(f.layers),
		"bytes", f.sizeBytesLocked(), "journal_records", records)
	return nil
}

// String names the filter for messages: its file, or "in memory".
func (f *Filter) String() string {
	if f.cfg.Path == "" {
		return "local filter in memory"
	}
	return "local filter " + f.cfg.Path
}

// Add inserts fingerprints and reports, for each, whether it was new. The
// batch is one atomic test-and-set: a fingerprint repeated within it is new
// at most once. A fingerprint never added may be reported as seen (a false
// positive, at a rate under FPRate); one added before is never reported as
// new. With a Path, the new fingerprints are appended to the journal in
// one write before Add returns; if that write fails, Add fails and the
// filter is unchanged. Add fails if ctx is already done, or with an error
// wrapping dedup.ErrClosed after Close.
func (f *Filter) Add(ctx context.Context, fps ...dedup.Fingerprint) ([]bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("local filter: add: %w", err)
	}
	isNew := make([]bool, len(fps))
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, fmt.Errorf("local filter: add: %w", dedup.ErrClosed)
	}
	if err := f.addLocked(fps, isNew, f.jr); err != nil {
		return nil, fmt.Errorf("local filter: add: %w", err)
	}
	if f.jr != nil && f.jr.size > f.compactAt {
		select {
		case f.compact <- struct{}{}:
		default:
		}
	}
	return isNew, nil
}

// Contains reports, for each fingerprint, whether some layer holds it,
// without adding any: true for every fingerprint added before, and for a
// never-added one at a rate under FPRate. It implements dedup.Checker. It
// fails if ctx is already done, or with an error wrapping dedup.ErrClosed
// after Close.
func (f *Filter) Contains(ctx context.Context, fps ...dedup.Fingerprint) ([]bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("local filter: contains: %w", err)
	}
	in := make([]bool, len(fps))
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, fmt.Errorf("local filter: contains: %w", dedup.ErrClosed)
	}
	for i := range fps {
		h1, h2 := baseHashes(&fps[i])
		in[i] = f.containsIn(f.layers, h1, h2)
	}
	return in, nil
}

// addLocked is Add with f.mu held. It tests every fingerprint against all
// layers, writes those no layer holds to jr (if not nil), then sets them in
// the last layer, adding a layer whenever one fills up.
func (f *Filter) addLocked(fps []dedup.Fingerprint, isNew []bool, jr *journal) error {
	candidates := 0
	for i := range fps {
		h1, h2 := baseHashes(&fps[i])
		if !f.containsIn(f.layers, h1, h2) {
			isNew[i] = true
			candidates++
		}
	}
	if candidates == 0 {
		return nil
	}
	if jr != nil {
		// A fingerprint repeated in the batch is written twice; replaying
		// it twice does no harm.
		if err := jr.add(fps, isNew); err != nil {
			clear(isNew)
			return err
		}
	}
	first := len(f.layers) - 1
	for i := range fps {
		if !isNew[i] {
			continue
		}
		h1, h2 := baseHashes(&fps[i])
		last := len(f.layers) - 1
		if f.layers[last].full() { // filled by this batch, or loaded full
			f.grow()
			last = len(f.layers) - 1
		}
		// Layers filled during this batch were tested before the earlier
		// fingerprints of the batch went in: test them again.
		if last > first && f.containsIn(f.layers[first:last], h1, h2) {
			isNew[i] = false
			continue
		}
		l := f.layers[last]
		if !l.testAndSet(h1, h2) {
			isNew[i] = false
			continue
		}
		l.n++
		f.n++
	}
	return nil
}

// containsIn reports whether any of layers holds the fingerprint, newest
// first (a duplicate is most often a recent fingerprint).
func (f *Filter) containsIn(layers []*layer, h1, h2 uint64) bool {
	for i := len(layers) - 1; i >= 0; i-- {
		if layers[i].contains(h1, h2) {
			return true
		}
	}
	return false
}

// grow adds a layer twice as large as the last one at a tighter
// false-positive rate (see growth and tightening), unless there are
// maxLayers already (unreachable in practice: the last layer then fills
// on).
func (f *Filter) grow() {
	last := f.layers[len(f.layers)-1]
	if len(f.layers) >= maxLayers {
		return
	}
	capacity, rate := last.capacity*growth, layerRate(f.cfg.FPRate, len(f.layers))
	if layerBits(capacity, rate) > maxBits {
		capacity = last.capacity
	}
	f.layers = append(f.layers, newLayer(capacity, rate))
	f.setCompactAt()
	f.log.Debug("dedup filter grew", "layers", len(f.layers), "capacity", capacity, "fp_rate", rate,
		"fingerprints", f.n, "bytes", f.sizeBytesLocked())
}

// reset empties the filter; f.mu is held.
func (f *Filter) reset() {
	f.layers = []*layer{f.firstLayer()}
	f.n = 0
	f.setCompactAt()
}

// setCompactAt sets the journal size past which the filter saves itself.
func (f *Filter) setCompactAt() {
	switch {
	case f.cfg.JournalLimit > 0:
		f.compactAt = f.cfg.JournalLimit
	case f.cfg.JournalLimit < 0:
		f.compactAt = math.MaxInt64
	default:
		f.compactAt = max(minJournalLimit, int64(f.sizeBytesLocked()))
	}
}

// compactor saves the filter whenever Add finds the journal past its
// limit, until Close. It is owned by the filter: Close stops it and waits.
func (f *Filter) compactor() {
	defer close(f.stopped)
	for {
		select {
		case <-f.stop:
			return
		case <-f.compact:
			if err := f.Save(); err != nil && !errors.Is(err, dedup.ErrClosed) {
				f.log.Warn("dedup filter not compacted: the journal keeps growing", "err", err)
			}
		}
	}
}

// Purge forgets every fingerprint; ctx is not used. With a Path, the purge is written to the journal and synced before
// the filter is emptied, so that a crash does not bring the fingerprints
// back.
func (f *Filter) Purge(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return fmt.Errorf("local filter: purge: %w", dedup.ErrClosed)
	}
	if f.jr != nil {
		err := f.jr.purge()
		if err == nil {
			err = f.jr.file.Sync()
		}
		if err != nil {
			return fmt.Errorf("local filter: purge: %w", err)
		}
		if f.cfg.JournalLimit >= 0 {
			select { // the file can shrink now
			case f.compact <- struct{}{}:
			default:
			}
		}
	}
	f.reset()
	return nil
}

// Len returns the number of fingerprints Add reported as new since the
// filter was created or purged, including those loaded from its file.
func (f *Filter) Len() uint {
	f.mu.Lock()
	defer f.mu.Unlock()
	return uint(f.n)
}

// SizeBytes returns the memory the filter's bits take; it grows with Len.
func (f *Filter) SizeBytes() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sizeBytesLocked()
}

func (f *Filter) sizeBytesLocked() uint64 {
	var b uint64
	for _, l := range f.layers {
		b += l.sizeBytes()
	}
	return b
}

// EstimatedFPRate returns the false-positive rate expected for a
// fingerprint never added, given how full each layer is: the chance that
// at least one layer claims it.
func (f *Filter) EstimatedFPRate() float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	none := 1.0
	for _, l := range f.layers {
		none *= 1 - l.estimatedFPRate()
	}
	return 1 - none
}

// Save writes the filter to Config.Path atomically (a temporary file in
// the same directory, synced, then renamed over the old file) and deletes
// the journal files it makes redundant. Adds may go on while it writes:
// they go to a new journal file, started when Save takes its copy. It
// fails if the filter has no Path or is closed.
func (f *Filter) Save() error {
	if f.cfg.Path == "" {
		return errors.New("local filter: save: no path configured")
	}
	f.saveMu.Lock()
	defer f.saveMu.Unlock()
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return fmt.Errorf("local filter: save: %w", dedup.ErrClosed)
	}
	s := f.snapshotLocked()
	for i, l := range s.layers {
		s.layers[i] = l.clone()
	}
	old := f.jr
	jr, err := createJournal(f.cfg.Path, old.gen+1)
	if err != nil {
		f.mu.Unlock()
		return fmt.Errorf("local filter: save: start a new journal: %w", err)
	}
	f.jr = jr
	f.mu.Unlock()
	if err := old.close(false); err != nil {
		f.log.Warn("dedup filter journal not closed", "err", err)
	}
	if err := f.save(s); err != nil {
		return err // the journals stay: the next New replays them
	}
	f.removeJournals(old.gen)
	return nil
}

// Close saves the filter if it has a Path, then releases it. Later calls
// return nil; Add, Purge and Save after Close fail with dedup.ErrClosed. If
// saving fails the filter is closed all the same; the old file and the
// journal, synced, are left for the next New.
func (f *Filter) Close() error {
	f.stopOnce.Do(func() {
		if f.stop != nil {
			close(f.stop)
			<-f.stopped
		}
	})
	f.saveMu.Lock()
	defer f.saveMu.Unlock()
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	s, jr := f.snapshotLocked(), f.jr
	f.layers, f.jr = nil, nil
	f.mu.Unlock()
	if jr == nil {
		return nil
	}
	jerr := jr.close(true)
	if err := f.save(s); err != nil {
		if jerr != nil {
			err = errors.Join(err, fmt.Errorf("local filter: journal: %w", jerr))
		}
		return err
	}
	f.removeJournals(jr.gen)
	return nil
}

// snapshotLocked returns the filter's state, sharing its layers.
func (f *Filter) snapshotLocked() snapshot {
	return snapshot{
		capacity: uint64(f.cfg.Capacity),
		fpRate:   f.cfg.FPRate,
		n:        f.n,
		layers:   append([]*layer(nil), f.layers...),
	}
}

// save writes s to the file and logs the outcome.
func (f *Filter) save(s snapshot) error {
	if err := writeFile(f.cfg.Path, s); err != nil {
		f.log.Error("dedup filter not saved", "path", f.cfg.Path, "err", err)
		return fmt.Errorf("local filter: save %q: %w", f.cfg.Path, err)
	}
	f.log.Info("dedup filter saved", "path", f.cfg.Path, "fingerprints", s.n, "layers", len(s.layers))
	return nil
}

// removeJournals deletes the journal files up to generation gen, which
// the file now holds. A file that cannot be deleted is only logged: it is
// replayed, harmlessly, by the next New.
func (f *Filter) removeJournals(gen uint64) {
	gens, err := journalFiles(f.cfg.Path)
	if err != nil {
		f.log.Warn("dedup filter journals not removed", "err", err)
		return
	}
	for _, g := range gens {
		if g > gen {
			break
		}
		if err := removeFile(journalName(f.cfg.Path, g)); err != nil {
			f.log.Warn("dedup filter journal not removed", "err", err)
		}
	}
}

var _ interface {
	dedup.Filter
	dedup.Checker
	io.Closer
} = (*Filter)(nil)
