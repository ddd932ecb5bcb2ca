package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/trawlhq/trawl/internal/testsite"
)

func newTestsiteCmd(o *options) *cobra.Command {
	var (
		addr    string
		opts    testsite.Config
		latency time.Duration
	)
	cmd := &cobra.Command{
		Use:   "testsite",
		Short: "Serve a synthetic site on loopback, for demos, tests and benchmarks",
		Long: "testsite serves a deterministic synthetic site with traps a correct crawler must handle " +
			"(permuted queries, fragments, robots.txt, 404s, flaky pages, redirect loops, huge and endless bodies). " +
			"GET /_testsite/verify says whether the crawl so far was correct; /_testsite/served counts every fetch.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Pages < 0 || opts.Links < 0 || latency < 0 {
				return usageError("--pages, --links and --latency must not be negative")
			}
			opts.Latency = latency
			opts.Logger = o.log
			site := testsite.New(opts)
			url, wait, err := site.Serve(cmd.Context(), addr)
			if err != nil {
				return err
			}
			fmt.Fprintln(o.stdout, url+"/") // alone on stdout, for scripts: url=$(trawl testsite &)
			fmt.Fprintf(o.stderr, "trawl testsite: serving %d pages at %s/ until interrupted (Ctrl-C): crawl it with trawl crawl %s/, then GET %s/_testsite/verify says whether the crawl was correct\n",
				opts.Pages, url, url, url)
			if !opts.NoTraps {
				// Its traps show in a correct crawl's summary: say so, lest
				// they be taken for the crawler's failures.
				fmt.Fprintln(o.stderr, "trawl testsite: its traps show in a correct crawl's summary: /huge (50 MiB) and /endless are bodies over the crawler's size cap, "+
					"given up on as they would be on any site: 2 errors (body_too_large 2); 3 flaky pages answer 503 once: 3 retries (--no-traps leaves them out)")
			}
			if err := wait(); err != nil {
				return err
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", "127.0.0.1:0", "listen address (loopback)")
	f.IntVar(&opts.Pages, "pages", 1000, "content pages")
	f.IntVar(&opts.Links, "links", 10, "links per page to other pages")
	f.DurationVar(&latency, "latency", 0, "added to every response")
	f.Int64Var(&opts.Seed, "seed", 1, "seed of the link graph and content")
	f.BoolVar(&opts.NoTraps, "no-traps", false, "leave out the trap pages (for benchmarks)")
	return cmd
}
