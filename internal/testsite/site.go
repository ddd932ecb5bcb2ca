package testsite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Sentinel errors wrapped by the problems Verify and VerifyPartial report;
// match them with errors.Is.
var (
	// ErrDuplicate: a resource was fetched more often than a correct crawler
	// fetches it.
	ErrDuplicate = errors.New("testsite: fetched too often")
	// ErrMissed: a reachable resource was never fetched, or never fetched
	// successfully (a flaky page answered 503 and was not retried).
	ErrMissed = errors.New("testsite: never fetched")
	// ErrDisallowed: a path that robots.txt disallows was fetched.
	ErrDisallowed = errors.New("testsite: fetched a path robots.txt disallows")
	// ErrNotLinked: something no HTML link points to was fetched: an asset
	// (stylesheet, script, image), a URL found inside a non-HTML body, or a
	// URL that a correct crawler never derives from the links on the site
	// (a mis-resolved relative link, say).
	ErrNotLinked = errors.New("testsite: fetched a URL no HTML link points to")
)

// HostileFetchLimit is how often /huge and /endless may be fetched in a
// correct crawl. Once is ideal; a crawler that retries a body it gave up on
// stays within the limit.
const HostileFetchLimit = 3

// Default values of Config.
const (
	DefaultPages     = 1000
	DefaultLinks     = 10
	DefaultSlowDelay = 2 * time.Second
	// HugeSize is the length of /huge in bytes.
	HugeSize = 50 << 20
)

// Config configures a Site. The zero value is a site of 1000 content pages
// with 10 links each, every trap, no added latency, seed 0, and no logging.
type Config struct {
	// Pages is the number of content pages /page/0 … /page/Pages-1.
	// 0 = DefaultPages.
	Pages int
	// Links is the number of links from each content page to other content
	// pages (fewer when there are not that many other pages). 0 = DefaultLinks.
	Links int
	// Latency is added to every response (not to /_testsite/ requests).
	Latency time.Duration
	// Seed chooses the link graph, the link spellings, the trap placement
	// and the filler text: they are a pure function of (Pages, Links, Seed,
	// NoTraps).
	Seed int64
	// SlowDelay is how long /slow waits before it answers. 0 = DefaultSlowDelay.
	SlowDelay time.Duration
	// NoTraps leaves out every trap resource: the site is /, the content
	// pages and /robots.txt, for benchmarks. Links are still spelled in
	// varied ways and external links remain.
	NoTraps bool
	// Logger receives a Debug record per request and a Warn record per
	// violation as it happens. nil = discard.
	Logger *slog.Logger
}

// Site is a deterministic synthetic website. It is an http.Handler; all its
// methods are safe for concurrent use.
type Site struct {
	pages, links int
	latency      time.Duration
	slow         time.Duration
	noTraps      bool
	seed         uint64
	log          *slog.Logger

	graph  [][]int32    // content links of each page; graph[i][0] == i+1 when i+1 < pages
	extras []*pageExtra // trap decorations of page i, nil for most pages
	res    map[string]*resource
	keys   []string // keys of res, sorted

	paras  [][]byte // filler paragraphs, shared by all pages
	chunk  []byte   // 64 KiB of paragraphs streamed by /huge and /endless
	binary []byte   // body of /binary
	bufs   sync.Pool

	expected int

	mu        sync.Mutex
	pageHits  []hit           // by page number
	hits      map[string]*hit // every other canonical key
	shopHits  map[string]int  // requests under /shop/, see shop.go
	calHits   map[string]int  // requests under /calendar/, see calendar.go
	extraHits map[string]int  // sitemaps, hidden and session pages, see extras.go
}

// hit counts the requests for one canonical key.
type hit struct {
	n     int       // requests
	ok    int       // requests answered 200
	first time.Time // when the first request came
}

// kind is what a resource is, which decides how it is served.
type kind uint8

const (
	kHome kind = iota
	kPage
	kRobots
	kQuery
	kPrivate
	kMissing
	kFlaky
	kRedirect
	kRedirect2
	kLoop
	kSlow
	kHuge
	kEndless
	kBinary
	kBroken
	kFile
	kLeaf
	kAsset
	kBait
)

// rule is what Verify demands of a resource.
type rule uint8

const (
	ruleOnce200   rule = iota // exactly one request, answered 200
	ruleFlaky                 // exactly two requests: 503, then 200
	ruleOnce                  // exactly one request, whatever the status (404, 3xx)
	ruleHostile               // 1..HostileFetchLimit requests
	ruleAny                   // any number (robots.txt)
	ruleForbidden             // never (robots.txt disallows it)
	ruleNotLinked             // never (not a link)
)

