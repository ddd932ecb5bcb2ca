// Package engine is trawl's crawl engine: it takes requests from a broker,
// fetches them politely, hands responses to callbacks, and publishes the
// new requests they find through a duplicate filter.
//
// # Guarantees
//
// At least once, end to end: a delivery is acknowledged only after its
// page was fetched, its new requests were published and its items were
// written durably to the sink. A worker that dies loses nothing; its
// deliveries come back after their lease and, at worst, a page in flight
// is fetched again. Leases of pages in progress are extended every third
// of Config.Lease.
//
// The duplicate filter is consulted when a request is published, never
// when it is consumed, so a redelivered request is not mistaken for a
// duplicate. A redelivered page (a delivery with Attempt > 1, whose earlier
// attempt may have added its links to the filter and died before
// publishing them) publishes its in-scope links whether the filter has seen
// them or not. Retries and graceful give-backs therefore publish a fresh
// copy of the request (Attempt 1) rather than nacking it.
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
// Retry-After (see HostLimiter, Politeness, Robots). Retries back off
// exponentially from Config.RetryBackoff. Redirects are not followed inside
// a fetch: a 3xx becomes a new request through scope and filter, so a
// redirect loop ends at the filter. A guard refuses to dial loopback,
// private, link-local and metadata addresses, on every hop, except for the
// hosts in Config.TrustedHosts (see Fetcher).
//
// # Scope
//
// A discovered link is followed when it is http or https, on an allowed
// domain (Config.AllowedDomains, or else the domain of the start URL it
// descends from, see Request.Scope), within Config.MaxDepth and the
// include and exclude patterns.
//
// # Wire format
//
// Requests travel as a compact binary encoding with a version byte
// (Request.MarshalBinary); decoding validates every length and never runs
// code. Start URLs travel as a plain URL or JSON (StartURL).
package engine
