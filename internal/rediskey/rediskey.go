// Package rediskey is the one rule by which trawl names its Redis keys,
// used by the Redis broker, the Redis duplicate filters, the crawl's
// Redis pieces (start URLs, items, stats, host limits) and the CLI.
//
// A crawl's name is the Redis Cluster hash tag of every key of the crawl,
// so that they all live in one slot:
//
//	rediskey.Crawl("books", "start_urls")  // {books}:start_urls
//	rediskey.Of("books:requests")          // {books}:requests
package rediskey

import "strings"

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

// Pattern returns the SCAN pattern of every key of crawl, "{crawl}:*",
// with the glob characters of crawl escaped.
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
