// Package deployment is trawl's composition root: it turns a deployment
// (the broker and its URLs, the duplicate filter, the crawl's name, the
// data directory, TLS) into everything a crawl needs: the frontier, the
// filter, the start URLs, the item list, the shared counters, the stored
// settings and presence, the per-host limiter shared by the workers, the
// dead letters, purge and Close.
//
// The trawl command and the root package (trawl.Config.Deployment) both
// open their crawls here, so a library program and trawl worker given the
// same settings are workers of one crawl, and the limits that tie the
// packages together are kept in one place: each broker's delivery limit
// against the engine's retry limit (MaxDeliveries), each broker's lease
// against the engine's.
//
// What a deployment holds, by Config.Broker:
//
//	""        embedded NATS, local filter and counters in Dir (one process)
//	memory    in-memory broker and filter (this process only, nothing kept)
//	redis     frontier, filter, start URLs, items, counters, settings,
//	          presence and per-host limits in Redis
//	nats      frontier, settings and presence in JetStream; filter,
//	          counters and per-host limits in Redis (or Filter "local")
//	rabbitmq  frontier in RabbitMQ; filter, counters, settings, presence
//	          and per-host limits in Redis (or Filter "local")
package deployment