// resource is one servable URL other than a content page.
type resource struct {
	kind   kind
	n      int    // index within its family; for redirects the target page
	target string // Location of a redirect; Content-Type of an asset
	abs    bool   // target is a path to prefix with scheme://host
	rule   rule
	hint   string // how it is reached, for problem messages
}

// pageExtra holds what a few pages carry besides their content links.
type pageExtra struct {
	base     uint8 // 0 none, 1 <base href="/">, 2 <base href="scheme://host/">
	nextLeaf bool  // <link rel="next"> points to /leaf/next instead of the next page
	a        []link
	area     []link
}

// link is a trap link placed on a page.
type link struct {
	abs  bool   // prefix scheme://host
	href string // as written (after the prefix)
	text string
}

// New returns a site built from o. It precomputes the link graph and the
// filler text; serving a page afterwards allocates little.
func New(o Config) *Site {
	s := &Site{
		pages:   o.Pages,
		links:   o.Links,
		latency: o.Latency,
		slow:    o.SlowDelay,
		noTraps: o.NoTraps,
		seed:    mix(uint64(o.Seed) ^ 0x7472_6177_6c21),
		log:     o.Logger,
		res:     make(map[string]*resource),
		hits:    make(map[string]*hit),
	}
	s.shopHits = make(map[string]int)
	s.calHits = make(map[string]int)
	s.extraHits = make(map[string]int)
	if s.pages <= 0 {
		s.pages = DefaultPages
	}
	if s.links <= 0 {
		s.links = DefaultLinks
	}
	if s.slow <= 0 {
		s.slow = DefaultSlowDelay
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.bufs.New = func() any { b := make([]byte, 0, 24<<10); return &b }
	s.pageHits = make([]hit, s.pages)
	s.extras = make([]*pageExtra, s.pages)
	s.buildFiller()
	s.buildGraph()
	s.add("/", &resource{kind: kHome, rule: ruleOnce200, hint: "the start page"})
	s.add("/robots.txt", &resource{kind: kRobots, rule: ruleAny})
	s.addAssets()
	if !s.noTraps {
		s.buildTraps()
	}
	s.keys = make([]string, 0, len(s.res))
	for k, r := range s.res {
		s.keys = append(s.keys, k)
		if r.rule == ruleOnce200 || r.rule == ruleFlaky {
			s.expected++
		}
	}
	slices.Sort(s.keys)
	s.expected += s.pages
	return s
}

// Expected returns how many distinct resources a correct, complete crawl
// fetches with status 200 and a body it keeps: /, every content page, and
// with traps the query variants, the flaky pages (once, after their 503),
// the leaf pages, /slow, /broken, /binary and the PDF files. Not counted:
// /robots.txt, 404s, redirects (3xx), /private/ pages, and /huge and
// /endless, whose bodies a crawler is expected to give up on.
func (s *Site) Expected() int { return s.expected }

// Pages returns the number of content pages.
func (s *Site) Pages() int { return s.pages }

// Served returns how often each canonical resource key was requested since
// New or Reset. A key is the request path with dot segments resolved and
// percent-encoding decoded, plus the query with its parameters sorted
// ("/q/1?id=1&sort=asc&view=full"); the fragment never reaches a server.
// Keys never requested are absent.
func (s *Site) Served() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]int, len(s.hits)+64)
	for i := range s.pageHits {
		if n := s.pageHits[i].n; n > 0 {
			m[pagePath(i)] = n
		}
	}
	for k, h := range s.hits {
		m[k] = h.n
	}
	return m
}

// FirstServed returns when each canonical resource key (as in Served) was
// first requested since New or Reset.
func (s *Site) FirstServed() map[string]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]time.Time, len(s.hits)+64)
	for i := range s.pageHits {
		if h := s.pageHits[i]; h.n > 0 {
			m[pagePath(i)] = h.first
		}
	}
	for k, h := range s.hits {
		m[k] = h.first
	}
	return m
}

// Reset forgets every request served so far, so that flaky pages answer 503
// again and a fresh crawl can be verified.
func (s *Site) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.pageHits)
	clear(s.hits)
	clear(s.shopHits)
	clear(s.calHits)
	clear(s.extraHits)
}

// Verify reports whether the requests served so far are those of a correct
// and complete crawl (see the package documentation). It returns nil if so,
// else an errors.Join of every problem, each naming the path and wrapping
// one of ErrDuplicate, ErrMissed, ErrDisallowed or ErrNotLinked.
func (s *Site) Verify() error { return errors.Join(s.problems(true)...) }

