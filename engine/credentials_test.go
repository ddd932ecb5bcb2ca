package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/syncbuf"
)

// A start URL with credentials: every page is fetched once, with the
// credentials as Basic authentication, whether its links are relative
// (which kept the user information) or absolute (which did not: the
// site was crawled twice); a redirect to another host does not take them
// along; no item and no log line holds the password.
func TestStartURLCredentials(t *testing.T) {
	const user, pass = "cu2", "pw-Zq81xK"
	other := newHitServer(t, func(w http.ResponseWriter, r *http.Request) {
		if _, _, ok := r.BasicAuth(); ok {
			t.Errorf("%s: credentials sent to another host", r.URL.Path)
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<html></html>")
	})
	var srv *hitServer
	unauthorized := 0 // the site serves them all the same, as the did
	srv = newHitServer(t, func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
			srv.mu.Lock()
			unauthorized++
			srv.mu.Unlock()
		}
		if r.URL.Path == "/away" {
			http.Redirect(w, r, other.URL+"/landed", http.StatusFound)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<html><a href="/a">a</a><a href="%s/b">b</a><a href="c">c</a><a href="/away">away</a></html>`, srv.URL)
	})
	b, f := newBackends(t)
	var logs syncbuf.Buffer
	sink := &memSink{}
	c, err := engine.New(b, f, engine.Config{
		IdleTimeout: 300 * time.Millisecond, IgnoreRobots: true, Sink: sink,
		TrustedHosts:   []string{srv.Listener.Addr().String(), other.Listener.Addr().String()},
		AllowedDomains: []string{"127.0.0.1"},
		Logger:         slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := strings.Replace(srv.URL, "http://", "http://"+user+":"+pass+"@", 1) + "/"
	if err := c.Seed(ctx, engine.StartURL{URL: start}); err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	srv.mu.Lock()
	for _, p := range []string{"/", "/a", "/b", "/c", "/away"} {
		if n := srv.hits[p]; n != 1 {
			t.Errorf("%s fetched %d times, want once", p, n)
		}
	}
	if len(srv.hits) != 5 {
		t.Errorf("paths fetched: %v, want the five linked", srv.hits)
	}
	srv.mu.Unlock()
	if n := other.count("/landed"); n != 1 {
		t.Errorf("the redirect's target fetched %d times, want once (without the credentials)", n)
	}
	items, _ := json.Marshal(sink.items)
	for what, s := range map[string]string{"items": string(items), "log": logs.String()} {
		if strings.Contains(s, pass) {
			t.Errorf("the password is in the %s:\n%s", what, s)
		}
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if unauthorized != 0 {
		t.Errorf("%d requests without the credentials", unauthorized)
	}
}
