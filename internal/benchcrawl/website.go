package main

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// webConfig shapes the web-shaped test site.
type webConfig struct {
	hosts    int           // hosts, each on a loopback address of its own
	pages    int           // pages in all, about (every host has at least one)
	maxHost  int           // pages of the largest host, at most
	median   time.Duration // the median latency of a request
	slow     time.Duration // the latency of 1% of the requests
	hang     time.Duration // how long a timing-out page hangs (past the fetch timeout)
	timeouts float64       // the share of pages whose first request hangs
	seed     uint64
}

// webSite serves cfg.hosts hosts on 127.0.x.y, half of them (the odd
// ones) over HTTPS under a CA it made. Host h has size[h] pages: / and
// /p/1 … /p/size-1, each page links to its children in a binary tree (so
// every page is reachable from / within a depth of log2 size) and to
// random pages of its own host and, 5% of its links, of other hosts.
// Each request is delayed by a log-normal latency drawn from the URL and
// the number of earlier requests for it, so that every client sees the
// same delays; the first request of a few pages hangs past the fetch
// timeout (the client's retry is answered).
type webSite struct {
	cfg   webConfig
	size  []int
	base  []string // scheme://127.0.x.y:port of each host
	hosts map[netip.Addr]int
	tls   *tls.Config
	ca    []byte // PEM

	count [][]atomic.Int32 // requests per host per page; index size[h] is robots.txt
	other atomic.Int64     // requests for no page of the site

	filler []byte // text that pads the pages

	mu          sync.Mutex
	first, last time.Time
	n           int
	busy        time.Duration // the timed requests' time in the site, summed: busy / window = mean requests in flight
	perHost     []hostUse     // each host's

	trace   []traced // every request since the last reset, when tracing
	tracing bool
	seconds map[[2]int][]pageRequest // the requests of each page requested more than once, since the last reset (robots.txt aside)
	firsts  map[[2]int]pageRequest   // the first request of each page, since the last reset

	inFlight atomic.Int64 // requests in the site now
	conns    connCounts
	samples  []flightSample
	stopS    chan struct{}

	lns     []net.Listener
	srv     *http.Server
	serving sync.WaitGroup
}

// hostAddr is host h's loopback address, 127.0.x.y with x, y in 1…250.
func hostAddr(h int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, 0, byte(1 + h/250), byte(1 + h%250)})
}

// zipfSizes returns n host sizes that follow a Zipf law (size of rank r
// proportional to 1/r), each at least 1 and at most maxHost, summing to
// about pages.
func zipfSizes(n, pages, maxHost int) []int {
	sizes := func(c float64) ([]int, int) {
		s, sum := make([]int, n), 0
		for r := range n {
			s[r] = max(1, min(maxHost, int(math.Round(c/float64(r+1)))))
			sum += s[r]
		}
		return s, sum
	}
	lo, hi := 0.0, float64(pages)*float64(n)
	for range 100 {
		mid := (lo + hi) / 2
		if _, sum := sizes(mid); sum < pages {
			lo = mid
		} else {
			hi = mid
		}
	}
	s, _ := sizes(hi)
	return s
}

// serveWeb starts the site; close stops it.
func serveWeb(cfg webConfig) (*webSite, error) {
	if cfg.hosts < 1 || cfg.hosts > 250*250 {
		return nil, fmt.Errorf("-hosts %d: want 1 to %d", cfg.hosts, 250*250)
	}
	s := &webSite{cfg: cfg, size: zipfSizes(cfg.hosts, cfg.pages, cfg.maxHost), hosts: map[netip.Addr]int{}}
	s.count = make([][]atomic.Int32, cfg.hosts)
	s.perHost = make([]hostUse, cfg.hosts)
	for h := range s.count {
		s.count[h] = make([]atomic.Int32, s.size[h]+1)
	}
	s.filler = fillerText(80 << 10)
	s.stopS = make(chan struct{})
	if err := s.makeCA(); err != nil {
		return nil, err
	}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 10 * time.Second,
		ErrorLog: log.New(io.Discard, "", 0), TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
		ConnState: s.conns.state, ConnContext: connContext}
	for h := range cfg.hosts {
		a := hostAddr(h)
		ln, err := net.Listen("tcp", netip.AddrPortFrom(a, 0).String())
		if err != nil {
			s.close()
			return nil, fmt.Errorf("web site: listen on %v: %w", a, err)
		}
		s.hosts[a] = h
		ln = countingListener{ln, &s.conns, h}
		scheme := "http"
		if h%2 == 1 {
			scheme, ln = "https", tls.NewListener(ln, s.tls)
		}
		s.lns = append(s.lns, ln)
		s.base = append(s.base, scheme+"://"+ln.Addr().String())
		s.serving.Go(func() { _ = s.srv.Serve(ln) }) // ends with close
	}
	s.serving.Go(s.sample) // ends with close
	return s, nil
}

