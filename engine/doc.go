// Package engine is trawl's crawl engine: it takes requests from a broker,
// fetches them politely, hands responses to callbacks, and publishes the
// new requests they find through a duplicate filter.
//
// The shortest use: a broker, a filter, a Config, then Seed and Run
// (errors unchecked here):
//
//	b, _ := memory.New(memory.Config{})        // or redis, rabbitmq, nats
//	f, _ := local.New(local.Config{})          // or dedup/redis
//	c, _ := engine.New(b, f, engine.Config{
//		Sink:        engine.NewJSONLines(os.Stdout),
//		IdleTimeout: 5 * time.Second, // 0: serve until ctx ends
//	})
//	c.Seed(ctx, engine.StartURL{URL: "https://example.com/"})
//	err := c.Run(ctx) // until the crawl is done
//
// The root package trawl builds all of this in one call, with callbacks
// on CSS selectors.
//
// # Guarantees
//
// At least once, end to end: a delivery is acknowledged only after its
// page was fetched, its new requests were published and its items were
// written durably to the sink. A worker that dies loses nothing; its
// deliveries come back after their lease and, at worst, a page in flight
// is fetched again. Leases of pages in progress are extended every third
// of Config.Lease: all of them in one call where the broker is a
// broker.BatchExtender.
//
// Settlement is batched: the links and items of pages that finish within
// a few milliseconds of each other are written together (one filter call
// per step, one publish, one sink write), and their deliveries are then
// acknowledged together, in one call where the broker is a
// broker.BatchAcker. A batch whose writing fails is written again in
// halves, down to the page at fault, which alone is nacked with its retry
// back-off; when both halves fail, the batch is nacked whole. Pages
// waiting for their batch count as in flight: a worker holds at most
// twice Config.Concurrency deliveries unsettled, so a worker killed with
// kill -9 has at most that many pages fetched again (a consumer's
// read-ahead comes back too). The frontier's consumer reads ahead one
// delivery per slot; on a broker.UnsettledCounter (RabbitMQ) its prefetch
// also covers the deliveries the batches hold. Run writes and
// acknowledges every waiting page before it returns.
//
// The crawl's shared state is a frontier (package frontier): a page's
// links are claimed and published by one frontier.Frontier.Expand when
// the page is written, never when a request is consumed, so a redelivered
// request is not mistaken for a duplicate. Expand is idempotent per page:
// a page processed again (a redelivery after a crash, whatever the broker
// says about it, a requeued dead letter, a second message for one page)
// publishes exactly the links that were claimed and never published, and
// nothing else; so a broker crash refetches at most the pages in flight.
// New composes a broker and a filter into a frontier that keeps marks in
// the filter to that end (frontier.Compose); NewOn takes any frontier. A
// start URL found claimed and not yet published is another worker's at
// work as often as a dead one's (workers given the same start URL at
// once): the composed frontier publishes it only once its claimer has not
// published it for half of Config.Lease, so it is fetched once, and never
// lost.
//
// Failures are retried by the broker: the delivery is nacked with an
// exponential, jittered delay (Config.RetryBackoff), keeping its priority,
// and the retries used are counted from its Attempt. Past Config.MaxRetries
// it is dead-lettered with the reason. Deliveries given back unstarted (on
// shutdown, or at Config.MaxPages) are published again as fresh copies that
// carry the retries used: a give-back is not an attempt, and a nack would
// count against the broker's delivery limit.
//
// Undecodable payloads, unknown callbacks and requests that exhausted their
// retries are dead-lettered and counted; the first undecodable payload is
// logged at Warn, later ones at Debug. A request naming a callback the
// worker does not have (workers running different code) is dead-lettered
// before it is fetched, with a reason naming the callback and the ones the
// worker has, and logged at Warn once per name.
//
// # Politeness and safety
//
// Per host: a concurrency cap, a delay between request starts, robots.txt
// (cached, Crawl-delay honoured) and a back-off on 429 and 503 that honours
// Retry-After (see HostLimiter and Config.IgnoreRobots). Retries back off
// exponentially from Config.RetryBackoff. Redirects are not followed inside
// a fetch: a 3xx becomes a new request through scope and filter, so a
// redirect loop ends at the filter. A guard refuses to dial loopback,
// private, link-local and metadata addresses, on every hop, except for the
// host:port pairs in Config.TrustedHosts (see FetchConfig.AllowPrivate). Such a refusal
// depends on the worker's configuration, not on the request
// (ErrLocalRefusal): the request is given back for another worker, never
// settled as done; the worker logs one Error per host naming
// --allow-private, backs off when it refuses everything, and past
// MaxDeferrals the request is dead-lettered with the reason. An
// unreachable robots.txt (5xx, network error) disallows its host until it
// can be fetched (RFC 9309): the host's requests are retried then.
//
// # Settings
//
// What a page yields must not depend on which worker took it, so the
// settings that decide it (Settings: allowed domains, the address guard and
// trusted hosts, include and exclude, depth, extraction, robots) belong to
// the crawl. Seed and Run store them with the crawl (broker.Metadata, or
// Config.Metadata) if it has none, and otherwise adopt the crawl's for the
// settings named in Config.Adopt, logging them at Info; a crawler that
// insists on a setting the crawl has with another value fails with a
// *SettingsError (ErrSettingsConflict) unless Config.OverrideSettings.
// Trusted hosts are merged: each worker that joins adds its own (also as
// one metadata key per host, created and never rewritten, so that workers
// joining at once cannot lose each other's), and a worker refused by its
// guard asks the crawl whether it trusts the host by now (its seeder
// joined later): then it fetches the page instead of failing it.
// While Run runs, the worker announces itself (broker.Presence), so that
// a purge can refuse while workers are live (LiveWorkers).
//
// # Limits
//
// URLs are at most MaxURLLength (8 KiB) wherever they enter; responses at
// most FetchConfig.MaxHeaderSize of header (1 MiB) and MaxBodySize of body
// (10 MiB), so a worker's responses take at most Config.Concurrency times
// their sum; robots.txt is parsed on its first 500 KiB. Links are followed
// to DefaultMaxDepth (32) unless Config.MaxDepth says otherwise: the guard
// against URL traps.
//
// # Scope
//
// A discovered link is followed when it is http or https, on an allowed
// domain (Config.AllowedDomains, or else the domain of the start URL it
// descends from, see Request.Scope), within Config.MaxDepth and the
// include and exclude patterns.
//
// # Sitemaps, headers, cookies, proxies
//
// With Config.Sitemaps, each start URL also seeds its host's robots.txt
// (read for Sitemap: lines) and /sitemap.xml, as requests for the
// engine's own callbacks (CallbackRobotsSitemaps, CallbackSitemap): they
// travel through the broker and the filter like pages, so any worker
// fetches them, once per crawl, with the same guarantees. Sitemap indexes
// are followed; gzip is read; the URLs listed are enqueued as links of the
// sitemap, through scope and the filter (see ParseSitemap for the
// protocol's limits, SitemapMaxNesting and SitemapMaxPerHost for those of
// indexes). A sitemap is parsed as it is read, never held whole; a
// robots.txt's Sitemap: lines are read from the robots cache's copy
// (fetched once per host), unless Config.IgnoreRobots.
//
// FetchConfig.Header goes with every request; a request's own Header (a
// JSON start URL's "headers", say) wins. Each worker
// keeps a cookie jar (FetchConfig.Jar, NoCookies): a page that needs a
// cookie set by an earlier page gets it when the same worker fetched the
// earlier page, which a single worker always does; workers do not share
// cookies. FetchConfig.Proxy, or else HTTP_PROXY, HTTPS_PROXY and
// NO_PROXY, choose the proxy; FetchConfig.Timeout bounds each request.
//
// # Items
//
// The default callback emits a Page per fetched 2xx page, with the fields
// of Config.Extract (::text, ::attr(NAME), ::html). A Sink
// stores items: JSONLines, CSV (PageColumns) and QueueSink ship with the
// engine; implement Sink for anything else.
//
// # Wire format
//
// Requests travel as a compact binary encoding with a version byte
// (Request.MarshalBinary); decoding validates every length and never runs
// code. Start URLs travel as a plain URL or JSON (StartURL).
package engine
