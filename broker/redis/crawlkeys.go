package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/redislayout"
)

// The crawl's Redis pieces beside its queues: start URLs, items, shared
// stats (here) and per-host limits (limiter.go). Their keys are
// "{NAME}:part" (internal/redislayout), hash-tagged like the broker's and the
// duplicate filter's keys, so that a crawl's keys share one Cluster slot.
var (
	_ engine.StartSource = (*StartURLs)(nil)
	_ broker.DeadLetters = (*StartURLs)(nil)
	_ engine.Sink        = (*Items)(nil)
	_ engine.SharedStats = (*Stats)(nil)
)

// StartURLs keeps a crawl's start URLs in a plain Redis list (or set) at
// {NAME}:start_urls, as scrapy-redis does: "redis-cli rpush '{books}:start_urls'
// https://example.com/" feeds a running crawl. It implements
// engine.StartSource. Taking is at least once, with no lease: a batch
// stays in the list until the engine has moved it into the frontier, where
// it is claimed in the filter, and drops it then (see TakeStarts). A worker killed in between (kill -9) loses nothing and
// leaves nothing to wait for: the batch is where it was.
//
// Payloads the engine rejects (not a start URL, too long) are kept with the
// reason in the list {NAME}:start_urls:dead, one JSON object
// {"reason": …, "payload": …} each (see RejectStart). They are the start
// URLs' dead letters: StartURLs implements broker.DeadLetters for the
// queue engine.StartQueue(NAME), and Requeue puts them back into
// {NAME}:start_urls as they came in.
//
// {NAME}:start_urls has one type for the crawl's life: a list, or a set
// with set. Any other finds the key of the other type refused with
// ErrStartsType.
type StartURLs struct {
	client goredis.UniversalClient
	queue  string // engine.StartQueue(crawl), the name of its dead letters
	key    string
	dead   string
	set    bool
}

// maxRejectedStarts bounds {NAME}:start_urls:dead: the oldest rejected
// payloads go once it holds that many.
const maxRejectedStarts = 10_000

// maxRejectedPayload is how much of a rejected payload is kept.
const maxRejectedPayload = 1 << 10

// NewStartURLs returns the start URLs of crawl; with set, a Redis set
// (no duplicates, no order) instead of a list.
func NewStartURLs(client goredis.UniversalClient, crawl string, set bool) *StartURLs {
	k := redislayout.StartKeys(crawl)
	return &StartURLs{client: client, queue: engine.StartQueue(crawl), key: k.List, dead: k.Dead, set: set}
}

// RejectStart keeps a rejected payload (its first KiB) with the reason in
// {NAME}:start_urls:dead, which holds the latest 10,000 (the engine then
// drops it from the start URLs).
func (s *StartURLs) RejectStart(ctx context.Context, payload []byte, reason string) error {
	kept := payload[:min(len(payload), maxRejectedPayload)]
	rec, err := json.Marshal(rejectedStart{reason, string(kept), len(payload),
		len(kept) == len(payload) && utf8.Valid(payload)})
	if err != nil {
		return fmt.Errorf("redis start urls: encode a rejected payload: %w", err)
	}
	_, err = s.client.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.RPush(ctx, s.dead, rec)
		p.LTrim(ctx, s.dead, -maxRejectedStarts, -1)
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis start urls: keep a rejected payload in %q: %w", s.dead, err)
	}
	return nil
}

// rejectedStart is a record of {NAME}:start_urls:dead.
type rejectedStart struct {
	Reason  string `json:"reason"`
	Payload string `json:"payload"`
	Bytes   int    `json:"bytes"` // the payload's length; only the first KiB is kept
	// Whole says the payload is kept as it came in: not cut, and valid
	// UTF-8 (JSON would replace the bytes that are not). Only a whole
	// payload can be requeued.
	Whole bool `json:"whole"`
}

