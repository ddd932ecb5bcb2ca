package nats

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/trawlhq/trawl/broker"
)

// Consume opens a long-lived consumer of queue that reads ahead at most
// prefetch deliveries. See consumer.
func (b *Broker) Consume(ctx context.Context, queue string, prefetch int) (broker.Consumer, error) {
	const op = "consume"
	if queue != "" && prefetch < 1 {
		return nil, invalid(op, queue, fmt.Sprintf("prefetch %d < 1", prefetch))
	}
	if err := b.enter(op, queue); err != nil {
		return nil, err
	}
	qs, err := b.partitions(ctx, queue)
	if err != nil {
		b.active.Done()
		return nil, opErr(op, queue, err)
	}
	c := &consumer{
		b: b, queue: queue, qs: qs, prefetch: prefetch, last: -1,
		avail: make(chan struct{}, 1), room: make(chan struct{}, 1), look: make(chan struct{}, 1), hunger: make(chan struct{}, 1),
		exited: make(chan struct{}),
	}
	c.ctx, c.cancel = context.WithCancel(b.life)
	go c.run() // owned by c: Close (or the broker's Close) ends it and waits
	return c, nil
}

// consumer is the broker.Consumer of a queue. Its loop (run) keeps up to
// prefetch deliveries read ahead in buf, highest band first, with the
// same pull requests as Receive: "no wait" requests band by band while
// the queue has messages (take), and, once it has none and buf is empty,
// a waiting request on every band and the delay consumer (wait), renewed
// by the broker as they expire (every waitExpiry; see waiting: no
// heartbeats are asked for). An idle consumer thus costs the server one
// pull request per band and per waitExpiry, and no connection of its own.
//
// A queue split into partitions is read the same way, each take over
// every partition in turn (see takeAll) and each wait on all of them, with
// one read-ahead of prefetch for them all; Next takes from the highest
// band read ahead, from the partitions in turn, so that no partition waits
// for another's backlog. A consumer told to prefer some partitions
// (Prefer) takes from those, and from the others only when its own came
// back empty and a Next has waited on an empty read-ahead for stealAfter
// (work stealing); meanwhile it waits on its own, and once it may steal
// and all are empty, on all.
//
// Standing requests: a wait's requests stay open with the server when it
// returns, while the read-ahead has room for what they may bring (a
// message a band and partition; at most half of prefetch), so that the
// next wait sends only those that brought their message, not a pull
// request per band and partition again; and a take on those partitions
// pulls from the bands whose requests brought a message (takeFired), not
// from every band that a stream info finds holding messages (a crawl's
// are mostly in flight), since the others' requests still wait: no band
// the server could give from is missed. What they bring meanwhile is
// read as the loop waits for room (waitRoom) and counted against the
// read-ahead, which each take leaves room for; the requests are stopped
// (drained) when the loop waits on other partitions (Prefer, stealing),
// fails or ends. A consumer with less read-ahead stops them at the end of
// every wait, as Receive does.
//
// Read-ahead deliveries are leased (the server counts AckWait from its
// sending): while buf is full the loop extends those past half their
// lease, and Next extends one past a quarter of its lease before
// returning it, so that a delivery comes out of Next with at least three
// quarters of a lease left, as from the Redis broker's consumer: the
// engine's lease keeper extends what it holds every third of a lease,
// and a delivery handed out with half a lease left had a sixth of one to
// spare before its first extension (0.5s at a 3s lease; see refresh).
type consumer struct {
	b        *Broker
	queue    string
	prefetch int
	ctx      context.Context // ends on Close and on the broker's Close
	cancel   context.CancelFunc
	closed   atomic.Bool
	exited   chan struct{} // closed when run has returned (and given buf back)

	avail  chan struct{} // poked when buf gains deliveries
	room   chan struct{} // poked when Next takes from buf
	look   chan struct{} // poked when Prefer is called
	hunger chan struct{} // poked when a Next starts waiting on an empty buf with a preference

	qs    []*queue // the partitions, owned by run; nil: to be opened again
	stand *waiting // the pull requests of the last wait, kept open (see consumer: standing requests); owned by run

	mu    sync.Mutex
	buf   []*delivery // read ahead, not yet returned by Next; sorted
	last  int         // the partition of the delivery Next returned last
	ended bool        // run returned; buf given back
	own   []int       // the partitions preferred (Prefer), maybe none; nil: all alike

	hungry time.Time // since when a Next waits on an empty buf; zero while none does
	dryOwn time.Time // since when takes of its own partitions come back empty; zero once one brought some
}

