package redis

import "github.com/trawlhq/trawl/internal/rediskey"

// keys are the Redis keys of one queue, built from rediskey.Of (the one
// key-naming rule of trawl's Redis pieces).
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
	base := rediskey.Of(queue)
	return keys{
		queue:    queue,
		ready:    base,
		inflight: base + ":inflight",
		delayed:  base + ":delayed",
		dead:     base + ":dead",
		notify:   base + ":notify",
		seq:      base + ":seq",
	}
}
