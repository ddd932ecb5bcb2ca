package engine

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// newTestServer starts an httptest server on 127.0.0.1 that is closed with t.
func newTestServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// trusting returns an httpFetcher that trusts 127.0.0.1, closed with t.
func trusting(t *testing.T, o FetchConfig) *httpFetcher {
	t.Helper()
	f := newHTTPFetcher(o)
	f.Trust("127.0.0.1")
	t.Cleanup(f.Close)
	return f
}

func TestFetchSendsRequest(t *testing.T) {
	type seen struct {
		method, ua, custom, body, enc string
	}
	got := make(chan seen, 1)
	srv := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.UserAgent(), r.Header.Get("X-Custom"), string(b), r.Header.Get("Accept-Encoding")}
		w.Header().Set("X-Reply", "yes")
		w.WriteHeader(http.StatusTeapot)
		io.WriteString(w, "hello")
	})

	t.Run("default GET and user agent", func(t *testing.T) {
		f := trusting(t, FetchConfig{})
		req := &Request{URL: srv.URL + "/a"}
		resp, err := f.Fetch(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		s := <-got
		if s.method != "GET" || s.ua != DefaultUserAgent {
			t.Errorf("server saw method %q UA %q", s.method, s.ua)
		}
		if !strings.Contains(s.enc, "gzip") {
			t.Errorf("Accept-Encoding %q, want gzip", s.enc)
		}
		if resp.StatusCode != http.StatusTeapot || string(resp.Body) != "hello" ||
			resp.Header.Get("X-Reply") != "yes" || resp.Request != req || resp.URL.Path != "/a" {
			t.Errorf("response %d %q %v %v", resp.StatusCode, resp.Body, resp.Header, resp.URL)
		}
	})

	t.Run("method header body and custom UA option", func(t *testing.T) {
		f := trusting(t, FetchConfig{UserAgent: "mybot/2"})
		h := http.Header{"X-Custom": {"v"}}
		_, err := f.Fetch(context.Background(), &Request{URL: srv.URL, Method: "POST", Header: h, Body: []byte("payload")})
		if err != nil {
			t.Fatal(err)
		}
		s := <-got
		if s.method != "POST" || s.ua != "mybot/2" || s.custom != "v" || s.body != "payload" {
			t.Errorf("server saw %+v", s)
		}
		if h.Get("User-Agent") != "" {
			t.Error("Fetch modified the request's header")
		}
	})

	t.Run("request header User-Agent wins", func(t *testing.T) {
		f := trusting(t, FetchConfig{})
		_, err := f.Fetch(context.Background(), &Request{URL: srv.URL, Header: http.Header{"User-Agent": {"special"}}})
		if err != nil {
			t.Fatal(err)
		}
		if s := <-got; s.ua != "special" {
			t.Errorf("UA %q", s.ua)
		}
	})
}

func TestFetchGzip(t *testing.T) {
	srv := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		io.WriteString(zw, strings.Repeat("abc", 1000))
		zw.Close()
	})
	f := trusting(t, FetchConfig{})
	resp, err := f.Fetch(context.Background(), &Request{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Body) != strings.Repeat("abc", 1000) {
		t.Errorf("body not decoded: %d bytes", len(resp.Body))
	}

	// The cap applies to the decoded body (no gzip bombs).
	f = trusting(t, FetchConfig{MaxBodySize: 100})
	if _, err := f.Fetch(context.Background(), &Request{URL: srv.URL}); !errors.Is(err, ErrBodyTooLarge) {
		t.Errorf("err = %v, want ErrBodyTooLarge", err)
	}
}