// DeadLetters returns up to max of the rejected start URLs, oldest first,
// each with the reason it was rejected; a payload longer than 1 KiB is
// cut. queue must be the crawl's start queue.
func (s *StartURLs) DeadLetters(ctx context.Context, queue string, max int) ([]broker.DeadLetter, error) {
	if queue != s.queue {
		return nil, fmt.Errorf("redis start urls: dead letters of %q: these are the start URLs of %q", queue, s.queue)
	}
	if max <= 0 {
		return nil, nil
	}
	recs, err := s.client.LRange(ctx, s.dead, 0, int64(max)-1).Result()
	if err != nil {
		return nil, fmt.Errorf("redis start urls: read %q: %w", s.dead, err)
	}
	out := make([]broker.DeadLetter, 0, len(recs))
	for _, r := range recs {
		var rec rejectedStart
		if err := json.Unmarshal([]byte(r), &rec); err != nil {
			rec = rejectedStart{Reason: "not a record of trawl", Payload: r}
		}
		out = append(out, broker.DeadLetter{Message: broker.Message{Body: []byte(rec.Payload)}, Reason: rec.Reason})
	}
	return out, nil
}

// requeueStartsScript moves up to max whole rejected payloads (see
// rejectedStart), oldest first, from the dead letters back to the end of
// the start URLs, as they came in; the others stay, in their order. DEL
// comes before the pushes, so that a server out of memory does not refuse
// the script (see returnStartsScript): the records it moves are larger
// than the payloads.
//
// KEYS: start_urls, start_urls:dead
// ARGV: "set" or "list", max
// Returns the number moved.
var requeueStartsScript = goredis.NewScript(`
local max = tonumber(ARGV[2])
local recs = redis.call('LRANGE', KEYS[2], 0, -1)
local moved, kept = {}, {}
for _, r in ipairs(recs) do
  local ok, rec = pcall(cjson.decode, r)
  local whole = ok and type(rec) == 'table' and type(rec.payload) == 'string' and
    (rec.whole == true or (rec.whole == nil and rec.bytes == #rec.payload))
  if whole and #moved < max then moved[#moved + 1] = rec.payload else kept[#kept + 1] = r end
end
if #moved == 0 then return 0 end
redis.call('DEL', KEYS[2])
for i = 1, #kept, 1000 do redis.call('RPUSH', KEYS[2], unpack(kept, i, math.min(i + 999, #kept))) end
for i = 1, #moved, 1000 do
  local hi = math.min(i + 999, #moved)
  if ARGV[1] == 'set' then
    redis.call('SADD', KEYS[1], unpack(moved, i, hi))
  else
    redis.call('RPUSH', KEYS[1], unpack(moved, i, hi))
  end
end
return #moved
`)

// Requeue moves up to max rejected payloads back to the end of the start
// URLs, as they came in, and says how many moved; queue must be the
// crawl's start queue. A payload that was not kept whole (cut at 1 KiB, or
// not UTF-8) cannot go back and stays with the dead letters.
func (s *StartURLs) Requeue(ctx context.Context, queue string, max int) (int, error) {
	if queue != s.queue {
		return 0, fmt.Errorf("redis start urls: requeue %q: these are the start URLs of %q", queue, s.queue)
	}
	if max <= 0 {
		return 0, nil
	}
	n, err := requeueStartsScript.Run(ctx, s.client, []string{s.key, s.dead}, s.mode(), max).Int()
	if err != nil {
		return 0, s.wrongType(ctx, fmt.Errorf("redis start urls: requeue from %q to %q: %w", s.dead, s.key, err))
	}
	return n, nil
}

// ErrStartsType is returned when {NAME}:start_urls holds another type than
// the start URLs are configured to use: a set where a list is read (a
// scrapy-redis user's SADD), or the reverse.
var ErrStartsType = errors.New("redis start urls: wrong type")

// mode is the key's type as the scripts name it.
func (s *StartURLs) mode() string {
	if s.set {
		return "set"
	}
	return "list"
}

// Check returns an error wrapping ErrStartsType if {NAME}:start_urls
// exists with another type than the one configured.
func (s *StartURLs) Check(ctx context.Context) error {
	t, err := s.client.Type(ctx, s.key).Result()
	if err != nil {
		return fmt.Errorf("redis start urls: type of %q: %w", s.key, err)
	}
	if t == "none" || t == s.mode() {
		return nil
	}
	return &StartsTypeError{Key: s.key, Have: t, Want: s.mode()}
}

