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
	Lease    string // {NAME}:host:HOST:lease: the token of the worker holding the host
	Next     string // {NAME}:host:HOST:next: when the next request may start
	Throttle string // {NAME}:host:HOST:throttle: AutoThrottle's delay
	Want     string // {NAME}:host:HOST:want: another worker asked for the host
}

// HostKeys returns the keys of host's limits in crawl.
func HostKeys(crawl, host string) Host {
	base := Crawl(crawl, "host:"+host)
	return Host{Lease: base + ":lease", Next: base + ":next", Throttle: base + ":throttle", Want: base + ":want"}
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
	{"requests", []string{"zset", "list"}, "broker/redis.Broker (queue NAME:requests)", []string{"receiveScript", "nackScript", "rejectScript", "extendScript", "countScript", "requeueScript", "claimPublishScript"}},
	{"requests:inflight", []string{"zset"}, "broker/redis.Broker", []string{"receiveScript", "nackScript", "rejectScript", "extendScript", "countScript"}},
	{"requests:delayed", []string{"zset"}, "broker/redis.Broker", []string{"receiveScript", "nackScript", "countScript"}},
	{"requests:dead", []string{"list"}, "broker/redis.Broker", []string{"receiveScript", "nackScript", "rejectScript", "countScript", "requeueScript"}},
	{"requests:notify", []string{"list"}, "broker/redis.Broker", []string{"receiveScript", "nackScript", "requeueScript", "claimPublishScript"}},
	{"requests:seq", []string{"string"}, "broker/redis.Broker", []string{"requeueScript", "claimPublishScript"}},
	{"start_urls", []string{"list", "set"}, "broker/redis.StartURLs", []string{"dropStartsScript", "returnStartsScript", "requeueStartsScript"}},
	{"start_urls:dead", []string{"list"}, "broker/redis.StartURLs", []string{"requeueStartsScript"}},
	{"items", []string{"list"}, "broker/redis.Items", nil},
	{"stats", []string{"hash"}, "broker/redis.Stats", nil},
	{"meta", []string{"hash"}, "broker/redis.Meta", nil},
	{"workers", []string{"zset"}, "broker/redis.Meta (presence)", []string{"announceScript", "liveScript"}},
	{"host:*:lease", []string{"string"}, "broker/redis.HostLimiter", []string{"leaseScript", "releaseScript", "renewScript"}},
	{"host:*:next", []string{"string"}, "broker/redis.HostLimiter", []string{"leaseScript", "releaseScript", "observeScript", "backoffScript"}},
	{"host:*:throttle", []string{"string"}, "broker/redis.HostLimiter", []string{"leaseScript", "releaseScript", "observeScript"}},
	{"host:*:want", []string{"string"}, "broker/redis.HostLimiter", []string{"leaseScript", "renewScript"}},
	{"robots:*", []string{"string"}, "broker/redis.HostLimiter (engine.RobotsStore)", nil},
	{"dupefilter:meta", []string{"hash"}, "dedup/redis (Set and Bloom)", nil},
	{"dupefilter:bloom:*", []string{"string"}, "dedup/redis.Bloom", []string{"claimPublishScript (broker/redis.ClaimPublish)"}},
	{"dupefilter:*", []string{"set"}, "dedup/redis.Set (one shard, a hex number)", []string{"claimPublishScript (broker/redis.ClaimPublish)"}},
}

// Match returns the entry of Keys that key, a key of crawl, belongs to;
// false if key is not part of crawl's layout.
func Match(crawl, key string) (Key, bool) {
	part, ok := strings.CutPrefix(key, Crawl(crawl, ""))
	if !ok {
		return Key{}, false
	}
	part, ok = strings.CutPrefix(part, ":")
	if !ok {
		return Key{}, false
	}
	for _, k := range Keys {
		if ok, _ := path.Match(k.Part, part); !ok {
			continue
		}
		if k.Part == "dupefilter:*" && !isHex(strings.TrimPrefix(part, "dupefilter:")) {
			continue // a shard's number is hex
		}
		return k, true
	}
	return Key{}, false
}

func isHex(s string) bool {
	_, err := strconv.ParseUint(s, 16, 64)
	return err == nil
}
