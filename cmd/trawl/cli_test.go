package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// numberSite serves "/" linking to /p/1, /p/22, … /p/55555, and /p/N
// linking to /p/(10N+1) below a million: which pages a crawl reaches
// depends on how many digits its --include lets through. /book has an h1
// and a price; /missing answers 404.
func numberSite(t *testing.T) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<html><title>home</title><body>`)
		for _, p := range []string{"/p/1", "/p/22", "/p/333", "/p/4444", "/p/55555", "/book"} {
			fmt.Fprintf(w, `<a href="%s">x</a>`, p)
		}
		fmt.Fprint(w, `</body></html>`)
	})
	mux.HandleFunc("/p/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.PathValue("n"))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, `<html><title>p%d</title><body>`, n)
		if n < 1e6 {
			fmt.Fprintf(w, `<a href="/p/%d">next</a>`, 10*n+1)
		}
		fmt.Fprint(w, `</body></html>`)
	})
	mux.HandleFunc("/book", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<html><title>book</title><body><h1>A Light in the Attic</h1><p class="price_color">£51.77</p><a href="/missing">gone</a></body></html>`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

type item struct {
	URL      string              `json:"url"`
	Status   int                 `json:"status"`
	Referrer string              `json:"referrer"`
	Fields   map[string][]string `json:"fields"`
}

// readItems reads a JSON Lines file of page items.
func readItems(t *testing.T, path string) []item {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []item
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var it item
		if err := json.Unmarshal(sc.Bytes(), &it); err != nil {
			t.Fatalf("bad item line %q: %v", sc.Text(), err)
		}
		out = append(out, it)
	}
	return out
}

// paths returns the sorted paths of items' URLs.
func paths(items []item, base string) []string {
	var out []string
	for _, it := range items {
		out = append(out, strings.TrimPrefix(it.URL, base))
	}
	slices.Sort(out)
	return out
}

// crawlItems runs a crawl writing to a file and returns its items.
func crawlItems(t *testing.T, args ...string) ([]item, result) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "items.jsonl")
	r := trawl(t, time.Minute, append([]string{"crawl", "--idle-timeout", "300ms", "--out", out}, args...)...)
	if r.code != 0 {
		t.Fatalf("trawl crawl %v: exit %d; stderr:\n%s", args, r.code, r.stderr)
	}
	return readItems(t, out), r
}

// TestFlagValuesWhole (9.1): a regex or a selector with a comma is one
// value: --include 'p/[0-9]{1,3}$' crawls exactly the pages the same regex
// without a comma crawls, and --extract 'r=h1,.price_color' extracts both.
func TestFlagValuesWhole(t *testing.T) {
	base := numberSite(t)
	braces, _ := crawlItems(t, "--include", `p/[0-9]{1,3}$`, base+"/")
	plain, _ := crawlItems(t, "--include", `p/[0-9][0-9]?[0-9]?$`, base+"/")
	want := []string{"/", "/p/1", "/p/11", "/p/111", "/p/22", "/p/221", "/p/333"}
	if got := paths(braces, base); !slices.Equal(got, want) {
		t.Errorf("--include 'p/[0-9]{1,3}$' crawled %v, want %v", got, want)
	}
	if got := paths(plain, base); !slices.Equal(got, want) {
		t.Errorf("--include 'p/[0-9][0-9]?[0-9]?$' crawled %v, want %v", got, want)
	}

	excl, _ := crawlItems(t, "--exclude", `p/[0-9]{2,}|book`, "--max-depth", "1", base+"/")
	if got, want := paths(excl, base), []string{"/", "/p/1"}; !slices.Equal(got, want) {
		t.Errorf("--exclude 'p/[0-9]{2,}|book' crawled %v, want %v", got, want)
	}

	books, _ := crawlItems(t, "--extract", "r=h1,.price_color", base+"/book")
	if len(books) != 1 {
		t.Fatalf("%d items, want the book alone: %v", len(books), books)
	}
	if got, want := books[0].Fields["r"], []string{"A Light in the Attic", "£51.77"}; !slices.Equal(got, want) {
		t.Errorf("--extract 'r=h1,.price_color' gave %q, want %q", got, want)
	}
}