func TestFetchBodyCap(t *testing.T) {
	const limit = 1024
	srv := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		n := 0
		fmt.Sscan(r.URL.Query().Get("n"), &n)
		if r.URL.Query().Get("chunked") != "" {
			w.(http.Flusher).Flush() // no Content-Length
		}
		w.Write([]byte(strings.Repeat("x", n)))
	})
	f := trusting(t, FetchConfig{MaxBodySize: limit})
	for _, tc := range []struct {
		n       int
		chunked bool
		tooBig  bool
	}{
		{limit, false, false},
		{limit, true, false},
		{limit + 1, false, true},
		{limit + 1, true, true},
		{100 * limit, true, true},
	} {
		u := fmt.Sprintf("%s/?n=%d", srv.URL, tc.n)
		if tc.chunked {
			u += "&chunked=1"
		}
		resp, err := f.Fetch(context.Background(), &Request{URL: u})
		if tc.tooBig {
			if !errors.Is(err, ErrBodyTooLarge) || !strings.Contains(err.Error(), srv.URL) {
				t.Errorf("%s: err = %v, want ErrBodyTooLarge naming the URL", u, err)
			}
			if isRetryable(err) {
				t.Errorf("%s: body too large is retryable", u)
			}
			continue
		}
		if err != nil || len(resp.Body) != tc.n {
			t.Errorf("%s: err %v, body %d bytes", u, err, len(resp.Body))
		}
	}
}

func TestFetchEndlessBody(t *testing.T) {
	srv := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		chunk := []byte(strings.Repeat("y", 4096))
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	})
	f := trusting(t, FetchConfig{MaxBodySize: 1 << 20})
	start := time.Now()
	_, err := f.Fetch(context.Background(), &Request{URL: srv.URL})
	if !errors.Is(err, ErrBodyTooLarge) {
		t.Fatalf("err = %v, want ErrBodyTooLarge", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("endless body took %v", d)
	}
}

// TestFetchTimeout runs in a synctest bubble over pipes, so the total
// timeout is exact on the bubble's clock however loaded the machine.
func TestFetchTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stop := make(chan struct{})
		arrived := make(chan struct{}, 10)
		pn := newPipeNet()
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case arrived <- struct{}{}:
			default:
			}
			if r.URL.Path == "/headers-then-stall" {
				io.WriteString(w, "partial")
				w.(http.Flusher).Flush()
			}
			select {
			case <-r.Context().Done():
			case <-stop:
			}
		})}
		go srv.Serve(pn)
		defer srv.Close()
		defer close(stop)
		piped := func(o FetchConfig) *httpFetcher {
			f := newHTTPFetcher(o)
			f.transport.DialContext = pn.dial
			t.Cleanup(f.Close)
			return f
		}
		const timeout = 200 * time.Millisecond
		f := piped(FetchConfig{Timeout: timeout})
		for _, path := range []string{"/no-headers", "/headers-then-stall"} {
			start := time.Now()
			_, err := f.Fetch(context.Background(), &Request{URL: "http://site.test" + path})
			d := time.Since(start)
			if err == nil {
				t.Fatalf("%s: no error from a stalled server", path)
			}
			if d != timeout {
				t.Errorf("%s: returned after %v, want %v", path, d, timeout)
			}
			if !isRetryable(err) {
				t.Errorf("%s: timeout %v is not retryable", path, err)
			}
		}

		// The caller's context is honoured too, and a cancel is not retryable.
		for len(arrived) > 0 {
			<-arrived
		}
		ctx, cancel := context.WithCancel(context.Background())
		f = piped(FetchConfig{})
		go func() {
			<-arrived // cancel once the request is in flight
			cancel()
		}()
		_, err := f.Fetch(ctx, &Request{URL: "http://site.test/no-headers"})
		if !errors.Is(err, context.Canceled) || isRetryable(err) {
			t.Errorf("cancelled fetch: err %v retryable %v", err, isRetryable(err))
		}
	})
}

