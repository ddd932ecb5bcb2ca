package engine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fullDisk writes to w until it has taken room bytes, then fails as a
// full disk does: a short write, then ENOSPC. Raising room frees space.
type fullDisk struct {
	w    io.Writer
	room int
}

var errNoSpace = errors.New("no space left on device")

func (d *fullDisk) Write(p []byte) (int, error) {
	if len(p) <= d.room {
		d.room -= len(p)
		return d.w.Write(p)
	}
	n, _ := d.w.Write(p[:d.room])
	d.room = 0
	return n, errNoSpace
}

// TestJSONLinesFullDisk writes items to a JSONLines file whose disk fills
// up, then frees space and writes the failed items again, as the engine
// does: the file holds every item exactly once, each line valid JSON.
// Without the cut back to the last whole line, the failed writes leave
// torn lines, the items after them glued on, and (with the buffer's
// sticky error) no write succeeds after the first failure.
func TestJSONLinesFullDisk(t *testing.T) {
	path := filepath.Join(t.TempDir(), "items.jsonl")
	s, err := CreateJSONLines(path)
	if err != nil {
		t.Fatal(err)
	}
	disk := &fullDisk{w: s.file.f, room: 1000}
	s.file.w = disk
	const n = 200
	failed := 0
	for i := 0; i < n; {
		batch := []any{map[string]any{"i": i, "pad": strings.Repeat("x", i%37)}, map[string]any{"i": i + 1}}
		if err := s.Write(t.Context(), batch); err != nil {
			if !errors.Is(err, errNoSpace) || errors.Is(err, ErrBadItem) {
				t.Fatalf("write %d: %v, want the disk's error, not a bad item", i, err)
			}
			failed++
			if failed > n {
				t.Fatalf("write %d failed %d times with room on the disk: %v", i, failed, err)
			}
			disk.room += 500 // space freed; the same items are written again
			continue
		}
		i += 2
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if failed == 0 {
		t.Fatal("the disk never filled: the test tests nothing")
	}
	checkLines(t, path, n)
	t.Logf("%d writes failed on a full disk", failed)
}

// checkLines checks that path holds items 0..n-1 each exactly once, one
// valid JSON object per line.
func checkLines(t *testing.T, path string, n int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]int{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		var it struct{ I *int }
		if err := json.Unmarshal(sc.Bytes(), &it); err != nil || it.I == nil {
			t.Fatalf("line %d is not an item: %q (%v)", line, sc.Text(), err)
		}
		seen[*it.I]++
	}
	for i := range n {
		if seen[i] != 1 {
			t.Errorf("item %d written %d times, want once", i, seen[i])
		}
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Errorf("the file ends in a torn line: %q", b[max(0, len(b)-40):])
	}
}

