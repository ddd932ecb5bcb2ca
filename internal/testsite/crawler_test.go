package testsite

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/html"
)

// flaws make the test crawler wrong on purpose, to show that Verify
// notices. The zero value is a correct crawler.
type flaws struct {
	ignoreRobots     bool
	ignoreBase       bool // resolve links against the page URL, not <base href>
	noArea           bool // ignore <area href>
	noLinkNext       bool // ignore <link rel="next">
	rawQuery         bool // do not sort query parameters
	keepFragment     bool // treat "#frag" as part of the URL
	rawPercent       bool // do not normalize percent-encoding
	regexLinks       bool // find links with a regular expression in any body
	followRedirects  bool // follow redirects without asking the seen set
	noRetry          bool // do not retry a 503
	skip             func(path string) bool
	maxBody          int64 // 0 = 1 MiB
	concurrencyLimit int   // 0 = 8
}

// crawler is a tiny, correct breadth-first crawler (unless told otherwise):
// same host only, robots.txt honoured, canonical de-duplication, redirects
// through the seen set, 503 retried, bodies capped, links from HTML only.
type crawler struct {
	t      testing.TB
	f      flaws
	origin *url.URL
	client *http.Client

	mu       sync.Mutex
	seen     map[string]bool
	disallow []string
	ok       int // 200 responses whose whole body was read
	errs     []error
}

func newCrawler(t testing.TB, origin string, f flaws) *crawler {
	u, err := url.Parse(origin)
	if err != nil {
		t.Fatal(err)
	}
	if f.maxBody == 0 {
		f.maxBody = 1 << 20
	}
	if f.concurrencyLimit == 0 {
		f.concurrencyLimit = 8
	}
	c := &crawler{t: t, f: f, origin: u, seen: make(map[string]bool)}
	c.client = &http.Client{Timeout: 10 * time.Second}
	if !f.followRedirects {
		c.client.CheckRedirect = func(req *http.Request, via []*http.Request) error {
			if len(via) >= 10 {
				return fmt.Errorf("too many redirects")
			}
			key, ok := c.canonical(req.URL)
			if !ok || !c.visit(key) {
				return http.ErrUseLastResponse
			}
			return nil
		}
	}
	return c
}

// canonical returns the de-duplication key of u and whether u is in scope
// (same host, http, not disallowed).
func (c *crawler) canonical(u *url.URL) (string, bool) {
	if (u.Scheme != "http" && u.Scheme != "https") || !strings.EqualFold(u.Host, c.origin.Host) {
		return "", false
	}
	v := *u
	v.Host = strings.ToLower(v.Host)
	if !c.f.keepFragment {
		v.Fragment, v.RawFragment = "", ""
	}
	if !c.f.rawPercent {
		v.RawPath = ""
	}
	if !c.f.rawQuery && v.RawQuery != "" {
		q, err := url.ParseQuery(v.RawQuery)
		if err == nil {
			v.RawQuery = q.Encode()
		}
	}
	if !c.f.ignoreRobots {
		for _, d := range c.disallow {
			if strings.HasPrefix(v.Path, d) {
				return "", false
			}
		}
	}
	if c.f.skip != nil && c.f.skip(v.Path) {
		return "", false
	}
	return v.String(), true
}

// visit marks key seen and reports whether it was new.
func (c *crawler) visit(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[key] {
		return false
	}
	c.seen[key] = true
	return true
}

func (c *crawler) fail(err error) {
	c.mu.Lock()
	c.errs = append(c.errs, err)
	c.mu.Unlock()
}

// run crawls from the origin's / and returns the number of 200 responses
// kept (the crawler's "items") and the fetch errors.
func (c *crawler) run(ctx context.Context) (int, []error) {
	c.readRobots(ctx)
	var wg sync.WaitGroup
	sem := make(chan struct{}, c.f.concurrencyLimit)
	var enqueue func(u *url.URL)
	enqueue = func(u *url.URL) {
		key, ok := c.canonical(u)
		if !ok || !c.visit(key) {
			return
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			for _, l := range c.fetch(ctx, key) {
				enqueue(l)
			}
		})
	}
	enqueue(c.origin.ResolveReference(&url.URL{Path: "/"}))
	wg.Wait()
	// Connections dialled but never used would hold up the server's
	// graceful shutdown.
	c.client.CloseIdleConnections()
	return c.ok, c.errs
}

func (c *crawler) readRobots(ctx context.Context) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.origin.String()+"/robots.txt", nil)
	resp, err := c.client.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	star := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		k, v = strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v)
		switch {
		case k == "user-agent":
			star = v == "*"
		case k == "disallow" && star && v != "":
			c.disallow = append(c.disallow, v)
		}
	}
}

var hrefRE = regexp.MustCompile(`href=["']?([^"' >]+)`)

// fetch gets key (retrying 503s) and returns the links found.
func (c *crawler) fetch(ctx context.Context, key string) []*url.URL {
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, key, nil)
		if err != nil {
			c.fail(err)
			return nil
		}
		resp, err := c.client.Do(req)
		if err != nil {
			c.fail(fmt.Errorf("fetch %s: %w", key, err))
			return nil
		}
		if resp.StatusCode == http.StatusServiceUnavailable && attempt < 3 && !c.f.noRetry {
			resp.Body.Close()
			ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			time.Sleep(min(time.Duration(ra)*time.Second, 20*time.Millisecond)) // back-off, shortened for tests
			continue
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.ContentLength > c.f.maxBody {
			return nil
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, c.f.maxBody+1))
		if err != nil || int64(len(body)) > c.f.maxBody {
			return nil // too large or broken: no item, no links
		}
		c.mu.Lock()
		c.ok++
		c.mu.Unlock()
		return c.links(resp.Request.URL, resp.Header.Get("Content-Type"), body)
	}
}

// links extracts the links of an HTML body: <a href>, <area href>,
// <link rel="next" href>, resolved against <base href> if present.
func (c *crawler) links(page *url.URL, ctype string, body []byte) []*url.URL {
	var raw []string
	base := page
	if c.f.regexLinks {
		for _, m := range hrefRE.FindAllSubmatch(body, -1) {
			raw = append(raw, html.UnescapeString(string(m[1])))
		}
	} else {
		if !strings.HasPrefix(ctype, "text/html") {
			return nil
		}
		doc, err := html.Parse(strings.NewReader(string(body)))
		if err != nil {
			return nil
		}
		baseSet := false
		for n := range doc.Descendants() {
			if n.Type != html.ElementNode {
				continue
			}
			href, has := attr(n, "href")
			if !has {
				continue
			}
			switch n.Data {
			case "base":
				if !baseSet && !c.f.ignoreBase {
					if b, err := page.Parse(href); err == nil {
						base, baseSet = b, true
					}
				}
			case "a":
				raw = append(raw, href)
			case "area":
				if !c.f.noArea {
					raw = append(raw, href)
				}
			case "link":
				rel, _ := attr(n, "rel")
				if !c.f.noLinkNext && containsFold(strings.Fields(rel), "next") {
					raw = append(raw, href)
				}
			}
		}
	}
	var out []*url.URL
	for _, h := range raw {
		if u, err := base.Parse(strings.TrimSpace(h)); err == nil {
			out = append(out, u)
		}
	}
	return out
}

func attr(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}

func containsFold(l []string, s string) bool {
	for _, x := range l {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}
