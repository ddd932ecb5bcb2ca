package engine

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// DefaultUserAgent is the User-Agent of a crawler whose FetchConfig set none.
const DefaultUserAgent = "trawl/0.1 (+https://github.com/trawlhq/trawl)"

// ErrBodyTooLarge is returned (wrapped, with the URL) by Fetch when a response
// body is larger than FetchConfig.MaxBodySize.
var ErrBodyTooLarge = errors.New("engine: body too large")

// ErrHeaderTooLarge is returned (wrapped, with the URL) by Fetch when a
// response's header is larger than FetchConfig.MaxHeaderSize.
var ErrHeaderTooLarge = errors.New("engine: response header too large")

// ErrLocalRefusal is wrapped by errors of refusals that depend on this
// worker's own configuration rather than on the request: the address guard
// (lifted by FetchConfig.AllowPrivate, trawl's --allow-private, or by
// trusting the host). Such a request is not done: another worker, or this
// one reconfigured, may fetch it. Errors wrapping it wrap
// ErrForbiddenAddress too.
var ErrLocalRefusal = errors.New("engine: refused by this worker's configuration (see --allow-private)")

// defaultMaxBodySize is FetchConfig.MaxBodySize's default.
const defaultMaxBodySize = 10 << 20

// MaxURLLength is the longest URL trawl accepts, in bytes, wherever a URL
// enters: start URLs, links, redirects, requests read from the queue.
const MaxURLLength = 8 << 10

// ErrURLTooLong is wrapped by the errors of URLs over MaxURLLength.
var ErrURLTooLong = errors.New("engine: url too long")

// errBadURL is returned (wrapped) by Fetch for a URL it cannot fetch.
var errBadURL = errors.New("bad url")

// FetchConfig configure how a crawler fetches pages. The zero value gives the documented defaults.
//
// Memory: a response in progress holds at most MaxHeaderSize of header and
// MaxBodySize of (decoded) body, so a crawler's responses take at most
// Config.Concurrency × (MaxHeaderSize + MaxBodySize): 16 × 11 MiB with the
// defaults. A robots.txt is fetched within the slot of the page that asked
// for it.
type FetchConfig struct {
	UserAgent      string        // "" = DefaultUserAgent
	ConnectTimeout time.Duration // TCP connect and TLS handshake; 0 = 10s
	Timeout        time.Duration // total per request including the body; 0 = 30s
	MaxBodySize    int64         // 0 = 10 MiB; larger bodies give ErrBodyTooLarge
	MaxHeaderSize  int64         // 0 = 1 MiB; larger response headers give ErrHeaderTooLarge
	AllowPrivate   bool          // lift the address guard
	Logger         *slog.Logger  // nil = discard
	// Header is sent with every request, robots.txt and sitemaps included;
	// a request's own Header replaces a header of the same name.
	// Accept-Encoding is the transport's (it asks for gzip and decodes
	// it): one set here or in a request is not sent.
	Header http.Header
	// Jar keeps cookies. nil = a fresh jar per crawler (so per worker)
	// that stores Set-Cookie per host as a browser does, domain cookies
	// bounded by the public suffix list; NoCookies turns cookies off.
	Jar       http.CookieJar
	NoCookies bool
	// Proxy, if set, is the proxy of every request (http, https or
	// socks5 URL, with user:password if needed). nil = the environment:
	// HTTP_PROXY, HTTPS_PROXY and NO_PROXY (or their lower-case forms).
	Proxy *url.URL
}

