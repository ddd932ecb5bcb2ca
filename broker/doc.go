// Package broker defines trawl's crawl frontier: named work queues with
// priorities and at-least-once delivery under leases, shared by any number
// of workers.
//
// A Broker publishes messages and hands them out as Deliveries. A delivery
// stays leased to its consumer until it is acknowledged (the work is done
// and durable), nacked (give it back, maybe after a delay) or rejected
// (dead-letter it). A delivery that is never settled, because its worker
// died, returns to its queue when the lease expires. A message delivered
// more than the backend's maximum number of times goes to the queue's
// dead-letter queue.
//
// Every Broker also counts, purges and requeues dead letters, and every
// Delivery's lease can be extended. What only some backends do is a
// separate interface found by type assertion, and says which do and why
// the others do not: BatchAcker, UnsettledCounter, Metadata, Presence and
// Incarnations.
//
// Package broker/brokertest is the conformance suite every backend passes;
// package broker/memory is the in-memory backend.
package broker