func TestFetchDoesNotFollowRedirects(t *testing.T) {
	var targetHits atomic.Int32
	srv := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/target" {
			targetHits.Add(1)
			return
		}
		http.Redirect(w, r, "/target", http.StatusFound)
	})
	f := trusting(t, FetchConfig{})
	resp, err := f.Fetch(context.Background(), &Request{URL: srv.URL + "/start"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/target" {
		t.Errorf("got %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if n := targetHits.Load(); n != 0 {
		t.Errorf("redirect followed %d times", n)
	}
}

func TestFetchGuard(t *testing.T) {
	var hits atomic.Int32
	srv := newTestServer(t, func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	localhostURL := fmt.Sprintf("http://localhost:%d/", port)

	refused := func(t *testing.T, f *httpFetcher, u string) {
		t.Helper()
		before := hits.Load()
		_, err := f.Fetch(context.Background(), &Request{URL: u})
		if !errors.Is(err, ErrForbiddenAddress) {
			t.Errorf("%s: err = %v, want ErrForbiddenAddress", u, err)
		}
		if isRetryable(err) {
			t.Errorf("%s: forbidden address is retryable", u)
		}
		if hits.Load() != before {
			t.Errorf("%s: request reached the server", u)
		}
	}
	allowed := func(t *testing.T, f *httpFetcher, u string) {
		t.Helper()
		before := hits.Load()
		if _, err := f.Fetch(context.Background(), &Request{URL: u}); err != nil {
			t.Errorf("%s: %v", u, err)
		}
		if hits.Load() != before+1 {
			t.Errorf("%s: request did not reach the server", u)
		}
	}

	t.Run("untrusted loopback refused", func(t *testing.T) {
		f := newHTTPFetcher(FetchConfig{})
		defer f.Close()
		refused(t, f, srv.URL)
		// A name is checked on the address it resolves to.
		refused(t, f, localhostURL)
	})
	t.Run("dial check alone refuses", func(t *testing.T) {
		// Bypass the URL literal pre-check: the dialer's Control must refuse.
		f := newHTTPFetcher(FetchConfig{})
		defer f.Close()
		conn, err := f.transport.DialContext(context.Background(), "tcp", srv.Listener.Addr().String())
		if err == nil {
			conn.Close()
		}
		if !errors.Is(err, ErrForbiddenAddress) {
			t.Errorf("dial err = %v, want ErrForbiddenAddress", err)
		}
	})
	t.Run("trusted IP", func(t *testing.T) {
		f := newHTTPFetcher(FetchConfig{})
		defer f.Close()
		f.Trust("127.0.0.1")
		allowed(t, f, srv.URL)
		// Trusting the IP does not trust a name resolving to it.
		refused(t, f, localhostURL)
	})
	t.Run("trusted host and port", func(t *testing.T) {
		other := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {})
		f := newHTTPFetcher(FetchConfig{})
		defer f.Close()
		u, _ := url.Parse(srv.URL)
		f.Trust(TrustedAddr(u))
		allowed(t, f, srv.URL)
		// Another port of the same address stays guarded.
		refused(t, f, other.URL)
	})
	t.Run("trusted name", func(t *testing.T) {
		f := newHTTPFetcher(FetchConfig{})
		defer f.Close()
		f.Trust("LOCALHOST.") // case and trailing dot do not matter
		allowed(t, f, localhostURL)
		refused(t, f, srv.URL)
	})
	t.Run("AllowPrivate", func(t *testing.T) {
		f := newHTTPFetcher(FetchConfig{AllowPrivate: true})
		defer f.Close()
		allowed(t, f, srv.URL)
		allowed(t, f, localhostURL)
	})
	t.Run("literal metadata address refused before dialling", func(t *testing.T) {
		f := newHTTPFetcher(FetchConfig{ConnectTimeout: 50 * time.Millisecond})
		defer f.Close()
		for _, u := range []string{"http://169.254.169.254/latest/meta-data/", "http://[fd00:ec2::254]/", "http://[::ffff:127.0.0.1]:1/"} {
			if _, err := f.Fetch(context.Background(), &Request{URL: u}); !errors.Is(err, ErrForbiddenAddress) {
				t.Errorf("%s: err = %v", u, err)
			}
		}
	})
	t.Run("proxy connection exempt", func(t *testing.T) {
		// The server acts as a proxy (it answers any absolute-form request).
		proxyURL, _ := url.Parse(srv.URL)
		f := newFetcher(FetchConfig{}, func(*http.Request) (*url.URL, error) { return proxyURL, nil })
		defer f.Close()
		allowed(t, f, "http://example.com/")
		// Literal forbidden IPs are still refused though they would go through the proxy.
		refused(t, f, "http://10.0.0.1/")
		// Only the proxy's exact address is exempt, not its host.
		f2 := newFetcher(FetchConfig{}, func(*http.Request) (*url.URL, error) { return proxyURL, nil })
		defer f2.Close()
		f2.Fetch(context.Background(), &Request{URL: "http://example.com/"})
		if f2.guard.exempt(fmt.Sprintf("127.0.0.1:%d", port+1)) || !f2.guard.exempt(srv.Listener.Addr().String()) {
			t.Error("proxy exemption is not exactly the proxy's host and port")
		}
	})
}

func TestForbiddenAddr(t *testing.T) {
	for _, tc := range []struct {
		ip        string
		forbidden bool
	}{
		{"127.0.0.1", true},
		{"127.255.255.254", true},
		{"::1", true},
		{"10.1.2.3", true},
		{"172.16.0.1", true},
		{"172.31.255.255", true},
		{"172.32.0.1", false},
		{"192.168.1.1", true},
		{"fc00::1", true},
		{"fd12:3456::1", true},
		{"169.254.1.1", true},
		{"169.254.169.254", true},
		{"fe80::1", true},
		{"fe80::1%eth0", true},
		{"fd00:ec2::254", true},
		{"0.0.0.0", true},
		{"0.1.2.3", true},
		{"::", true},
		{"224.0.0.1", true},
		{"239.255.255.250", true},
		{"ff02::1", true},
		{"ff0e::1", true},
		{"100.64.0.1", true},
		{"100.127.255.255", true},
		{"100.128.0.1", false},
		{"100.63.255.255", false},
		{"255.255.255.255", true},
		{"198.18.0.1", true},
		{"::ffff:127.0.0.1", true},
		{"::ffff:10.0.0.1", true},
		{"::ffff:8.8.8.8", false},
		{"64:ff9b::7f00:1", true},   // NAT64 of 127.0.0.1
		{"64:ff9b::808:808", false}, // NAT64 of 8.8.8.8
		{"2002:a00:1::", true},      // 6to4 of 10.0.0.1
		{"2002:808:808::", false},
		{"8.8.8.8", false},
		{"1.1.1.1", false},
		{"93.184.216.34", false},
		{"2606:4700::1111", false},
		{"2001:4860:4860::8888", false},
	} {
		a := netip.MustParseAddr(tc.ip)
		if got := forbiddenAddr(a); got != tc.forbidden {
			t.Errorf("forbiddenAddr(%s) = %v, want %v", tc.ip, got, tc.forbidden)
		}
	}
	if !forbiddenAddr(netip.Addr{}) {
		t.Error("the invalid address is allowed")
	}
}

func TestRetryable(t *testing.T) {
	opErr := func(err error) error {
		return &url.Error{Op: "Get", URL: "http://x/", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", err)}}
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"refused", opErr(syscall.ECONNREFUSED), true},
		{"reset", opErr(syscall.ECONNRESET), true},
		{"host unreachable", opErr(syscall.EHOSTUNREACH), true},
		{"unexpected EOF mid-body", fmt.Errorf("fetch x: read body: %w", io.ErrUnexpectedEOF), true},
		{"EOF before response", &url.Error{Op: "Get", URL: "http://x/", Err: io.EOF}, true},
		{"deadline", &url.Error{Op: "Get", URL: "http://x/", Err: context.DeadlineExceeded}, true},
		{"net timeout", &net.OpError{Op: "dial", Err: timeoutErr{}}, true},
		{"DNS temporary", &net.DNSError{Err: "server misbehaving", IsTemporary: true}, true},
		{"DNS timeout", &net.DNSError{Err: "timeout", IsTimeout: true}, true},
		{"DNS not found", &net.DNSError{Err: "no such host", IsNotFound: true}, false},
		{"cancelled", &url.Error{Op: "Get", URL: "http://x/", Err: context.Canceled}, false},
		{"body too large", fmt.Errorf("fetch x: %w", ErrBodyTooLarge), false},
		{"forbidden", opErr(fmt.Errorf("%w: 127.0.0.1", ErrForbiddenAddress)), false},
		{"bad url", fmt.Errorf("fetch x: %w", errBadURL), false},
		{"unknown authority", &url.Error{Err: x509.UnknownAuthorityError{}}, false},
		{"hostname mismatch", &url.Error{Err: x509.HostnameError{Host: "x"}}, false},
		{"cert invalid", &url.Error{Err: x509.CertificateInvalidError{Reason: x509.Expired}}, false},
		{"cert verification", &url.Error{Err: &tls.CertificateVerificationError{Err: errors.New("bad")}}, false},
		{"unknown error", errors.New("something else"), false},
	} {
		if got := isRetryable(tc.err); got != tc.want {
			t.Errorf("%s: isRetryable(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestRetryableRealErrors(t *testing.T) {
	f := trusting(t, FetchConfig{})

	t.Run("connection refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		_, err = f.Fetch(context.Background(), &Request{URL: "http://" + addr + "/"})
		if err == nil || !isRetryable(err) {
			t.Errorf("refused: err %v retryable %v", err, isRetryable(err))
		}
	})
	t.Run("connection closed mid-body", func(t *testing.T) {
		srv := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "100")
			io.WriteString(w, "short")
			w.(http.Flusher).Flush()
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		})
		_, err := f.Fetch(context.Background(), &Request{URL: srv.URL})
		if err == nil || !isRetryable(err) {
			t.Errorf("mid-body close: err %v retryable %v", err, isRetryable(err))
		}
	})
	t.Run("untrusted certificate", func(t *testing.T) {
		srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		defer srv.Close()
		_, err := f.Fetch(context.Background(), &Request{URL: srv.URL})
		if err == nil || isRetryable(err) {
			t.Errorf("bad certificate: err %v retryable %v", err, isRetryable(err))
		}
	})
	t.Run("bad URLs", func(t *testing.T) {
		for _, u := range []string{"ftp://x/", "/relative", "http://%zz/", "http:///nohost"} {
			_, err := f.Fetch(context.Background(), &Request{URL: u})
			if err == nil || isRetryable(err) {
				t.Errorf("%q: err %v retryable %v", u, err, isRetryable(err))
			}
		}
		_, err := f.Fetch(context.Background(), &Request{URL: "http://127.0.0.1/", Method: "BAD METHOD"})
		if err == nil || isRetryable(err) {
			t.Errorf("bad method: err %v retryable %v", err, isRetryable(err))
		}
	})
}