// httpFetcher fetches single requests over one shared HTTP transport (keep-alive,
// HTTP/2, a proxy from FetchConfig.Proxy or the environment) with one
// cookie jar (see FetchConfig.Jar), adding FetchConfig.Header to every
// request. It does not follow redirects: a 3xx
// response is returned as it is, so that the caller can pass its Location
// through the duplicate filter as a new request.
//
// The address guard refuses to connect to loopback, private (RFC 1918,
// fc00::/7), link-local, unspecified, multicast, shared (100.64.0.0/10),
// reserved and cloud metadata addresses (169.254.169.254, fd00:ec2::254),
// and IPv6 forms embedding such an IPv4 address. It checks the address
// actually dialled, after DNS resolution, so a name that resolves (or
// rebinds) to a forbidden address is refused; since redirects are separate
// fetches, every hop is checked. Hosts given to Trust, and all hosts when
// FetchConfig.AllowPrivate is set, skip the guard.
//
// Proxies: when the environment (HTTP_PROXY, HTTPS_PROXY, NO_PROXY) sends a
// request through a proxy, the connection dialled is the proxy's, which the
// operator configured; it is not guarded. The proxy resolves the target's
// name, so the guard cannot see that address: only URLs whose host is an IP
// literal are checked (before anything is dialled). Operators who use a proxy
// should make it refuse private destinations.
//
// An httpFetcher is safe for concurrent use.
type httpFetcher struct {
	client    *http.Client
	transport *http.Transport
	guard     *guard
	userAgent string
	header    http.Header
	timeout   time.Duration
	maxBody   int64
	maxHeader int64
	log       *slog.Logger
	bodies    sync.Pool     // *[]byte: bodies given back by recycle
	fetches   atomic.Uint64 // fetches begun: each claims its connection by its number (see poolConn)
}

// tlsSessions is how many hosts' TLS sessions a fetcher keeps for
// resumption, the most recent: a few KiB each, certificates included,
// so a few MiB at most, whatever the crawl's hosts. 256 was too few: a
// worker that starts 1,000 hosts' home pages within seconds (a Redis
// worker's read-ahead does) had their sessions all pushed out before any
// host's second connection came, 7-9 s later, and resumed 14-47 of about
// 1,000 handshakes on bench-web; at 1,024, 433 of 933 (BENCHMARKS.md,
// issue 26, session 13).
const tlsSessions = 1024

// maxRecycled is the largest body buffer recycle keeps (most HTML pages
// are far smaller).
const maxRecycled = 256 << 10

// recycle gives back body, a Response.Body of this fetcher that nothing
// refers to any more, for a later fetch to read into.
func (f *httpFetcher) recycle(body []byte) {
	if c := cap(body); c > 0 && c <= maxRecycled {
		body = body[:0]
		f.bodies.Put(&body)
	}
}

// newHTTPFetcher returns an httpFetcher configured by o.
func newHTTPFetcher(o FetchConfig) *httpFetcher {
	return newFetcher(o, proxyFunc(o))
}