// stealAfter is how long a consumer that prefers some partitions (see
// Prefer) must have found its own empty, and its caller waiting in Next
// on an empty read-ahead, before it takes from the others. A worker's own
// partitions run dry all through a crawl: it takes what they hold as soon
// as it is published, while its read-ahead has room, which it nearly
// always has; stealing whenever they are dry spreads hosts over workers
// again. A caller that waited a second is idle, not between two pages.
// (The Redis consumer waits as long.)
const stealAfter = time.Second

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// run is the consumer's loop; see consumer.
func (c *consumer) run() {
	b := c.b
	defer b.active.Done()
	defer close(c.exited)
	defer c.end()
	r := retrier{b: b, op: "consume", queue: c.queue}
	dry := false // the last take found nothing while buf held deliveries
	for {
		if !c.waitRoom(dry) {
			return
		}
		var err error
		var failed *queue
		if c.qs == nil {
			c.qs, err = b.partitions(c.ctx, c.queue)
		}
		var ds []*delivery
		if err == nil {
			own, others := c.split(c.qs)
			room := c.prefetch - c.buffered() - c.pending()
			if room > 0 {
				if w := c.stand; w != nil && !w.stopped && w.same(own) {
					ds, failed, err = w.takeFired(room) // its requests tell which bands have messages
				} else {
					ds, failed, err = b.takeAll(own, room)
				}
			}
			steal := time.Time{} // when it may steal, if it may not yet
			if len(others) > 0 && err == nil && room > 0 {
				if steal = c.dried(len(ds) == 0); steal.IsZero() {
					ds, failed, err = b.takeAll(others, room)
					own = c.qs // if all are empty, wait on all
				}
			}
			if len(ds) == 0 && err == nil {
				if c.buffered() > 0 || room <= 0 {
					dry = true
					continue
				}
				ds, failed, err = c.wait(own, steal, len(others) > 0)
			}
		}
		if len(ds) > 0 {
			dry = false
			c.push(ds)
			err = nil
		}
		if err := r.after(c.ctx, failed, err); err != nil {
			return
		}
		if c.qs != nil && !b.known(c.qs) {
			c.qs = nil // forgotten by after: open them again
			c.push(c.unstand())
		}
	}
}

var _ broker.PartitionPreferrer = (*consumer)(nil)

// Prefer makes the consumer take from the partitions own (numbers from 0)
// and from the others only when none of its own has messages: a worker
// that prefers its share of the partitions fetches their hosts, and
// another's only when it would idle otherwise. nil makes all partitions
// alike again; an own not nil with no partition of the queue leaves the
// consumer none of its own: it takes only as it steals. It may be called
// at any time, from any goroutine; the next take follows it.
func (c *consumer) Prefer(own []int) {
	c.mu.Lock()
	c.own = slices.Clone(own)
	if own != nil && c.own == nil {
		c.own = []int{} // none of its own, not all alike
	}
	c.mu.Unlock()
	poke(c.look)
}

// split divides qs into the partitions the consumer prefers and the
// others; all of qs are its own if it has no preference, none if it
// prefers none of them.
func (c *consumer) split(qs []*queue) (own, others []*queue) {
	c.mu.Lock()
	pref := c.own
	c.mu.Unlock()
	if pref == nil {
		return qs, nil
	}
	for _, q := range qs {
		if slices.Contains(pref, q.part) {
			own = append(own, q)
		} else {
			others = append(others, q)
		}
	}
	return own, others
}