// StartsTypeError is ErrStartsType with the key and its types.
type StartsTypeError struct {
	Key  string
	Have string // the key's type (TYPE)
	Want string // "list" or "set"
}

func (e *StartsTypeError) Error() string {
	if e.Have == "zset" {
		return fmt.Sprintf("%v: %s is a sorted set, the broker's start queue of a program that gives the engine no Config.Starts, but this crawl reads its start URLs from a %s", ErrStartsType, e.Key, e.Want)
	}
	return fmt.Sprintf("%v: %s is a %s, but this crawl reads its start URLs from a %s", ErrStartsType, e.Key, e.Have, e.Want)
}

// Is makes errors.Is(err, ErrStartsType) true, and errors.Is(err,
// engine.ErrStartsType): the engine stops a crawl on it.
func (e *StartsTypeError) Is(target error) bool {
	return target == ErrStartsType || target == engine.ErrStartsType
}

// wrongType returns Check's error if err is Redis's WRONGTYPE, else err.
func (s *StartURLs) wrongType(ctx context.Context, err error) error {
	if !strings.Contains(err.Error(), "WRONGTYPE") {
		return err
	}
	if c := s.Check(ctx); errors.Is(c, ErrStartsType) {
		return c
	}
	return err
}

// luaPushFront defines pushFront(key, mode, t, i, j): it puts t[i..j]
// back at the front of the list (the first ends first), or into the set,
// in chunks of 1,000 (unpack is bounded by the Lua stack).
const luaPushFront = `
local function pushFront(key, mode, t, i, j)
  for hi = j, i, -1000 do
    local lo = math.max(i, hi - 999)
    if mode == 'set' then
      redis.call('SADD', key, unpack(t, lo, hi))
    else
      local rev = {}
      for k = hi, lo, -1 do rev[#rev + 1] = t[k] end
      redis.call('LPUSH', key, unpack(rev))
    end
  end
end
`

func bytesOf(vals []string) [][]byte {
	out := make([][]byte, len(vals))
	for i, v := range vals {
		out[i] = []byte(v)
	}
	return out
}

// TakeStarts takes up to max payloads at least once, without removing
// them: it reads the first max of the list (LRANGE), or max random
// members of the set (SRANDMEMBER), and the batch's Done drops them once
// they are in the frontier. A worker killed before that leaves them where
// they were, to be taken again at once by any worker: what it moved into
// the frontier is claimed in the filter by then, so nothing is published
// twice; the Redis frontier claims and publishes in one step, and the
// composed one rechecks its marks. So nothing is leased and lease is
// unused: there are no lease records. Several workers may take the same
// start URLs at once; of those that claim one, one publishes it.
func (s *StartURLs) TakeStarts(ctx context.Context, max int) ([][]byte, error) {
	if max <= 0 {
		return nil, nil
	}
	var vals []string
	var err error
	if s.set {
		vals, err = s.client.SRandMemberN(ctx, s.key, int64(max)).Result()
	} else {
		vals, err = s.client.LRange(ctx, s.key, 0, int64(max)-1).Result()
	}
	if errors.Is(err, goredis.Nil) {
		err = nil
	}
	if err != nil {
		return nil, s.wrongType(ctx, fmt.Errorf("redis start urls: take from %q: %w", s.key, err))
	}
	if len(vals) == 0 {
		return nil, nil
	}
	return bytesOf(vals), nil
}

