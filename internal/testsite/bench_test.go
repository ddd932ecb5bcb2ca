package testsite

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// discardWriter is a ResponseWriter that keeps nothing, so that a benchmark
// measures the site and not the recorder.
type discardWriter struct {
	h http.Header
	n int64
}

func (d *discardWriter) Header() http.Header { return d.h }
func (d *discardWriter) WriteHeader(int)     {}
func (d *discardWriter) Write(p []byte) (int, error) {
	d.n += int64(len(p))
	return len(p), nil
}

func pageRequests(s *Site) []*http.Request {
	reqs := make([]*http.Request, s.Pages())
	for i := range reqs {
		reqs[i] = httptest.NewRequest(http.MethodGet, "http://127.0.0.1:8080/page/"+strconv.Itoa(i), nil)
	}
	return reqs
}

// BenchmarkServePage serves content pages in process, one at a time.
func BenchmarkServePage(b *testing.B) {
	s := New(Config{})
	reqs := pageRequests(s)
	w := &discardWriter{h: make(http.Header)}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		clear(w.h)
		s.ServeHTTP(w, reqs[i%len(reqs)])
	}
	b.ReportMetric(float64(w.n)/float64(b.N), "bytes/page")
}

// BenchmarkServePageParallel serves content pages in process from
// GOMAXPROCS goroutines, as a server under load would.
func BenchmarkServePageParallel(b *testing.B) {
	s := New(Config{})
	reqs := pageRequests(s)
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		w := &discardWriter{h: make(http.Header)}
		for pb.Next() {
			clear(w.h)
			s.ServeHTTP(w, reqs[next.Add(1)%int64(len(reqs))])
		}
	})
}

// BenchmarkLoopback fetches content pages over loopback HTTP from 64
// goroutines: the ceiling a crawler can reach against this site on this
// machine (client and server share the CPUs).
func BenchmarkLoopback(b *testing.B) {
	s := New(Config{NoTraps: true})
	ctx, cancel := context.WithCancel(b.Context())
	base, wait, err := s.Serve(ctx, "")
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		cancel()
		if err := wait(); err != nil {
			b.Error(err)
		}
	}()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var next atomic.Int64
	b.SetParallelism((64 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ReportAllocs()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := client.Get(base + "/page/" + strconv.FormatInt(next.Add(1)%int64(s.Pages()), 10))
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pages/s")
}