// dried notes whether the last take of the consumer's own partitions came
// back empty, and returns when it may steal from the others: zero if it
// may now, far in the future while no Next waits on an empty read-ahead
// (a Next that starts waiting pokes hunger).
func (c *consumer) dried(empty bool) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	switch {
	case !empty:
		c.dryOwn = time.Time{}
		return now.Add(stealAfter) // it took some: not now
	case c.dryOwn.IsZero():
		c.dryOwn = now
	}
	if at := c.stealAt(); now.Before(at) {
		return at
	}
	return time.Time{}
}

// stealAt is when the consumer may steal, its own partitions having been
// found empty since dryOwn: stealAfter after that and after a Next
// started waiting, far in the future while none waits. c.mu is held.
func (c *consumer) stealAt() time.Time {
	if c.hungry.IsZero() {
		return time.Now().Add(365 * 24 * time.Hour)
	}
	at := c.dryOwn
	if c.hungry.After(at) {
		at = c.hungry
	}
	return at.Add(stealAfter)
}

// wait waits on partitions qs (see Broker.wait), cut short when look is
// poked (Prefer was called) and, with a preference, at steal, when the
// consumer may steal from the others, so that the loop looks again; that
// is no error. A Next that starts waiting meanwhile (hunger) moves steal
// without cutting the wait: its pull requests are not sent again for it.
func (c *consumer) wait(qs []*queue, steal time.Time, preferring bool) ([]*delivery, *queue, error) {
	if c.stand != nil && (c.stand.stopped || !c.stand.same(qs)) {
		if ds := c.unstand(); len(ds) > 0 {
			return ds, nil, nil // came before its requests were stopped
		}
	}
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	watched := make(chan struct{})
	go func() { // owned by wait: ends with ctx, which it cancels on a poke or at steal
		defer close(watched)
		timer := time.NewTimer(time.Until(steal))
		defer timer.Stop()
		if !preferring || steal.IsZero() {
			timer.Stop()
		}
		for {
			select {
			case <-c.look:
				cancel()
			case <-timer.C:
				cancel()
			case <-c.hunger:
				if preferring && !steal.IsZero() {
					c.mu.Lock()
					steal = c.stealAt()
					c.mu.Unlock()
					timer.Reset(time.Until(steal))
				}
				continue
			case <-ctx.Done():
			}
			return
		}
	}()
	if len(qs) == 0 { // none of its own: until it may steal, or is poked
		<-ctx.Done()
		cancel()
		<-watched
		return nil, nil, nil
	}
	if c.stand == nil {
		w, err := c.b.openWaiting(qs, 1)
		if err != nil {
			cancel()
			<-watched
			return nil, qs[0], err
		}
		c.stand = w
	}
	ds, failed, err, again := c.stand.wait(ctx, nil)
	cancel()
	<-watched
	if err != nil || again || c.stand.gone || c.stand.bands() > c.prefetch/2 {
		// Stopped (a failure, a reconnection), or too many for the
		// read-ahead to keep open (see consumer: standing requests).
		ds = append(ds, c.unstand()...)
	}
	if c.ctx.Err() != nil {
		return ds, nil, nil // the loop gives them back as it ends
	}
	return ds, failed, err
}

// pending is how many messages the consumer's open pull requests may
// still bring (see consumer: standing requests).
func (c *consumer) pending() int {
	if c.stand == nil {
		return 0
	}
	return c.stand.pending()
}

// unstand stops the pull requests kept open, if any, and returns the
// deliveries they brought.
func (c *consumer) unstand() []*delivery {
	if c.stand == nil {
		return nil
	}
	ds := c.stand.stop()
	c.stand = nil
	return ds
}

