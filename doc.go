// Package trawl is the front door of the trawl crawler: a crawl with
// Colly-style callbacks in a few lines, on one machine or on many workers
// sharing a broker.
//
// The shortest use crawls a site and writes one JSON line per item to
// standard output:
//
//	c := trawl.New(trawl.Config{})
//	c.OnHTML("a.next, h3 a", func(e *trawl.Element) { e.Follow(e.Attr("href")) })
//	c.OnHTML("article.product", func(e *trawl.Element) {
//		e.Item(map[string]string{"title": e.ChildText("h1"), "price": e.ChildText(".price")})
//	})
//	err := c.Run(ctx, "https://shop.example/")
//
// Run seeds the start URLs, crawls until the crawl has been idle for
// DefaultIdleTimeout (nothing queued, nothing in flight), and closes what
// it opened. Without a handler, every page becomes an engine.Page item and
// every link on the start URLs' domains is followed, as the CLI does.
//
// # Defaults
//
// The zero Config is what `trawl crawl URL` does: the frontier is an
// embedded NATS server with file storage and the duplicate filter a local
// Bloom filter, both in ./.trawl/NAME (Config.Dir), so that running the
// same program again resumes an interrupted crawl and does not fetch again
// what it fetched. Config.InMemory keeps both in memory instead. Items go
// to standard output as JSON Lines (Config.Output, or any engine.Sink in
// Config.Crawl.Sink). The hosts of the start URLs are trusted (exactly
// their host and port), so a site on loopback or a private network can be
// crawled; other private addresses stay refused. robots.txt, per-host
// politeness, retries with back-off, and the scope of the start URL's
// domain all apply; Config.Crawl (an engine.Config) tunes them.
//
// # Handlers
//
// OnHTML(selector, fn) calls fn for each element matching the CSS
// selector on each HTML page; OnResponse(fn) for each successful response,
// HTML or not, first. A page is parsed once, and the same document is
// handed to every handler. An Element reads the element (Text, Attr,
// ChildText, ChildAttr, ChildAttrs, the goquery DOM) and acts for its page:
// AbsURL resolves a link (honouring <base href>), Follow enqueues it, Item
// emits an item. Handlers run concurrently on different pages; a page's
// handlers run one after the other. A handler that panics, or uses a
// selector that does not compile, fails its page: the page is retried with
// back-off and, past Crawl.MaxRetries, dead-lettered with the reason.
// Items and links of a page are published only once all its handlers
// returned, and the page is acknowledged only after that: at least once,
// end to end (see package engine).
//
// # Sitemaps, headers, cookies, output
//
// Everything the CLI's flags do is a field of Config.Crawl:
// Crawl.Sitemaps (--sitemaps) also crawls the pages the sitemaps of the
// start URLs' hosts list, handed to the same handlers as the start URLs;
// Crawl.Fetch.Header (--header), Crawl.Fetch.NoCookies (--no-cookies; a
// cookie jar per worker by default), Crawl.Fetch.Proxy (--proxy; else the
// standard proxy variables) and Crawl.Fetch.Timeout (--timeout) shape the
// requests; Crawl.Extract (--extract) adds fields to the default items.
// Items go to Crawl.Sink when set: engine.NewCSV writes CSV, and any type
// with Write and Close is a sink (see engine.Sink for the contract: Write
// safe for concurrent use, returning once the items are durable).
//
// # Many workers
//
// Name the deployment (Config.Deployment: Redis, RabbitMQ or NATS and
// their URLs, as the trawl command's flags do) and run the same program on
// every worker:
//
//	c := trawl.New(trawl.Config{
//		Deployment: deployment.Config{Broker: "redis", RedisURL: "redis://10.0.0.5:6379/0"},
//		Crawl:      engine.Config{Name: "shop"},
//	})
//	scrape(c) // registers the handlers: the same on every worker
//	err := c.Run(ctx, start) // or Run(ctx) on workers that do not seed
//
// Run opens the deployment as trawl worker does (package deployment, the
// one composition root): the workers share the frontier, the duplicate
// filter, the per-host limits (PerHost and Delay hold across them), the
// counters (trawl stats shows them) and the crawl's stored settings, and
// the brokers' delivery limits follow Crawl.MaxRetries. A program and
// trawl worker with the same crawl name are workers of one crawl. Run(ctx)
// joins a crawl that exists, as trawl worker does: it waits for a seed up
// to Crawl.IdleTimeout, saying so on standard error, then returns an error
// wrapping deployment.ErrNoCrawl, having begun no crawl of a mistyped name.
//
// Closures cannot travel through a broker, so the handlers are registered
// under a name behind the scenes: a digest of their kinds and selectors in
// registration order ("trawl:3fa8c1d2e4b5"). A request followed from a
// page carries that name. Workers running the same program agree on it; a
// worker whose handlers differ (an older build, say) dead-letters such a
// request without fetching it, with a reason naming the callback and the
// ones it has, and logs it at Warn. Start URLs carry no name: every worker
// handles them with its handlers.
//
// # Configuration
//
// trawl takes a Config struct, as the engine and every backend do: its
// zero value is the documented default, Validate reports every problem at
// once, and the engine's own settings are one field (Crawl) rather than a
// second vocabulary of options. New never fails; Run reports a bad Config,
// a selector that does not compile and a bad start URL, all together,
// before it opens or fetches anything.
package trawl