// close stops the site.
func (s *webSite) close() {
	_ = s.srv.Close()
	for _, ln := range s.lns {
		_ = ln.Close()
	}
	close(s.stopS)
	s.serving.Wait()
}

// traced is a request the site served, for -trace.
type traced struct {
	host, page int
	start, end time.Time
	timed      bool
	conn       int
}

// writeTrace writes the requests since the last reset to path, one a
// line: host, page (the host's size for robots.txt), start and end in
// seconds from the window's start, 1 if timed, the connection's id; then
// the connections closed: "#conn", id, host, end, who closed it
// (site-idle, client-idle, busy), its TLS handshake (full, resumed, or
// "-" for HTTP).
func (s *webSite) writeTrace(path string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, t := range s.trace {
		timed := 0
		if t.timed {
			timed = 1
		}
		fmt.Fprintf(&b, "%d\t%d\t%.4f\t%.4f\t%d\t%d\n", t.host, t.page, t.start.Sub(s.first).Seconds(), t.end.Sub(s.first).Seconds(), timed, t.conn)
	}
	s.conns.mu.Lock()
	for _, c := range s.conns.closed {
		fmt.Fprintf(&b, "#conn\t%d\t%d\t%.4f\t%s\t%s\n", c.id, c.host, c.end.Sub(s.first).Seconds(), c.closer, cmp.Or(c.tls, "-"))
	}
	s.conns.mu.Unlock()
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// hostUse is one host's share of a run: its requests' time in the site
// and the span from its first request to the end of its last.
type hostUse struct {
	busy        time.Duration
	first, last time.Time
}

// flightSample is the site's requests in flight at a time.
type flightSample struct {
	at time.Time
	n  int64
}

// sampleEvery is how often the site samples its requests in flight.
const sampleEvery = 50 * time.Millisecond

// sample records the requests in flight every sampleEvery while any are,
// until close.
func (s *webSite) sample() {
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stopS:
			return
		case now := <-t.C:
			if n := s.inFlight.Load(); n > 0 {
				s.mu.Lock()
				s.samples = append(s.samples, flightSample{now, n})
				s.mu.Unlock()
			}
		}
	}
}

// makeCA makes the CA and the TLS configuration, whose certificate for
// each host (its IP address) is made on its first handshake.
func (s *webSite) makeCA() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "trawl bench-web CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return err
	}
	s.ca = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	var mu sync.Mutex
	certs := map[netip.Addr]*tls.Certificate{}
	s.tls = &tls.Config{
		NextProtos: []string{"http/1.1"}, // the loop and trawl alike
		// Called on every handshake, resumptions too.
		VerifyConnection: func(cs tls.ConnectionState) error {
			s.conns.handshake(cs.DidResume)
			return nil
		},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			ap, err := netip.ParseAddrPort(hello.Conn.LocalAddr().String())
			if err != nil {
				return nil, err
			}
			a := ap.Addr()
			mu.Lock()
			defer mu.Unlock()
			if c := certs[a]; c != nil {
				return c, nil
			}
			lk, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			if err != nil {
				return nil, err
			}
			lt := &x509.Certificate{
				SerialNumber: big.NewInt(int64(2 + s.hosts[a])),
				Subject:      pkix.Name{CommonName: a.String()},
				IPAddresses:  []net.IP{a.AsSlice()},
				NotBefore:    time.Now().Add(-time.Hour),
				NotAfter:     time.Now().Add(24 * time.Hour),
				KeyUsage:     x509.KeyUsageDigitalSignature,
				ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			}
			ld, err := x509.CreateCertificate(rand.Reader, lt, ca, &lk.PublicKey, key)
			if err != nil {
				return nil, err
			}
			c := &tls.Certificate{Certificate: [][]byte{ld}, PrivateKey: lk}
			certs[a] = c
			return c, nil
		},
	}
	return nil
}

