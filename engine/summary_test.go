package engine_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trawlhq/trawl/engine"
)

func TestSummary(t *testing.T) {
	s := engine.Summarize(map[string]int64{
		engine.StatResponses: 10, engine.StatItems: 9, engine.StatErrors: 3,
		engine.StatErrorKindPrefix + engine.ErrorFetch: 1, engine.StatErrorKindPrefix + engine.ErrorRetries: 2,
		engine.StatRetries: 4, engine.StatDeadLetters: 2, engine.StatFiltered: 40, engine.StatStatusPrefix + "200": 9, engine.StatStatusPrefix + "404": 1,
	}, 2*time.Second)
	want := "10 pages fetched, 9 items written, 3 errors (fetch 1, retries_exhausted 2), 4 retries, 2 dead letters, 40 duplicates filtered, 2s, 5.0 pages/s"
	if got := s.String(); got != want {
		t.Errorf("summary\n got %q\nwant %q", got, want)
	}
	if s.Empty() != "" {
		t.Errorf("a crawl with items is not empty: %q", s.Empty())
	}
	if got := engine.Summarize(map[string]int64{engine.StatRetries: 1}, time.Second).String(); !strings.Contains(got, ", 1 retry, ") {
		t.Errorf("summary of one retry %q, want \"1 retry\"", got)
	}
	for _, c := range []struct {
		stats map[string]int64
		want  string
	}{
		{map[string]int64{engine.StatStartURLs: 1, engine.StatFiltered: 1}, "already crawled: nothing to do (use --flush to start again)"},
		{map[string]int64{engine.StatStartURLs: 1, engine.StatRequests: 1, engine.StatResponses: 1, engine.StatStatusPrefix + "404": 1}, "the start URL answered 404 Not Found"},
		{map[string]int64{engine.StatStartURLs: 1, engine.StatRobotsForbidden: 1}, "the start URL is disallowed by robots.txt"},
		{map[string]int64{}, "nothing to do: no start URL and an empty frontier"},
	} {
		if got := engine.Summarize(c.stats, time.Second).Empty(); got != c.want {
			t.Errorf("Empty(%v) = %q, want %q", c.stats, got, c.want)
		}
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		`parse "redis://u:s3cret@host:x/0": invalid port`: `parse "redis://u:xxxxx@host:x/0": invalid port`,
		"nats://a:b@h1:4222,nats://c:d%zz@h2:4222":        "nats://a:xxxxx@h1:4222,nats://c:xxxxx@h2:4222",
		"http://user@host/ and http://:p@ss@host/x":       "http://user@host/ and http://:xxxxx@host/x",
		"no url here: a@b":                                "no url here: a@b",
	} {
		if got := engine.Redact(in); got != want {
			t.Errorf("Redact(%q)\n got %q\nwant %q", in, got, want)
		}
	}
	u, _ := url.Parse("http://u:pw@example.com/a?b=1")
	if got := engine.StripCredentials(u); got != "http://example.com/a?b=1" {
		t.Errorf("StripCredentials = %q", got)
	}
}

