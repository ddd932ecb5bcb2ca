package testsite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"
)

// Summary condenses the counters of a site.
type Summary struct {
	Requests  int `json:"requests"`  // requests counted (not /_testsite/)
	Distinct  int `json:"distinct"`  // distinct canonical keys requested
	Succeeded int `json:"succeeded"` // resources counted by Expected that were answered 200
	Expected  int `json:"expected"`  // Expected()
	Problems  int `json:"problems"`  // problems Verify reports
}

// Summary returns the counters in brief. After a correct, complete crawl
// Succeeded == Expected and Problems == 0.
func (s *Site) Summary() Summary {
	probs := len(s.problems(true))
	s.mu.Lock()
	defer s.mu.Unlock()
	sum := Summary{Expected: s.expected, Problems: probs}
	for _, h := range s.pageHits {
		sum.Requests += h.n
		if h.n > 0 {
			sum.Distinct++
		}
		if h.ok > 0 {
			sum.Succeeded++
		}
	}
	for k, h := range s.hits {
		sum.Requests += h.n
		sum.Distinct++
		if r := s.res[k]; r != nil && h.ok > 0 && (r.rule == ruleOnce200 || r.rule == ruleFlaky) {
			sum.Succeeded++
		}
	}
	return sum
}

// serveControl answers the control endpoints under /_testsite/:
//
//	GET  /_testsite/served   JSON {"served": {key: count}, "summary": Summary}
//	GET  /_testsite/verify   200 "ok", or 409 with one problem per line;
//	                         ?partial=1 checks as VerifyPartial
//	GET  /_testsite/shop     JSON {"products": Products(), "problems": VerifyShop's}
//	POST /_testsite/reset    Reset; 204
func (s *Site) serveControl(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/_testsite/served":
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(struct {
			Served  map[string]int `json:"served"`
			Summary Summary        `json:"summary"`
		}{s.Served(), s.Summary()})
	case "/_testsite/verify":
		var probs []error
		if r.URL.Query().Get("partial") != "" {
			probs = s.problems(false)
		} else {
			probs = s.problems(true)
		}
		if len(probs) == 0 {
			serveText(w, http.StatusOK, ctText, "ok\n")
			return
		}
		var b strings.Builder
		for _, p := range probs {
			b.WriteString(p.Error())
			b.WriteByte('\n')
		}
		serveText(w, http.StatusConflict, ctText, b.String())
	case "/_testsite/shop":
		var problems []string
		if err := s.VerifyShop(); err != nil {
			problems = strings.Split(err.Error(), "\n")
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(struct {
			Products []Product `json:"products"`
			Problems []string  `json:"problems"`
		}{Products(), problems})
	case "/_testsite/reset":
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			serveText(w, http.StatusMethodNotAllowed, ctText, "use POST\n")
			return
		}
		s.Reset()
		w.WriteHeader(http.StatusNoContent)
	default:
		serveText(w, http.StatusNotFound, ctText, "404 not found\n")
	}
}

// Serve listens on addr ("" = "127.0.0.1:0", a free loopback port) and
// serves the site until ctx ends. It returns the site's base URL, like
// "http://127.0.0.1:41234" (no trailing slash), and wait, which blocks until
// the server has stopped and returns what stopped it: nil once ctx ended,
// else the error of the server.
//
// When ctx ends, the contexts of requests in flight end too (so /slow and
// /endless stop at once), the listener closes, and connections still open
// after a second are closed.
func (s *Site) Serve(ctx context.Context, addr string) (baseURL string, wait func() error, err error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("testsite: listen on %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	stopped := make(chan struct{})
	var result error
	go func() { // owned by wait; exits when ctx ends or the server fails
		defer close(stopped)
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			if err := srv.Shutdown(sctx); err != nil {
				_ = srv.Close()
			}
			cancel()
			if err := <-served; !errors.Is(err, http.ErrServerClosed) {
				result = fmt.Errorf("testsite: serve on %s: %w", ln.Addr(), err)
			}
		case err := <-served:
			_ = srv.Close()
			result = fmt.Errorf("testsite: serve on %s: %w", ln.Addr(), err)
		}
	}()
	s.log.Info("testsite: serving", slog.String("url", "http://"+ln.Addr().String()))
	return "http://" + ln.Addr().String(), func() error { <-stopped; return result }, nil
}