// writeCA writes the CA's certificate to path, for SSL_CERT_FILE.
func (s *webSite) writeCA(path string) error { return os.WriteFile(path, s.ca, 0o644) }

// fillerText is n bytes of words, the text that pads the pages.
func fillerText(n int) []byte {
	words := strings.Fields("the crawler fetched a page of text with links to other pages on this host and some to other hosts politeness latency queue worker broker")
	r := mrand.New(mrand.NewPCG(1, 2))
	var b []byte
	for len(b) < n {
		b = append(b, words[r.IntN(len(words))]...)
		if r.IntN(12) == 0 {
			b = append(b, ".\n"...)
		} else {
			b = append(b, ' ')
		}
	}
	return b[:n]
}

// urls returns every URL of the site, host by host, robots.txt first,
// then / and the pages in order.
func (s *webSite) urls() []string {
	var u []string
	for h := range s.cfg.hosts {
		u = append(u, s.base[h]+"/robots.txt", s.base[h]+"/")
		for p := 1; p < s.size[h]; p++ {
			u = append(u, s.base[h]+"/p/"+strconv.Itoa(p))
		}
	}
	return u
}

// starts returns the home page of every host.
func (s *webSite) starts() []string {
	u := make([]string, len(s.base))
	for h, b := range s.base {
		u[h] = b + "/"
	}
	return u
}

// expected is the number of URLs of the site: its pages and robots.txt files.
func (s *webSite) expected() int {
	n := 0
	for _, z := range s.size {
		n += z + 1
	}
	return n
}

// rng is a generator drawn from the site's seed and the values given:
// the same in every process, so that every run of the bench serves the
// same site with the same delays.
func (s *webSite) rng(vals ...uint64) *mrand.Rand {
	x := splitmix(s.cfg.seed)
	for _, v := range vals {
		x = splitmix(x ^ v)
	}
	return mrand.New(mrand.NewPCG(x, x^0x9e3779b97f4a7c15))
}

// splitmix is SplitMix64's mix of x.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// hangs tells whether the first request for page p of host h hangs.
func (s *webSite) hangs(h, p int) bool {
	return s.cfg.timeouts > 0 && s.rng(uint64(h), uint64(p), 7).Float64() < s.cfg.timeouts
}

// latency is the delay of request number attempt (0 for the first) of
// page p of host h (p = size for robots.txt): log-normal with median
// cfg.median (σ = 0.5), or cfg.slow for 1%; cfg.hang for a hanging
// page's first request.
func (s *webSite) latency(h, p, attempt int) time.Duration {
	if attempt == 0 && p < s.size[h] && s.hangs(h, p) {
		return s.cfg.hang
	}
	r := s.rng(uint64(h), uint64(p), uint64(attempt))
	if r.Float64() < 0.01 {
		return s.cfg.slow
	}
	return time.Duration(float64(s.cfg.median) * math.Exp(0.5*r.NormFloat64()))
}

// ServeHTTP serves a page, robots.txt, or 404.
func (s *webSite) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	h, p, ok := s.route(r)
	if !ok {
		s.other.Add(1)
		http.NotFound(w, r)
		return
	}
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	attempt := int(s.count[h][p].Add(1)) - 1
	// A hanging page's requests are counted but do not time the run:
	// when the timeout's retry comes depends on where the page falls in
	// the run, not on the client's scheduling, and up to 10 s of a 30 s
	// run would be its alone.
	timed := p == s.size[h] || !s.hangs(h, p)
	t := time.NewTimer(s.latency(h, p, attempt))
	select {
	case <-t.C:
	case <-r.Context().Done():
		t.Stop()
		s.note(h, p, attempt, start, timed, true, connID(r))
		return
	}
	var body []byte
	if p == s.size[h] {
		body = []byte("User-agent: *\nAllow: /\n")
		w.Header().Set("Content-Type", "text/plain")
	} else {
		body = s.page(h, p)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
	s.note(h, p, attempt, start, timed, false, connID(r))
}

// pageRequest is one request of a page, for the account of the pages
// fetched twice (twiceWhy).
type pageRequest struct {
	start, end time.Time
	cut        bool // its client went away before the response was written
	conn       int
}

