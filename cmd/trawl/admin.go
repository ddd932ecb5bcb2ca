package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/deployment"
	"github.com/trawlhq/trawl/engine"
)

func newSeedCmd(o *options) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "seed [URL...]",
		Short: "Push start URLs into a crawl (also --file, one per line, - for stdin)",
		Long: `Push start URLs into a crawl (also --file, one per line, - for stdin).

` + wrap("The first seed of a crawl also stores its settings, the crawl flags below: "+settingFlags(true)+
			". Every worker adopts them, and refuses to start with other values unless given --override-settings "+
			"(which cannot change the partitions: trawl repartition moves a stopped crawl's queues). "+
			"To change them, purge the crawl and seed it again (on one machine: trawl crawl --flush with the new flags).", 72),
		RunE: func(cmd *cobra.Command, args []string) error {
			starts := make([]engine.StartURL, 0, len(args))
			for _, a := range args {
				s, err := parseStartURL(a)
				if err != nil {
					return err
				}
				starts = append(starts, s)
			}
			if file != "" {
				more, err := readStarts(file, cmd.InOrStdin())
				if err != nil {
					return err
				}
				starts = append(starts, more...)
			}
			if len(starts) == 0 {
				return usageError("seed needs URLs (arguments or --file)")
			}
			b, err := o.open(cmd.Context(), "seed")
			if err != nil {
				return err
			}
			defer b.Close()
			// The settings given here (and the start URLs' addresses,
			// trusted) are the crawl's, as for trawl crawl: Seed joins the
			// crawl's settings first.
			cfg := o.engineConfig()
			for _, s := range starts {
				u, _ := url.Parse(s.URL)
				cfg.TrustedHosts = append(cfg.TrustedHosts, engine.TrustedAddr(u))
			}
			cfg.Adopt, cfg.OverrideSettings = adopt(cmd.Flags()), o.overrideSettings
			c, err := b.Crawler(cfg)
			if err != nil {
				return usageError("%v", err)
			}
			err = c.Seed(cmd.Context(), starts...)
			if err != nil {
				return b.StartsHint(err)
			}
			fmt.Fprintf(o.stdout, "seeded %d start %s into %s\n", len(starts), plural(int64(len(starts)), "URL"), b.QueueName(engine.StartQueue(o.name)))
			return nil
		},
	}
	cmd.Flags().StringVar(&file, "file", "", "read start URLs (or JSON lines) from this file, - for stdin")
	o.addBackendFlags(cmd.Flags())
	o.addHiddenCrawlFlags(cmd.Flags())
	// Shown: the settings seeding stores with the crawl.
	for _, n := range append(slices.Clone(engine.SettingNames), "override-settings") {
		cmd.Flags().Lookup(n).Hidden = false
	}
	return cmd
}

// wrap breaks text into lines of at most width characters, at spaces.
func wrap(text string, width int) string {
	var b strings.Builder
	n := 0
	for i, w := range strings.Fields(text) {
		switch {
		case i == 0:
		case n+1+len(w) > width:
			b.WriteByte('\n')
			n = 0
		default:
			b.WriteByte(' ')
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}

// readStarts reads the start URLs of file (- for stdin), one a line;
// blank lines and lines starting with # are skipped. A line that is not
// a start URL is a usage error naming its line.
func readStarts(file string, stdin io.Reader) ([]engine.StartURL, error) {
	r := stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, usageError("--file: %v", err)
		}
		defer f.Close()
		r = f
	}
	var out []engine.StartURL
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		s, err := parseStartURL(l)
		if err != nil {
			return nil, usageError("--file %s, line %d: %v", file, n, err)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--file: %w", err)
	}
	return out, nil
}

func newStatsCmd(o *options) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Show a crawl's queues and counters",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := o.open(cmd.Context(), "stats")
			if err != nil {
				return err
			}
			defer b.Close()
			out, err := o.stats(cmd.Context(), b)
			if err != nil {
				return err
			}
			if n, err := b.MisplacedStarts(cmd.Context()); err == nil && n > 0 {
				fmt.Fprintln(o.stderr, b.StartsWarning(n))
			}
			if asJSON {
				return json.NewEncoder(o.stdout).Encode(out)
			}
			keys := make([]string, 0, len(out))
			for k := range out {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				fmt.Fprintf(o.stdout, "%-50s %d\n", k, out[k])
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	o.addBackendFlags(cmd.Flags())
	o.addHiddenCrawlFlags(cmd.Flags())
	return cmd
}