// TestFetchHeaderTooLarge: a server sending a 2 MiB response header gets a
// clear error from the default fetcher (1 MiB cap), and the fetcher reads
// little more than its cap of it, not the whole header.
func TestFetchHeaderTooLarge(t *testing.T) {
	big := strings.Repeat("a", 2<<20)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Big: " + big + "\r\n\r\nok")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				c.Read(buf) // the request; its content does not matter
				c.Write(resp)
			}()
		}
	}()
	url := "http://" + ln.Addr().String() + "/"

	f := trusting(t, FetchConfig{})
	_, err = f.Fetch(context.Background(), &Request{URL: url})
	if !errors.Is(err, ErrHeaderTooLarge) || !strings.Contains(err.Error(), url) {
		t.Fatalf("err = %v, want ErrHeaderTooLarge naming %s", err, url)
	}
	if isRetryable(err) {
		t.Error("ErrHeaderTooLarge is retryable")
	}

	small := trusting(t, FetchConfig{MaxHeaderSize: 64 << 10})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = small.Fetch(context.Background(), &Request{URL: url})
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrHeaderTooLarge) {
		t.Fatalf("err = %v, want ErrHeaderTooLarge", err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Errorf("a fetch with a 64 KiB header cap allocated %d bytes for a 2 MiB header", n)
	}
}

