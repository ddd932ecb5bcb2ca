// Command benchcrawl measures whole crawls of the real trawl binary against
// the test site, as a user runs them. It is run by make bench-crawl and
// make soak, not by make test: it prints figures, it asserts nothing.
//
//	go run ./internal/benchcrawl [-trawl bin/trawl] [-pages 10000] [-concurrency 32] [-latency 0]
//	go run ./internal/benchcrawl soak [-trawl bin/trawl] [-pages 100000]
//	go run ./internal/benchcrawl web [-trawl bin/trawl] [-hosts 1000] [-pages 20000] [-modes memory,redis] [-repeat 2] [-rss-hosts 0]
//
// # bench (the default)
//
// One run, side by side, on one test site (internal/testsite, the site of
// trawl testsite, with --no-traps and no latency unless -latency adds
// some to every page) served by this process:
//
//   - the fetch limit: a bare loop of HTTP GETs over the site's pages
//     (/ and /page/0 … /page/N-1) at the crawl's concurrency, in a process
//     of its own, as the crawler is; it is measured again just before each
//     crawl, and each crawl is compared with the one before it;
//   - one `trawl crawl` process, --concurrency C --per-host C, per mode:
//     --broker=memory, the embedded default (no --broker), --broker=redis,
//     --broker=nats (an external server), --broker=rabbitmq (a stock
//     server: no plugin, so no management API). Servers run in local
//     containers (TRAWL_REDIS_IMAGE, TRAWL_NATS_IMAGE, TRAWL_RABBITMQ_IMAGE),
//     one at a time, started just before their crawl and removed after it.
//     NATS and RabbitMQ crawls use --dedup=local, so that their figures
//     are the broker's alone (a multi-worker deployment adds a Redis
//     filter).
//
// A crawl's time runs from the site's first request to the end of its
// last response: the process start, the seeding and the idle timeout are
// not in it. A crawl counts only if the site's Verify passes (every page
// fetched exactly once, nothing else) and the item file holds one item per
// page.
//
// Beside each crawl: the broker server's CPU seconds per 1,000 pages over
// the same window (Redis: INFO cpu; NATS and RabbitMQ: the container's
// cgroup CPU usage, or its processes' CPU from /proc where no cgroup is
// readable) and the worker process's CPU over its whole life.
//
// Then the idle cost per server: `trawl worker --idle-timeout 0` of the
// finished crawl (its queues empty) for -idle (10s) after a warm-up,
// counting what reaches the server (Redis: total_commands_processed; NATS:
// in_msgs of the client connections in /connz; RabbitMQ: recv_cnt of
// rabbitmqctl list_connections, socket reads) and the connections it holds:
// sampled every 250 ms, the count held for at least half the window, and
// the most seen (a pooled connection opened when two of the worker's timers
// overlap lives a second or two).
//
// Each figure is printed beside issue 10's bar with PASS or MISS.
//
// # web
//
// The crawl where crawls really run (make bench-web, issue 26): a site of
// -hosts hosts (1,000), each on a loopback address 127.0.x.y of its own,
// the odd ones over HTTPS under a CA this process makes (trawl trusts it
// through SSL_CERT_FILE, nothing else does); host sizes follow a Zipf law
// (-pages in all, at most -max-host per host: at --per-host 2 and 100 ms
// a host serves 20 pages/s, so the largest host bounds a run's length);
// each request waits a log-normal latency (median 100 ms, σ 0.5; 1% 2 s;
// the first request of 0.05% of the pages hangs past --timeout), drawn
// from its URL and attempt so that every client sees the same delays;
// pages are 20–80 KB of HTML with 30–150 links, 5% to other hosts.
//
// For each mode (one worker on memory, the embedded default, redis, nats,
// rabbitmq; 4 workers on redis and on nats with a Redis filter, both
// with --partitions 8, which the workers share out: see README), -repeat
// crawls (2), each on fresh broker servers, every host's home page a
// start URL (one worker: `trawl crawl`; 4 workers: four `trawl worker
// --idle-timeout=0`, as docs/deploy.md runs them as services, then
// `trawl seed` once each worker's log says it prefers its share of the
// partitions among all four, and SIGTERM once the site has served every
// URL), each between two runs
// of a bare loop of GETs over the same URLs (the webfetch command: every
// URL known in advance, -concurrency times the workers in all, -per-host
// per host, the same timeout): loop, crawl, loop, crawl, loop, the loop
// after one mode the loop before the next. For 4 workers each loop is
// followed by a loop of the crawl's shape: four webfetch processes at
// -concurrency each, each over the hosts host affinity gives one worker
// (partition mod 4), so that the cap per host holds across them. The
// CPU bar compares the workers' CPU, summed over four Go runtimes, with
// one loop process; the second table compares it with the four loop
// processes too, and the two loops' ratio is what four runtimes on the
// machine's cores cost a page, apart from the crawler. The machine's load moves the
// loop's pages/s twofold between runs of the bench, so each crawl is
// compared with the mean of its two neighbouring loops, and a mode's row
// is its median crawl, with the smallest and largest ratio. The site is
// the same in every run (its latencies are drawn from a fixed seed); the
// load average is logged at each step and printed per crawl.
//
// It reports pages/s against the loop (over the window from the first
// request to the end of the last, the hanging pages' requests aside: where
// their timeout and retry fall is not scheduling), the site's requests in
// flight (the mean over the window: what the scheduler kept busy, for the
// crawl and its loops; the log adds them by tenth of the window, and the
// largest host's and the last hosts' in flight over their span, against
// the least time the largest host takes at -per-host), worker CPU per
// page against the loops', the broker server's CPU per page, broker
// requests per page (Redis: INFO commandstats, commands run by scripts
// included), the worker's RSS, and URLs fetched twice (a run that
// fetched some says how: how many first requests its client cut, the
// gaps to the next, the first few pages' requests); then one
// --broker=memory crawl at -rss-hosts hosts (10,000) for the worker's
// RSS per host. Each figure is printed beside issue 26's bar with PASS or
// MISS. -trace DIR writes every request of each run to DIR, for a look at
// a host's requests over time.
//
// # soak
//
// One `trawl crawl` of -pages (100,000) pages on the embedded default
// (or -broker memory), its RSS (VmRSS of /proc/PID/status) sampled every
// second. Memory is flat if its median over the last fifth of the pages is
// within 20% of its median over the fifth after the warm-up (the first 20%
// of the pages). Medians, not the maximum: between collections the Go heap
// may grow to twice what is live, so one reading can sit 30% above its
// neighbours without anything leaking; a leak moves the median.
package main
