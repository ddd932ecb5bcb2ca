package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	mathrand "math/rand/v2"
	"os"
	"time"

	"github.com/trawlhq/trawl/broker"
)

// PresenceTTL is how long a worker's announcement lasts (see
// broker.Presence); a running worker renews it every third of that or
// a little sooner (presenceJitter). A worker killed without a chance to
// withdraw it counts as live for at most that long.
const PresenceTTL = 15 * time.Second

// presenceJitter is how much sooner than PresenceTTL/3 each renewal may
// come, at random: a worker's other periodic jobs (its progress line
// every 10 s, its feeder's look at the start URLs on a 200 ms grid) tick
// in step with a renewal every PresenceTTL/3, all started with the
// crawl, and two of them at once take two pooled connections where one
// does: an idle Redis worker dialled a connection every 10 s, which its
// pool closed 2–3 s later (deployment's redisConnMaxIdle). Jittered, the
// renewals drift over the others' ticks and meet one by chance only, as
// the workers of a fleet started together no longer beat together.
const presenceJitter = PresenceTTL / 15

// presence keeps a worker announced in its crawl's presence while it
// runs, renewing the announcement every third of PresenceTTL less a
// random presenceJitter and writing
// the worker's record (see WorkerStatus) each time, and withdraws the
// announcement when the worker stops, its record marked stopped.
//
// Where the presence is a broker.Roster, it also reads the crawl's live
// workers after each announcement, and a few times sooner after the
// worker starts (earlyLooks), and shares the queue's partitions out over
// them (aff).
type presence struct {
	p     broker.Presence
	crawl string
	id    string
	beat  func(ctx context.Context, stopped bool) // writes the worker's record
	log   *slog.Logger
	aff   *affinity // nil: no share of partitions
}

// presence returns this worker's presence in the crawl, or nil where the
// crawl keeps none.
func (c *Crawler) presence() *presence {
	p := c.metadata()
	if p == nil {
		return nil
	}
	id := workerID()
	hb := c.newHeartbeat(id)
	pr := &presence{p: p, crawl: c.cfg.Name, id: id, log: c.log,
		beat: func(ctx context.Context, stopped bool) { c.beat(ctx, hb, stopped) }}
	if _, ok := p.(broker.Roster); ok && partitions(c.frontier.Broker()) > 1 {
		pr.aff = &c.aff
	}
	return pr
}

// partitions is the partition count of b's queues: 1 where they are not
// split.
func partitions(b broker.Broker) int {
	if pb, ok := b.(broker.Partitioned); ok {
		return max(pb.Partitions(), 1)
	}
	return 1
}

// workerID names this worker in the crawl's presence: host, process,
// and random bytes (a process may run several crawlers).
func workerID() string {
	host, _ := os.Hostname()
	var r [4]byte
	rand.Read(r[:])
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(r[:]))
}

// run keeps the worker announced until done is closed, then withdraws
// it. A failure is logged: presence is for the commands that must not
// spoil a running crawl (trawl purge) and for watching, not for crawling.
func (p *presence) run(ctx context.Context, done <-chan struct{}) {
	t := time.NewTimer(presenceEvery())
	defer t.Stop()
	var early *time.Timer // the next of earlyLooks, where the share is on
	looks := 0            // earlyLooks done
	if p.aff != nil {
		early = time.NewTimer(earlyLooks[0])
		defer early.Stop()
	}
	p.renew(ctx)
	for {
		var soon <-chan time.Time
		if early != nil && looks < len(earlyLooks) {
			soon = early.C
		}
		select {
		case <-done:
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
			p.beat(lctx, true)
			if err := p.p.Leave(lctx, p.crawl, p.id); err != nil {
				p.log.Warn("withdrawing this worker's announcement failed: it expires within "+PresenceTTL.String(), "crawl", p.crawl, "err", err)
			}
			cancel()
			return
		case <-t.C:
			t.Reset(presenceEvery())
			p.renew(ctx)
		case <-soon:
			if looks++; looks < len(earlyLooks) {
				early.Reset(earlyLooks[looks] - earlyLooks[looks-1])
			}
			p.look(ctx)
		}
	}
}

// renew announces the worker again, looks at the crawl's live workers
// and writes the worker's record.
func (p *presence) renew(ctx context.Context) {
	if err := p.p.Announce(ctx, p.crawl, p.id, PresenceTTL); err != nil {
		p.log.Warn("announcing this worker failed: trawl purge may not see it", "crawl", p.crawl, "err", err)
	}
	p.look(ctx)
	p.beat(ctx, false)
}

// look shares the queue's partitions out over the crawl's live workers,
// where the presence does (aff).
func (p *presence) look(ctx context.Context) {
	if p.aff != nil {
		p.aff.look(ctx, p.p.(broker.Roster), p.crawl, p.id)
	}
}

// presenceEvery is the wait before a renewal: PresenceTTL/3 less a
// random presenceJitter.
func presenceEvery() time.Duration {
	return PresenceTTL/3 - mathrand.N(presenceJitter)
}