// newFetcher lets tests choose the proxy function (ProxyFromEnvironment reads
// the environment only once per process).
func newFetcher(o FetchConfig, proxy func(*http.Request) (*url.URL, error)) *httpFetcher {
	if o.UserAgent == "" {
		o.UserAgent = DefaultUserAgent
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 10 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.MaxBodySize <= 0 {
		o.MaxBodySize = defaultMaxBodySize
	}
	if o.MaxHeaderSize <= 0 {
		o.MaxHeaderSize = 1 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	f := &httpFetcher{
		guard:     newGuard(o.AllowPrivate),
		userAgent: o.UserAgent,
		header:    o.Header,
		timeout:   o.Timeout,
		maxBody:   o.MaxBodySize,
		maxHeader: o.MaxHeaderSize,
		log:       o.Logger,
	}
	plain := &net.Dialer{Timeout: o.ConnectTimeout, KeepAlive: 30 * time.Second}
	guarded := &net.Dialer{Timeout: o.ConnectTimeout, KeepAlive: 30 * time.Second, Control: control}
	f.transport = &http.Transport{
		Proxy: func(req *http.Request) (*url.URL, error) {
			u, err := proxy(req)
			if u != nil {
				f.guard.noteProxy(u)
			}
			return u, err
		},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			d := guarded
			if f.guard.exempt(addr) {
				d = plain
			}
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &poolConn{Conn: c}, nil
		},
		// Resumed sessions: a second connection to a host (--per-host 2,
		// or one its server closed while idle) skips the certificate's
		// parsing and verification, about half a full handshake's CPU.
		TLSClientConfig:        &tls.Config{ClientSessionCache: tls.NewLRUClientSessionCache(tlsSessions)},
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           1024,
		MaxIdleConnsPerHost:    128, // concurrency 64 to one host keeps its connections
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    o.ConnectTimeout,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: o.MaxHeaderSize,
	}
	f.client = &http.Client{
		Jar:       newJar(o),
		Transport: f.transport,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	return f
}

// Trust exempts host from the address guard. host is "host:port" (a host
// name or IP address and a port: that port only, as TrustedAddr gives for a
// start URL the operator gave) or a bare host name or IP address (every
// port of it). Trust is safe for concurrent use.
func (f *httpFetcher) Trust(host string) { f.guard.trust(host) }

// TrustedAddr is what to Trust for u, a start URL an operator gave: its
// exact host and port (the scheme's default port when u names none), so
// that trusting http://127.0.0.1:8080/ does not open 127.0.0.1:6379.
func TrustedAddr(u *url.URL) string {
	return net.JoinHostPort(u.Hostname(), defaultPort(u))
}

// Fetch sends r and reads the whole response body, within the total timeout
// and the body-size cap. The request method defaults to GET; User-Agent is
// the httpFetcher's unless r.Header sets one. A gzip-encoded body is decoded by
// the transport; the cap applies to the decoded body. Redirects are not
// followed. A response with any status code is returned without error; errors
// are for requests that got no complete response (see Retryable).
func (f *httpFetcher) Fetch(ctx context.Context, r *Request) (*Response, error) {
	return f.fetch(ctx, r, f.maxBody, false)
}

// fetch is Fetch with a body limit; with truncate, a longer body is cut
// to limit instead of failing.
func (f *httpFetcher) fetch(ctx context.Context, r *Request, limit int64, truncate bool) (*Response, error) {
	return f.do(ctx, r, limit, truncate, nil)
}

// fetchStream is Fetch for a sitemap: a 2xx body is not read into the
// Response but handed to read as it arrives (decoded from gzip by the
// transport, if so encoded), whose result becomes Response.sitemap; an
// error reading the body (a timeout, a reset) is the fetch's. Other
// statuses are read as Fetch reads them.
func (f *httpFetcher) fetchStream(ctx context.Context, r *Request, read func(io.Reader) *sitemapRead) (*Response, error) {
	return f.do(ctx, r, f.maxBody, true, read)
}

// do is fetch, and fetchStream with read.
func (f *httpFetcher) do(ctx context.Context, r *Request, limit int64, truncate bool, read func(io.Reader) *sitemapRead) (*Response, error) {
	u, err := f.target(r)
	if err != nil {
		return nil, err
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	timedOut := func(err error) error {
		if parent.Err() == nil && ctx.Err() != nil {
			return fmt.Errorf("%w (total timeout %v)", err, f.timeout)
		}
		return err
	}
	// Every fetch claims its connection, so that one found spare is
	// retired only if no fetch took it since (see poolConn).
	spare, _ := parent.Value(spareConnKey{}).(func() bool)
	fetch := f.fetches.Add(1)
	var conn *poolConn
	req, err := f.request(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { conn = claim(info.Conn, fetch) },
	}), r, u)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, f.doErr(u, err, timedOut)
	}
	defer resp.Body.Close()
	latency := time.Since(start)

	if read != nil && resp.StatusCode >= 200 && resp.StatusCode < 300 {
		body := &errReader{r: resp.Body}
		sm := read(body)
		if body.err != nil {
			return nil, timedOut(fmt.Errorf("fetch %s: read body: %w", u, body.err))
		}
		return &Response{Request: r, URL: u, StatusCode: resp.StatusCode, Header: resp.Header, Latency: latency, sitemap: sm}, nil
	}
	body, err := f.readBody(resp, u, limit, truncate, timedOut)
	if err != nil {
		return nil, err
	}
	if conn != nil && spare != nil && resp.ProtoMajor == 1 && spare() { // HTTP/2: one connection for every request to the host
		conn.retire(fetch)
	}
	if f.log.Enabled(ctx, slog.LevelDebug) { // u.String() costs an allocation per page
		f.log.Debug("fetched", "url", Redact(u.String()), "status", resp.StatusCode,
			"bytes", len(body), "duration", time.Since(start))
	}
	return &Response{
		Request:    r,
		URL:        u,
		StatusCode: resp.StatusCode,
		Header:     resp.Header,
		Body:       body,
		Latency:    latency,
	}, nil
}