// remember keeps r, request number attempt (0 for the first) of page p
// of host h, if it may turn out to be fetched twice: the first of every
// page, and every later one; s.mu held.
func (s *webSite) remember(h, p, attempt int, r pageRequest) {
	if p == s.size[h] {
		return
	}
	k := [2]int{h, p}
	if attempt == 0 {
		if s.firsts == nil {
			s.firsts = map[[2]int]pageRequest{}
		}
		s.firsts[k] = r
		return
	}
	if s.seconds == nil {
		s.seconds = map[[2]int][]pageRequest{}
	}
	s.seconds[k] = append(s.seconds[k], r)
}

// twiceWhy says how the pages fetched twice were requested: how many
// first requests the client cut (a timeout, a connection it closed) or
// were served, the gaps from a first request's end to the next one's
// start, and the first few pages with their requests' times (seconds from
// the window's start) and connections: what tells a page's retry after
// an error (a cut first request, a short gap) from a lease that ran out
// (a served first request, a gap near the lease) or a delivery handed
// out twice (served, another connection, a short gap).
func (s *webSite) twiceWhy(twice func(h, p int) bool) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys [][2]int
	for k := range s.seconds {
		if twice(k[0], k[1]) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return ""
	}
	slices.SortFunc(keys, func(a, b [2]int) int { return s.firsts[a].start.Compare(s.firsts[b].start) })
	cut := 0
	var gaps []time.Duration
	for _, k := range keys {
		f := s.firsts[k]
		if f.cut {
			cut++
		}
		gaps = append(gaps, s.seconds[k][0].start.Sub(f.end))
	}
	slices.Sort(gaps)
	var b strings.Builder
	fmt.Fprintf(&b, "of the %d pages fetched twice, %d first requests cut by the client, %d served; gap from a first request's end to the next's start: min %v, median %v, max %v",
		len(keys), cut, len(keys)-cut, gaps[0].Round(time.Millisecond), gaps[len(gaps)/2].Round(time.Millisecond), gaps[len(gaps)-1].Round(time.Millisecond))
	at := func(t time.Time) string { return fmt.Sprintf("%.3fs", t.Sub(s.first).Seconds()) }
	for i, k := range keys[:min(len(keys), 5)] {
		sep := ";"
		if i > 0 {
			sep = ","
		}
		f := s.firsts[k]
		how := "served"
		if f.cut {
			how = "cut"
		}
		fmt.Fprintf(&b, "%s host %d page %d: %s-%s %s (conn %d)", sep, k[0], k[1], at(f.start), at(f.end), how, f.conn)
		for _, r := range s.seconds[k] {
			how = "served"
			if r.cut {
				how = "cut"
			}
			fmt.Fprintf(&b, " then %s-%s %s (conn %d)", at(r.start), at(r.end), how, r.conn)
		}
	}
	return b.String()
}