func newPurgeCmd(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "purge",
		Short: "Delete a crawl's frontier, filter, items, stats and settings (refused while its workers run: --force)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := o.open(cmd.Context(), "purge")
			if err != nil {
				return err
			}
			defer b.Close()
			if err := b.PurgeAll(cmd.Context(), o.force); err != nil {
				return err
			}
			fmt.Fprintf(o.stdout, "purged crawl %s\n", o.name)
			return nil
		},
	}
	cmd.Flags().BoolVar(&o.force, "force", false, "purge even while workers of the crawl are running (they then crawl the whole site again)")
	o.addBackendFlags(cmd.Flags())
	o.addHiddenCrawlFlags(cmd.Flags())
	return cmd
}

// defaultListMax is how many dead letters per queue deadletter list shows
// unless --max says otherwise.
const defaultListMax = 100

// requeueBatch is how many dead letters one Requeue call moves.
const requeueBatch = 1000

// requeueAll moves queue's dead letters back to it, in batches, until none
// is left or max were moved (max <= 0: all). Every dead letter must go back
// unless the user said how many: one left behind is a page lost for good.
func requeueAll(ctx context.Context, dl broker.DeadLetters, queue string, max int) (int, error) {
	total := 0
	for max <= 0 || total < max {
		batch := requeueBatch
		if max > 0 {
			batch = min(batch, max-total)
		}
		n, err := dl.Requeue(ctx, queue, batch)
		total += n
		if err != nil {
			return total, err
		}
		if n < batch {
			break
		}
	}
	return total, nil
}

