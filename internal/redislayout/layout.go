// Package redislayout is the one home of a crawl's Redis layout: the rule
// by which trawl names its Redis keys, the constructors of every key a
// crawl may create, and Keys, the table that lists each of them with its
// Redis type, its owner (the component that writes it) and the scripts
// that touch it. The Redis broker, the Redis duplicate filters, the
// crawl's Redis pieces (start URLs, items, stats, metadata, presence,
// host limits) and the CLI build their keys here and nowhere else.
//
// A crawl's name is the Redis Cluster hash tag of every key of the crawl,
// so that they all live in one slot:
//
//	redislayout.Crawl("books", "start_urls")  // {books}:start_urls
//	redislayout.Of("books:requests")          // {books}:requests
package redislayout

import (
	"path"
	"strconv"
	"strings"
)

// Crawl returns the key of part of crawl: "{crawl}:part", or "{crawl}"
// when part is empty.
func Crawl(crawl, part string) string {
	if part == "" {
		return "{" + crawl + "}"
	}
	return "{" + crawl + "}:" + part
}

// Of returns the key of a queue or key name "CRAWL:PART": split at its
// last ':', the crawl name is the hash tag ("books:requests" is
// "{books}:requests"). A name without ':' is its own tag: "jobs" is
// "{jobs}".
func Of(name string) string {
	i := strings.LastIndexByte(name, ':')
	if i < 0 {
		return Crawl(name, "")
	}
	return Crawl(name[:i], name[i+1:])
}

// Pattern returns the SCAN pattern of every key tagged with crawl,
// "{crawl}:*", with the glob characters of crawl escaped. Not every key it
// finds is the crawl's: Match tells.
func Pattern(crawl string) string {
	var b strings.Builder
	for _, r := range crawl {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return Crawl(b.String(), "*")
}

// Queue holds the keys of one broker queue, "CRAWL:PART" (see Of): the
// queue "books:requests" has
//
//	{books}:requests            ready messages
//	{books}:requests:inflight   leased messages by lease deadline
//	{books}:requests:delayed    nacked messages by the time they are due
//	{books}:requests:dead       dead letters
//	{books}:requests:notify     wake-up token for blocked consumers
//	{books}:requests:seq        message id counter
type Queue struct {
	Name                                        string
	Ready, Inflight, Delayed, Dead, Notify, Seq string
}

// QueueKeys returns the keys of broker queue name.
func QueueKeys(name string) Queue {
	base := Of(name)
	return Queue{
		Name:     name,
		Ready:    base,
		Inflight: base + ":inflight",
		Delayed:  base + ":delayed",
		Dead:     base + ":dead",
		Notify:   base + ":notify",
		Seq:      base + ":seq",
	}
}

// A crawl of several partitions (trawl --partitions N, N > 1) keeps each
// partition's queue keys and filter shards under a hash tag of its own,
// so that the partitions spread over a Cluster's primaries; its other keys
// stay under {NAME}, the crawl's home slot. Partition P of N is tagged
// "NAME#P.S": S, its salt, is the least number that puts the tag's slot in
// the P-th N-th of the 16,384 slots, so that the partitions are spread
// evenly over the slots, and so over the primaries of a Cluster whose
// slots are split in equal ranges (as redis-cli --cluster create splits
// them). Partition 3 of 12 of "books" is tagged "books#3.43":
//
//	{books#3.43}:requests        its ready messages (and :inflight …)
//	{books#3.43}:dupefilter:1f   its set filter's shard 1f
//
// With one partition (N <= 1) a crawl's keys are those of a crawl without
// partitions: its tag is NAME.

// slots is the number of Redis Cluster hash slots.
const slots = 16384

// PartitionTag returns the hash tag (without braces) of partition p of n
// of crawl: crawl itself when n <= 1.
func PartitionTag(crawl string, p, n int) string {
	if n <= 1 {
		return crawl
	}
	prefix := crawl + "#" + strconv.Itoa(p) + "."
	for salt := 0; ; salt++ {
		tag := prefix + strconv.Itoa(salt)
		if int(Slot(tag))*n/slots == p {
			return tag
		}
	}
}

// Slot returns the Redis Cluster hash slot of key: CRC-16 (XMODEM) of its
// hash tag (of key itself without one) modulo 16,384.
func Slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % slots
}

// split splits a queue or filter name "CRAWL:PART" at its last ':'; a
// name without one is its own crawl, with no part.
func split(name string) (crawl, part string) {
	i := strings.LastIndexByte(name, ':')
	if i < 0 {
		return name, ""
	}
	return name[:i], name[i+1:]
}