// note records request number attempt (0 for the first) to page p of
// host h, that started at start and ends now; timed: its times bound the
// run's window; cut: its client went away before the response.
func (s *webSite) note(h, p, attempt int, start time.Time, timed, cut bool, conn int) {
	end := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	s.remember(h, p, attempt, pageRequest{start: start, end: end, cut: cut, conn: conn})
	if s.tracing {
		s.trace = append(s.trace, traced{h, p, start, end, timed, conn})
	}
	if !timed {
		return
	}
	if s.first.IsZero() || start.Before(s.first) {
		s.first = start
	}
	s.last = latest(s.last, end)
	s.busy += end.Sub(start)
	u := &s.perHost[h]
	if u.first.IsZero() || start.Before(u.first) {
		u.first = start
	}
	u.last = latest(u.last, end)
	u.busy += end.Sub(start)
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// route finds the host and page of r.
func (s *webSite) route(r *http.Request) (h, p int, ok bool) {
	la, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if la == nil {
		return 0, 0, false
	}
	ap, err := netip.ParseAddrPort(la.String())
	if err != nil {
		return 0, 0, false
	}
	h, ok = s.hosts[ap.Addr()]
	if !ok {
		return 0, 0, false
	}
	switch path := r.URL.Path; {
	case path == "/":
		return h, 0, true
	case path == "/robots.txt":
		return h, s.size[h], true
	case strings.HasPrefix(path, "/p/"):
		p, err := strconv.Atoi(path[3:])
		if err != nil || p < 1 || p >= s.size[h] {
			return 0, 0, false
		}
		return h, p, true
	}
	return 0, 0, false
}

// page is the HTML of page p of host h: 30 to 150 links, 20 to 80 KB.
func (s *webSite) page(h, p int) []byte {
	r := s.rng(uint64(h), uint64(p), 99)
	size := 20<<10 + r.IntN(60<<10)
	b := make([]byte, 0, size+256)
	b = fmt.Appendf(b, "<!DOCTYPE html>\n<html><head><title>host %d page %d</title></head><body>\n<h1>host %d page %d</h1>\n", h, p, h, p)
	n := 30 + r.IntN(121)
	link := func(host, page int) {
		b = append(b, `<a href="`...)
		if host != h {
			b = append(b, s.base[host]...)
		}
		if page == 0 {
			b = append(b, '/')
		} else {
			b = fmt.Appendf(b, "/p/%d", page)
		}
		b = append(b, "\">a link</a>\n"...)
	}
	for _, c := range []int{2*p + 1, 2*p + 2} {
		if c < s.size[h] {
			link(h, c)
			n--
		}
	}
	for range n {
		if r.IntN(20) == 0 {
			o := r.IntN(s.cfg.hosts)
			link(o, r.IntN(s.size[o]))
		} else {
			link(h, r.IntN(s.size[h]))
		}
	}
	b = append(b, "<p>"...)
	if pad := size - len(b) - 20; pad > 0 {
		off := r.IntN(len(s.filler) - pad + 1)
		b = append(b, s.filler[off:off+pad]...)
	}
	return append(b, "</p></body></html>\n"...)
}

// topBound is the least time the largest host (host 0) takes at perHost
// requests at once: its requests' latencies, summed, over perHost (a
// hanging page's retry counted, not its hang). A window this long is
// the site's, whatever the client's scheduling.
func (s *webSite) topBound(perHost int) time.Duration {
	var sum time.Duration
	for p := range s.size[0] + 1 {
		a := 0
		if p < s.size[0] && s.hangs(0, p) {
			a = 1
		}
		sum += s.latency(0, p, a)
	}
	return sum / time.Duration(max(1, perHost))
}

// reset forgets the counts and the timing, for the next run.
func (s *webSite) reset() {
	for h := range s.count {
		for p := range s.count[h] {
			s.count[h][p].Store(0)
		}
	}
	s.other.Store(0)
	s.conns.reset()
	s.mu.Lock()
	s.first, s.last, s.n = time.Time{}, time.Time{}, 0
	s.busy, s.samples, s.trace = 0, nil, nil
	s.firsts, s.seconds = nil, nil
	clear(s.perHost)
	s.mu.Unlock()
}

// window is what the site saw since the last reset.
func (s *webSite) window() window {
	s.mu.Lock()
	defer s.mu.Unlock()
	return window{First: s.first, Last: s.last, Requests: s.n}
}

// use is how busy the site was since the last reset, over the window.
func (s *webSite) use() siteUse {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := siteUse{first: s.first, window: s.last.Sub(s.first)}
	u.top = hostSpan{host: 0, pages: s.size[0], use: s.perHost[0]}
	for h, x := range s.perHost {
		if x.last.IsZero() {
			continue
		}
		u.last = append(u.last, hostSpan{host: h, pages: s.size[h], use: x})
		slices.SortFunc(u.last, func(a, b hostSpan) int { return b.use.last.Compare(a.use.last) })
		u.last = u.last[:min(len(u.last), 3)]
	}
	if u.window > 0 {
		u.inFlight = float64(s.busy) / float64(u.window)
		for i := range u.tenths {
			from := s.first.Add(u.window * time.Duration(i) / 10)
			to := s.first.Add(u.window * time.Duration(i+1) / 10)
			var sum, n int64
			for _, x := range s.samples {
				if !x.at.Before(from) && x.at.Before(to) {
					sum += x.n
					n++
				}
			}
			if n > 0 {
				u.tenths[i] = float64(sum) / float64(n)
			}
		}
	}
	return u
}

// siteUse is how busy the site was over a run's window: what a
// scheduler kept in flight, which pages/s alone hides.
type siteUse struct {
	first    time.Time
	window   time.Duration
	inFlight float64     // requests in flight, the window's mean
	tenths   [10]float64 // requests in flight (sampled every sampleEvery), mean over each tenth of the window
	top      hostSpan    // the largest host's
	last     []hostSpan  // the hosts whose last request ended last, last first
}

// hostSpan is a host's share of a run.
type hostSpan struct {
	host, pages int
	use         hostUse
}

// say says where h fell in u's window and how busy it was over its span.
func (u siteUse) say(h hostSpan) string {
	span := h.use.last.Sub(h.use.first)
	if span <= 0 || u.window <= 0 {
		return fmt.Sprintf("host %d (%d pages): -", h.host, h.pages)
	}
	at := func(t time.Time) float64 { return 100 * t.Sub(u.first).Seconds() / u.window.Seconds() }
	return fmt.Sprintf("host %d (%d pages): %.2f in flight from %.0f%% to %.0f%% of the window", h.host, h.pages, float64(h.use.busy)/float64(span), at(h.use.first), at(h.use.last))
}

// String says it in a line, for the log.
func (u siteUse) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%.0f requests in flight on average over %.1fs; by tenth of the window:", u.inFlight, u.window.Seconds())
	for _, t := range u.tenths {
		fmt.Fprintf(&b, " %.0f", t)
	}
	fmt.Fprintf(&b, "; the largest, %s; ending last:", u.say(u.top))
	for i, h := range u.last {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " %s", u.say(h))
	}
	return b.String()
}