// TestFetchResumesTLS: a second connection to an HTTPS host resumes the
// first's TLS session: no certificate to parse and verify again.
func TestFetchResumesTLS(t *testing.T) {
	var (
		mu      sync.Mutex
		resumed []bool
	)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		resumed = append(resumed, r.TLS.DidResume)
	}))
	defer srv.Close()
	f := newHTTPFetcher(FetchConfig{})
	defer f.Close()
	f.Trust("127.0.0.1")
	cfg := &tls.Config{}
	if f.transport.TLSClientConfig != nil {
		cfg = f.transport.TLSClientConfig.Clone() // the same session cache
	}
	cfg.RootCAs = x509.NewCertPool()
	cfg.RootCAs.AddCert(srv.Certificate())
	f.transport.TLSClientConfig = cfg
	for range 3 {
		if _, err := f.Fetch(context.Background(), &Request{URL: srv.URL}); err != nil {
			t.Fatal(err)
		}
		f.transport.CloseIdleConnections() // the next fetch dials again
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []bool{false, true, true}; !slices.Equal(resumed, want) {
		t.Errorf("sessions resumed on three connections: %v, want %v", resumed, want)
	}
}

// TestFetchSparesConnection: a page's fetch whose host has no use for its
// connection (withSpareConn's function says so once the body is read)
// has the transport drop it; otherwise the connection goes back to the
// pool and the next fetch reuses it. The bodies are whole and the server
// gets each request once. (Before, every fetch kept its connection: 1
// dial for the 4.)
func TestFetchSparesConnection(t *testing.T) {
	for _, tlsOn := range []bool{false, true} {
		t.Run(fmt.Sprint("tls=", tlsOn), func(t *testing.T) {
			page := bytes.Repeat([]byte("<p>a page</p>\n"), 3000)
			var requests atomic.Int32
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				w.Header().Set("Content-Length", strconv.Itoa(len(page)))
				_, _ = w.Write(page)
			})
			srv := httptest.NewUnstartedServer(h)
			if tlsOn {
				srv.StartTLS()
			} else {
				srv.Start()
			}
			defer srv.Close()
			f := newHTTPFetcher(FetchConfig{AllowPrivate: true})
			defer f.Close()
			if tlsOn {
				f.transport.TLSClientConfig.RootCAs = x509.NewCertPool()
				f.transport.TLSClientConfig.RootCAs.AddCert(srv.Certificate())
			}
			var dials atomic.Int32
			dial := f.transport.DialContext
			f.transport.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
				dials.Add(1)
				return dial(ctx, network, addr)
			}
			var asked atomic.Int32
			fetch := func(spare bool) {
				t.Helper()
				ctx := withSpareConn(t.Context(), func() bool { asked.Add(1); return spare })
				resp, err := f.Fetch(ctx, &Request{URL: srv.URL})
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(resp.Body, page) {
					t.Fatalf("body of %d bytes, want the page's %d", len(resp.Body), len(page))
				}
			}
			fetch(false)
			fetch(false) // the same connection
			if n := dials.Load(); n != 1 {
				t.Fatalf("%d dials for two fetches whose connection is not spare, want 1", n)
			}
			fetch(true) // still the same, dropped after
			fetch(false)
			if n := dials.Load(); n != 2 {
				t.Errorf("%d dials, want 2: the spare connection dropped, the next fetch dials again", n)
			}
			if n := asked.Load(); n != 4 {
				t.Errorf("spare asked %d times, want once a fetch", n)
			}
			if n := requests.Load(); n != 4 {
				t.Errorf("the server got %d requests, want 4", n)
			}
		})
	}
}

