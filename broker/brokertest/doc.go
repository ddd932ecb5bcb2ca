// Package brokertest is the conformance suite for broker.Broker backends,
// in the manner of testing/slogtest and testing/fstest: it says in code what
// the interface in package broker promises, and every backend (memory,
// Redis, RabbitMQ, NATS JetStream) runs it unchanged:
//
//	func TestConformance(t *testing.T) {
//		brokertest.Run(t, brokertest.Config{
//			New: func(t *testing.T, s brokertest.Setup) broker.Broker { … },
//		})
//	}
//
// Run runs one subtest per order mode the backend supports, and under it
// one subtest per promise: round trips of bodies and priorities, ordering
// per mode (in one Publish call, in several, and interleaved with Receive
// against a reference model), ack, nack with and without delay, reject and
// dead letters, the delivery limit, double settlement, lease expiry and
// extension, a consumer closed with deliveries in hand, concurrent
// consumers, wake-up of a blocked Receive, context cancellation (and that a
// cancelled Receive loses nothing), closed brokers, invalid arguments,
// counts, purge and queue independence; and the promises of
// broker.Consumer: order within the read-ahead window, the read-ahead
// bound, deliveries returned and unsettled kept out of it (or, for a
// broker.UnsettledCounter, counted in it), settling, lease expiry and extension of deliveries from Next,
// wake-up, cancellation that loses nothing, Close of the consumer (read-ahead
// given back at once) and of its broker, concurrent consumers, and, where
// Config.Restartable offers a server of the test's own, a consumer open
// across a restart of the server. A broker.Partitioned with two partitions
// or more also runs the Partitions cases: keyed messages go to their
// key's partition and are counted there, and Receive and a consumer take
// from every partition, so that another partition's backlog starves none
// (fair); a consumer that is a broker.PartitionPreferrer takes its
// preferred partition's messages before another's, and the other's once
// its own is empty (Prefer), and one told to prefer none (an empty own)
// takes only as it steals (PreferNone). KeyIn, Keyed and DrainWithFault serve a backend's own partition
// tests (its layout, its leaders on a cluster).
//
// Counts, Purge, DeadLetters, Requeue and Extend are part of broker.Broker
// and broker.Delivery and are checked on every backend. The promises of
// an optional interface, broker.Metadata (with its Presence, and a broker.Roster listing the
// live workers sorted),
// broker.BatchAcker (AckBatch acks as Ack on each delivery would) and
// broker.BatchExtender (ExtendBatch extends as Extend on each would, an
// error per delivery), are
// checked when the backend implements it; a subtest that needs one the
// backend lacks says so with t.Skip.
//
// Every subtest uses fresh queue names, so backends may share one server
// across subtests, and runs in parallel with the others. Waits are bounded:
// deadline-based polling or context timeouts, never a bare sleep as
// synchronization. Tests that need leases to expire use Config.Lease.
//
// The subtests spend their time waiting for leases and delays, not
// computing, so a generous -parallel (say 32) shortens a run several times
// over on a machine with few cores; the suite runs in about 4 leases
// (Config.Lease) plus overheads when nothing limits its parallelism.
package brokertest
