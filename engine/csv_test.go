package engine

import (
	"context"
	"encoding/csv"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestCSVSink: the header row once, a Page's columns and its fields (several
// values in one cell), other items by their JSON members; appending to a
// file keeps one header row and refuses a file with other columns.
func TestCSVSink(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "items.csv")
	cols := PageColumns("price", "tags")
	s, err := CreateCSV(path, cols)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	page := &Page{URL: "http://a.test/x", Status: 200, Title: `say "hi", then`, Depth: 1, Length: 10, Links: 2, FetchedAt: at, Referrer: "http://a.test/",
		Fields: map[string][]string{"price": {"£1"}, "tags": {"a", "b,c"}}}
	type other struct {
		URL   string  `json:"url"`
		Price float64 `json:"price"`
		Tags  any     `json:"tags"`
	}
	if err := s.Write(ctx, []any{page, other{URL: "http://a.test/y", Price: 2.5}}); err != nil {
		t.Fatal(err)
	}
	// Flushed before Write returned: readable while the sink is open.
	if got := readCSV(t, path); len(got) != 3 {
		t.Fatalf("after one Write the file has %d rows, want 3 (header and two items)", len(got))
	}
	if err := s.Write(ctx, []any{42}); err == nil {
		t.Error("an item that is not a JSON object was written")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = CreateCSV(path, cols)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, []any{Page{URL: "http://a.test/z", Status: 404, FetchedAt: at, Error: "Not Found"}}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	want := [][]string{
		cols,
		{"http://a.test/x", "200", "£1", "a\nb,c", `say "hi", then`, "1", "", "10", "2", "2026-01-02T03:04:05Z", "http://a.test/", ""},
		{"http://a.test/y", "", "2.5", "", "", "", "", "", "", "", "", ""},
		{"http://a.test/z", "404", "", "", "", "0", "", "0", "0", "2026-01-02T03:04:05Z", "", "Not Found"},
	}
	if got := readCSV(t, path); !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("rows:\n%q\nwant\n%q", got, want)
	}
	if _, err := CreateCSV(path, PageColumns("other")); !errors.Is(err, ErrColumns) {
		t.Errorf("CreateCSV with other columns: %v, want ErrColumns", err)
	}
}

func readCSV(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return rows
}
