// Package nats is trawl's NATS JetStream broker, and the embedded NATS
// server behind the default, serverless crawl. It passes broker/brokertest
// in Priority and FIFO order against nats-server 2.15 (embedded and
// external); LIFO is not supported.
//
// # Layout
//
// Each queue is a work-queue stream with one subject per priority band and
// a delay subject, a durable pull consumer per subject (shared by every
// worker), and a dead-letter stream; names are built in names.go. Every
// JetStream request goes through nats.go's jetstream package, so
// Config.Domain (trawl's --nats-domain) puts the queues and the metadata
// bucket in another JetStream domain, such as a hub's reached through a
// leaf node. A queue
// name is escaped into the stream and subject token: lower-case letters,
// digits and '-' stay, any other byte becomes '_' and two hex digits
// ("books:requests" → stream TRAWL_Q_books_3arequests, subjects
// trawl.books_3arequests.b0 … .b4 and .delay; dead letters in
// TRAWL_D_books_3arequests on trawl.books_3arequests.dead). Streams and
// consumers are created on a queue's first use, with file storage by
// default.
//
// # Priorities
//
// JetStream has no message priority. Priority order uses Config.Bands
// bands (default 5), centred on 0: band k holds priority lo+k where
// lo = -(Bands-1)/2, and the outer bands hold everything beyond (five
// bands: ≤-2, -1, 0, 1, ≥2). Receive, and a consumer's read-ahead, take
// from the highest band that has messages, then lower ones, in stream
// (publish) order within a band. So
// priorities are exact inside [lo, hi] and FIFO among all priorities that
// share an outer band; every message keeps its own priority value (a
// header). The engine's default priority 0 is the middle band, and a
// retry's priority-1 the one below. FIFO order has one band.
//
// # Delivery
//
// Delivery is at-least-once. A delivery is leased for Config.Lease, the
// consumers' AckWait; Extend sends JetStream's "in progress" (+WPI), which
// restarts the lease at a full Lease. Ack, and every other settlement,
// waits for the server's confirmation. AckBatch and ExtendBatch
// (broker.BatchAcker, broker.BatchExtender) send the requests of many
// deliveries together, their replies to one subscription of the batch,
// and wait for every confirmation: a few writes and one waiting goroutine
// a batch, not a request each. A lease is counted as lost slightly
// before the server's AckWait ends (by a tenth of Lease, at most a
// second): settling after that returns broker.ErrLeaseLost and sends
// nothing, since JetStream would apply a late ack or nak to the message's
// next delivery. The lease is counted from the sending of the pull request
// where the server answers at once (a message that was ready), else from
// the message's arrival (or, for one that came to a consumer's request
// kept open while its loop was busy, from when the loop stopped reading),
// so that only there can a process held up for longer than that margin
// settle a delivery the server has given away.
// A consumer's read-ahead deliveries are leased from their pull too: while
// its buffer is full it extends those past half their lease, and Next
// extends one past a quarter of its lease before returning it: a
// delivery comes out of Next with at least three quarters of a lease.
//
// Nack and Close give a message back by publishing a copy (to the end of
// its band, or to the delay subject) and then acknowledging the delivery,
// rather than with JetStream's nak: a nacked message then counts as ready
// (JetStream counts a nakked one as pending acknowledgement until it is
// redelivered), and a delay runs out through the delay consumer, whose
// messages wait with a nak delay and are moved back to their band when
// due. A nacked message therefore goes to the end of its band. The number
// of earlier deliveries travels in a header; Attempt adds JetStream's
// delivery count. A crash between the copy and the acknowledgement
// delivers the message twice, never zero times.
//
// # Dead letters
//
// JetStream does not move a message that reached MaxDeliver (it only
// publishes an advisory), so the broker does it: the consumers have no
// MaxDeliver, a Nack of a message on its last allowed attempt publishes it
// to the dead-letter stream, and a delivery that arrives with more than
// Config.MaxDeliveries attempts (its last lease expired) is dead-lettered
// by the Receive that gets it instead of being returned. Reject publishes
// with the reason in a header. Each dead letter is then acknowledged. Dead
// letters are read by sequence, oldest first; Requeue publishes them back
// (with their dead-letter id as message id, so racing Requeues publish
// once) and deletes them.
//
// # Waiting
//
// Receive first asks for what is there now: one stream info request tells
// which bands hold messages, then a "no wait" fetch per non-empty band,
// highest first. A band that answers with fewer messages than it holds
// (the server tells its consumers of a new message asynchronously) while
// a lower band holds some is asked again with a short waiting request, so
// that a lower band's message does not overtake it. Each fetch reads its
// answer to the end, however late it comes (nats.go's Fetch drops what
// comes a second after a "no wait" request: a held-up server or process
// would lose those messages until their lease); a message's lease is
// counted from when its request was sent, and one that comes after its
// lease ran out is not handed out (the server gives it to another). If
// there is nothing, it waits with a pull request that
// the server holds on every band and the delay consumer of every
// partition (one message each): a Publish, Nack, Requeue, expiring delay
// or lease wakes it at once, with no polling. The requests share one
// subscription, on a wildcard inbox with a reply subject per request, and
// are published without waiting for an answer, so that starting and
// stopping a wait costs one subscription and one drain however many bands
// and partitions the queue has (nats.go's Messages would be a
// subscription, a reader and heartbeat timers per band and partition,
// each drained in turn: 18 for three partitions of five bands). It then
// drains the subscription (the server forgets the open requests when
// their inbox loses its subscriber, and what it sent before is still
// read) and tops the result up to max. What is beyond max (one message came per band)
// goes back with a nak the server confirms before the next pull, so that
// it keeps its place in its band: JetStream delivers a consumer's nakked
// messages before its others. A cancelled Receive gives back what its
// requests brought at once, as copies (uncounted).
//
// What still grows with bands × partitions: opening a queue, once per
// broker, creates (or checks) two streams and a consumer per band plus
// the delay consumer in each partition, one API request each, in turn
// (24 for three partitions of five bands; sent together they took two
// to three times longer on the embedded server, which handles one
// connection's requests in turn); and a waiting worker holds that many
// pull requests on the server, renewed every 30s. A take costs a stream
// info request per partition and a fetch per band that holds messages.
//
// A consumer (Broker.Consume) is one loop per queue doing the same: while
// the queue has messages it refills its read-ahead (at most prefetch
// deliveries, sorted by band) with "no wait" fetches once half of it has
// been taken by Next; when the queue is empty and the read-ahead used up,
// it waits as Receive does (what comes beyond prefetch goes back with a
// nak, in place), with requests renewed as they expire (every 30s) or
// bring their batch; a reconnection, a consumer's new leader, or a request
// left unanswered past its expiry (a restarted server forgets them) sends
// them all again on a new subscription. A consumer whose read-ahead has
// room for what they may bring (one message a band and partition, at
// most half of prefetch) keeps them open when a wait returns: the next
// wait sends only those that brought their message, a take pulls from the
// bands whose requests brought one (no stream info: the others' requests
// still wait, so their bands have nothing the server could give), what
// they bring meanwhile is read as the loop waits for room and counted
// against the read-ahead, and they are drained when the loop waits on
// other partitions, fails or ends. An idle consumer
// therefore sends the server one pull request per band and per 30s
// (twelve per 30s for a crawl's two queues with five bands), on the
// connection it was given. Errors while the server is away are retried
// with back-off, with a warning; Next waits meanwhile. Close gives the
// read-ahead back at once, uncounted.
//
// # Deviations
//
//   - Priorities are banded (above). LIFO is not supported.
//   - Counts: a delivery whose lease expired, or that went back with a nak
//     (below), counts as InFlight until it is delivered again (the server
//     keeps it pending).
//   - Extend restarts the lease at Config.Lease whatever duration it is
//     given.
//   - A message published a moment before is not yet known to the
//     consumer's count (JetStream tells consumers asynchronously); Receive
//     compensates (see take in fetch.go), Counts may lag (callers poll).
//   - JetStream counts a delivery sent to a pull request whose subscriber
//     had just drained as a delivery. Attempt discounts redeliveries that
//     the message's age shows cannot come from expired leases; the
//     discount can also hide a real redelivery right after a server
//     restart (the server restores delivery times rounded down), so a
//     message in flight across a restart may get one attempt more than
//     MaxDeliveries.
//   - A message that a wait brought beyond what its Receive or consumer
//     could take (several bands received messages at once, more than max
//     or prefetch) goes back with JetStream's nak, which keeps its place in
//     its band but counts as a delivery: Attempt discounts it (as above)
//     while the message is younger than a lease, not when it is delivered
//     again later than that, when it counts one attempt more. A consumer
//     whose prefetch is at least Config.Bands never gives back that way.
//   - Delays are measured from the nack by the server's timestamp and the
//     clock of the worker that next handles the delayed message, every
//     time the server delivers it (a failed delivery makes the server
//     deliver it again at once); clock skew shortens a delay, or
//     lengthens it at most 8-fold. A Nack
//     delay is cut to MaxDelay; a message read from the server whose
//     trawl headers (Trawl-Delay, Trawl-Attempts, Trawl-Priority) are not
//     numbers within bounds was not written by trawl and is dead-lettered
//     with the reason instead of being held or handed out.
//   - All brokers of a queue must agree on Order and Bands (a mismatch is
//     refused with broker.ErrInvalid) and should agree on Lease and
//     MaxDeliveries (the last broker to open a queue sets AckWait).
//
// # Embedded server
//
// StartEmbedded runs nats-server in-process with JetStream file storage in
// a directory (locked against a second server), reachable through an
// in-process connection and, if asked, a loopback TCP port. Streams,
// messages, consumers and their acknowledgements survive a restart on the
// same directory. With EmbeddedConfig.Advertise the server requires a
// random token and records its address and token in the directory, so
// that another process (trawl stats, seed, deadletter) reaches it with
// ConnectRunning while it runs.
package nats
