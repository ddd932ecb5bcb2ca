// Package testsite serves a deterministic synthetic website for demos,
// tests and benchmarks of the crawler, and judges afterwards whether a
// crawl of it was correct.
//
//	site := testsite.New(testsite.Config{Pages: 500, Seed: 1})
//	base, wait, err := site.Serve(ctx, "")   // http://127.0.0.1:PORT
//	… crawl base + "/" …
//	err = site.Verify()                       // nil iff the crawl was correct
//
// # The site
//
// The link graph, the link spellings, the trap placement and the filler
// text are a pure function of (Pages, Links, Seed, NoTraps): two sites built
// from the same options serve the same bytes (up to the host, which absolute
// links take from the request). The site never knows its address ahead of
// time.
//
//   - / links to the first Links content pages.
//   - /page/N, N in [0, Pages): 10 to 20 KB of HTML (head with title,
//     stylesheet and script, nav, filler paragraphs, a list of links, a
//     footer). Page N links to N+1 and to Links-1 other distinct pages
//     chosen by the seed, so every page is reachable from /. The same
//     page is spelled many ways: root-relative (/page/7), relative (7,
//     ./7, ../page/7), absolute (http://HOST/page/7, also with the host
//     upper-cased), with a fragment (/page/7#section-2) and
//     percent-encoded (/page/%37). Every page also links to other hosts
//     (http://external.invalid/…, https://example.org/…,
//     //external.invalid/…) and to mailto:, tel: and javascript: URLs, and
//     refers to /static/site.css, /static/app.js and /static/logo.png
//     through <link rel=stylesheet>, <script src> and <img src>.
//   - /robots.txt: "User-agent: *" / "Disallow: /private/" (and a group
//     disallowing everything to "evilbot").
//
// Unless Config.NoTraps is set, pages chosen by the seed also carry these
// traps, each linked from two pages (or more) so that de-duplication
// matters:
//
//   - /private/0…2: disallowed by robots.txt; served 200 if asked anyway.
//   - /missing/0…2: 404.
//   - /flaky/0…2: the first request gets 503 with "Retry-After: 1", every
//     later one 200.
//   - /redirect/J (301) -> /redirect/J/2 (302) -> a content page, the last
//     Location absolute with a fragment or relative ("../../page/T"); the
//     content page is linked normally too.
//   - /loop/a (302) -> /loop/b (302) -> /loop/a.
//   - /q/0…4 with a query of three parameters, linked with the parameters
//     in different orders, with "&" and "&amp;", with a fragment and with
//     a percent-encoded unreserved character: one resource each.
//   - /slow: answers after Config.SlowDelay (2s by default).
//   - /huge: 50 MiB of HTML with a Content-Length, streamed from a shared
//     64 KiB buffer.
//   - /endless: HTML without a length that never ends; it stops writing
//     when the request's context ends or a write fails, and then cuts the
//     connection (the body never ends cleanly).
//   - /binary: 64 KiB of binary bytes served as text/html (no '<' in
//     them, so no links whatever the parser).
//   - /broken: unclosed and stray tags, bad entities and garbage bytes; its
//     one real link goes to /leaf/broken; it also mentions /from-script in
//     a <script> and /commented-out in comments, neither a link.
//   - /files/0.pdf, /files/1.pdf: application/pdf whose bytes contain
//     <a href="/from-pdf/J"> — links must not be extracted from non-HTML.
//   - Leaf pages reachable one way only: /leaf/area (an <area href>),
//     /leaf/next (a <link rel="next">), /leaf/base (the relative link
//     "leaf/base" on two pages with <base href="/"> and
//     <base href="http://HOST/">; resolved against the page it would be
//     /page/leaf/base).
//
// # The shop
//
// Under /shop/ the site also serves a small shop, for scraping examples
// (in the manner of books.toscrape.com). It is not linked from /, and its
// requests are counted apart (ShopServed), so Verify of a crawl from / is
// unaffected. It is the same in every site, whatever the Config.
//
//   - /shop/ links to page/1.
//   - /shop/page/N, N in [1, ShopListingPages]: ShopPageSize products as
//     article.product_pod, each with an h3 a linking "../product/I" (a
//     shortened title; the full one in the title attribute), a
//     p.star-rating and a p.price_color; a ul.pager with relative
//     li.previous a and li.next a links.
//   - /shop/product/I, I in [1, ShopProducts]: article.product_page with
//     an h1 title (some contain "&", written "&amp;"), p.price_color
//     ("£51.77") and p.star-rating with the rating as its second class
//     ("star-rating Three"); links back to its listing page and to three
//     other products.
//
// # Sitemaps, cookies
//
// Also counted apart (ExtrasServed), and the same in every site:
//
//   - /robots.txt ends with "Sitemap: http://HOST/sitemaps/index.xml".
//   - /sitemap.xml: a urlset listing /hidden/0.
//   - /sitemaps/index.xml: a sitemap index listing /sitemaps/hidden.xml.gz,
//     /sitemaps/encoded.xml and http://external.invalid/sitemap.xml.
//   - /sitemaps/hidden.xml.gz: a gzip file served as application/gzip,
//     listing /hidden/1 to /hidden/20, /hidden/1 again, /private/hidden
//     (disallowed by robots.txt) and http://external.invalid/hidden.
//   - /sitemaps/encoded.xml: served with Content-Encoding: gzip, listing
//     /hidden/21 to /hidden/29.
//   - /hidden/N, N in [0, HiddenPages): small pages nothing links to, so a
//     crawl finds them through the sitemaps alone (HiddenPaths).
//   - /session/login sets the cookie SessionCookie (Path=/session/) and
//     links to /session/members, which answers 403 without the cookie.
//
// Products returns the products a correct scrape finds; VerifyShop checks
// that every listing and product page was fetched exactly once.
//
// # The calendar
//
// Under /calendar/ the site serves an infinite calendar, the classic
// crawler trap: /calendar/ links to CalendarStart; each month
// /calendar/Y/M links to the months before and after it and to two days
// /calendar/Y/M/1 and /calendar/Y/M/15, which link back to it, for years 1
// to 1,000,000. From /calendar/ at depth 0, the month k months away from
// CalendarStart is at depth 1+|k| and its days one deeper. Like the shop it is not linked from / and is
// counted apart (CalendarServed). A crawl of it ends only by a limit: the
// engine's default maximum depth.
//
// # Counting
//
// Every request except those under /_testsite/ is counted under its
// canonical key: the decoded path with dot segments resolved, plus the
// query with its parameters sorted ("/q/1?id=1&sort=asc&view=full"). The
// fragment never reaches a server. So a crawler that fetches /page/7 and
// /page/%37, or two orders of one query, is seen fetching one key twice.
// Served returns the counts; the host is not part of the key.
//
// # What Verify checks
//
// Verify assumes a complete crawl from / with no depth or page limit, a
// body-size cap, and redirects that pass through the duplicate filter. It
// returns nil iff all of these hold, else an errors.Join of every
// violation, each naming its path and wrapping a sentinel:
//
//   - ErrMissed / ErrDuplicate: /, every content page, the query variants,
//     the leaf pages, /slow, /broken, /binary and the PDF files were each
//     requested exactly once (and answered 200); every flaky page exactly
//     twice (503, then 200); every /missing/ page, redirect and loop step
//     exactly once (a 404 is not retried; a redirect to a URL already seen
//     is not followed); /huge and /endless at least once and at most
//     HostileFetchLimit (3) times — once is ideal.
//   - ErrDisallowed: no /private/ path was requested.
//   - ErrNotLinked: nothing else was requested: not the assets, not
//     /from-pdf/J, /from-script or /commented-out, not any path the site
//     does not serve (a mis-resolved relative link, say).
//   - /robots.txt may be requested any number of times (once per worker).
//
// VerifyPartial checks only what must hold at every moment of a correct
// crawl (nothing too often, nothing disallowed, nothing unlinked), so it
// applies to crawls stopped early. Reset clears the counters and the flaky
// state for a fresh crawl.
//
// Expected is the number of distinct resources a correct crawl fetches with
// status 200 and keeps: 1 (/) + Pages, plus 17 with traps (5 query
// variants, 3 flaky pages, 4 leaf pages, /slow, /broken, /binary, 2 PDF
// files). It leaves out /robots.txt, 404s, 3xx responses, /private/ and
// /huge and /endless, which a crawler with a body-size cap below 50 MiB
// gives up on. It equals the number of items of a crawler that writes one
// item per 200 response it keeps; Summary().Succeeded counts the same
// resources on the server's side.
//
// # Control endpoints
//
// For a test in another process (the CLI under test, say):
//
//	GET  /_testsite/served            {"served": {key: count}, "summary": Summary}
//	GET  /_testsite/verify            200 "ok", or 409 with one problem per line
//	GET  /_testsite/verify?partial=1  the same for VerifyPartial
//	GET  /_testsite/shop              {"products": Products(), "problems": […]} (VerifyShop)
//	POST /_testsite/reset             Reset, 204
//
// These requests are neither counted nor delayed by Config.Latency.
//
// # Performance and concurrency
//
// New precomputes the link graph, 256 filler paragraphs and the streamed
// buffers; a content page is assembled in a pooled buffer and written with
// one Write and a Content-Length (about 1.5 to 2 µs and 2 small allocations per
// page, see BenchmarkServePage). Every method is safe for concurrent use;
// the counters sit behind one mutex held for a map update.
package testsite
