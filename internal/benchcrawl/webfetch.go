package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"
)

// webFetchMain is the fetch limit of bench-web, in a process of its own:
// conc goroutines GET the URLs of -urls (one a line), each once (a
// request that fails is tried again after -retry-backoff, as trawl
// does), at most -per-host at once to one host, taking the next URL of
// any host that has a free slot: the best a scheduler can do with every
// URL known in advance. HTTPS is trusted through -ca alone.
func webFetchMain(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("webfetch", flag.ContinueOnError)
	list := fs.String("urls", "", "file of URLs, one a line")
	ca := fs.String("ca", "", "PEM file of the CA of the HTTPS hosts")
	conc := fs.Int("concurrency", 256, "goroutines")
	perHost := fs.Int("per-host", 2, "requests to one host at once, at most")
	timeout := fs.Duration("timeout", 5*time.Second, "time limit of each request, body included")
	backoff := fs.Duration("retry-backoff", 500*time.Millisecond, "wait before a failed request is tried again")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *list == "" || *ca == "" || *conc < 1 || *perHost < 1 {
		return errors.New("webfetch: want -urls, -ca, -concurrency ≥ 1 and -per-host ≥ 1")
	}
	pem, err := os.ReadFile(*ca)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("%s: no certificate", *ca)
	}
	q, err := readHostQueues(*list, *perHost)
	if err != nil {
		return err
	}
	// As trawl's fetcher has it, but HTTP/1.1 (the site offers no other).
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, ClientSessionCache: tls.NewLRUClientSessionCache(1024)},
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 128,
		IdleConnTimeout:     90 * time.Second,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: *timeout}
	var wg sync.WaitGroup
	errs := make(chan error, *conc)
	for range *conc {
		wg.Go(func() {
			for {
				h, u := q.take()
				if h == nil {
					return
				}
				for try := 1; ; try++ {
					err := get(ctx, client, u)
					if err == nil {
						break
					}
					if ctx.Err() != nil || try > 3 {
						errs <- err
						q.stop()
						return
					}
					time.Sleep(*backoff)
				}
				q.done(h)
			}
		})
	}
	wg.Wait()
	close(errs)
	return errors.Join(ctx.Err(), <-errs)
}

// hostQueues hands out URLs host by host, at most perHost at once per host.
type hostQueues struct {
	perHost int
	mu      sync.Mutex
	cond    *sync.Cond
	ready   []*hostQueue // hosts with a free slot and URLs, first come first served
	left    int          // URLs not yet taken
	stopped bool
}

type hostQueue struct {
	urls   []string
	active int
	queued bool // in ready
}

// readHostQueues reads the URLs of path into queues per host, in order.
func readHostQueues(path string, perHost int) (*hostQueues, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	q := &hostQueues{perHost: perHost}
	q.cond = sync.NewCond(&q.mu)
	byHost := map[string]*hostQueue{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		u, err := url.Parse(sc.Text())
		if err != nil {
			return nil, err
		}
		h := byHost[u.Host]
		if h == nil {
			h = &hostQueue{queued: true}
			byHost[u.Host] = h
			q.ready = append(q.ready, h)
		}
		h.urls = append(h.urls, sc.Text())
		q.left++
	}
	return q, sc.Err()
}

// take returns the next URL of the first host with a free slot, waiting
// for one; nil when every URL was taken.
func (q *hostQueues) take() (*hostQueue, string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.ready) == 0 && q.left > 0 && !q.stopped {
		q.cond.Wait()
	}
	if q.left == 0 || q.stopped {
		return nil, ""
	}
	h := q.ready[0]
	q.ready = q.ready[1:]
	u := h.urls[0]
	h.urls = h.urls[1:]
	h.active++
	q.left--
	if h.active < q.perHost && len(h.urls) > 0 {
		q.ready = append(q.ready, h)
	} else {
		h.queued = false
	}
	if q.left == 0 {
		q.cond.Broadcast()
	}
	return h, u
}

// done gives back h's slot.
func (q *hostQueues) done(h *hostQueue) {
	q.mu.Lock()
	defer q.mu.Unlock()
	h.active--
	if !h.queued && len(h.urls) > 0 {
		h.queued = true
		q.ready = append(q.ready, h)
		q.cond.Signal()
	}
}

// stop makes every take return nil.
func (q *hostQueues) stop() {
	q.mu.Lock()
	q.stopped = true
	q.cond.Broadcast()
	q.mu.Unlock()
}
