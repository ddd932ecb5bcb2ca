package local_test

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/trawlhq/trawl/dedup"
	"github.com/trawlhq/trawl/dedup/deduptest"
	"github.com/trawlhq/trawl/dedup/local"
)

func TestConformance(t *testing.T) {
	var mu sync.Mutex
	filters := map[*testing.T]*local.Filter{}
	deduptest.Run(t, deduptest.Config{
		// Workers of one crawl on one node share one filter.
		New: func(t *testing.T) dedup.Filter {
			mu.Lock()
			defer mu.Unlock()
			if f := filters[t]; f != nil {
				return f
			}
			f := newFilter(t, local.Config{
				Capacity: 1000, // small: the suite makes it grow
				FPRate:   0.001,
				Path:     filepath.Join(t.TempDir(), "dupefilter.bloom"),
			})
			filters[t] = f
			return f
		},
		FalsePositiveRate: 0.001,
	})
}

// newFilter returns a filter closed when the test ends.
func newFilter(t *testing.T, cfg local.Config) *local.Filter {
	t.Helper()
	f, err := local.New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return f
}

func randomFingerprints(r *rand.Rand, n int) []dedup.Fingerprint {
	fps := make([]dedup.Fingerprint, n)
	for i := range fps {
		binary.LittleEndian.PutUint64(fps[i][:8], r.Uint64())
		binary.LittleEndian.PutUint64(fps[i][8:], r.Uint64())
	}
	return fps
}

func add(t *testing.T, f *local.Filter, fps ...dedup.Fingerprint) []bool {
	t.Helper()
	isNew, err := f.Add(context.Background(), fps...)
	if err != nil {
		t.Fatalf("Add: %v", err)
	}
	return isNew
}

func count(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

func TestSaveLoadRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data", "dupefilter.bloom") // directory made on save
	cfg := local.Config{Capacity: 10_000, FPRate: 0.001, Path: path}
	r := rand.New(rand.NewPCG(5, 6))
	old := randomFingerprints(r, 2000)

	f, err := local.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	first := count(add(t, f, old[:1000]...))
	if first < 990 {
		t.Fatalf("%d of 1000 fingerprints new, want about all", first)
	}
	if err := f.Save(); err != nil {
		t.Fatalf("Save: %v", err)
	}
	added := count(add(t, f, old[1000:]...)) // after Save: saved by Close
	if err := f.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil || len(entries) != 1 {
		t.Errorf("data directory holds %v (%v), want only the filter file", entries, err)
	}

	g := newFilter(t, cfg)
	if got, want := g.Len(), uint(first+added); got != want {
		t.Errorf("loaded Len = %d, want %d", got, want)
	}
	if n := count(add(t, g, old...)); n != 0 {
		t.Errorf("after reload, %d of %d fingerprints added before reported new", n, len(old))
	}
	if n := count(add(t, g, randomFingerprints(r, 1000)...)); n < 990 {
		t.Errorf("after reload, %d of 1000 fresh fingerprints reported new, want about all", n)
	}
}

func TestNoFileStartsEmpty(t *testing.T) {
	f := newFilter(t, local.Config{Capacity: 1000, Path: filepath.Join(t.TempDir(), "missing")})
	if f.Len() != 0 {
		t.Errorf("Len = %d, want 0", f.Len())
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	cfg := local.Config{Capacity: 1000, FPRate: 0.01, Path: good}
	f, err := local.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	add(t, f, randomFingerprints(rand.New(rand.NewPCG(7, 8)), 100)...)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}

	flip := func(i int) []byte {
		d := append([]byte(nil), data...)
		d[i] ^= 0x10
		return d
	}
	for _, tc := range []struct {
		name    string
		content []byte
		cfg     local.Config
		want    error
	}{
		{"empty", []byte{}, cfg, local.ErrCorrupt},
		{"not a filter", []byte("hello, this is not a bloom filter at all, but it is long enough to have a header"), cfg, local.ErrCorrupt},
		{"truncated", data[:len(data)-10], cfg, local.ErrCorrupt},
		{"longer", append(append([]byte(nil), data...), 0), cfg, local.ErrCorrupt},
		{"bit flipped", flip(100), cfg, local.ErrCorrupt},
		{"checksum flipped", flip(len(data) - 1), cfg, local.ErrCorrupt},
		{"count flipped", flip(32), cfg, local.ErrCorrupt},
		{"layer count flipped", flip(40), cfg, local.ErrCorrupt},
		{"layer size flipped", flip(48 + 16), cfg, local.ErrCorrupt},
		{"other version", flip(8), cfg, local.ErrCorrupt},
		{"other rate", data, local.Config{Capacity: 1000, FPRate: 0.001}, local.ErrMismatch},
		{"defaults", data, local.Config{}, local.ErrMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name)
			if err := os.WriteFile(path, tc.content, 0o600); err != nil {
				t.Fatal(err)
			}
			tc.cfg.Path = path
			f, err := local.New(tc.cfg)
			if err == nil {
				f.Close()
				t.Fatalf("New over a %s file succeeded", tc.name)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("New over a %s file: %v; want an error wrapping %v", tc.name, err, tc.want)
			}
			t.Log(err)
		})
	}
}