// dropStartsScript drops a batch taken by TakeStarts from the start URLs,
// but for the payloads to keep. From a set, the members to drop (SREM).
// From a list, the elements at its head that are the batch's payloads in
// order, skipping those of the batch no longer there (another worker took
// them and dropped them first), with one LTRIM, and then the payloads to
// keep of those back at the front, in their order. An element it drops
// that was pushed again meanwhile is a start URL the filter holds. The
// first write shrinks memory, so a server out of memory runs it: Redis
// refuses a script under maxmemory only at its first write that may grow
// memory, and only if nothing was written before.
//
// KEYS: start_urls
// ARGV: "set" or "list", then per payload of the batch, in the order
// taken: "k" (keep) or "d" (drop), and the payload
// Returns the number dropped.
var dropStartsScript = goredis.NewScript(luaPushFront + `
local n = (#ARGV - 1) / 2
if ARGV[1] == 'set' then
  local drop = {}
  for i = 2, #ARGV, 2 do
    if ARGV[i] == 'd' then drop[#drop + 1] = ARGV[i + 1] end
  end
  local dropped = 0
  for i = 1, #drop, 1000 do
    dropped = dropped + redis.call('SREM', KEYS[1], unpack(drop, i, math.min(i + 999, #drop)))
  end
  return dropped
end
local head = redis.call('LRANGE', KEYS[1], 0, n - 1)
local j, back = 1, {}
for i = 2, #ARGV, 2 do
  if head[j] == ARGV[i + 1] then
    j = j + 1
    if ARGV[i] == 'k' then back[#back + 1] = ARGV[i + 1] end
  end
end
if j == 1 then return 0 end
redis.call('LTRIM', KEYS[1], j - 1, -1)
if #back > 0 then pushFront(KEYS[1], 'list', back, 1, #back) end
return j - 1 - #back
`)

// drop runs dropStartsScript for the payloads of a batch, keeping those
// that keep says.
func (s *StartURLs) drop(ctx context.Context, payloads [][]byte, keep func(i int) bool) error {
	if len(payloads) == 0 {
		return nil
	}
	args := make([]any, 0, 2*len(payloads)+1)
	args = append(args, s.mode())
	for i, p := range payloads {
		flag := "d"
		if keep(i) {
			flag = "k"
		}
		args = append(args, flag, p)
	}
	if err := dropStartsScript.Run(ctx, s.client, []string{s.key}, args...).Err(); err != nil {
		return s.wrongType(ctx, fmt.Errorf("redis start urls: drop %d from %q: %w", len(payloads), s.key, err))
	}
	return nil
}

// DropStarts drops the payloads of one TakeStarts from the start URLs,
// but for those of keep (they could not be moved into the frontier), which
// stay where they are, in their order; a payload another worker dropped
// first is not dropped again. Out of memory too. It implements
// engine.StartSource.
func (s *StartURLs) DropStarts(ctx context.Context, taken, keep [][]byte) error {
	left := map[string]int{}
	for _, p := range keep {
		left[string(p)]++
	}
	kept := make([]bool, len(taken))
	for i, p := range taken {
		if left[string(p)] > 0 {
			left[string(p)]--
			kept[i] = true
		}
	}
	return s.drop(ctx, taken, func(i int) bool { return kept[i] })
}

// AddStarts appends payloads.
func (s *StartURLs) AddStarts(ctx context.Context, payloads ...[]byte) error {
	if len(payloads) == 0 {
		return nil
	}
	args := make([]any, len(payloads))
	for i, p := range payloads {
		args[i] = p
	}
	var err error
	if s.set {
		err = s.client.SAdd(ctx, s.key, args...).Err()
	} else {
		err = s.client.RPush(ctx, s.key, args...).Err()
	}
	if err != nil {
		return s.wrongType(ctx, fmt.Errorf("redis start urls: add to %q: %w", s.key, err))
	}
	return nil
}

// PendingStarts counts the waiting payloads, those of batches taken and
// not yet done included.
func (s *StartURLs) PendingStarts(ctx context.Context) (int64, error) {
	n, err := s.Counts(ctx, s.queue)
	return n.Ready, err
}

// Counts counts the start URLs as a broker.Counter counts a queue: Ready
// the waiting payloads (those of batches taken and not yet done
// included), Dead the rejected payloads kept with their reason.
func (s *StartURLs) Counts(ctx context.Context, queue string) (broker.Counts, error) {
	if queue != s.queue {
		return broker.Counts{}, fmt.Errorf("redis start urls: count %q: these are the start URLs of %q", queue, s.queue)
	}
	var waiting, dead *goredis.IntCmd
	_, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		if s.set {
			waiting = p.SCard(ctx, s.key)
		} else {
			waiting = p.LLen(ctx, s.key)
		}
		dead = p.LLen(ctx, s.dead)
		return nil
	})
	if err != nil {
		return broker.Counts{}, s.wrongType(ctx, fmt.Errorf("redis start urls: count %q: %w", s.key, err))
	}
	return broker.Counts{Ready: waiting.Val(), Dead: dead.Val()}, nil
}