// known tells whether qs are still the broker's open partitions of their
// queue.
func (b *Broker) known(qs []*queue) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, q := range qs {
		if b.queues[qkey{q.queue, q.part}] != q {
			return false
		}
	}
	return true
}

func (c *consumer) buffered() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.buf)
}

// push adds ds to buf, and gives back what is beyond prefetch (see
// putBack: a wait brings one message per band that had one).
func (c *consumer) push(ds []*delivery) {
	c.mu.Lock()
	c.buf = append(c.buf, ds...)
	sortDeliveries(c.buf)
	var extra []*delivery
	if len(c.buf) > c.prefetch {
		extra = append(extra, c.buf[c.prefetch:]...)
		c.buf = c.buf[:c.prefetch:c.prefetch]
	}
	c.mu.Unlock()
	poke(c.avail)
	if len(extra) > 0 {
		c.b.putBack(extra)
	}
}

// waitRoom waits until buf may be refilled: it is empty or, unless the
// last take came back dry, half of prefetch is free (of buf and of what
// the open pull requests may bring). Meanwhile it keeps the leases of buf
// alive, and takes what the open pull requests bring (a message come
// makes the loop take again). It returns false once the consumer ends.
func (c *consumer) waitRoom(dry bool) bool {
	threshold := max(1, (c.prefetch+1)/2)
	for {
		var answers <-chan *natsgo.Msg
		if w := c.stand; w != nil {
			if ds := w.poll(); len(ds) > 0 {
				c.push(ds)
				dry = false
			}
			if w.stopped || w.gone {
				c.push(c.unstand()) // failed: the next wait sends them anew
			} else {
				answers = w.answers
			}
		}
		n := c.buffered()
		if n == 0 || (!dry && c.prefetch-n-c.pending() >= threshold) {
			return c.ctx.Err() == nil
		}
		t := time.NewTimer(c.b.cfg.Lease / 4)
		select {
		case <-c.room:
			t.Stop()
		case m := <-answers:
			t.Stop()
			c.stand.idle = time.Time{} // it comes now
			c.stand.handle(m)
		case <-t.C:
			c.keepAlive()
		case <-c.ctx.Done():
			t.Stop()
			return false
		}
		if c.stand != nil {
			c.stand.idle = time.Now()
		}
	}
}

// keepAlive extends the leases of buf's deliveries past half their lease,
// all in one confirmAll, and drops those whose lease is lost (the server
// delivers them again).
func (c *consumer) keepAlive() {
	b := c.b
	c.mu.Lock()
	ds := append([]*delivery(nil), c.buf...)
	c.mu.Unlock()
	var due, gone []*delivery
	b.mu.Lock()
	for _, d := range ds {
		switch left := time.Until(d.deadline); {
		case left <= 0:
			gone = append(gone, d)
		case left < b.cfg.Lease/2:
			due = append(due, d)
		}
	}
	b.mu.Unlock()
	sent := time.Now()
	errs := b.confirmAll(c.ctx, due, wpiBody)
	b.mu.Lock()
	for i, d := range due {
		switch {
		case errs[i] == nil:
			d.deadline = b.leaseEnd(sent)
		case time.Until(d.deadline) <= 0:
			gone = append(gone, d)
			fallthrough
		default:
			b.log.Debug("extending a read-ahead delivery failed", "queue", c.queue, "error", errs[i])
		}
	}
	b.mu.Unlock()
	if len(gone) == 0 || c.ctx.Err() != nil {
		return
	}
	c.mu.Lock()
	c.buf = slices.DeleteFunc(c.buf, func(d *delivery) bool { return slices.Contains(gone, d) })
	c.mu.Unlock()
}

