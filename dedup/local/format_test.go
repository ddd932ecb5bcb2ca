package local

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/trawlhq/trawl/dedup"
)

// writeV1 writes l as a format-1 file, the fixed-size filter of trawl
// before filters grew.
func writeV1(t *testing.T, path string, l *layer) {
	t.Helper()
	b := []byte(fileMagic)
	b = binary.LittleEndian.AppendUint32(b, 1)
	b = binary.LittleEndian.AppendUint32(b, schemeDoubleHashing)
	b = binary.LittleEndian.AppendUint64(b, l.capacity)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(l.fpRate))
	b = binary.LittleEndian.AppendUint64(b, l.m)
	b = binary.LittleEndian.AppendUint64(b, l.k)
	b = binary.LittleEndian.AppendUint64(b, l.n)
	for _, w := range l.words {
		b = binary.LittleEndian.AppendUint64(b, w)
	}
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func randomFPs(seed uint64, n int) []dedup.Fingerprint {
	r := rand.New(rand.NewPCG(seed, 1))
	fps := make([]dedup.Fingerprint, n)
	for i := range fps {
		binary.LittleEndian.PutUint64(fps[i][:8], r.Uint64())
		binary.LittleEndian.PutUint64(fps[i][8:], r.Uint64())
	}
	return fps
}

// TestReadsFormat1 opens a file written by the fixed-size filter: its
// fingerprints are known, it becomes the first layer, the filter grows
// past it, and Close rewrites the file in the current format.
func TestReadsFormat1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dupefilter.bloom")
	old := newLayer(500, 0.01)
	old.scheme = schemeDoubleHashing // the scheme of format 1
	fps := randomFPs(1, 1500)
	for i := range fps[:500] {
		if old.testAndSet(baseHashes(&fps[i])) {
			old.n++
		}
	}
	writeV1(t, path, old)

	if _, err := New(Config{Path: path, FPRate: 0.001}); !errors.Is(err, ErrMismatch) {
		t.Errorf("New with another rate over a format-1 file: %v, want ErrMismatch", err)
	}
	cfg := Config{Path: path, FPRate: 0.01}
	f, err := New(cfg)
	if err != nil {
		t.Fatalf("New over a format-1 file: %v", err)
	}
	if f.Len() != uint(old.n) {
		t.Errorf("Len = %d, want the file's %d", f.Len(), old.n)
	}
	isNew, err := f.Add(context.Background(), fps...)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range isNew[:500] {
		if b {
			t.Fatalf("fingerprint %d of the format-1 file reported new", i)
		}
	}
	if len(f.layers) < 2 || f.layers[0].capacity != 500 {
		t.Errorf("layers %d, first of capacity %d; want the old filter first and the filter grown past it", len(f.layers), f.layers[0].capacity)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := readFile(path)
	if err != nil || s.version != fileVersion {
		t.Fatalf("after Close, file version %d (%v), want %d", s.version, err, fileVersion)
	}
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	isNew, err = g.Add(context.Background(), fps...)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range isNew {
		if b {
			t.Fatalf("after rewriting, fingerprint %d reported new", i)
		}
	}
}

// TestFailedJournalWriteChangesNothing makes the journal write fail: Add
// fails, and the fingerprints it was given are still new afterwards, so a
// caller that retries loses none.
func TestFailedJournalWriteChangesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	f, err := New(Config{Capacity: 10, Path: path, JournalLimit: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx := context.Background()
	fps := randomFPs(2, 30)
	if _, err := f.Add(ctx, fps[:5]...); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.jr.file.Close() // every write fails now
	layers, n := len(f.layers), f.n
	f.mu.Unlock()
	if _, err := f.Add(ctx, fps...); err == nil {
		t.Fatal("Add with a failing journal succeeded")
	}
	f.mu.Lock()
	if len(f.layers) != layers || f.n != n {
		t.Errorf("failed Add changed the filter: %d layers, %d fingerprints; was %d, %d", len(f.layers), f.n, layers, n)
	}
	if f.jr, err = createJournal(path, f.jr.gen+1); err != nil {
		t.Fatal(err)
	}
	f.mu.Unlock()
	isNew, err := f.Add(ctx, fps...)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range isNew {
		if b != (i >= 5) {
			t.Errorf("after the failed Add, fingerprint %d new = %v, want %v", i, b, i >= 5)
		}
	}
}

// TestReadsFormat2 opens a file in format 2 (layers without a scheme,
// all in schemeDoubleHashing, as trawl wrote for a while): its
// fingerprints are known, and the layers added after it use schemeMixed.
func TestReadsFormat2(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dupefilter.bloom")
	fps := randomFPs(3, 3000)
	var layers []*layer
	for i, c := range []uint64{100, 200} {
		l := newLayer(c, layerRate(0.01, i))
		l.scheme = schemeDoubleHashing
		layers = append(layers, l)
	}
	var n uint64
	for i := range fps[:300] {
		l := layers[0]
		if i >= 100 {
			l = layers[1]
		}
		if l.testAndSet(baseHashes(&fps[i])) {
			l.n++
			n++
		}
	}
	b := []byte(fileMagic)
	b = binary.LittleEndian.AppendUint32(b, 2)
	b = binary.LittleEndian.AppendUint32(b, schemeDoubleHashing)
	b = binary.LittleEndian.AppendUint64(b, 100)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(0.01))
	b = binary.LittleEndian.AppendUint64(b, n)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(layers)))
	for _, l := range layers {
		for _, x := range []uint64{l.capacity, math.Float64bits(l.fpRate), l.m, l.k, l.n} {
			b = binary.LittleEndian.AppendUint64(b, x)
		}
		for _, w := range l.words {
			b = binary.LittleEndian.AppendUint64(b, w)
		}
	}
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}

	f, err := New(Config{Path: path, FPRate: 0.01})
	if err != nil {
		t.Fatalf("New over a format-2 file: %v", err)
	}
	defer f.Close()
	if f.Len() != uint(n) {
		t.Errorf("Len = %d, want the file's %d", f.Len(), n)
	}
	isNew, err := f.Add(context.Background(), fps...)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range isNew[:300] {
		if b {
			t.Fatalf("fingerprint %d of the format-2 file reported new", i)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.layers) < 3 || f.layers[1].n != 200 {
		t.Errorf("%d layers, the file's last holding %d of 200: the filter did not grow past the file's full layer",
			len(f.layers), f.layers[1].n)
	}
	for i, l := range f.layers {
		want := uint64(schemeMixed)
		if i < 2 {
			want = schemeDoubleHashing
		}
		if l.scheme != want {
			t.Errorf("layer %d: scheme %d, want %d", i, l.scheme, want)
		}
	}
}