func newDeadLetterCmd(o *options) *cobra.Command {
	var max int
	cmd := &cobra.Command{
		Use:   "deadletter list|requeue",
		Short: "List or requeue a crawl's dead letters (trawl purge deletes them with the crawl)",
		Long: `List or requeue a crawl's dead letters: the pages and start URLs it gave
up on (failed past --retry-times, or not a start URL), with the reason.

  trawl deadletter list      print them: queue, URL (no password), reason
  trawl deadletter requeue   put them back in their queue, to be tried again

trawl purge deletes them with the crawl.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			switch args[0] {
			case "list", "requeue":
			default:
				return usageError("deadletter %q: want list or requeue", args[0])
			}
			if max < 0 {
				return usageError("--max %d: want 0 or more", max)
			}
			b, err := o.open(cmd.Context(), "deadletter")
			if err != nil {
				return err
			}
			defer b.Close()
			ctx := cmd.Context()
			total := 0
			var more []string // lists cut at --max
			queues := []string{engine.RequestsQueue(o.name), engine.StartQueue(o.name)}
			for _, q := range queues {
				// Start URLs outside the broker keep their own dead
				// letters: back there, as they came in.
				dl := b.DeadLetters(q)
				switch args[0] {
				case "list":
					n := max
					if n <= 0 {
						n = defaultListMax
					}
					ls, err := dl.DeadLetters(ctx, q, n+1) // one more tells whether there are more
					if err != nil {
						return err
					}
					if len(ls) > n {
						ls = ls[:n]
						more = append(more, fmt.Sprintf("trawl: %s holds more dead letters than the %d shown (--max N shows N)", b.QueueName(q), n))
					}
					for _, l := range ls {
						what, why := describe(q, l)
						fmt.Fprintf(o.stdout, "%s\t%s\t%s\n", b.QueueName(q), what, why)
					}
					total += len(ls)
				case "requeue":
					n, err := requeueAll(ctx, dl, q, max)
					total += n
					if err != nil {
						return fmt.Errorf("requeued %d dead %s, then: %w", total, plural(int64(total), "letter"), err)
					}
				}
			}
			switch {
			case args[0] == "requeue":
				fmt.Fprintf(o.stdout, "requeued %d dead %s\n", total, plural(int64(total), "letter"))
			case total == 0:
				fmt.Fprintf(o.stdout, "no dead letters in %s or %s\n", b.QueueName(queues[0]), b.QueueName(queues[1]))
			}
			for _, m := range more {
				fmt.Fprintln(o.stderr, m)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&max, "max", 0, fmt.Sprintf("at most this many per queue (0: list %d, requeue all)", defaultListMax))
	o.addBackendFlags(cmd.Flags())
	o.addHiddenCrawlFlags(cmd.Flags())
	return cmd
}

// stats reads what trawl stats shows: the shared counters, and the
// queues' counts keyed QUEUE/ready, QUEUE/in_flight, QUEUE/dead and
// QUEUE/delayed (those of ready not yet due).
func (o *options) stats(ctx context.Context, b *deployment.Deployment) (map[string]int64, error) {
	out := map[string]int64{}
	if b.Stats != nil {
		m, err := b.Stats.Load(ctx)
		if err != nil {
			return nil, err
		}
		out = m
	}
	if b.Starts != nil {
		n, err := b.Starts.PendingStarts(ctx)
		if err != nil {
			return nil, err
		}
		out[b.QueueName(engine.StartQueue(o.name))+"/ready"] = n
	}
	queues := []string{engine.RequestsQueue(o.name), engine.StartQueue(o.name)}
	if b.Starts != nil {
		queues = queues[:1]
	}
	for _, q := range queues {
		n, err := b.Broker.Counts(ctx, q)
		if err != nil {
			return nil, err
		}
		k := b.QueueName(q)
		out[k+"/ready"], out[k+"/in_flight"], out[k+"/dead"], out[k+"/delayed"] = n.Ready, n.InFlight, n.Dead, n.Delayed
		if err := partitionStats(ctx, b.Broker, k, q, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// partitionStats adds the counts of each partition of queue (named k) to
// out, keyed QUEUE/pN/ready and so on, when the broker splits it.
func partitionStats(ctx context.Context, b broker.Broker, k, queue string, out map[string]int64) error {
	pc, ok := b.(broker.PartitionCounter)
	if p, isP := b.(broker.Partitioned); !ok || !isP || p.Partitions() < 2 {
		return nil
	}
	parts, err := pc.PartitionCounts(ctx, queue)
	if err != nil {
		return err
	}
	for i, n := range parts {
		pk := fmt.Sprintf("%s/p%d", k, i)
		out[pk+"/ready"], out[pk+"/in_flight"], out[pk+"/dead"], out[pk+"/delayed"] = n.Ready, n.InFlight, n.Dead, n.Delayed
	}
	return nil
}

// describe renders a dead letter for a listing: its URL, with no
// password, and its reason. A start URL Redis kept as rejected is a JSON
// record of the payload and the reason.
func describe(queue string, l broker.DeadLetter) (what, reason string) {
	body, reason := l.Message.Body, l.Reason
	if strings.HasSuffix(queue, ":requests") {
		var r engine.Request
		if err := r.UnmarshalBinary(body); err == nil {
			body = []byte(r.URL)
		}
	} else {
		var rec struct {
			Reason  string  `json:"reason"`
			Payload *string `json:"payload"`
		}
		if json.Unmarshal(body, &rec) == nil && rec.Payload != nil {
			body, reason = []byte(*rec.Payload), rec.Reason
		}
	}
	text := startURLText(string(body))
	if u, err := parseURL(text); err == nil && u.Host != "" && !strings.ContainsAny(text, " \t\r\n") {
		return u.Redacted(), hidePassword(reason, u)
	}
	if strings.Contains(text, "@") {
		shown := shownURL(text, true)
		reason, text = strings.ReplaceAll(reason, text, shown), shown
	}
	s := strconv.Quote(text)
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s, engine.Redact(reason)
}

func newRepartitionCmd(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "repartition --partitions N",
		Short: "Move a stopped crawl's queued requests and dead letters into N partitions (Redis, NATS, RabbitMQ)",
		Long: `Move a stopped crawl's queued requests and dead letters into N partitions
(Redis, NATS, RabbitMQ), each to the partition of its host (or registrable
domain, as the crawl's --partition-by), and store N as the crawl's partition
count: workers started afterwards without --partitions adopt it. It refuses
while workers of the crawl run. Nothing is lost if it is cut short: run it
again with the same N to finish the move. To the crawl's own count, with
nothing left on its way, it has nothing to move, and says so.

With --broker=redis the duplicate filter is partitioned too, and its entries
(fingerprints, not URLs) cannot be moved by host: every new partition gets a
copy of every old partition's, so that no page is fetched twice, at the cost
of N times the filter's memory; the old partitions' keys are deleted. The
crawl's filter is opened as it was made: --dedup and the Bloom sizes need not
be given.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f := cmd.Flags().Lookup("partitions"); f == nil || !f.Changed {
				return usageError("repartition needs --partitions N")
			}
			b, err := o.open(cmd.Context(), "repartition")
			if err != nil {
				return err
			}
			defer b.Close()
			m, err := b.Repartition(cmd.Context(), o.partitions)
			if errors.Is(err, deployment.ErrConfig) {
				return &exitError{code: 2, err: err}
			}
			if err != nil {
				return err
			}
			if m.Unchanged {
				fmt.Fprintf(o.stdout, "crawl %s: already in %d %s: nothing to move\n", o.name, m.To, plural(int64(m.To), "partition"))
				return nil
			}
			fmt.Fprintf(o.stdout, "crawl %s: %d queued %s and %d dead %s moved from %d to %d partitions\n",
				o.name, m.Ready, plural(int64(m.Ready), "request"), m.Dead, plural(int64(m.Dead), "letter"), m.From, m.To)
			return nil
		},
	}
	o.addBackendFlags(cmd.Flags())
	o.addHiddenCrawlFlags(cmd.Flags())
	// --partitions is required here: the crawl flag's default and its
	// words about other commands would mislead.
	f := cmd.Flags().Lookup("partitions")
	f.Hidden, f.DefValue = false, "0"
	f.Usage = "move the crawl's queues into this many partitions, each a queue of the broker's own (required; workers started afterwards adopt it)"
	return cmd
}