// partitionOf is Of for partition p of n: the name's crawl part becomes
// partition p's tag.
func partitionOf(name string, p, n int) string {
	crawl, part := split(name)
	return Crawl(PartitionTag(crawl, p, n), part)
}

// PartitionQueueKeys returns the keys of partition p of n of broker queue
// name: QueueKeys(name) when n <= 1.
func PartitionQueueKeys(name string, p, n int) Queue {
	q := QueueKeys(name)
	if n <= 1 {
		return q
	}
	base := partitionOf(name, p, n)
	return Queue{
		Name: name, Ready: base, Inflight: base + ":inflight", Delayed: base + ":delayed",
		Dead: base + ":dead", Notify: base + ":notify", Seq: base + ":seq",
	}
}

// PartitionFilterKeys returns the keys of partition p of n of the
// duplicate filter named key: FilterKeys(key) when n <= 1. A partition's
// filter has shards (or Bloom parts) of its own, and no layout key: the
// filter's layout is the one in FilterKeys(key).Meta.
func PartitionFilterKeys(key string, p, n int) Filter {
	if n <= 1 {
		return FilterKeys(key)
	}
	base := partitionOf(key, p, n)
	return Filter{Base: base, Meta: FilterKeys(key).Meta}
}

// Retired returns the partitions of from of queue or filter name
// ("CRAWL:PART") whose keys none of its to partitions uses, in order: what
// a change of the crawl's partition count from from to to leaves behind
// (trawl repartition). Partition p of from and q of to share their keys
// when they share a tag (partition 0 of 4 and of 8 may); a count of one
// is the crawl's own tag. to = 0 retires every partition of from.
func Retired(name string, from, to int) []int {
	crawl, _ := split(name)
	used := map[string]bool{}
	for q := range to {
		used[PartitionTag(crawl, q, to)] = true
	}
	var out []int
	for p := range max(from, 1) {
		if !used[PartitionTag(crawl, p, from)] {
			out = append(out, p)
		}
	}
	return out
}

// PartitionPattern returns the SCAN pattern of the keys of crawl's
// partitions, "{crawl#*}:*", escaped as Pattern's. Not every key it finds
// is the crawl's: Match tells.
func PartitionPattern(crawl string) string {
	home := Pattern(crawl) // "{crawl}:*"
	return home[:len(home)-len("}:*")] + "#*}:*"
}

// RepartitionQueues returns the names of the two queues of one partition
// that trawl repartition moves queue ("NAME:requests") through, beside
// it: queue+"~repartition" (its requests) and queue+"~repartition-dead"
// (its dead letters). A repartition that ends leaves them empty and
// deletes them; one cut short leaves them holding what it was moving.
func RepartitionQueues(queue string) (requests, dead string) {
	return queue + "~repartition", queue + "~repartition-dead"
}

// Starts holds the keys of a crawl's start URLs.
type Starts struct {
	List string // {NAME}:start_urls: the list (or set) fed by trawl seed and rpush
	Dead string // {NAME}:start_urls:dead: rejected payloads, with the reason
}

// StartKeys returns the keys of crawl's start URLs.
func StartKeys(crawl string) Starts {
	return Starts{
		List: Crawl(crawl, "start_urls"),
		Dead: Crawl(crawl, "start_urls:dead"),
	}
}

// Items returns the key of crawl's item list, {NAME}:items.
func Items(crawl string) string { return Crawl(crawl, "items") }

// Stats returns the key of crawl's shared counters, {NAME}:stats.
func Stats(crawl string) string { return Crawl(crawl, "stats") }

// Meta returns the key of crawl's metadata (its stored settings),
// {NAME}:meta.
func Meta(crawl string) string { return Crawl(crawl, "meta") }

// Workers returns the key of crawl's live workers, {NAME}:workers.
func Workers(crawl string) string { return Crawl(crawl, "workers") }

// Host holds the keys of one host's shared limits in a crawl.
type Host struct {
	Slots    string // {NAME}:host:HOST:slots: the workers holding the host's slots (a hash: token -> count:expiry, "~" -> the key's expiry)
	Next     string // {NAME}:host:HOST:next: when the next request may start
	Throttle string // {NAME}:host:HOST:throttle: AutoThrottle's delay
	Want     string // {NAME}:host:HOST:want: another worker asked for the host
}

