// Package redis is trawl's Redis broker: work queues kept in Redis, shared
// by any number of workers on any number of machines, through a go-redis
// UniversalClient (a single server, Sentinel or Cluster). It needs Redis
// 6.2 or later.
//
// The shortest use, as the engine's broker:
//
//	client := goredis.NewClient(&goredis.Options{Addr: "localhost:6379"})
//	b, err := redis.New(ctx, redis.Config{Client: client})
//	c, err := engine.New(b, filter, engine.Config{Name: "books"})
//
// The crawl's other Redis pieces live here too: StartURLs (scrapy-redis's
// start_urls list), Items, Stats (engine.Config.SharedStats), HostLimiter
// (engine.Config.Limiter) and PurgeCrawl; every key is "{NAME}:part", as
// the crawl's layout (internal/redislayout, listed in docs/design.md)
// names it, and has one type and one owner.
//
// # Guarantees
//
// Delivery is at-least-once. Receive is one Lua script that moves messages
// from the ready structure into an in-flight sorted set scored by lease
// deadline; nothing is popped destructively. Ack removes a message only if
// the lease is still the caller's (else broker.ErrLeaseLost). A lease that
// runs out, because its worker died or hung, is given back by the next
// Receive on the queue, by any worker, with Attempt one higher; after
// Config.MaxDeliveries deliveries (a Nack or an expired lease on the last
// one) the message goes to the queue's dead letters instead. A worker
// extends (Delivery.Extend, or ExtendBatch for many: one script call per
// queue partition) the leases of pages still in progress. All deadlines use the server's clock, so workers' clocks do
// not matter.
//
// Close gives back the deliveries it has not settled at once; they count
// as delivered (the next delivery has the next Attempt), but Close never
// dead-letters them.
//
// # Ordering
//
// Priority mode (the default) keeps a sorted set: higher priorities first,
// exactly, for any int priority within ±2^53; FIFO among equal priorities.
// A nacked or expired message goes back to its old place. FIFO and LIFO
// modes keep a list and ignore priorities for ordering (they still travel
// with the message); a message given back is the next one taken.
//
// # Blocking
//
// A Receive that finds nothing waits with BLPOP on the queue's notify list,
// to which Publish, Nack and a Receive that leaves messages behind push a
// token; the wait also ends when the queue's earliest lease or delay runs
// out, and after Config.BlockTimeout at most. Nothing polls in a tight
// loop. A Receive whose context ends returns at once; its BLPOP finishes in
// the background within BlockTimeout, and never runs past the context's
// deadline.
//
// # Consumers
//
// Consume starts one goroutine, owned by the consumer, on a connection of
// its own (to the node that serves the queue, on a Cluster): it runs the
// same lease script as Receive for up to prefetch messages at a time,
// keeps them read ahead for Next, renews the leases of those still
// waiting there every eighth of a lease (one script call for all), and
// waits with BLPOP when the queue has none. So a worker whose slots are
// all busy keeps its read-ahead: another worker does not take it when it
// waits longer than a lease, and the wait does not count as a delivery.
// Close ends that wait at once with CLIENT UNBLOCK from another
// connection, then gives the read-ahead back as never delivered (its
// Attempt unchanged). Next extends a delivery whose renewal came late
// (less than three quarters of its lease left), and skips one whose lease
// was lost. A consumer waits on the queue's token for up to the longer of
// BlockTimeout and the lease (a delayed Nack pushes a token too, so that
// a waiting consumer learns when the delay ends): an idle consumer sends
// two commands per lease, 30s by default.
//
// # Keys
//
// The keys of queue "books:requests" all carry the hash tag {books}, the
// part of the name before its last ':', so that on Cluster all keys of a
// crawl (NAME:requests, NAME:start_urls, NAME:dupefilter, …) share a slot:
// "{books}:requests" holds the ready messages; ":inflight", ":delayed",
// ":dead", ":notify" and ":seq" are appended for the rest (see the comment
// in scripts.go for what each holds). A message is one member that carries
// its body, so Ack sends the body back to the server: fine for requests of
// a few hundred bytes, wasteful for bodies of megabytes.
//
// # Deviations and limits
//
// Delays and lease expiry are carried out lazily by Receive: an expired
// lease of a queue nobody receives from stays in flight (Counts shows it
// there). Entries pushed onto the ready key by hand, not by Publish, are
// moved to the dead letters with the reason "malformed queue entry"; from
// there Requeue publishes them properly. A Publish of more than 1000
// messages is atomic per 1000.
//
// AckBatch acknowledges many deliveries in one round trip per queue; use
// it where acknowledgements come in batches.
package redis