// VerifyPartial is Verify without completeness: it reports only what a
// correct crawler never does at any point of a crawl (fetch twice, fetch a
// disallowed path, fetch what no link points to), so it also holds for a
// crawl stopped early by a page limit.
func (s *Site) VerifyPartial() error { return errors.Join(s.problems(false)...) }

func (s *Site) problems(complete bool) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{key}, args...)...))
	}
	check := func(key string, rl rule, hint func() string, h hit) {
		switch rl {
		case ruleOnce200, ruleOnce:
			if h.n > 1 {
				bad(key, "fetched %d times, want once: %w", h.n, ErrDuplicate)
			} else if complete && h.n == 0 {
				bad(key, "%w (%s)", ErrMissed, hint())
			}
		case ruleFlaky:
			if h.n > 2 {
				bad(key, "fetched %d times, want twice (503, then 200): %w", h.n, ErrDuplicate)
			} else if complete && h.n == 0 {
				bad(key, "%w (%s)", ErrMissed, hint())
			} else if complete && h.ok == 0 {
				bad(key, "answered 503 with Retry-After and never retried: %w", ErrMissed)
			}
		case ruleHostile:
			if h.n > HostileFetchLimit {
				bad(key, "fetched %d times, want at most %d: %w", h.n, HostileFetchLimit, ErrDuplicate)
			} else if complete && h.n == 0 {
				bad(key, "%w (%s)", ErrMissed, hint())
			}
		case ruleForbidden:
			if h.n > 0 {
				bad(key, "fetched %d times, but robots.txt has \"Disallow: /private/\": %w", h.n, ErrDisallowed)
			}
		case ruleNotLinked:
			if h.n > 0 {
				bad(key, "fetched %d times, but %s: %w", h.n, hint(), ErrNotLinked)
			}
		}
	}
	for i, h := range s.pageHits {
		if h.n == 1 || (!complete && h.n == 0) {
			continue // the common case, without building the key
		}
		check(pagePath(i), ruleOnce200, func() string {
			if i == 0 {
				return "linked from /"
			}
			return "linked from " + pagePath(i-1)
		}, h)
	}
	for _, k := range s.keys {
		r := s.res[k]
		check(k, r.rule, func() string { return r.hint }, s.hitOf(k))
	}
	var unknown []string
	for k := range s.hits {
		if s.res[k] == nil {
			unknown = append(unknown, k)
		}
	}
	slices.Sort(unknown)
	for _, k := range unknown {
		bad(k, "fetched %d times, but no page links to it: %w", s.hits[k].n, ErrNotLinked)
	}
	return errs
}

// hitOf returns the counters of key; s.mu is held.
func (s *Site) hitOf(key string) hit {
	if h := s.hits[key]; h != nil {
		return *h
	}
	return hit{}
}

// record counts a request for key and returns the status to answer with.
// page is the page number for content pages, else -1; r is nil for keys
// the site does not know.
func (s *Site) record(ctx context.Context, key string, page int, r *resource) int {
	status := http.StatusOK
	s.mu.Lock()
	var h *hit
	if page >= 0 {
		h = &s.pageHits[page]
	} else if h = s.hits[key]; h == nil {
		h = new(hit)
		s.hits[key] = h
	}
	h.n++
	n := h.n
	if n == 1 {
		h.first = time.Now()
	}
	switch {
	case r == nil && page < 0:
		status = http.StatusNotFound
	case r == nil:
	case r.kind == kFlaky && n == 1:
		status = http.StatusServiceUnavailable
	case r.kind == kMissing || r.kind == kBait:
		status = http.StatusNotFound
	case r.kind == kRedirect:
		status = http.StatusMovedPermanently
	case r.kind == kRedirect2 || r.kind == kLoop:
		status = http.StatusFound
	}
	if status == http.StatusOK {
		h.ok++
	}
	s.mu.Unlock()

	if s.log.Enabled(ctx, slog.LevelDebug) {
		s.log.LogAttrs(ctx, slog.LevelDebug, "testsite: served", slog.String("path", key), slog.Int("status", status), slog.Int("count", n))
	}
	if n > 1 || r == nil || r.rule == ruleForbidden || r.rule == ruleNotLinked {
		rl := ruleOnce200
		if r != nil {
			rl = r.rule
		}
		var why string
		switch {
		case r == nil && page < 0:
			why = "not linked"
		case rl == ruleForbidden:
			why = "disallowed by robots.txt"
		case rl == ruleNotLinked:
			why = "not linked"
		case rl == ruleFlaky && n > 2, rl == ruleHostile && n > HostileFetchLimit,
			(rl == ruleOnce200 || rl == ruleOnce) && n > 1:
			why = "duplicate fetch"
		}
		if why != "" {
			s.log.LogAttrs(ctx, slog.LevelWarn, "testsite: crawl violation", slog.String("path", key), slog.String("outcome", why), slog.Int("count", n))
		}
	}
	return status
}

