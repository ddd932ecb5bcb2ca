// Package linkscan finds the title and the links of an HTML page, fast: a
// single pass over the bytes that tokenizes as HTML does (as
// golang.org/x/net/html's Tokenizer does) but allocates only for what it
// returns. The crawler (engine.ExtractLinks) calls Extract on every HTML
// page; ExtractTokenized is the reference built on x/net/html that the
// differential fuzz target checks it against. BenchmarkCrawlLinkScanner in
// the engine measures what the scanner buys end to end (BENCHMARKS.md): it
// is kept because it buys far more than 10% of crawl throughput.
//
//	title, links := linkscan.Extract(base, body)
package linkscan