// Purge deletes the start URLs and the rejected ones.
func (s *StartURLs) Purge(ctx context.Context) error {
	if err := s.client.Del(ctx, s.key, s.dead).Err(); err != nil {
		return fmt.Errorf("redis start urls: purge %q: %w", s.key, err)
	}
	return nil
}

// Items is an item sink that appends JSON documents to the Redis list
// {NAME}:items, as scrapy-redis's RedisPipeline does. Write returns once the
// list was pushed. It implements engine.Sink.
type Items struct {
	client goredis.UniversalClient
	key    string
}

// NewItems returns the item list of crawl.
func NewItems(client goredis.UniversalClient, crawl string) *Items {
	return &Items{client: client, key: redislayout.Items(crawl)}
}

// Write appends items as JSON, in one round trip.
func (s *Items) Write(ctx context.Context, items []any) error {
	if len(items) == 0 {
		return nil
	}
	args := make([]any, len(items))
	for i, it := range items {
		b, err := json.Marshal(it)
		if err != nil {
			return fmt.Errorf("redis items: encode: %w: %w", engine.ErrBadItem, err)
		}
		args[i] = b
	}
	if err := s.client.RPush(ctx, s.key, args...).Err(); err != nil {
		return fmt.Errorf("redis items: push to %q: %w", s.key, err)
	}
	return nil
}

// Close does nothing: every Write is already durable. The client is not closed.
func (s *Items) Close() error { return nil }

// Take removes and returns up to max items, oldest first (trawl items).
func (s *Items) Take(ctx context.Context, max int) ([][]byte, error) {
	vals, err := s.client.LPopCount(ctx, s.key, max).Result()
	if errors.Is(err, goredis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("redis items: take from %q: %w", s.key, err)
	}
	out := make([][]byte, len(vals))
	for i, v := range vals {
		out[i] = []byte(v)
	}
	return out, nil
}

// Return puts items taken by Take back at the front of the list, in their
// order.
func (s *Items) Return(ctx context.Context, items [][]byte) error {
	if len(items) == 0 {
		return nil
	}
	args := make([]any, len(items))
	for i, it := range items {
		args[len(items)-1-i] = it
	}
	if err := s.client.LPush(ctx, s.key, args...).Err(); err != nil {
		return fmt.Errorf("redis items: return %d to %q: %w", len(items), s.key, err)
	}
	return nil
}

// Purge deletes the items.
func (s *Items) Purge(ctx context.Context) error {
	if err := s.client.Del(ctx, s.key).Err(); err != nil {
		return fmt.Errorf("redis items: purge %q: %w", s.key, err)
	}
	return nil
}

// Stats are a crawl's counters aggregated across workers in the Redis hash
// {NAME}:stats.
type Stats struct {
	client goredis.UniversalClient
	key    string
}

// NewStats returns the shared counters of crawl.
func NewStats(client goredis.UniversalClient, crawl string) *Stats {
	return &Stats{client: client, key: redislayout.Stats(crawl)}
}

// Add adds deltas to the counters in one round trip.
func (s *Stats) Add(ctx context.Context, deltas map[string]int64) error {
	if len(deltas) == 0 {
		return nil
	}
	_, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for k, v := range deltas {
			if v != 0 {
				p.HIncrBy(ctx, s.key, k, v)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis stats: add to %q: %w", s.key, err)
	}
	return nil
}

// Load returns the counters.
func (s *Stats) Load(ctx context.Context) (map[string]int64, error) {
	m, err := s.client.HGetAll(ctx, s.key).Result()
	if err != nil {
		return nil, fmt.Errorf("redis stats: read %q: %w", s.key, err)
	}
	out := make(map[string]int64, len(m))
	for k, v := range m {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("redis stats: %q field %q is not a number", s.key, k)
		}
		out[k] = n
	}
	return out, nil
}

// Purge deletes the counters.
func (s *Stats) Purge(ctx context.Context) error {
	if err := s.client.Del(ctx, s.key).Err(); err != nil {
		return fmt.Errorf("redis stats: purge %q: %w", s.key, err)
	}
	return nil
}