// target is r's URL, parsed, if it may be fetched: not too long,
// absolute http or https, and not refused by the address guard.
func (f *httpFetcher) target(r *Request) (*url.URL, error) {
	if len(r.URL) > MaxURLLength {
		return nil, fmt.Errorf("fetch %.64q…: %w: %d bytes, the limit is %d", r.URL, ErrURLTooLong, len(r.URL), MaxURLLength)
	}
	u, err := url.Parse(r.URL)
	if err != nil {
		return nil, fmt.Errorf("fetch %q: %w: %w", r.URL, errBadURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("fetch %q: %w: want an absolute http or https URL", r.URL, errBadURL)
	}
	if err := f.guard.checkURLHost(u); err != nil {
		return nil, fmt.Errorf("fetch %s: %w: %w", u, ErrLocalRefusal, err)
	}
	return u, nil
}

// request is the HTTP request of r, for u, with the fetcher's headers
// under r's and its User-Agent unless r names one.
func (f *httpFetcher) request(ctx context.Context, r *Request, u *url.URL) (*http.Request, error) {
	method := r.Method
	if method == "" {
		method = http.MethodGet
	}
	var body io.Reader
	if len(r.Body) > 0 {
		body = bytes.NewReader(r.Body)
	}
	// u as it is, not printed and parsed again (the client reads a
	// request's URL, never writes it): without an empty port, as
	// NewRequest makes it.
	req, err := http.NewRequestWithContext(ctx, method, "", body)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w: %w", u, errBadURL, err)
	}
	req.URL = u
	if i := strings.LastIndexByte(u.Host, ':'); i >= 0 && i == len(u.Host)-1 && i > strings.LastIndexByte(u.Host, ']') {
		ru := *u
		ru.Host = u.Host[:i]
		req.URL = &ru
	}
	req.Host = req.URL.Host
	req.Header = requestHeader(f.header, r.Header)
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", f.userAgent)
	}
	return req, nil
}

// doErr is the error of a fetch of u whose request failed with err.
func (f *httpFetcher) doErr(u *url.URL, err error, timedOut func(error) error) error {
	// The transport says so only in words (net/http has no sentinel).
	if strings.Contains(err.Error(), "server response headers exceeded") {
		return fmt.Errorf("fetch %s: %w: more than %d bytes", u, ErrHeaderTooLarge, f.maxHeader)
	}
	if errors.Is(err, ErrForbiddenAddress) {
		return fmt.Errorf("%w: %w", ErrLocalRefusal, err)
	}
	return timedOut(err) // *url.Error names the method and URL
}

// spareConnKey is the context key of withSpareConn's function.
type spareConnKey struct{}

// withSpareConn returns ctx for a page's fetch whose HTTP/1 connection is
// closed once the body is read, rather than kept idle for the host's next
// request, if spare says so then (see workbench.spare). spare may be nil.
func withSpareConn(ctx context.Context, spare func() bool) context.Context {
	if spare == nil {
		return ctx
	}
	return context.WithValue(ctx, spareConnKey{}, spare)
}

// poolConn is a connection the fetcher dialled. Each fetch claims the
// connection it gets (claim), and one that finds it spare retires it if
// no other fetch claimed it since: the transport then drops it.
type poolConn struct {
	net.Conn
	owner atomic.Uint64 // the fetch that last claimed it, or retired
}

// retired is poolConn.owner once the connection is retired.
const retired = ^uint64(0)

// claim records fetch, a number of the fetcher's, as the last to get
// conn, a connection of the transport's: a *tls.Conn over a poolConn for
// HTTPS, a poolConn for HTTP (to a proxy too: plain HTTP through one
// shares it between hosts, and retiring it costs a new connection to the
// proxy). It returns the poolConn, nil for another.
func claim(conn net.Conn, fetch uint64) *poolConn {
	if t, ok := conn.(*tls.Conn); ok {
		conn = t.NetConn()
	}
	c, ok := conn.(*poolConn)
	if !ok {
		return nil
	}
	// Not over a retire: the pool may hand out a connection just
	// retired, whose write must fail (the transport sends the request
	// again on another) rather than reach the server and have its
	// response cut by the retire's deadline.
	for o := c.owner.Load(); o != retired && !c.owner.CompareAndSwap(o, fetch); o = c.owner.Load() {
	}
	return c
}

// retire has the transport drop c, whose response to fetch was read to
// its end (so the pool holds c, or soon will), unless another fetch
// claimed it since. Reads end from now on, one that waits included (the
// pool's, which looks out for the server's close of an idle
// connection): the pool drops c as if its server had closed it. Writes
// fail, so a request that the pool handed c meanwhile is sent on another
// connection, not here.
func (c *poolConn) retire(fetch uint64) {
	if c.owner.CompareAndSwap(fetch, retired) {
		_ = c.SetReadDeadline(time.Now())
	}
}