// TestJSONLinesDevNull: a sink on /dev/null closes cleanly (fsync there
// fails with EINVAL).
func TestJSONLinesDevNull(t *testing.T) {
	if _, err := os.Stat(os.DevNull); err != nil {
		t.Skip(err)
	}
	s, err := engine.CreateJSONLines(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Write(t.Context(), []any{map[string]int{"a": 1}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

func TestTruncateJSONLines(t *testing.T) {
	p := t.TempDir() + "/items.jsonl"
	if err := os.WriteFile(p, []byte("{\"old\":1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := engine.TruncateJSONLines(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Write(t.Context(), []any{map[string]int{"new": 1}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(p)
	if string(data) != "{\"new\":1}\n" {
		t.Errorf("file %q, want only the new item", data)
	}
}

// TestErrorItems (9.13): with ErrorItems, a broken link gives an item with
// its status and the page that links to it; a 5xx past the retry limit
// and an unreachable link too; without it, neither. Config.OnFailure is
// told of the same pages, once each, either way.
func TestErrorItems(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close() // connection refused from now on
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/":
			fmt.Fprintf(w, `<html><a href="/gone">a</a><a href="/broken">b</a><a href="%s/x">c</a></html>`, deadURL)
		case "/broken":
			http.Error(w, "down", http.StatusInternalServerError)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	for _, on := range []bool{false, true} {
		var sink memSink
		var mu sync.Mutex
		failed := map[string][]string{} // OnFailure's calls, by URL
		b, f := newBackends(t)
		c, err := engine.New(b, f, engine.Config{
			IdleTimeout: 200 * time.Millisecond, IgnoreRobots: true, ErrorItems: on, Sink: &sink,
			MaxRetries: 1, RetryBackoff: time.Millisecond, AllowedDomains: []string{"127.0.0.1"},
			TrustedHosts: []string{"127.0.0.1"},
			OnFailure: func(_ context.Context, req *engine.Request, resp *engine.Response, err error) {
				status := 0
				if resp != nil {
					status = resp.StatusCode
				}
				mu.Lock()
				failed[req.URL] = append(failed[req.URL], fmt.Sprintf("%d %v", status, err != nil))
				mu.Unlock()
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		c.Seed(t.Context(), engine.StartURL{URL: srv.URL + "/"})
		if err := c.Run(t.Context()); err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, p := range sink.pages() {
			got[p.URL] = fmt.Sprintf("%d %s %v", p.Status, p.Referrer, p.Error != "")
		}
		want := map[string]string{srv.URL + "/": "200  false"}
		if on {
			want[srv.URL+"/gone"] = "404 " + srv.URL + "/ true"
			want[srv.URL+"/broken"] = "500 " + srv.URL + "/ true"
			want[deadURL+"/x"] = "0 " + srv.URL + "/ true"
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("ErrorItems=%v: items\n got %v\nwant %v", on, got, want)
		}
		// OnFailure is told of the same pages, once each (not per retry),
		// with or without ErrorItems.
		wantFailed := map[string][]string{
			srv.URL + "/gone": {"404 true"}, srv.URL + "/broken": {"500 true"}, deadURL + "/x": {"0 true"},
		}
		mu.Lock()
		if !reflect.DeepEqual(failed, wantFailed) {
			t.Errorf("ErrorItems=%v: OnFailure\n got %v\nwant %v", on, failed, wantFailed)
		}
		mu.Unlock()
	}
}

// pages returns the Page items written.
func (s *memSink) pages() []*engine.Page {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*engine.Page
	for _, it := range s.items {
		out = append(out, it.(*engine.Page))
	}
	return out
}

// TestNoPasswordInErrors (9.8): a start URL with a password that cannot be
// fetched: neither Run's error nor the dead letter's reason names the
// password, and no item carries it.
func TestNoPasswordInErrors(t *testing.T) {
	const pw = "Pl4ntedS3cret"
	b, f := newBackends(t)
	var sink memSink
	c, err := engine.New(b, f, engine.Config{
		IdleTimeout: 200 * time.Millisecond, IgnoreRobots: true, MaxRetries: 1, RetryBackoff: time.Millisecond,
		TrustedHosts: []string{"127.0.0.1"}, ErrorItems: true, Sink: &sink,
	})
	if err != nil {
		t.Fatal(err)
	}
	c.Seed(t.Context(), engine.StartURL{URL: "http://user:" + pw + "@127.0.0.1:1/"})
	err = c.Run(t.Context())
	if err == nil || strings.Contains(err.Error(), pw) {
		t.Errorf("run: %v, want an error without the password", err)
	}
	dls, derr := b.DeadLetters(t.Context(), engine.RequestsQueue("trawl"), 10)
	if derr != nil || len(dls) != 1 || strings.Contains(dls[0].Reason, pw) {
		t.Errorf("dead letters %+v (%v), want one whose reason has no password", dls, derr)
	}
	for _, p := range sink.pages() {
		if strings.Contains(p.URL+p.Error, pw) {
			t.Errorf("item %+v names the password", p)
		}
	}
}
