package engine_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/trawlhq/trawl/engine"
)

func servePage(w http.ResponseWriter, body string) {
	w.Header().Set("Content-Type", "text/html")
	fmt.Fprint(w, "<html>"+body+"</html>")
}

// A page with more links than Config.MaxLinks: the first are followed,
// the others counted and logged (200,000 links were cut to 10,000 with no
// counter, log line or documentation).
func TestLinksPastLimitCounted(t *testing.T) {
	const links, limit = 300, 100
	srv := newHitServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			servePage(w, "")
			return
		}
		var b strings.Builder
		for i := range links {
			fmt.Fprintf(&b, `<a href="/p/%d">%d</a>`, i, i)
		}
		servePage(w, b.String())
	})
	c, logs := crawlSitemaps(t, srv, engine.Config{IgnoreRobots: true, MaxLinks: limit})
	if n := srv.count("/p/"); n != limit {
		t.Errorf("%d links followed, want the first %d", n, limit)
	}
	if n := c.Stats().Get(engine.StatLinksDropped); n != links-limit {
		t.Errorf("%s = %d, want %d", engine.StatLinksDropped, n, links-limit)
	}
	if !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "more links than --max-links") {
		t.Errorf("no warning of the links dropped:\n%s", logs)
	}
}

// A session-id trap (each page links to 10 pages with new ?sid= values)
// ends at the URL-trap guard, with a counter and a warning; --max-depth
// does not end it (98,029 pages in 30 s). Without the guard, this crawl
// would stop only at MaxPages.
func TestSessionIDTrapBounded(t *testing.T) {
	const limit = 50
	var next atomic.Int64
	srv := newHitServer(t, func(w http.ResponseWriter, r *http.Request) {
		var b strings.Builder
		for range 10 {
			fmt.Fprintf(&b, `<a href="/page?lang=en&sid=%d">x</a>`, next.Add(1))
		}
		servePage(w, b.String())
	})
	c, logs := crawlSitemaps(t, srv, engine.Config{IgnoreRobots: true, MaxQueryValues: limit, MaxPages: 2000, MaxDepth: -1})
	// The home page's 10 links are no steps (it has no query); from
	// there, limit new values are followed.
	if n, most := srv.count("/page"), 10+limit; n > most {
		t.Errorf("%d trap pages fetched, want at most %d", n, most)
	}
	if n := c.Stats().Get(engine.StatURLTrap); n == 0 {
		t.Errorf("%s = 0: the trap was not counted", engine.StatURLTrap)
	}
	if strings.Count(logs, "URL trap") != 1 {
		t.Errorf("want one warning of the trap:\n%.3000s", logs)
	}
	// A listing whose pages link to each other is no trap: its values repeat.
}

// A listing of pages linking to the next and previous (?page=N), longer
// than the guard's bound in pages crawled... is cut at the bound: the
// guard counts values, so a listing of more pages than MaxQueryValues
// needs it raised; one within it is crawled whole.
func TestListingWithinTrapGuard(t *testing.T) {
	const pages, limit = 40, 50
	srv := newHitServer(t, func(w http.ResponseWriter, r *http.Request) {
		var n int
		fmt.Sscan(r.URL.Query().Get("page"), &n)
		body := `<a href="/list?page=1">first</a>`
		if n > 1 {
			body += fmt.Sprintf(`<a href="/list?page=%d">prev</a>`, n-1)
		}
		if n < pages {
			body += fmt.Sprintf(`<a href="/list?page=%d">next</a>`, n+1)
		}
		servePage(w, body)
	})
	c, _ := crawlSitemaps(t, srv, engine.Config{IgnoreRobots: true, MaxQueryValues: limit, MaxDepth: -1})
	if n := srv.count("/list"); n != pages {
		t.Errorf("%d pages of the listing fetched, want all %d", n, pages)
	}
	if n := c.Stats().Get(engine.StatURLTrap); n != 0 {
		t.Errorf("%s = %d, want 0", engine.StatURLTrap, n)
	}
}

// The per-host page budget: a worker follows MaxPagesPerHost links of a
// host, counts the others and warns once.
func TestPagesPerHostBudget(t *testing.T) {
	const budget = 20
	srv := newHitServer(t, func(w http.ResponseWriter, r *http.Request) {
		var n int
		fmt.Sscanf(r.URL.Path, "/p/%d", &n)
		servePage(w, fmt.Sprintf(`<a href="/p/%d">a</a><a href="/p/%d">b</a>`, 2*n+1, 2*n+2))
	})
	c, logs := crawlSitemaps(t, srv, engine.Config{IgnoreRobots: true, MaxPagesPerHost: budget, MaxDepth: -1, MaxPages: 1000})
	if n := srv.count("/p/"); n != budget {
		t.Errorf("%d pages fetched past the start URL, want the budget, %d", n, budget)
	}
	if c.Stats().Get(engine.StatHostBudget) == 0 {
		t.Errorf("%s = 0", engine.StatHostBudget)
	}
	if strings.Count(logs, "page budget") != 1 {
		t.Errorf("want one warning of the budget:\n%.3000s", logs)
	}
}
