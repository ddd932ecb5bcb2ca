// Package redis holds trawl's duplicate filters in Redis, shared by all
// workers of a crawl through a go-redis UniversalClient (a single server,
// Sentinel or Cluster): Set, exact, and Bloom, probabilistic and smaller.
//
// Both are atomic test-and-set filters: when several workers add one
// fingerprint at once, exactly one hears "new". Both answer a batch in one
// round trip.
//
// The shortest use, as the engine's filter:
//
//	f, err := redis.NewSet(ctx, redis.SetConfig{Client: client, Key: "books:dupefilter"})
//
// # Keys
//
// Filter key "books:dupefilter" (the engine's NAME:dupefilter) becomes the
// prefix "{books}:dupefilter": the part before the last ':' is the Cluster
// hash tag, the same as for the crawl's queues, so all keys of a crawl live
// in one slot. "{books}:dupefilter:meta" records the filter's layout; a
// worker configured for another kind or shape of filter on the same key
// gets ErrLayout (Bloom) or adopts the stored layout (Set). Stored opens
// the filter a key holds as its layout says, with no configuration.
//
// # Set
//
// Set stores each fingerprint as a 64-bit integer member of one of 2^b
// shard sets, "{books}:dupefilter:<shard in hex>": the first b bits of the
// fingerprint pick the shard, its last 64 bits are the member. Redis keeps
// a set of integers with at most set-max-intset-entries (default 512)
// members as an intset, 8 bytes a member; b is chosen so that at Capacity a
// shard holds about 3/4 of that. So a fingerprint costs about 9–10 bytes
// of Redis memory at capacity, against some 84 for scrapy-redis's
// 40-character hex strings. Well below capacity the per-key overhead
// (about 100 bytes per shard) dominates; well above it, shards turn into
// hash tables and a fingerprint costs several times more. Size Capacity
// for the crawl.
//
// Set is exact on 64+b of the fingerprint's 128 bits: two different
// requests collide with probability about n²/2^(65+b) among n stored
// fingerprints, 10^-7 for a billion fingerprints at b = 15, far below a
// Bloom filter's rate.
//
// Add sends one SADD per fingerprint, pipelined; SADD's answer is the
// atomic test-and-set.
//
// # Bloom
//
// Bloom is a Bloom filter of m bits and k hashes, m = -n ln p / (ln 2)^2 and
// k = (m/n) ln 2 for Capacity n and FPRate p (BloomParams): 1.2 bytes a
// fingerprint at 1%. The bits live in "{books}:dupefilter:bloom:<i>",
// strings of at most 2^32 bits each. A fingerprint's k bit positions come
// from its two 64-bit halves by double hashing, computed by the client.
// One BITFIELD command sets the bits of a whole batch and returns their old
// values, from which Add tells, per fingerprint, whether any was clear:
// check and set are one atomic step on the server, never check-then-set
// from the client. (A batch that needs several commands, for a filter of
// several parts or more than 8000 bits, runs them in one MULTI/EXEC.) No
// Lua script is needed: a script would spend most of its time converting
// its arguments.
//
// # Claims
//
// Both filters give the writes that claim a batch of fingerprints, their
// keys and per fingerprint its member or bit offsets (Claims), so that a
// script of the crawl's slot claims them itself beside other writes:
// broker/redis's ClaimPublish claims links and publishes the new ones in
// one atomic step, with the answer Add would give.
package redis