// Read reads as the connection does, but a retired connection reads its end.
func (c *poolConn) Read(p []byte) (int, error) {
	if c.owner.Load() == retired {
		return 0, io.EOF
	}
	n, err := c.Conn.Read(p)
	if err != nil && c.owner.Load() == retired {
		return n, io.EOF
	}
	return n, err
}

// Write writes as the connection does, but fails on a retired connection.
func (c *poolConn) Write(p []byte) (int, error) {
	if c.owner.Load() == retired {
		return 0, net.ErrClosed
	}
	return c.Conn.Write(p)
}

// readBody reads resp's body, of u, into a buffer of the fetcher's: at
// most limit bytes, a longer body failing with ErrBodyTooLarge, or cut to
// limit with truncate. A failed read's error goes through timedOut.
func (f *httpFetcher) readBody(resp *http.Response, u *url.URL, limit int64, truncate bool, timedOut func(error) error) ([]byte, error) {
	if resp.ContentLength > limit && !truncate {
		return nil, fmt.Errorf("fetch %s: %w: Content-Length %d over the limit of %d bytes",
			u, ErrBodyTooLarge, resp.ContentLength, limit)
	}
	var buf *bytes.Buffer
	if b, ok := f.bodies.Get().(*[]byte); ok {
		buf = bytes.NewBuffer(*b)
	} else {
		buf = new(bytes.Buffer)
	}
	if resp.ContentLength > 0 {
		// ReadFrom wants bytes.MinRead free before each read, the one
		// that finds the end too: without them a body of exactly its
		// Content-Length would be copied into a buffer twice its size.
		buf.Grow(int(min(resp.ContentLength, limit)) + bytes.MinRead)
	}
	n, err := buf.ReadFrom(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, timedOut(fmt.Errorf("fetch %s: read body: %w", u, err))
	}
	if n > limit {
		if !truncate {
			return nil, fmt.Errorf("fetch %s: %w: more than %d bytes", u, ErrBodyTooLarge, limit)
		}
		buf.Truncate(int(limit))
	}
	return buf.Bytes(), nil
}

// errReader keeps the first error of its reader other than io.EOF.
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF && e.err == nil {
		e.err = err
	}
	return n, err
}

// Close closes the transport's idle connections. The httpFetcher stays usable.
func (f *httpFetcher) Close() { f.transport.CloseIdleConnections() }

// isRetryable reports whether a Fetch error is worth retrying later: timeouts
// (connect, TLS handshake, total), connection refused, reset or aborted,
// unreachable networks, a connection closed before or during the response
// (EOF), and temporary DNS failures. It is false for nil, ErrBodyTooLarge,
// ErrHeaderTooLarge, ErrForbiddenAddress (and ErrLocalRefusal: see the
// crawler for those), ErrURLTooLong, bad URLs, TLS certificate errors,
// names that do not exist, a cancelled context, and anything it does not
// recognise.
func isRetryable(err error) bool {
	if err == nil {
		return false
	}
	// Permanent, whatever else the chain holds.
	var (
		hostnameErr  x509.HostnameError
		unknownCA    x509.UnknownAuthorityError
		invalidCert  x509.CertificateInvalidError
		verification *tls.CertificateVerificationError
		recordHeader tls.RecordHeaderError
	)
	switch {
	case errors.Is(err, ErrBodyTooLarge), errors.Is(err, ErrHeaderTooLarge), errors.Is(err, ErrForbiddenAddress),
		errors.Is(err, ErrURLTooLong),
		errors.Is(err, errBadURL), errors.Is(err, context.Canceled),
		errors.As(err, &hostnameErr), errors.As(err, &unknownCA),
		errors.As(err, &invalidCert), errors.As(err, &verification),
		errors.As(err, &recordHeader):
		return false
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return dnsErr.IsTemporary || dnsErr.IsTimeout
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.ETIMEDOUT), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return true
	}
	// HTTP/2 and the transport report some resets only as text.
	msg := err.Error()
	return strings.Contains(msg, "connection reset") || strings.Contains(msg, "stream error")
}
