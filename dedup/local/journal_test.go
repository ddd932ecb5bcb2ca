package local_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trawlhq/trawl/dedup/local"
	"github.com/trawlhq/trawl/internal/syncbuf"
)

// crash copies the files in dir, as they are now, to a new directory and
// returns it: what a kill -9 at this moment would leave on disk. The filter
// writing dir goes on (its compactor may be saving); a file that vanishes
// during the copy means the copy mixes two moments, and it is taken again.
// The filter's Close affects dir only.
func crash(t *testing.T, dir string) string {
	t.Helper()
	for range 10 {
		dst := t.TempDir()
		if copyFiles(t, dir, dst) {
			return dst
		}
	}
	t.Fatalf("files in %s kept vanishing during 10 copies", dir)
	return ""
}

// copyFiles copies the files of dir to dst. It reports false if one
// vanished before it was read.
func copyFiles(t *testing.T, dir, dst string) bool {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			continue // a save under way; a kill leaves it behind, New ignores it
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return true
}

// newLogger returns a logger writing text to w.
func newLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, nil))
}

// journals returns the journal files in dir.
func journals(t *testing.T, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.journal.*"))
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// dirSize returns the total size of the files in dir.
func dirSize(t *testing.T, dir string) int64 {
	t.Helper()
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		total += info.Size()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return total
}

// TestKillKeepsEveryFingerprint adds batches, saves once midway, adds more
// and is "killed" (its files copied, no Close): a filter opened on the copy
// knows every fingerprint, those of the file and those of the journal, and
// one opened again after that still does (the journal was folded in).
func TestKillKeepsEveryFingerprint(t *testing.T) {
	dir := t.TempDir()
	cfg := local.Config{Capacity: 100, FPRate: 0.001, Path: filepath.Join(dir, "dupefilter.bloom"), JournalLimit: -1}
	f := newFilter(t, cfg)
	fps := randomFingerprints(rand.New(rand.NewPCG(21, 22)), 3000)
	for i := 0; i < len(fps); i += 30 {
		add(t, f, fps[i:i+30]...)
		if i == 900 {
			if err := f.Save(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(journals(t, dir)) == 0 {
		t.Fatal("no journal file beside the filter")
	}
	killed := crash(t, dir)

	cfg.Path = filepath.Join(killed, "dupefilter.bloom")
	g := newFilter(t, cfg)
	if g.Len() != f.Len() {
		t.Errorf("after the kill, Len = %d, want %d", g.Len(), f.Len())
	}
	if n := count(add(t, g, fps...)); n != 0 {
		t.Errorf("after the kill, %d of %d fingerprints reported new", n, len(fps))
	}
	if got := journals(t, killed); len(got) != 1 {
		t.Errorf("after opening, journal files %v; want the journals folded into the file and one new journal", got)
	}
	again := crash(t, killed)
	temp := filepath.Join(again, "dupefilter.bloom.tmp-123") // a save cut short
	if err := os.WriteFile(temp, []byte("half a filter"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Path = filepath.Join(again, "dupefilter.bloom")
	h := newFilter(t, cfg)
	if n := count(add(t, h, fps...)); n != 0 {
		t.Errorf("after a second kill, %d of %d fingerprints reported new", n, len(fps))
	}
	if _, err := os.Stat(temp); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the temporary file of a save cut short is still there (%v)", err)
	}
}

// TestTornTail cuts the journal inside its last record, as a kill during
// the write would: the filter opens, knows every earlier batch, logs the
// torn record, and the journal goes on working.
func TestTornTail(t *testing.T) {
	fps := randomFingerprints(rand.New(rand.NewPCG(23, 24)), 100)
	for _, tc := range []struct {
		name string
		cut  func([]byte) []byte
	}{
		{"cut in the fingerprints", func(b []byte) []byte { return b[:len(b)-5] }},
		{"cut in the record header", func(b []byte) []byte { return b[:len(b)-10*16-7] }},
		{"zeros after the end", func(b []byte) []byte { return append(b[:len(b)-10*16-12], make([]byte, 4096)...) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var logs syncbuf.Buffer
			cfg := local.Config{Capacity: 1000, Path: filepath.Join(dir, "f"), JournalLimit: -1}
			f := newFilter(t, cfg)
			for i := 0; i < len(fps); i += 10 {
				add(t, f, fps[i:i+10]...)
			}
			killed := crash(t, dir)
			js := journals(t, killed)
			if len(js) != 1 {
				t.Fatalf("journal files %v, want 1", js)
			}
			data, err := os.ReadFile(js[0])
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(js[0], tc.cut(data), 0o600); err != nil {
				t.Fatal(err)
			}

			cfg.Path = filepath.Join(killed, "f")
			cfg.Logger = newLogger(&logs)
			g := newFilter(t, cfg)
			if n := count(add(t, g, fps[:90]...)); n != 0 {
				t.Errorf("%d of the 90 fingerprints before the torn record reported new", n)
			}
			if !strings.Contains(logs.String(), "torn record") {
				t.Errorf("the torn record was not logged:\n%s", logs.String())
			}
			// The last batch was lost with its record: it is new again, and
			// the journal records it.
			if n := count(add(t, g, fps[90:]...)); n != 10 {
				t.Errorf("%d of the 10 fingerprints of the torn record reported new, want 10", n)
			}
			cfg.Path = filepath.Join(crash(t, killed), "f")
			cfg.Logger = nil
			h := newFilter(t, cfg)
			if n := count(add(t, h, fps...)); n != 0 {
				t.Errorf("after a second kill, %d of %d fingerprints reported new", n, len(fps))
			}
		})
	}
}

// TestJournalCorruption damages a record that is followed by others: that
// is not a torn write but a damaged file, and New refuses it.
func TestJournalCorruption(t *testing.T) {
	dir := t.TempDir()
	cfg := local.Config{Capacity: 1000, Path: filepath.Join(dir, "f"), JournalLimit: -1}
	f := newFilter(t, cfg)
	fps := randomFingerprints(rand.New(rand.NewPCG(25, 26)), 30)
	for i := 0; i < len(fps); i += 10 {
		add(t, f, fps[i:i+10]...)
	}
	killed := crash(t, dir)
	js := journals(t, killed)
	data, err := os.ReadFile(js[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		at   int
	}{
		{"header", 3},
		{"record count", 12 + 1},
		{"record fingerprint", 12 + 12 + 5},
		{"second record header", 12 + 12 + 160 + 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := append([]byte(nil), data...)
			d[tc.at] ^= 0x40
			if err := os.WriteFile(js[0], d, 0o600); err != nil {
				t.Fatal(err)
			}
			cfg.Path = filepath.Join(killed, "f")
			g, err := local.New(cfg)
			if err == nil {
				g.Close()
				t.Fatal("New over a damaged journal succeeded")
			}
			if !errors.Is(err, local.ErrCorrupt) {
				t.Fatalf("New over a damaged journal: %v; want an error wrapping ErrCorrupt", err)
			}
			t.Log(err)
		})
	}
}

// TestPurgeSurvivesKill purges, adds others and is killed: the purged
// fingerprints stay forgotten, the later ones known.
func TestPurgeSurvivesKill(t *testing.T) {
	dir := t.TempDir()
	cfg := local.Config{Capacity: 1000, Path: filepath.Join(dir, "f"), JournalLimit: -1}
	f := newFilter(t, cfg)
	fps := randomFingerprints(rand.New(rand.NewPCG(27, 28)), 200)
	add(t, f, fps[:100]...)
	if err := f.Save(); err != nil {
		t.Fatal(err)
	}
	if err := f.Purge(context.Background()); err != nil {
		t.Fatal(err)
	}
	add(t, f, fps[100:]...)
	cfg.Path = filepath.Join(crash(t, dir), "f")
	g := newFilter(t, cfg)
	if n := count(add(t, g, fps[100:]...)); n != 0 {
		t.Errorf("%d of 100 fingerprints added after the purge reported new", n)
	}
	if n := count(add(t, g, fps[:100]...)); n < 99 {
		t.Errorf("%d of 100 purged fingerprints reported new, want about all", n)
	}
}

// TestSmallCrawlIsSmall adds 300 fingerprints one at a time, as a 300-page
// crawl would: the files take a few kilobytes, killed or closed.
func TestSmallCrawlIsSmall(t *testing.T) {
	dir := t.TempDir()
	f, err := local.New(local.Config{Path: filepath.Join(dir, "dupefilter.bloom")}) // the defaults
	if err != nil {
		t.Fatal(err)
	}
	for _, fp := range randomFingerprints(rand.New(rand.NewPCG(29, 30)), 300) {
		add(t, f, fp)
	}
	const limit = 64 << 10
	if size := dirSize(t, dir); size > limit {
		t.Errorf("before Close, the files take %d bytes, want at most %d", size, limit)
	} else {
		t.Logf("before Close: %d bytes", size)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if size := dirSize(t, dir); size > limit {
		t.Errorf("after Close, the files take %d bytes, want at most %d", size, limit)
	} else {
		t.Logf("after Close: %d bytes", size)
	}
}

// TestJournalCompacts sets a small journal limit and adds much more: the
// filter saves itself and drops old journals without being asked, and a
// kill after that loses nothing.
func TestJournalCompacts(t *testing.T) {
	dir := t.TempDir()
	cfg := local.Config{Capacity: 1000, Path: filepath.Join(dir, "f"), JournalLimit: 16 << 10}
	f := newFilter(t, cfg)
	fps := randomFingerprints(rand.New(rand.NewPCG(31, 32)), 20_000)
	for i := 0; i < len(fps); i += 50 {
		add(t, f, fps[i:i+50]...)
	}
	// 20k fingerprints make 320 KB of journal; the compactor runs behind
	// Add, so wait for it to catch up, boundedly.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var size int64
		for _, j := range journals(t, dir) {
			if info, err := os.Stat(j); err == nil {
				size += info.Size()
			}
		}
		if size <= 2*cfg.JournalLimit {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("journals still take %d bytes after 10s, limit %d", size, cfg.JournalLimit)
		}
		time.Sleep(10 * time.Millisecond) // polling a file size, bounded by the deadline
	}
	if _, err := os.Stat(cfg.Path); err != nil {
		t.Fatalf("the filter never saved itself: %v", err)
	}
	cfg.Path = filepath.Join(crash(t, dir), "f")
	g := newFilter(t, cfg)
	if n := count(add(t, g, fps...)); n != 0 {
		t.Errorf("after compaction and a kill, %d of %d fingerprints reported new", n, len(fps))
	}
}