// HostKeys returns the keys of host's limits in crawl.
func HostKeys(crawl, host string) Host {
	base := Crawl(crawl, "host:"+host)
	return Host{Slots: base + ":slots", Next: base + ":next", Throttle: base + ":throttle", Want: base + ":want"}
}

// Robots returns the key of the robots.txt of site (scheme://host[:port])
// that crawl's workers share, {NAME}:robots:SCHEME:HOST[:PORT].
func Robots(crawl, site string) string {
	return Crawl(crawl, "robots:"+strings.Replace(site, "://", ":", 1))
}

// Filter holds the keys of a duplicate filter named "CRAWL:PART" (the CLI
// names it "NAME:dupefilter"), built like a queue's (see Of).
type Filter struct {
	Base string // {NAME}:dupefilter, the prefix of the others (no key of its own)
	Meta string // {NAME}:dupefilter:meta: the filter's layout
}

// FilterName is the name of crawl's duplicate filter, "NAME:dupefilter",
// whose keys FilterKeys returns.
func FilterName(crawl string) string { return crawl + ":dupefilter" }

// FilterKeys returns the keys of the duplicate filter named key.
func FilterKeys(key string) Filter {
	base := Of(key)
	return Filter{Base: base, Meta: base + ":meta"}
}

// Shard returns the key of the set filter's shard i (a hex number).
func (f Filter) Shard(i uint64) string { return f.Base + ":" + strconv.FormatUint(i, 16) }

// BloomPart returns the key of the Bloom filter's bitmap part i.
func (f Filter) BloomPart(i uint64) string {
	return f.Base + ":bloom:" + strconv.FormatUint(i, 10)
}

// Key describes one key (or family of keys) of a crawl.
type Key struct {
	// Part is the key after "{NAME}:", with * for what varies (a host,
	// a shard number).
	Part string
	// Partitioned keys are split by a crawl of several partitions
	// (--partitions N > 1): each partition has its own, under its own
	// hash tag (see PartitionTag), "{NAME#P.S}:" + Part.
	Partitioned bool
	// Types are the Redis types the key may have (TYPE's answer); one
	// key has one of them for its whole life. Where there are two, a
	// setting of the crawl chooses: --order for a queue's ready messages,
	// --start-urls-set for the start URLs.
	Types []string
	// Owner is the component that writes it.
	Owner string
	// Scripts are the Lua scripts that touch it (by their Go names).
	Scripts []string
}