func TestCloseSemantics(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "f")
	f, err := local.New(local.Config{Capacity: 1000, Path: path})
	if err != nil {
		t.Fatal(err)
	}
	fp := dedup.Fingerprint{1}
	add(t, f, fp)
	if err := f.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("Close did not save: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := f.Add(ctx, fp); !errors.Is(err, dedup.ErrClosed) {
		t.Errorf("Add after Close: %v, want ErrClosed", err)
	}
	if err := f.Purge(ctx); !errors.Is(err, dedup.ErrClosed) {
		t.Errorf("Purge after Close: %v, want ErrClosed", err)
	}
	if err := f.Save(); !errors.Is(err, dedup.ErrClosed) {
		t.Errorf("Save after Close: %v, want ErrClosed", err)
	}

	g, err := local.New(local.Config{Capacity: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Save(); err == nil {
		t.Error("Save without a path succeeded")
	}
	if err := g.Close(); err != nil {
		t.Errorf("Close without a path: %v", err)
	}
}

// TestSaveFailure makes saving impossible (a directory where the file
// goes): Save and Close fail, and the journal they leave behind gives the
// next filter every fingerprint.
func TestSaveFailure(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bloom")
	cfg := local.Config{Capacity: 1000, Path: path}
	f, err := local.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	fps := randomFingerprints(rand.New(rand.NewPCG(1, 2)), 100)
	add(t, f, fps[:50]...)
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := f.Save(); err == nil {
		t.Error("Save over a directory succeeded")
	}
	add(t, f, fps[50:]...)
	if err := f.Close(); err == nil {
		t.Error("Close that could not save returned nil")
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	g := newFilter(t, cfg)
	if n := count(add(t, g, fps...)); n != 0 {
		t.Errorf("after failed saves, %d of %d fingerprints forgotten", n, len(fps))
	}
}

func TestCancelledContext(t *testing.T) {
	f := newFilter(t, local.Config{Capacity: 1000})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := f.Add(ctx, dedup.Fingerprint{1}); !errors.Is(err, context.Canceled) {
		t.Errorf("Add with a cancelled context: %v, want context.Canceled", err)
	}
	if f.Len() != 0 {
		t.Errorf("Add with a cancelled context added: Len = %d", f.Len())
	}
}

func TestPurgeAndLen(t *testing.T) {
	f := newFilter(t, local.Config{Capacity: 1000, FPRate: 0.01})
	fps := randomFingerprints(rand.New(rand.NewPCG(9, 10)), 500)
	n := count(add(t, f, fps...))
	if f.Len() != uint(n) || n < 490 {
		t.Errorf("Len = %d after %d new of 500", f.Len(), n)
	}
	if r := f.EstimatedFPRate(); r <= 0 || r >= 0.01 {
		t.Errorf("EstimatedFPRate at half capacity = %v, want in (0, 0.01)", r)
	}
	if err := f.Purge(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f.Len() != 0 || f.EstimatedFPRate() != 0 {
		t.Errorf("after Purge: Len = %d, EstimatedFPRate = %v", f.Len(), f.EstimatedFPRate())
	}
	if n := count(add(t, f, fps...)); n != 500 {
		t.Errorf("after Purge, %d of 500 fingerprints new, want 500", n)
	}
}

// TestConcurrentAddAndSave adds overlapping sets from several goroutines
// while another saves: every fingerprint is new exactly once, and the last
// file written holds them all.
func TestConcurrentAddAndSave(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	cfg := local.Config{Capacity: 1000, FPRate: 0.0001, Path: path, JournalLimit: 4096} // grows and compacts
	f, err := local.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	fps := randomFingerprints(rand.New(rand.NewPCG(11, 12)), 20_000)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		trues = map[dedup.Fingerprint]int{}
		done  = make(chan struct{})
	)
	for w := range 4 {
		wg.Go(func() {
			// Worker w adds the fingerprints in [w*4000, w*4000+8000).
			part := fps[w*4000 : w*4000+8000]
			for len(part) > 0 {
				batch := part[:min(len(part), 64)]
				part = part[len(batch):]
				isNew, err := f.Add(context.Background(), batch...)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for i, b := range isNew {
					if b {
						trues[batch[i]]++
					}
				}
				mu.Unlock()
			}
		})
	}
	var saver sync.WaitGroup
	saver.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := f.Save(); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Wait()
	close(done)
	saver.Wait()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	distinct := 4*4000 + 4000
	total := 0
	for fp, c := range trues {
		if c > 1 {
			t.Errorf("fingerprint %v new %d times", fp, c)
		}
		total += c
	}
	if total > distinct || total < distinct-10 {
		t.Errorf("%d fingerprints new, want about %d", total, distinct)
	}
	g := newFilter(t, cfg)
	if n := count(add(t, g, fps[:distinct]...)); n != 0 {
		t.Errorf("reloaded filter: %d of %d fingerprints new", n, distinct)
	}
}

func TestValidate(t *testing.T) {
	for _, cfg := range []local.Config{
		{FPRate: 1},
		{FPRate: -0.1},
		{FPRate: math.NaN()},
		{Capacity: math.MaxUint},
		{Capacity: 1 << 34, FPRate: 1e-9},
	} {
		if err := cfg.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", cfg)
		}
		if _, err := local.New(cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
	if err := (local.Config{}).Validate(); err != nil {
		t.Errorf("Validate of the zero Config: %v", err)
	}
}

// BenchmarkAdd adds 1M random fingerprints, over and over, in batches of
// 64 to a default filter (0.1%): the first pass adds, later ones find
// duplicates.
func BenchmarkAdd(b *testing.B) {
	benchmarkAdd(b, local.Config{})
}

// BenchmarkAddJournal is BenchmarkAdd with a Path: every batch with a new
// fingerprint is written to the journal, which is compacted past 1 MiB.
func BenchmarkAddJournal(b *testing.B) {
	benchmarkAdd(b, local.Config{Path: filepath.Join(b.TempDir(), "f")})
}

func benchmarkAdd(b *testing.B, cfg local.Config) {
	const batch = 64
	f, err := local.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	fps := randomFingerprints(rand.New(rand.NewPCG(13, 14)), 1<<20)
	ctx := context.Background()
	i := 0
	start := time.Now()
	for b.Loop() {
		if _, err := f.Add(ctx, fps[i:i+batch]...); err != nil {
			b.Fatal(err)
		}
		i = (i + batch) % len(fps)
	}
	b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds(), "adds/s")
	b.ReportMetric(float64(f.SizeBytes())/float64(f.Len()), "bytes/fp")
}

// BenchmarkAddParallel is BenchmarkAdd from GOMAXPROCS goroutines at once.
func BenchmarkAddParallel(b *testing.B) {
	const batch = 64
	f, err := local.New(local.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	fps := randomFingerprints(rand.New(rand.NewPCG(15, 16)), 1<<20)
	var seed sync.Mutex
	next := 0
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		seed.Lock()
		i := next
		next += len(fps) / 8
		seed.Unlock()
		for pb.Next() {
			i %= len(fps) - batch
			if _, err := f.Add(context.Background(), fps[i:i+batch]...); err != nil {
				b.Error(err)
				return
			}
			i += batch
		}
	})
	b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds(), "adds/s")
}

// BenchmarkSave writes a filter of 1M fingerprints to disk.
func BenchmarkSave(b *testing.B) {
	f, err := local.New(local.Config{Path: filepath.Join(b.TempDir(), "f"), JournalLimit: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	add := randomFingerprints(rand.New(rand.NewPCG(17, 18)), 1_000_000)
	if _, err := f.Add(context.Background(), add...); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(f.SizeBytes()))
	for b.Loop() {
		if err := f.Save(); err != nil {
			b.Fatal(err)
		}
	}
}
