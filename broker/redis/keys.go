package redis

import "github.com/trawlhq/trawl/internal/redislayout"

// keys are the Redis keys of one queue, as the crawl's layout
// (internal/redislayout) names them.
//
// A queue name is split at its last ':' into a crawl name and a local
// name; the crawl name becomes the Cluster hash tag, so that all keys of
// a crawl (its requests, start URLs, dead letters, and the duplicate
// filter's keys, which follow the same rule) live in one slot. The queue
// "books:requests" has the keys
//
//	{books}:requests            ready messages
//	{books}:requests:inflight   leased messages by lease deadline
//	{books}:requests:delayed    nacked messages by the time they are due
//	{books}:requests:dead       dead letters
//	{books}:requests:notify     wake-up token for blocked consumers
//	{books}:requests:seq        message id counter
//
// A name without ':' is its own tag: "jobs" has "{jobs}", "{jobs}:inflight"…
//
// A queue of a broker with partitions (Config.Partitions > 1) has those
// keys once per partition, under the partition's hash tag
// (redislayout.PartitionQueueKeys): "{books#3.43}:requests"…
type keys struct {
	queue                                       string
	part                                        int // its partition
	ready, inflight, delayed, dead, notify, seq string
}

func keysFor(queue string) keys { return partitionKeys(queue, 0, 1) }

// partitionKeys returns the keys of partition p of n of queue.
func partitionKeys(queue string, p, n int) keys {
	k := redislayout.PartitionQueueKeys(queue, p, n)
	return keys{
		queue:    queue,
		part:     p,
		ready:    k.Ready,
		inflight: k.Inflight,
		delayed:  k.Delayed,
		dead:     k.Dead,
		notify:   k.Notify,
		seq:      k.Seq,
	}
}

// queueKeys returns the keys of each partition of queue, made once per
// queue and kept: deliveries point to them.
func (b *Broker) queueKeys(queue string) []*keys {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ks, ok := b.parts[queue]; ok {
		return ks
	}
	n := b.cfg.Partitions
	ks := make([]*keys, n)
	for p := range n {
		k := partitionKeys(queue, p, n)
		ks[p] = &k
	}
	if len(b.parts) >= maxKeptQueues {
		clear(b.parts) // a broker of many queues (tests) makes them again
	}
	b.parts[queue] = ks
	return ks
}

// maxKeptQueues bounds the queues whose keys a Broker keeps.
const maxKeptQueues = 1024