// canonicalKey returns the key under which a request for u is counted: the
// decoded path with dot segments resolved, and the query with its
// parameters sorted. It does not allocate for a clean path without query.
func canonicalKey(u *url.URL) string {
	p := u.Path
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	if strings.Contains(p, "/.") || strings.Contains(p, "//") {
		c := path.Clean(p)
		if strings.HasSuffix(p, "/") && c != "/" {
			c += "/"
		}
		p = c
	}
	if u.RawQuery == "" {
		return p
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return p + "?" + u.RawQuery
	}
	if enc := q.Encode(); enc != "" {
		return p + "?" + enc
	}
	return p
}

// pageNumber returns N for the key "/page/N" with N canonical decimal in
// range, else -1.
func (s *Site) pageNumber(key string) int {
	d, ok := strings.CutPrefix(key, "/page/")
	if !ok || d == "" || len(d) > 9 || (d[0] == '0' && len(d) > 1) {
		return -1
	}
	n := 0
	for i := 0; i < len(d); i++ {
		c := d[i]
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	if n >= s.pages {
		return -1
	}
	return n
}

func pagePath(i int) string { return "/page/" + strconv.Itoa(i) }

// ServeHTTP serves the site. Requests under /_testsite/ are the control
// endpoints and are not counted; every other request is counted under its
// canonical key before it is answered.
func (s *Site) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/_testsite/") {
		s.serveControl(w, r)
		return
	}
	if strings.HasPrefix(r.URL.Path, "/shop/") {
		s.serveShop(w, r)
		return
	}
	if isExtra(r.URL.Path) {
		s.serveExtras(w, r)
		return
	}
	if strings.HasPrefix(r.URL.Path, "/calendar/") {
		s.serveCalendar(w, r)
		return
	}
	key := canonicalKey(r.URL)
	page := s.pageNumber(key)
	var res *resource
	if page < 0 {
		res = s.res[key]
	}
	ctx := r.Context()
	status := s.record(ctx, key, page, res)
	if s.latency > 0 && !wait(ctx, s.latency) {
		return
	}
	h := w.Header()
	if page >= 0 {
		s.servePage(w, r, page)
		return
	}
	if res == nil {
		serveText(w, http.StatusNotFound, ctText, "404 not found\n")
		return
	}
	switch res.kind {
	case kHome:
		s.serveHome(w, r)
	case kRobots:
		serveText(w, http.StatusOK, ctText, robotsTxt+"\nSitemap: "+scheme(r)+"://"+r.Host+"/sitemaps/index.xml\n")
	case kFlaky:
		if status == http.StatusServiceUnavailable {
			h.Set("Retry-After", "1")
			serveText(w, status, ctText, "503 busy, try again\n")
			return
		}
		s.serveSmall(w, r, "Flaky page "+strconv.Itoa(res.n), "This page failed once and now works.", pagePath(res.n%s.pages))
	case kRedirect, kRedirect2, kLoop:
		loc := res.target
		if res.abs && r.Host != "" {
			loc = scheme(r) + "://" + r.Host + loc
		}
		h.Set("Location", loc)
		serveText(w, status, ctText, "moved\n")
	case kMissing, kBait:
		serveText(w, http.StatusNotFound, ctText, "404 not found\n")
	case kSlow:
		if !wait(ctx, s.slow) {
			return
		}
		s.serveSmall(w, r, "Slow page", "This page took its time.", "/")
	case kHuge:
		s.serveHuge(w, r)
	case kEndless:
		s.serveEndless(w, r)
	case kBinary:
		h["Content-Type"] = ctHTML
		h.Set("Content-Length", strconv.Itoa(len(s.binary)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(s.binary)
	case kBroken:
		serveText(w, http.StatusOK, ctHTML[0], brokenHTML)
	case kFile:
		s.serveFile(w, res.n)
	case kAsset:
		serveText(w, http.StatusOK, res.target, "/* asset */\n")
	default: // kQuery, kPrivate, kLeaf
		s.serveSmall(w, r, key, "A small page.", "/")
	}
}

// wait waits for d or until ctx ends; it reports whether d passed.
func wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func scheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

var (
	ctHTML = []string{"text/html; charset=utf-8"}
	ctText = "text/plain; charset=utf-8"
)

func serveText(w http.ResponseWriter, status int, contentType, body string) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

const robotsTxt = `# trawl test site
User-agent: evilbot
Disallow: /

User-agent: *
Disallow: /private/
`
