package engine

import (
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"
)

// liveGrowth returns how much the live heap grew while fill ran, in
// bytes, measured after a collection on either side.
func liveGrowth(fill func()) int64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fill()
	runtime.GC()
	runtime.ReadMemStats(&after)
	return int64(after.HeapAlloc) - int64(before.HeapAlloc)
}

// perHostHosts is how many hosts the per-host state tests hold: the
// memory check's 10,000 (make bench-web).
const perHostHosts = 10_000

// perHostAddr is host i's address, as the memory check's site gives them.
func perHostAddr(i int) string {
	return fmt.Sprintf("127.0.%d.%d:%d", 1+i/250, 1+i%250, 20000+i%1000)
}

// TestRobotsBytesPerHost: the robots.txt cache holds 10,000 hosts whose
// files allow everything (half "User-agent: *" / "Allow: /", as the
// memory check's site serves, half none at all) in at most 96 bytes a
// host, key included (84-88 with Go 1.26's maps: the host[:port] alone as
// the key, in the scheme's map, and 16 bytes beside it). It held 339
// when each host had an entry of its own, a channel, and a parsed group
// of one Allow rule, and 102-107 with "scheme://host" keys and 24 bytes
// beside them.
func TestRobotsBytesPerHost(t *testing.T) {
	store := &mapRobots{files: make(map[string][]byte, perHostHosts)}
	urls := make([]*url.URL, perHostHosts)
	for i := range urls {
		urls[i] = &url.URL{Scheme: "http", Host: perHostAddr(i), Path: "/"}
		file := []byte("User-agent: *\nAllow: /\n")
		if i%2 == 1 {
			file = nil // no robots.txt (404), as the store keeps it
		}
		store.files["http://"+urls[i].Host] = file
	}
	f := trusting(t, FetchConfig{})
	// The least of three fills, each into a new cache: what else the
	// process allocates meanwhile can only add.
	per := int64(1 << 62)
	for range 3 {
		r := newRobotsCache(f, "trawl", 0)
		r.shared = store
		grown := liveGrowth(func() {
			for _, u := range urls {
				if ok, delay, err := r.Allowed(t.Context(), u); !ok || delay != 0 || err != nil {
					t.Fatalf("%s: allowed %v, delay %v, %v; want allowed at once", u, ok, delay, err)
				}
			}
		})
		per = min(per, grown/perHostHosts)
		runtime.KeepAlive(r)
	}
	t.Logf("robots.txt cache: %d bytes a host over %d hosts", per, perHostHosts)
	if per > 96 {
		t.Errorf("robots.txt cache: %d bytes a host over %d hosts, want at most 96", per, perHostHosts)
	}
	runtime.KeepAlive(urls) // not freed while measured
}

// TestRobotsAllowAllKeepsNoRules: a file that cannot disallow a path
// keeps no parsed rules, but its Sitemap: lines and Crawl-delay hold; a
// Disallow line, however written, keeps the rules.
func TestRobotsAllowAllKeepsNoRules(t *testing.T) {
	r := newRobotsCache(trusting(t, FetchConfig{}), "trawl", 0)
	for _, c := range []struct {
		file      string
		rules     bool
		disallows string // a path the file disallows, if any
	}{
		{"User-agent: *\nAllow: /\n", false, ""},
		{"User-agent: *\nDisallow:\n", false, ""},
		{"User-agent: *\r\nDisallow: # nothing\r\nSitemap: http://h/s.xml\r\n", false, ""},
		{"User-agent: *\nCrawl-delay: 2\n", true, ""},
		{"User-agent: *\nDisallow: /private\n", true, "/private/1"},
		{"User-agent: *\r\nDISALLOW:/x\r\n", true, "/x"},
		{"user-agent: trawl\ndisallow /y\n", true, ""},    // no colon: kept, whatever the parser makes of it
		{"User-agent: disallowbot\nAllow: /\n", true, ""}, // errs on the side of keeping
	} {
		group, sitemaps := r.parse([]byte(c.file), "test")
		if (group != nil) != c.rules {
			t.Errorf("%q: rules kept %v, want %v", c.file, group != nil, c.rules)
		}
		if c.disallows != "" && (group == nil || group.Test(c.disallows)) {
			t.Errorf("%q: %s allowed, want disallowed", c.file, c.disallows)
		}
		if strings.Contains(c.file, "Sitemap") && len(sitemaps) != 1 {
			t.Errorf("%q: sitemaps %q, want the one", c.file, sitemaps)
		}
	}
}

// TestGuardOffKeepsNoTrust: a guard that is off (AllowPrivate) keeps no
// trusted hosts, the start URLs' hosts a crawl trusts (every one of them
// in the memory check, whose 10,000 hosts are all start URLs): it kept
// 62 bytes a host before. It trusts every host all the same.
func TestGuardOffKeepsNoTrust(t *testing.T) {
	addrs := make([]string, perHostHosts)
	for i := range addrs {
		addrs[i] = perHostAddr(i)
	}
	off, on := newGuard(true), newGuard(false)
	grown := liveGrowth(func() {
		for _, a := range addrs {
			off.trust(a)
		}
	})
	per := grown / perHostHosts
	t.Logf("a guard that is off: %d bytes a trusted host", per)
	if per > 4 {
		t.Errorf("a guard that is off: %d bytes a trusted host, want none", per)
	}
	for _, a := range addrs[:10] {
		on.trust(a)
		if !off.trusts(a) || !off.exempt(a) || !on.trusts(a) || !on.exempt(a) {
			t.Errorf("%s: trusted %v/%v, exempt %v/%v (off/on); want trusted and exempt", a, off.trusts(a), on.trusts(a), off.exempt(a), on.exempt(a))
		}
	}
	if on.trusts(addrs[11]) || on.exempt(addrs[11]) {
		t.Errorf("%s: trusted by a guard that is on without trust", addrs[11])
	}
	runtime.KeepAlive(off)
	runtime.KeepAlive(addrs)
}

// TestPolitenessBytesPerHost: the local limiter forgets a host whose last
// request ended and which holds nothing a new entry would not (the
// default delay, no back-off, no AutoThrottle), as the memory check's
// 10,000 hosts are crawled: it kept 295 bytes a host until the sweep, a
// minute after, which a crawl of the check's length never reached. A
// host that must be remembered (a --delay still running) keeps at most
// 160 bytes, key included (127 with Go 1.26's maps), where it kept 295;
// its key is its own, not the page URL the host was cut from.
func TestPolitenessBytesPerHost(t *testing.T) {
	for _, c := range []struct {
		name  string
		delay time.Duration
		bound int64
	}{
		{"default delay", 0, 8},
		{"--delay 1s", time.Second, 160},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newPoliteness(politenessConfig{PerHost: 2, Delay: c.delay})
			grown := liveGrowth(func() {
				for i := range perHostHosts {
					// The host as the engine passes it: cut from a page's URL.
					u := fmt.Sprintf("http://%s/some/page/%d.html", perHostAddr(i), i)
					host := u[len("http://") : strings.Index(u[len("http://"):], "/")+len("http://")]
					release, err := p.Acquire(t.Context(), host)
					if err != nil {
						t.Fatal(err)
					}
					release()
				}
			})
			per := grown / perHostHosts
			t.Logf("politeness, %s: %d bytes a host over %d hosts (%d entries)", c.name, per, perHostHosts, len(p.hosts))
			if per > c.bound {
				t.Errorf("politeness, %s: %d bytes a host over %d hosts, want at most %d", c.name, per, perHostHosts, c.bound)
			}
			runtime.KeepAlive(p)
		})
	}
}