// tally is what the site's counts say of a run.
type tally struct {
	twice   int // pages fetched more than once, beyond the retry of a hanging page
	robots  int // robots.txt files fetched more than once (two workers that find none stored at once)
	missing int // URLs never fetched
	other   int64
	why     string // how the pages fetched twice were requested (see twiceWhy); "" if none was
}

// tally counts the pages and robots.txt files fetched twice and the URLs
// never fetched.
func (s *webSite) tally() tally {
	var t tally
	for h := range s.count {
		for p := range s.count[h] {
			n := int(s.count[h][p].Load())
			allowed := 1
			if p < s.size[h] && s.hangs(h, p) {
				allowed = 2
			}
			switch {
			case n == 0:
				t.missing++
			case n > allowed && p == s.size[h]:
				t.robots++
			case n > allowed:
				t.twice++
			}
		}
	}
	t.other = s.other.Load()
	if t.twice > 0 {
		t.why = s.twiceWhy(func(h, p int) bool {
			allowed := 1
			if s.hangs(h, p) {
				allowed = 2
			}
			return int(s.count[h][p].Load()) > allowed
		})
	}
	return t
}

// errWebIncomplete says that a run missed URLs or fetched some twice.
var errWebIncomplete = errors.New("incomplete")

// check returns an error if t shows URLs missed or fetched twice.
func (t tally) check() error {
	if t.missing > 0 || t.twice > 0 {
		err := fmt.Errorf("%w: %d URLs never fetched, %d pages fetched twice, %d requests for no page", errWebIncomplete, t.missing, t.twice, t.other)
		if t.why != "" {
			err = fmt.Errorf("%w (%s)", err, t.why)
		}
		return err
	}
	return nil
}

// served returns the URLs of the site not yet served as often as a crawl
// must ask for them (twice for a page whose first request hangs), the
// requests in progress, and the requests so far: what tells the end of a
// crawl by workers that serve on when the crawl is idle
// (--idle-timeout=0), and a stall.
func (s *webSite) served() (left int, inFlight, requests int64) {
	requests = s.other.Load()
	for h := range s.count {
		for p := range s.count[h] {
			n := int64(s.count[h][p].Load())
			requests += n
			want := int64(1)
			if p < s.size[h] && s.hangs(h, p) {
				want = 2
			}
			if n < want {
				left++
			}
		}
	}
	return left, s.inFlight.Load(), requests
}

// waitServed waits until the site has served every URL and has no
// request in progress (served), or ctx ends, or no request came for
// stall with some URLs not served yet.
func (s *webSite) waitServed(ctx context.Context, stall time.Duration) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	last, since := int64(-1), time.Now()
	for {
		left, inFlight, n := s.served()
		if left == 0 && inFlight == 0 {
			return nil
		}
		if n != last || inFlight > 0 {
			last, since = n, time.Now()
		} else if time.Since(since) > stall {
			return fmt.Errorf("%w: no request for %v with %d URLs not served as often as a crawl asks", errWebIncomplete, stall, left)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the site's last %d URLs: %w", left, ctx.Err())
		case <-t.C:
		}
	}
}