// Keys lists every key a crawl NAME may create, each "{NAME}:" + Part:
// its layout. The first that matches a key is its entry (Match).
var Keys = []Key{
	{"requests", true, []string{"zset", "list"}, "broker/redis.Broker (queue NAME:requests)", []string{"receiveScript", "nackScript", "rejectScript", "extendScript", "countScript", "requeueScript", "claimPublishScript"}},
	{"requests:inflight", true, []string{"zset"}, "broker/redis.Broker", []string{"receiveScript", "nackScript", "rejectScript", "extendScript", "countScript"}},
	{"requests:delayed", true, []string{"zset"}, "broker/redis.Broker", []string{"receiveScript", "nackScript", "countScript"}},
	{"requests:dead", true, []string{"list"}, "broker/redis.Broker", []string{"receiveScript", "nackScript", "rejectScript", "countScript", "requeueScript"}},
	{"requests:notify", true, []string{"list"}, "broker/redis.Broker", []string{"receiveScript", "nackScript", "requeueScript", "claimPublishScript"}},
	{"requests:seq", true, []string{"string"}, "broker/redis.Broker", []string{"requeueScript", "claimPublishScript"}},
	// The queues trawl repartition moves NAME:requests through
	// (RepartitionQueues; * is "" or "-dead"), of one partition each.
	{repartitionPart, false, []string{"zset", "list"}, "deployment.Repartition (queues NAME:requests~repartition and ~repartition-dead, through broker/redis.Broker)", []string{"receiveScript", "nackScript", "rejectScript", "extendScript", "countScript", "requeueScript"}},
	{repartitionPart + ":inflight", false, []string{"zset"}, "deployment.Repartition (through broker/redis.Broker)", []string{"receiveScript", "nackScript", "rejectScript", "extendScript", "countScript"}},
	{repartitionPart + ":delayed", false, []string{"zset"}, "deployment.Repartition (through broker/redis.Broker)", []string{"receiveScript", "nackScript", "countScript"}},
	{repartitionPart + ":dead", false, []string{"list"}, "deployment.Repartition (through broker/redis.Broker)", []string{"receiveScript", "nackScript", "rejectScript", "countScript", "requeueScript"}},
	{repartitionPart + ":notify", false, []string{"list"}, "deployment.Repartition (through broker/redis.Broker)", []string{"receiveScript", "nackScript", "requeueScript"}},
	{repartitionPart + ":seq", false, []string{"string"}, "deployment.Repartition (through broker/redis.Broker)", []string{"requeueScript"}},
	{"start_urls", false, []string{"list", "set"}, "broker/redis.StartURLs", []string{"dropStartsScript", "returnStartsScript", "requeueStartsScript"}},
	{"start_urls:dead", false, []string{"list"}, "broker/redis.StartURLs", []string{"requeueStartsScript"}},
	{"items", false, []string{"list"}, "broker/redis.Items", nil},
	{"stats", false, []string{"hash"}, "broker/redis.Stats", nil},
	{"meta", false, []string{"hash"}, "broker/redis.Meta", nil},
	{"workers", false, []string{"zset"}, "broker/redis.Meta (presence)", []string{"announceScript", "liveScript"}},
	{"host:*:slots", false, []string{"hash"}, "broker/redis.HostLimiter", []string{"leaseScript", "releaseScript", "renewScript"}},
	{"host:*:next", false, []string{"string"}, "broker/redis.HostLimiter", []string{"leaseScript", "releaseScript", "renewScript", "observeScript", "backoffScript"}},
	{"host:*:throttle", false, []string{"string"}, "broker/redis.HostLimiter", []string{"leaseScript", "releaseScript", "observeScript"}},
	{"host:*:want", false, []string{"string"}, "broker/redis.HostLimiter", []string{"leaseScript", "renewScript"}},
	{"robots:*", false, []string{"string"}, "broker/redis.HostLimiter (engine.RobotsStore)", nil},
	{"dupefilter:meta", false, []string{"hash"}, "dedup/redis (Set and Bloom)", nil},
	{"dupefilter:bloom:*", true, []string{"string"}, "dedup/redis.Bloom", []string{"claimPublishScript (broker/redis.ClaimPublish)"}},
	{"dupefilter:*", true, []string{"set"}, "dedup/redis.Set (one shard, a hex number)", []string{"claimPublishScript (broker/redis.ClaimPublish)"}},
}

// repartitionPart is the part of the keys of the queues trawl
// repartition moves through, "requests~repartition*": * is "" or "-dead"
// (see RepartitionQueues).
const repartitionPart = "requests~repartition*"

// repartitionKey tells whether part, which matched pattern (an entry of
// repartitionPart), is a key of one of the two queues of RepartitionQueues.
func repartitionKey(part, pattern string) bool {
	star := strings.TrimPrefix(part, strings.TrimSuffix(repartitionPart, "*"))
	star, ok := strings.CutSuffix(star, strings.TrimPrefix(pattern, repartitionPart))
	return ok && (star == "" || star == "-dead")
}

// Match returns the entry of Keys that key, a key of crawl, belongs to;
// false if key is not part of crawl's layout.
func Match(crawl, key string) (Key, bool) {
	part, ok := strings.CutPrefix(key, Crawl(crawl, ""))
	inPartition := false
	if !ok {
		part, inPartition = partitionPart(crawl, key)
		if !inPartition {
			return Key{}, false
		}
	}
	part, ok = strings.CutPrefix(part, ":")
	if !ok {
		return Key{}, false
	}
	for _, k := range Keys {
		if inPartition && !k.Partitioned {
			continue
		}
		if ok, _ := path.Match(k.Part, part); !ok {
			continue
		}
		if k.Part == "dupefilter:*" && !isHex(strings.TrimPrefix(part, "dupefilter:")) {
			continue // a shard's number is hex
		}
		if strings.HasPrefix(k.Part, repartitionPart) && !repartitionKey(part, k.Part) {
			continue
		}
		return k, true
	}
	return Key{}, false
}

// partitionPart returns what follows the hash tag of key when that is
// the tag of one of crawl's partitions, "{crawl#P.S}".
func partitionPart(crawl, key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, "{"+crawl+"#")
	if !ok {
		return "", false
	}
	end := strings.IndexByte(rest, '}')
	if end < 0 {
		return "", false
	}
	p, salt, ok := strings.Cut(rest[:end], ".")
	if !ok || !isDecimal(p) || !isDecimal(salt) {
		return "", false
	}
	return rest[end+1:], true
}

func isDecimal(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func isHex(s string) bool {
	_, err := strconv.ParseUint(s, 16, 64)
	return err == nil
}