// TestJSONLinesCutsTornLine opens, to append to, a file whose last line
// was torn (a crawl killed mid-write): the torn line is cut off, and the
// next item is not glued onto it.
func TestJSONLinesCutsTornLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "items.jsonl")
	if err := os.WriteFile(path, []byte(`{"i":0}`+"\n"+`{"i":1,"pa`), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := CreateJSONLines(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Write(t.Context(), []any{map[string]int{"i": 1}, map[string]int{"i": 2}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checkLines(t, path, 3)
}

// TestJSONLinesBadItem checks that an item that does not encode is the
// page's fault (ErrBadItem), and writes nothing of its batch.
func TestJSONLinesBadItem(t *testing.T) {
	path := filepath.Join(t.TempDir(), "items.jsonl")
	s, err := TruncateJSONLines(path)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Write(t.Context(), []any{map[string]int{"i": 0}, func() {}})
	if !errors.Is(err, ErrBadItem) {
		t.Fatalf("write of a func: %v, want ErrBadItem", err)
	}
	if err := s.Write(t.Context(), []any{map[string]int{"i": 0}}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	checkLines(t, path, 1)
}

// TestCSVFullDisk is TestJSONLinesFullDisk for the CSV sink: after a
// disk that filled up is freed, the file holds one header row and every
// item exactly once, each a whole record.
func TestCSVFullDisk(t *testing.T) {
	path := filepath.Join(t.TempDir(), "items.csv")
	s, err := CreateCSV(path, []string{"i", "pad"})
	if err != nil {
		t.Fatal(err)
	}
	disk := &fullDisk{w: s.file.f, room: 300}
	s.file.w = disk
	const n = 200
	failed := 0
	for i := 0; i < n; {
		batch := []any{map[string]any{"i": i, "pad": strings.Repeat("x\n", i%7)}, map[string]any{"i": i + 1}}
		if err := s.Write(t.Context(), batch); err != nil {
			if !errors.Is(err, errNoSpace) {
				t.Fatalf("write %d: %v, want the disk's error", i, err)
			}
			if failed++; failed > n {
				t.Fatalf("write %d failed %d times with room on the disk: %v", i, failed, err)
			}
			disk.room += 200
			continue
		}
		i += 2
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if failed == 0 {
		t.Fatal("the disk never filled: the test tests nothing")
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatalf("the file is not CSV: %v", err)
	}
	if len(recs) == 0 || !slices.Equal(recs[0], []string{"i", "pad"}) {
		t.Fatalf("no header row first: %q", recs[:min(1, len(recs))])
	}
	seen := map[string]int{}
	for _, r := range recs[1:] {
		seen[r[0]]++
	}
	for i := range n {
		if k := strconv.Itoa(i); seen[k] != 1 {
			t.Errorf("item %d written %d times, want once", i, seen[k])
		}
	}
	if len(recs)-1 != n {
		t.Errorf("%d records after the header, want %d", len(recs)-1, n)
	}
}

// TestJSONLinesPageAsEncodingJSON: the lines JSONLines writes for Pages
// (its own encoder, no reflection) are byte for byte encoding/json's
// (HTML not escaped), for Pages with strings to escape (quotes,
// backslashes, control characters, HTML, U+2028, invalid UTF-8, DEL),
// empty and set optional fields, maps, and times in UTC, in other zones
// and out of RFC 3339's years; items of other types, and a nil *Page,
// are encoded as encoding/json does too.
func TestJSONLinesPageAsEncodingJSON(t *testing.T) {
	strs := []string{"", "https://127.0.0.1:8080/p/12?a=1&b=<2>", `say "hi"`, `back\slash`, "tab\tnew\nline\r\b\f\x01\x1f",
		"héllo wörld", "line\u2028sep\u2029", "bad\xffutf8\xc3", "del\x7f", "<script>&amp;</script>", "plain title"}
	rng := rand.New(rand.NewPCG(14, 14))
	pick := func() string { return strs[rng.IntN(len(strs))] }
	zones := []*time.Location{time.UTC, time.FixedZone("X", 5*3600+30*60), time.FixedZone("Y", -(23*3600 + 59*60))}
	var items []any
	for i := range 2000 {
		p := &Page{URL: pick(), Status: rng.IntN(600) - 1, Title: pick(), Depth: rng.IntN(20), ContentType: pick(),
			Length: rng.IntN(1 << 20), Links: rng.IntN(200), Referrer: pick(), Error: pick(),
			FetchedAt: time.Unix(rng.Int64N(1<<33), rng.Int64N(1e9)).In(zones[rng.IntN(len(zones))])}
		switch i % 4 {
		case 1:
			p.Meta, p.Fields = map[string]string{}, map[string][]string{}
		case 2:
			p.Meta = map[string]string{pick(): pick(), "b": pick(), "a": pick()}
			p.Fields = map[string][]string{"z": {pick(), pick()}, pick(): nil, "y": {}}
		case 3:
			p.FetchedAt = time.Time{}
		}
		items = append(items, p)
	}
	items = append(items, (*Page)(nil), Page{URL: "a value"}, map[string]any{"x": 1}, "str", 12)
	var want bytes.Buffer
	enc := json.NewEncoder(&want)
	enc.SetEscapeHTML(false)
	for _, it := range items {
		if err := enc.Encode(it); err != nil {
			t.Fatal(err)
		}
	}
	var got bytes.Buffer
	s := NewJSONLines(&got)
	for i := 0; i < len(items); i += 7 {
		if err := s.Write(context.Background(), items[i:min(i+7, len(items))]); err != nil {
			t.Fatal(err)
		}
	}
	g, w := strings.Split(got.String(), "\n"), strings.Split(want.String(), "\n")
	if len(g) != len(w) {
		t.Fatalf("%d lines, want %d", len(g), len(w))
	}
	for i := range g {
		if g[i] != w[i] {
			t.Fatalf("line %d:\n got %s\nwant %s", i+1, g[i], w[i])
		}
	}

	// A time encoding/json refuses (year 10000) is the page's fault, as before.
	err := s.Write(context.Background(), []any{&Page{FetchedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}})
	if !errors.Is(err, ErrBadItem) {
		t.Errorf("a page of year 10000: %v, want ErrBadItem", err)
	}
}

// BenchmarkJSONLinesPages: a batch of 5 Pages as the default callback
// makes them, written to a discarding writer.
func BenchmarkJSONLinesPages(b *testing.B) {
	s := NewJSONLines(io.Discard)
	items := make([]any, 5)
	for i := range items {
		items[i] = &Page{URL: fmt.Sprintf("https://127.0.3.%d:8080/p/%d", i, 100+i), Status: 200, Title: "host 3 page 101",
			Depth: 3, ContentType: "text/html; charset=utf-8", Length: 51234, Links: 93, FetchedAt: time.Now().UTC()}
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Write(context.Background(), items); err != nil {
			b.Fatal(err)
		}
	}
}
