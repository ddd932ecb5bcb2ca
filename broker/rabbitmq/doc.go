// Package rabbitmq is trawl's RabbitMQ broker: work queues in RabbitMQ
// (3.8 or later; a stock server, no plugin needed), shared by any
// number of workers on any number of machines, through
// github.com/rabbitmq/amqp091-go. It passes broker/brokertest in Priority
// and FIFO order.
//
// # Topology
//
// A broker queue Q is the AMQP queue Q, reached through the default
// exchange, declared on first use: durable (Config.NonDurable: transient),
// with x-max-priority (Config.MaxPriority, default 10) in Priority order,
// and with a dead-letter exchange that routes to Q+":dead", an ordinary
// queue holding Q's dead letters. A nack with a delay publishes into
// Q+":delay:<ms>", a queue whose x-message-ttl is the delay and whose
// dead-letter exchange routes expired messages back to Q; it deletes
// itself a minute after its last use (x-expires). Delays are rounded up to
// the next of 40 steps (100ms times powers of √2, from 100ms to 24h; 300ms,
// 600ms and 1.2s are steps), so that the delay queues Q can have are few
// and their names known in advance.
//
// With Config.QueueType Quorum, Q, its dead-letter queue and its delay
// queues are quorum queues (x-queue-type quorum), replicated on the nodes
// of a cluster: a publish is confirmed once a majority of them has the
// message, and a queue keeps serving while a minority is down. Quorum
// queues have no priorities in RabbitMQ 3.x (they ignore x-max-priority
// and the message priority), so Quorum needs FIFO order: Validate says so
// rather than letting priorities be dropped in silence. The queues that
// dead-letter (Q to its dead letters, a delay queue back to Q) do so at
// least once (x-dead-letter-strategy at-least-once, with the x-overflow
// reject-publish RabbitMQ requires for it; the queues have no length
// limit). Config.URL may list the cluster's nodes, comma-separated: the
// broker connects to the first that answers and, when its connection
// drops, tries them in turn from the one it had.
//
// Every Broker also declares the fanout exchange trawl.presence and an
// exclusive, server-named queue bound to it, and publishes there, twice a
// second, how many deliveries of each queue it has taken and holds (see
// Counts).
//
// A queue that exists with other arguments (another x-max-priority, other
// durability, a missing dead-letter route) is never used as it is: the
// declaration fails with ErrQueueMismatch, which quotes the server's
// explanation and names Config.Recreate (--amqp-recreate), which deletes
// the queue, losing its messages, and declares it anew.
//
// # Priorities
//
// A message's priority p is published as the AMQP priority
// clamp(p+Config.PriorityOffset, 0, MaxPriority). The mapping is
// monotonic: priorities inside the range keep their order exactly;
// priorities beyond it share the range's ends (and among themselves come
// FIFO) without disturbing the others. The priority itself travels in the
// header x-trawl-priority, so Message().Priority is what was published.
//
// # Consumers
//
// A worker takes its deliveries through Consume: one channel per
// consumer, with basic.qos(prefetch) and one basic.consume, held for the
// consumer's life, so an idle worker sends the server nothing for it.
// The server pushes the head of the queue (highest priority first) up to
// prefetch unacknowledged deliveries; those read ahead and not yet
// returned by Next are the only reordering (a message of higher priority
// published meanwhile comes after them), and count as in flight for
// Counts and in the presence reports. basic.qos also counts deliveries
// returned by Next and not yet settled, and a live consumer's window
// cannot grow (a channel's basic.qos applies to the consumers started
// after it), so the broker is a broker.UnsettledCounter: a caller that
// holds deliveries unsettled while it reads on (the engine, whose
// settlement is batched) asks for a prefetch that covers them.
// Deliveries are settled on the consumer's channel. The lease (below)
// starts when Next returns a delivery.
//
// Close cancels the consumer (basic.cancel) and gives what it read ahead
// back at once, as copies with the same attempt, published and confirmed
// before the read-ahead deliveries are acknowledged (a nack with requeue
// would flag them as redelivered and cost them an attempt); they join the
// end of their priority level. Deliveries returned before Close stay
// valid: the channel closes once the last of them is settled (or its
// connection, or the broker, closes). After a connection loss the
// consumer subscribes again on the new connection by itself; a Next that
// waits more than 5s for it returns an error saying so, and the next
// call waits again.
//
// Receive, for one-off takes, registers a consumer with prefetch
// min(max, Config.Prefetch), takes what the server pushes, and cancels it
// before it returns, so messages it did not ask for stay in the queue:
// two round trips per Receive on top of the deliveries.
//
// AckBatch (broker.BatchAcker) acknowledges, per channel, the longest
// run of a batch's delivery tags below which no other delivery of the
// channel is unsettled with one basic.ack (multiple=true), and the rest
// one by one. An ack is a frame the server does not answer: a batch saves
// frames and the server's work per frame, not round trips. Its frames go
// out in one write, as do the messages of one Publish (amqp091 flushes
// after every command; the broker's connection holds the flushes until
// the batch is written), rather than a write(2) and a TCP segment each.
//
// # Delivery, attempts and leases
//
// Publish uses publisher confirms: it returns once the server has taken
// every message (for persistent messages, written them to disk). When the
// connection drops meanwhile, the unconfirmed messages are published again
// on the new connection, so a message may be stored twice (at-least-once).
// If ctx ends after the messages were sent, Publish still waits up to 5s
// for their confirms.
//
// Deliveries are acknowledged manually. RabbitMQ does not count
// deliveries of classic queues (quorum queues do, but support priorities
// only from RabbitMQ 4.0), so the attempt number travels in the header
// x-trawl-attempt, and a message is never requeued with a stale count:
//
//   - Nack publishes a copy with the next attempt (into the delay queue
//     for a delay), waits for its confirm, then acknowledges the delivery.
//     The copy joins the end of its priority level. Nack of the
//     MaxDeliveries-th attempt dead-letters instead; Reject dead-letters at
//     once, with the reason in the header x-trawl-reason.
//   - A delivery the server redelivers (its consumer's channel closed with
//     it unacknowledged: a crash, Close, a lost connection, an expired
//     lease) is re-stamped by the consumer that gets it: published again
//     with the next attempt, or dead-lettered once past MaxDeliveries, and
//     the redelivery acknowledged. A worker that crashes on a message every
//     time therefore sends it to the dead letters, not into a loop.
//   - A server restart (a crash above all) flags as redelivered messages
//     that no consumer may have held. Each message carries the id of the
//     server incarnation it was stamped in (kept as the one message of the
//     transient queue trawl.boot, which a restart empties); a redelivery
//     counts as an attempt only within that incarnation, otherwise the
//     message is re-stamped with its attempt unchanged. So a restart costs
//     no message an attempt, and a crash loop loses at most one count per
//     restart. (The engine does not read Attempt as "its links may be
//     published": publication marks in the filter say that.)
//   - A server killed (kill -9, a power cut) forgets the acknowledgements
//     it had not yet written to disk: a classic queue writes them in
//     batches, when it next syncs (for a publisher confirm, say). Their
//     messages come back after the restart, as redeliveries, and are
//     processed again: at least once, never lost. Late in a crawl, when
//     nothing new is published, one kill brought back the messages
//     acknowledged in the last 1.5 s (482 pages of 2,001).
//
// AMQP has no lease: the server keeps a delivery with its channel until it
// is settled or the channel closes (or RabbitMQ's consumer_timeout, 30
// minutes by default, closes the channel, and with it a consumer's other
// deliveries: the consumer subscribes again). This broker keeps a lease of
// Config.Lease per delivery in the process: when it runs out, the
// delivery is nacked with requeue (so any consumer may get it, re-stamped
// as above) and settling it returns broker.ErrLeaseLost. Extending a
// delivery beyond consumer_timeout does not help. A worker that hangs without its process dying keeps its
// deliveries only for the lease; a worker whose process dies loses its
// connection, and the server gives its deliveries back at once.
//
// # Connection loss
//
// The broker reconnects by itself when its connection drops (server
// restart, network cut, forced close), with back-off from 100ms to 5s,
// logging at Warn. Queues are declared again on first use on the new
// connection. Deliveries of the old connection are void (settling them
// returns broker.ErrLeaseLost); the server redelivers their messages.
// Publish and Receive calls in progress wait for the new connection and
// carry on; they fail only when their context ends or Close is called.
//
// # Counts, purge, dead letters
//
// Counts needs no management API. Ready messages come from passive
// declares of Q and its delay queues; messages in flight from the reports
// every Broker publishes about its own deliveries. An engine that sees
// nothing ready and nothing in flight for its whole idle timeout may
// conclude that the crawl is done; Broker.Counts gives the rule and why it
// holds, also when workers are killed. Config.ManagementURL, if set, makes
// Counts ask the management API first (its totals lag by the server's
// collect_statistics_interval, 5s by default: keep the idle timeout above
// it); when the API fails, Counts warns, naming the flag, and counts over
// AMQP. A management URL without credentials takes the AMQP URL's.
// Counts answers from a count of the same queue less than a second old
// unless this Broker published, took or settled one of its messages
// since: an idle worker (a consumer on each of its two queues, counts
// five times a second) sends the server about 3 frames a second (the
// presence reports and the counts; TestIdleCost), over one connection.
//
// Purge empties Q, its dead-letter queue and its delay queues, and
// acknowledges the deliveries of Q this broker holds so that they do not
// come back. Deliveries held by other processes at that moment come back
// when those processes die or let their leases run out: purge a crawl
// whose workers are stopped.
//
// DeadLetters reads dead letters with basic.get and gives them back in
// their places; Requeue publishes them to Q as new messages (attempt 1),
// then acknowledges them in the dead-letter queue.
//
// # Deviations
//
// LIFO order is not supported: an AMQP queue delivers from its head.
// Bodies are carried as they are; the broker adds three headers. A message
// published to Q by another client, without those headers, counts as
// attempt 1 with the priority of its AMQP priority less the offset.
package rabbitmq
