package main

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/deployment"
	"github.com/trawlhq/trawl/engine"
)

// itemsWait is how long items waits for the items its broker counts ready
// before it says why on stderr.
const itemsWait = 2 * time.Second

// itemsWaitCounted is how long items waits for items its broker counts
// ready before it gives up on them (a starved machine can take seconds to
// deliver them, another taker may have taken them, and a server's count
// may lag); it says why after itemsWait.
const itemsWaitCounted = 30 * time.Second

func newItemsCmd(o *options) *cobra.Command {
	var max int
	cmd := &cobra.Command{
		Use:   "items",
		Short: "Take the items a crawl wrote with --out queue or --out redis off NAME:items and print them, one JSON line each",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if max < 0 {
				return usageError("--max %d: want 0 (all) or more", max)
			}
			b, err := o.open(cmd.Context(), "items")
			if err != nil {
				return err
			}
			defer b.Close()
			n, err := o.takeItems(cmd.Context(), b, max)
			fmt.Fprintf(o.stderr, "trawl: %d %s taken from %s\n", n, plural(int64(n), "item"), b.QueueName(engine.ItemsQueue(o.name)))
			return err
		},
	}
	cmd.Flags().IntVar(&max, "max", 0, "take at most this many (0: all there are)")
	o.addBackendFlags(cmd.Flags())
	o.addHiddenCrawlFlags(cmd.Flags())
	return cmd
}

// takeItems writes the items of the crawl's items queue (or Redis list)
// to stdout, and takes each off for good only once its reader took it:
// written to a file or a terminal, or, on a pipe, read out of it (the
// pipe drained; Linux), so that a reader that stops early (trawl items |
// head -1) loses nothing. An item written and not read when the reader
// closed its end goes back with those not written, their deliveries not
// counted, and takeItems ends without error. It takes items until the
// queue is empty (by its count, or after itemsWait with nothing more) or
// max are taken.
func (o *options) takeItems(ctx context.Context, b *deployment.Deployment, max int) (int, error) {
	if pipeOf(o.stdout) != nil {
		// A write to a pipe its reader closed fails with EPIPE instead of
		// killing trawl (exit 141) with items taken and not given back.
		signal.Ignore(syscall.SIGPIPE)
		defer signal.Reset(syscall.SIGPIPE)
	}
	taken := 0
	if l, ok := b.Items.(itemList); ok { // --out redis (and --out queue on Redis)
		n, err := o.takeList(ctx, l, max)
		taken += n
		if err != nil || b.ItemsInList() || (max > 0 && taken >= max) {
			return taken, err
		}
	}
	if max > 0 {
		max -= taken
	}
	n, err := o.takeQueue(ctx, b, max)
	return taken + n, err
}

// put writes one item to stdout and, on a pipe, waits until its reader
// took it (see takeItems).
func (o *options) put(item []byte) error {
	if _, err := fmt.Fprintf(o.stdout, "%s\n", item); err != nil {
		return err
	}
	if p := pipeOf(o.stdout); p != nil {
		return awaitTaken(p)
	}
	return nil
}

// readerGone reports whether err, of put, says that the reader closed
// its end of the pipe, and says so on stderr.
func (o *options) readerGone(err error) bool {
	if !errors.Is(err, errReaderGone) && !errors.Is(err, syscall.EPIPE) {
		return false
	}
	fmt.Fprintf(o.stderr, "trawl: the reader closed its end; the items it did not read stay where they were\n")
	return true
}

// batch is how many items to take at once: one when each waits for the
// reader of a pipe (a lease taken with many could run out meanwhile).
func (o *options) batch(max, taken int) int {
	want := 100
	if pipeOf(o.stdout) != nil {
		want = 1
	}
	if max > 0 {
		want = min(want, max-taken)
	}
	return want
}

// itemList is a Redis item list (redisbroker.Items).
type itemList interface {
	Take(ctx context.Context, max int) ([][]byte, error)
	Return(ctx context.Context, items [][]byte) error
}

// takeList writes the items of the list l to stdout, taking them off it
// until it is empty or max are taken.
func (o *options) takeList(ctx context.Context, l itemList, max int) (int, error) {
	taken := 0
	for max <= 0 || taken < max {
		its, err := l.Take(ctx, o.batch(max, taken))
		if err != nil || len(its) == 0 {
			return taken, err
		}
		for i, it := range its {
			if err := o.put(it); err != nil {
				_ = l.Return(context.WithoutCancel(ctx), its[i:]) // back to the list at once
				if o.readerGone(err) {
					return taken, nil
				}
				return taken, fmt.Errorf("write: %w", err)
			}
			taken++
		}
	}
	return taken, nil
}

// takeQueue takes the items off the broker queue NAME:items (takeItems).
func (o *options) takeQueue(ctx context.Context, b *deployment.Deployment, max int) (int, error) {
	q := engine.ItemsQueue(o.name)
	taken := 0
	for max == 0 || taken < max {
		n, err := b.Broker.Counts(ctx, q)
		if err != nil {
			return taken, err
		}
		if n.Ready == 0 {
			return taken, nil
		}
		ds, err := o.receiveItems(ctx, b.Broker, q, o.batch(max, taken))
		if err != nil || len(ds) == 0 {
			return taken, err
		}
		for i, d := range ds {
			if err := o.put(d.Message().Body); err != nil {
				for _, d := range ds[i:] { // back to the queue at once, uncounted
					if err := d.Release(context.WithoutCancel(ctx)); err != nil {
						o.log.Warn("an item not taken goes back when its lease ends", "err", err)
					}
				}
				if o.readerGone(err) {
					return taken, nil
				}
				return taken, fmt.Errorf("write: %w", err)
			}
			if err := d.Ack(ctx); err != nil {
				return taken, fmt.Errorf("acknowledge an item: %w", err)
			}
			taken++
		}
	}
	return taken, nil
}

// receiveItems receives up to n items of queue q, which the broker
// counted ready. It waits for them up to itemsWaitCounted, saying why on
// stderr once itemsWait has passed, then gives up (none, nil).
func (o *options) receiveItems(ctx context.Context, b broker.Broker, q string, n int) ([]broker.Delivery, error) {
	wait := itemsWaitCounted
	start, said := time.Now(), false
	for {
		slice := min(itemsWait, wait-time.Since(start))
		if slice <= 0 {
			fmt.Fprintf(o.stderr, "trawl: the broker counts items ready on %s, but none came within %s; stopping\n", q, wait)
			return nil, nil
		}
		rctx, cancel := context.WithTimeout(ctx, slice)
		ds, err := b.Receive(rctx, q, n)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			if !said {
				said = true
				fmt.Fprintf(o.stderr, "trawl: the broker counts items ready on %s, but none came within %s; waiting for them up to %s\n", q, itemsWait, wait)
			}
			continue
		}
		return ds, err
	}
}