// TestPoolConnRetire: a connection is retired only by the last fetch to
// claim it (one that the pool handed it meanwhile keeps it); a retired
// connection reads its end, a read waiting already included, and fails
// writes, a later claim's too. (Without the claim, and with a claim
// that took a retired connection back, a page's request written on a
// connection retired under it was sent again on another: bench-web
// fetched 4–9 pages twice.)
func TestPoolConnRetire(t *testing.T) {
	client, server := net.Pipe()
	defer server.Close()
	if claim(client, 1) != nil {
		t.Fatal("claim of a connection the fetcher did not dial: want nil")
	}
	c := claim(&poolConn{Conn: client}, 1)
	claim(c, 2) // another fetch took it
	c.retire(1)
	go server.Write([]byte("x"))
	if n, err := c.Read(make([]byte, 1)); n != 1 || err != nil {
		t.Fatalf("read %d, %v after a retire by a fetch that no longer holds it, want the byte", n, err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		read <- err
	}()
	c.retire(2)
	if err := <-read; err != io.EOF {
		t.Errorf("a read waiting when retired ended with %v, want io.EOF", err)
	}
	if _, err := c.Write([]byte("GET")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("write on a retired connection: %v, want net.ErrClosed", err)
	}
	// A fetch the pool handed it as it was retired: its claim leaves it
	// retired, so that its request fails unsent (and is sent again on
	// another connection by the transport).
	claim(c, 3)
	if _, err := c.Write([]byte("GET")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("write after a claim of a retired connection: %v, want net.ErrClosed", err)
	}
}

// TestFetchRequestAsNewRequest: the fetcher's request for a parsed URL
// (not printed and parsed again) is what http.NewRequest makes of the
// URL's string: the same URL, Host (an empty port dropped), method, body
// and its length, GetBody; and the parsed URL itself is left as it was.
func TestFetchRequestAsNewRequest(t *testing.T) {
	f := newHTTPFetcher(FetchConfig{UserAgent: "ua", AllowPrivate: true})
	defer f.Close()
	for _, r := range []*Request{
		{URL: "http://example.com/a/b?x=1&y=%2F"},
		{URL: "http://example.com:/a"},
		{URL: "https://[::1]:/x"},
		{URL: "https://[::1]:8443/x?q"},
		{URL: "http://127.0.0.1:8080/p%2Fq/r%20s?x=%zz#frag"},
		{URL: "http://user:pw@example.com:8080/", Method: http.MethodPost, Body: []byte("a=1")},
	} {
		u, err := f.target(r)
		if err != nil {
			t.Fatalf("%s: %v", r.URL, err)
		}
		before := *u
		got, err := f.request(context.Background(), r, u)
		if err != nil {
			t.Fatalf("%s: %v", r.URL, err)
		}
		var body io.Reader
		if len(r.Body) > 0 {
			body = bytes.NewReader(r.Body)
		}
		want, err := http.NewRequest(cmp.Or(r.Method, http.MethodGet), u.String(), body)
		if err != nil {
			t.Fatal(err)
		}
		if *u != before {
			t.Errorf("%s: the parsed URL changed: %#v, was %#v", r.URL, *u, before)
		}
		gu, wu := *got.URL, *want.URL
		if gu.User.String() == wu.User.String() {
			gu.User, wu.User = nil, nil // the same, in other pointers
		}
		if gu != wu || got.Host != want.Host || got.Method != want.Method ||
			got.ContentLength != want.ContentLength || (got.GetBody == nil) != (want.GetBody == nil) {
			t.Errorf("%s: request %s %#v host %q length %d, want %s %#v host %q length %d", r.URL,
				got.Method, *got.URL, got.Host, got.ContentLength, want.Method, *want.URL, want.Host, want.ContentLength)
		}
		if got.Header.Get("User-Agent") != "ua" {
			t.Errorf("%s: User-Agent %q, want ua", r.URL, got.Header.Get("User-Agent"))
		}
	}
}
