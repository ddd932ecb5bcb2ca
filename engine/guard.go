package engine

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"syscall"
)

// ErrForbiddenAddress is returned (wrapped) by Fetch when the address guard
// refused to connect: the address dialled, or an IP literal in the URL, is
// loopback, private, link-local, unspecified, multicast, shared (CGNAT),
// reserved or a cloud metadata address, and its host was not trusted.
var ErrForbiddenAddress = errors.New("engine: forbidden address")

// forbiddenPrefixes lists the ranges the guard refuses besides those netip
// classifies itself (loopback, private, link-local, multicast, unspecified).
var forbiddenPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),          // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),      // shared address space (CGNAT)
	netip.MustParsePrefix("169.254.169.254/32"), // cloud metadata (also link-local)
	netip.MustParsePrefix("192.0.0.0/24"),       // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),      // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),        // reserved, and 255.255.255.255
	netip.MustParsePrefix("fd00:ec2::254/128"),  // AWS metadata over IPv6 (also in fc00::/7)
	netip.MustParsePrefix("fec0::/10"),          // deprecated site-local
}

// Prefixes of IPv6 ranges that embed an IPv4 address; the embedded address is
// checked too, so that 64:ff9b::7f00:1 cannot reach 127.0.0.1 through NAT64.
var (
	nat64Prefix  = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour    = netip.MustParsePrefix("2002::/16")
	v4Compatible = netip.MustParsePrefix("::/96")
)

// forbiddenAddr reports whether the guard refuses to connect to a.
func forbiddenAddr(a netip.Addr) bool {
	if !a.IsValid() {
		return true
	}
	a = a.Unmap().WithZone("")
	if a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() ||
		a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast() ||
		a.IsMulticast() || a.IsUnspecified() {
		return true
	}
	for _, p := range forbiddenPrefixes {
		if p.Contains(a) {
			return true
		}
	}
	if a.Is6() {
		b := a.As16()
		switch {
		case nat64Prefix.Contains(a), v4Compatible.Contains(a):
			return forbiddenAddr(netip.AddrFrom4([4]byte(b[12:16])))
		case sixToFour.Contains(a):
			return forbiddenAddr(netip.AddrFrom4([4]byte(b[2:6])))
		}
	}
	return false
}

// guard decides which dials are allowed. It is safe for concurrent use.
type guard struct {
	off bool // AllowPrivate

	mu      sync.RWMutex
	trusted map[string]struct{} // normalized host names and IPs: every port
	exact   map[string]struct{} // normalized "host:port": that port only
	proxies map[string]struct{} // "host:port" of proxies taken from the environment
}

func newGuard(off bool) *guard {
	return &guard{off: off, trusted: make(map[string]struct{}), exact: make(map[string]struct{}),
		proxies: make(map[string]struct{})}
}

// normalizeHost lower-cases host, drops brackets, a port and a trailing dot,
// and writes IP addresses in their canonical form, so that "[::1]:80",
// "::1" and "0:0::1" name the same host.
func normalizeHost(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap().String()
	}
	return host
}

// trust exempts "host:port" (that port only) or a bare host (every port).
// A guard that is off exempts every host and keeps none: a crawl trusts
// each start URL's host, which may be millions.
func (g *guard) trust(host string) {
	h := normalizeHost(host)
	if h == "" || g.off {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, port, err := net.SplitHostPort(host); err == nil && port != "" {
		g.exact[net.JoinHostPort(h, port)] = struct{}{}
		return
	}
	g.trusted[h] = struct{}{}
}

// trusts reports whether host, as given to trust, is trusted already.
func (g *guard) trusts(host string) bool {
	if g.off {
		return true
	}
	h := normalizeHost(host)
	g.mu.RLock()
	defer g.mu.RUnlock()
	if _, port, err := net.SplitHostPort(host); err == nil && port != "" {
		_, ok := g.exact[net.JoinHostPort(h, port)]
		return ok
	}
	_, ok := g.trusted[h]
	return ok
}

// isTrusted reports whether host (normalized or not) on port is trusted.
func (g *guard) isTrusted(host, port string) bool {
	if g.off {
		return true
	}
	h := normalizeHost(host)
	g.mu.RLock()
	defer g.mu.RUnlock()
	if _, ok := g.trusted[h]; ok {
		return true
	}
	_, ok := g.exact[net.JoinHostPort(h, port)]
	return ok
}

// defaultPort is the port of u, or its scheme's default.
func defaultPort(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if u.Scheme == "https" {
		return "443"
	}
	return "80"
}

// noteProxy records the address of a proxy chosen from the environment; dials
// to exactly that host and port are the proxy connection and are not guarded.
func (g *guard) noteProxy(u *url.URL) {
	port := u.Port()
	if port == "" {
		switch u.Scheme {
		case "https":
			port = "443"
		case "socks5", "socks5h":
			port = "1080"
		default:
			port = "80"
		}
	}
	addr := net.JoinHostPort(normalizeHost(u.Hostname()), port)
	g.mu.RLock()
	_, ok := g.proxies[addr]
	g.mu.RUnlock()
	if ok {
		return
	}
	g.mu.Lock()
	g.proxies[addr] = struct{}{}
	g.mu.Unlock()
}

// exempt reports whether a dial to addr ("host:port", before resolution)
// skips the guard: the guard is off, the host is trusted, or addr is a proxy.
func (g *guard) exempt(addr string) bool {
	if g.off {
		return true
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if g.isTrusted(host, port) {
		return true
	}
	g.mu.RLock()
	defer g.mu.RUnlock()
	_, ok := g.proxies[net.JoinHostPort(normalizeHost(host), port)]
	return ok
}

// checkURLHost refuses a URL whose host is an IP literal the guard forbids,
// before anything is dialled. This also covers requests sent through a proxy,
// where the guard never sees the target's address.
func (g *guard) checkURLHost(u *url.URL) error {
	if g.off {
		return nil
	}
	a, err := netip.ParseAddr(strings.TrimSuffix(u.Hostname(), "."))
	if err != nil || !forbiddenAddr(a) || g.isTrusted(u.Hostname(), defaultPort(u)) {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrForbiddenAddress, a)
}

// control is the net.Dialer Control function of guarded dials: it runs on the
// address actually dialled (after DNS resolution, once per address tried), so
// a name that resolves to a forbidden address is refused however it resolves.
func control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: unparsable address %q", ErrForbiddenAddress, address)
	}
	if forbiddenAddr(ap.Addr()) {
		return fmt.Errorf("%w: %s", ErrForbiddenAddress, ap.Addr())
	}
	return nil
}
