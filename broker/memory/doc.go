// Package memory is trawl's in-memory broker, for single-node runs and fast
// unit tests. It passes broker/brokertest in all three order modes.
//
// # Store and handles
//
// A Store holds the queues; a Broker is one handle on a Store, standing for
// one consumer (a worker, a test's second process). Handles of one Store see
// the same queues. Closing a handle gives its unsettled deliveries back to
// their queues at once (counting as a delivery attempt, as an expired lease
// does) and leaves the other handles working. New is short for
// NewStore followed by Connect, for the common case of a single handle.
//
// A Store owns no goroutines and no operating-system resources: there is
// nothing to close, and it is freed when no longer referenced.
//
// # Guarantees
//
//   - Order: Priority mode delivers the highest priority first and FIFO
//     among equal priorities (a heap on priority, then publish sequence);
//     FIFO and LIFO ignore priority and order by publish sequence. A nacked
//     message keeps its original sequence number, so it returns to its old
//     place; a dead letter that is requeued gets a new one, as if published
//     again.
//   - Priorities are exact: every int is its own level.
//   - Leases: every delivery carries a deadline (Config.Lease from the
//     Receive). A delivery whose deadline has passed is expired: settling it
//     returns broker.ErrLeaseLost, and its message is redelivered with
//     Attempt+1, or dead-lettered once Attempt has reached
//     Config.MaxDeliveries. Expiry is applied lazily, whenever the queue is
//     next touched, and a waiting Receive sleeps on a timer until the
//     earliest lease deadline or delayed nack of its queue, so nothing
//     polls and nothing runs in the background.
//   - Nack with a delay keeps the message counted as Ready and invisible
//     until the delay has passed.
//   - Bodies are copied on Publish and on Receive: neither the publisher nor
//     a consumer can change a stored message through a slice it holds.
//   - Receive blocks without polling: it waits on a per-queue channel that
//     Publish, Nack, Requeue and a closing handle close to wake waiters, on
//     ctx, on the handle's Close and on the timer above.
//   - Context: Receive returns ctx.Err() (wrapped) when ctx is already done
//     or ends while waiting. The other operations never block and ignore ctx.
//
// Of the optional interfaces, *Broker implements broker.Metadata. It is no broker.BatchAcker: with no round trips to
// save, acknowledging one by one costs as much.
//
// # Deviations
//
// Nothing is durable: messages live as long as the Store. There is a single
// mutex per Store, which is ample for one process but serializes queues.
package memory