// refresh extends d's lease if less than three quarters of it is left.
// It returns an error if the lease is lost. With half (as before), a
// delivery that waited in the read-ahead came out with as little as
// half a lease, and the engine's keeper, extending every third of a
// lease, reached it up to a third later: held up half a second more at
// --lease 3s (-race under load), a worker lost leases of deliveries it
// held back and fetched them anyway, while the server gave them to
// another (TestNATSThreeWorkers fetched 2 pages twice in a clean-clone
// CI).
func (c *consumer) refresh(ctx context.Context, d *delivery) error {
	b := c.b
	b.mu.Lock()
	left := time.Until(d.deadline)
	b.mu.Unlock()
	if left <= 0 {
		return broker.ErrLeaseLost
	}
	if left >= b.cfg.Lease*3/4 {
		return nil
	}
	sent := time.Now()
	err := b.ackReq(ctx, d.m, []byte("+WPI"))
	if err != nil {
		b.log.Debug("extending a read-ahead delivery failed", "queue", c.queue, "error", err)
		if time.Until(d.deadline) > 0 {
			return nil // the lease stands, shorter
		}
		return broker.ErrLeaseLost
	}
	b.mu.Lock()
	d.deadline = b.leaseEnd(sent)
	b.mu.Unlock()
	return nil
}

// end gives back what the loop read ahead, once it stops.
func (c *consumer) end() {
	came := c.unstand()
	c.mu.Lock()
	ds := append(c.buf, came...)
	c.buf, c.ended = nil, true
	c.mu.Unlock()
	c.b.unclaim(ds)
}

// Next returns the next delivery, highest band first among those read
// ahead, waiting until one comes. While the server is away it waits (the
// loop retries, with a warning in the log).
func (c *consumer) Next(ctx context.Context) (broker.Delivery, error) {
	const op = "next"
	for {
		if err := ctx.Err(); err != nil {
			return nil, opErr(op, c.queue, err)
		}
		c.mu.Lock()
		if c.ended || c.closed.Load() {
			c.mu.Unlock()
			return nil, opErr(op, c.queue, broker.ErrClosed)
		}
		if len(c.buf) > 0 {
			d := c.pick()
			c.hungry = time.Time{}
			c.mu.Unlock()
			poke(c.room)
			if err := c.refresh(ctx, d); err != nil {
				c.b.log.Debug("a read-ahead delivery's lease ran out; the server delivers it again", "queue", c.queue)
				continue
			}
			if c.closed.Load() {
				c.b.unclaim([]*delivery{d})
				return nil, opErr(op, c.queue, broker.ErrClosed)
			}
			ds, err := c.b.hand(op, c.queue, []*delivery{d})
			if err != nil {
				return nil, err
			}
			return ds[0], nil
		}
		if c.hungry.IsZero() {
			c.hungry = time.Now()
			if c.own != nil {
				poke(c.hunger) // a loop held back from stealing may steal a stealAfter from now
			}
		}
		c.mu.Unlock()
		select {
		case <-c.avail:
		case <-c.exited:
		case <-ctx.Done():
			c.mu.Lock()
			c.hungry = time.Time{} // nobody waits
			c.mu.Unlock()
		}
	}
}

// pick removes and returns the delivery Next returns next: of the highest
// band in buf, the first of the partition that comes first after the last
// one served. buf is not empty; c.mu is held.
func (c *consumer) pick() *delivery {
	at := 0
	if n := c.b.cfg.Partitions; n > 1 {
		best := n
		for i, d := range c.buf {
			if d.band != c.buf[0].band {
				break
			}
			if dist := (d.q.part - c.last - 1 + 2*n) % n; dist < best {
				at, best = i, dist
			}
		}
	}
	d := c.buf[at]
	c.buf = slices.Delete(c.buf, at, at+1)
	c.last = d.q.part
	return d
}

// Close stops the consumer and gives back at once what it read ahead
// (uncounted: its next delivery has the same attempt). Deliveries already
// returned by Next stay valid. Close is idempotent.
func (c *consumer) Close() error {
	c.closed.Store(true)
	c.cancel()
	<-c.exited
	return nil
}