// PurgeCrawl deletes every key of crawl name's layout
// (internal/redislayout) in Redis, on every primary of a Cluster: its
// queues, start URLs, items, stats, host limits, duplicate filter, and the
// ones no component's Purge deletes (message id counters, the filter's
// layout). Afterwards nothing of the crawl is left, and nothing else was
// deleted: a key tagged {NAME} that is not the crawl's stays. It returns
// how many keys it deleted.
func PurgeCrawl(ctx context.Context, client goredis.UniversalClient, name string) (int, error) {
	n, err := purgeMatching(ctx, client, name, redislayout.Pattern(name), redislayout.PartitionPattern(name))
	if err != nil {
		return n, fmt.Errorf("redis: purge %s: %w", redislayout.Pattern(name), err)
	}
	return n, nil
}

// PurgeOtherPartitions deletes, on every primary of a Cluster, the keys of
// crawl name that its layout of n partitions does not use: the keys of the
// partitioned entries of its layout (queue keys, filter shards and
// bitmaps) under the tag of a partition of another count, and, with n > 1,
// the queue keys under the crawl's own tag (the one partition of a crawl
// of one). The filter's keys under the crawl's own tag stay: they hold the
// crawl's marks (see dedup/redis.DropPartitions). Run on a stopped crawl
// of n partitions, it deletes what a repartition cut short (or made before
// repartitions cleaned up) left. It returns how many keys it deleted.
func PurgeOtherPartitions(ctx context.Context, client goredis.UniversalClient, name string, n int) (int, error) {
	used := map[string]bool{}
	for p := range max(n, 1) {
		used[redislayout.PartitionTag(name, p, n)] = true
	}
	stray := func(key string, k redislayout.Key) bool {
		tag := key[1:strings.IndexByte(key, '}')] // a key of the layout has one
		return k.Partitioned && !used[tag] && !(tag == name && strings.HasPrefix(k.Part, "dupefilter"))
	}
	d, err := purgeWhere(ctx, client, name, stray, redislayout.Pattern(name), redislayout.PartitionPattern(name))
	if err != nil {
		return d, fmt.Errorf("redis: purge what crawl %s's %d partitions do not use: %w", name, n, err)
	}
	return d, nil
}

// purgeMatching deletes the keys of crawl name's layout that patterns
// find, on every primary of a Cluster; it returns how many it deleted.
func purgeMatching(ctx context.Context, client goredis.UniversalClient, name string, patterns ...string) (int, error) {
	return purgeWhere(ctx, client, name, func(string, redislayout.Key) bool { return true }, patterns...)
}

// purgeWhere is purgeMatching of the keys which says so.
func purgeWhere(ctx context.Context, client goredis.UniversalClient, name string, which func(key string, k redislayout.Key) bool, patterns ...string) (int, error) {
	var mu sync.Mutex
	n := 0
	del := func(ctx context.Context, c goredis.UniversalClient) error {
		for _, pattern := range patterns {
			if err := delMatching(ctx, c, name, pattern, which, &mu, &n); err != nil {
				return err
			}
		}
		return nil
	}
	if cc, ok := client.(*goredis.ClusterClient); ok {
		return n, cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error { return del(ctx, c) })
	}
	return n, del(ctx, client)
}

// delMatching deletes the keys of crawl name's layout that pattern finds
// on c and which says so, adding their count to *n; one DEL per slot (the
// partitions' keys are in several).
func delMatching(ctx context.Context, c goredis.UniversalClient, name, pattern string, which func(string, redislayout.Key) bool, mu *sync.Mutex, n *int) error {
	iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
	var batch []string
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		bySlot := map[uint16][]string{}
		for _, k := range batch {
			bySlot[redislayout.Slot(k)] = append(bySlot[redislayout.Slot(k)], k)
		}
		batch = batch[:0]
		for _, keys := range bySlot {
			d, err := c.Del(ctx, keys...).Result()
			mu.Lock()
			*n += int(d)
			mu.Unlock()
			if err != nil {
				return err
			}
		}
		return nil
	}
	for iter.Next(ctx) {
		if k, ok := redislayout.Match(name, iter.Val()); !ok || !which(iter.Val(), k) {
			continue
		}
		batch = append(batch, iter.Val())
		if len(batch) == 500 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	return flush()
}
