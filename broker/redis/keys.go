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
type keys struct {
	queue                                       string
	ready, inflight, delayed, dead, notify, seq string
}

func keysFor(queue string) keys {
	k := redislayout.QueueKeys(queue)
	return keys{
		queue:    queue,
		ready:    k.Ready,
		inflight: k.Inflight,
		delayed:  k.Delayed,
		dead:     k.Dead,
		notify:   k.Notify,
		seq:      k.Seq,
	}
}
