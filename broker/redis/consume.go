package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/internal/redisrun"
)

// renewAfter is how long, as a fraction of the lease, a delivery waits in
// the read-ahead before the consumer renews the leases of all it holds
// there (one script call): a worker whose slots are all busy keeps its
// read-ahead, and Next hands each out with nearly a whole lease, as
// Receive would.
const renewAfter = 8 // lease/renewAfter

// stealAfter is how long a consumer that prefers some partitions (see
// Prefer) must have found none of them with messages, and its caller
// waiting in Next on an empty read-ahead, before it leases from the other
// partitions. A worker's own partitions run dry all through a crawl: it
// leases what they hold as soon as it is published, into its workbench,
// while its read-ahead has room, which it nearly always has. Stealing
// whenever they are dry and there is room spread every one of a test's 48
// hosts over two of its 3 workers (a third of the pages by the thief);
// a caller waiting in Next has a slot free and nothing to fill it with,
// and one that waited a second is idle, not between two pages.
const stealAfter = time.Second

// Backing off a consumer's connection after an error. At most a second:
// a Redis Cluster's replica takes over a dead primary's slots within the
// node timeout, and the consumer should follow it at once, not seconds
// later (a dial to a dead node costs the client's DialTimeout anyway).
const (
	consumerBackoffMin = 100 * time.Millisecond
	consumerBackoffMax = time.Second
)

// consumer is a broker.Consumer on Redis. One goroutine, owned by the
// consumer, leases up to prefetch messages at a time with the receive
// script (so leases work exactly as Receive's), renews the leases of those
// waiting in its read-ahead every lease/renewAfter (so a busy worker's
// read-ahead is neither handed to another worker nor counted as a
// delivery when it waits longer than a lease) and, when the queue has
// none, waits for its wake-up token with BLPOP, all on a connection of its
// own. Close unblocks that wait at once (CLIENT UNBLOCK from another
// connection): no blocking command outlives the consumer.
//
// A queue with partitions has one such loop per partition, each on a
// connection of its own (to the partition's primary on a Cluster),
// sharing one read-ahead of prefetch: the partitions that have messages
// lease in turn, half the read-ahead each (see roomFor), and Next hands
// out the partitions' deliveries in turn, so that no partition waits for
// another's backlog. A loop whose lease found none stands aside until it
// leases again: a crawl whose hosts sit in one partition leases in the
// batches of an unsplit queue. A consumer told to prefer some partitions
// (Prefer) leases from the others only once none of its own has been
// active for stealAfter: their loops wait meanwhile, as loops of a full
// read-ahead do, and cost the server nothing.
type consumer struct {
	b        *Broker
	queue    string
	ks       []*keys // the partitions
	prefetch int

	mu       sync.Mutex
	buf      []*delivery // read ahead: leased, not yet returned by Next
	reserved int         // read-ahead the loops are leasing
	last     int         // the partition of the delivery Next returned last
	active   []bool      // by partition: its last lease found messages
	own      []bool      // by partition: preferred (Prefer), maybe none; nil: all alike
	dry      time.Time   // with a preference, since when none of own is active; zero while one is
	hungry   time.Time   // since when a Next waits on an empty read-ahead; zero while none does
	next     int         // the partition whose turn to lease comes first
	err      error       // a loop's last error, not yet returned by Next
	closed   bool
	unblock  map[*keys]func() // unblocks a loop's BLPOP while it runs one
	room     chan struct{}    // closed (and replaced) when Next takes from buf
	// gate is closed (and replaced) when the loops held back from
	// stealing (see roomFor) may steal: stealTimer, at stealAt, or a
	// new preference.
	gate       chan struct{}
	stealTimer *time.Timer  // armed by armSteal; nil until first armed
	stealAt    time.Time    // when stealTimer fires; zero when not armed
	wakes      atomic.Int64 // loop wake-ups by room or gate, for tests

	more   chan struct{} // (cap 1) buf or err changed
	done   chan struct{} // closed by Close
	exited chan struct{} // closed when every loop has returned
}

// Consume opens a consumer of queue that reads ahead up to prefetch
// deliveries, keeping their leases while they wait. It holds one
// connection of its own (taken from the client's pool, or from the pool of
// the node that serves the queue on a Cluster) until Close. ctx bounds the
// opening only.
func (b *Broker) Consume(ctx context.Context, queue string, prefetch int) (broker.Consumer, error) {
	if err := b.check("consume", queue); err != nil {
		return nil, err
	}
	if prefetch < 1 {
		return nil, opErr("consume", queue, fmt.Errorf("%w: prefetch %d < 1", broker.ErrInvalid, prefetch))
	}
	switch b.client.(type) {
	case *goredis.Client, *goredis.ClusterClient:
	default:
		return nil, opErr("consume", queue, fmt.Errorf("%w: a consumer needs a *redis.Client or a *redis.ClusterClient, not %T", broker.ErrInvalid, b.client))
	}
	// A worker starting says once whether the crawl would survive a
	// restart of the server (commands that only look do not).
	b.warned.Do(func() { redisrun.WarnNoPersistence(ctx, b.client, b.log) })
	ks := b.queueKeys(queue)
	c := &consumer{
		b:        b,
		queue:    queue,
		ks:       ks,
		prefetch: prefetch,
		last:     -1,
		active:   make([]bool, len(ks)),
		unblock:  map[*keys]func(){},
		more:     make(chan struct{}, 1),
		room:     make(chan struct{}),
		gate:     make(chan struct{}),
		done:     make(chan struct{}),
		exited:   make(chan struct{}),
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, opErr("consume", queue, broker.ErrClosed)
	}
	b.consumers[c] = struct{}{}
	b.mu.Unlock()
	var loops sync.WaitGroup
	for _, k := range ks {
		loops.Go(func() { c.loop(k) })
	}
	go func() { loops.Wait(); close(c.exited) }()
	return c, nil
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Next returns the oldest read-ahead delivery, waiting for one. The loop
// renews read-ahead leases; a delivery whose renewal came late (less than
// three quarters of its lease left) is extended first, so that the caller
// gets it with most of a lease, as from Receive; one whose lease was lost
// is skipped (it is back in the queue, or with another consumer).
func (c *consumer) Next(ctx context.Context) (broker.Delivery, error) {
	for {
		if err := ctx.Err(); err != nil {
			c.mu.Lock()
			c.hungry = time.Time{} // nobody waits
			c.mu.Unlock()
			return nil, opErr("consume", c.queue, err)
		}
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, opErr("consume", c.queue, broker.ErrClosed)
		}
		if len(c.buf) > 0 {
			d := c.pick()
			c.hungry = time.Time{}
			c.roomChanged()
			c.mu.Unlock()
			if c.fresh(ctx, d) {
				return d, nil
			}
			continue
		}
		if err := c.err; err != nil {
			c.err = nil
			c.hungry = time.Time{}
			c.mu.Unlock()
			return nil, err
		}
		if c.hungry.IsZero() {
			c.hungry = time.Now()
			c.armSteal()
		}
		c.mu.Unlock()
		select {
		case <-c.more:
		case <-c.done:
		case <-c.b.done:
			return nil, opErr("consume", c.queue, broker.ErrClosed)
		case <-ctx.Done():
		}
	}
}

// pick removes and returns the delivery Next returns next: the oldest of
// the partition that comes first after the last one served. buf is not
// empty; c.mu is held.
func (c *consumer) pick() *delivery {
	at := 0
	if n := len(c.ks); n > 1 {
		best := n
		for i, d := range c.buf {
			if dist := (d.k.part - c.last - 1 + 2*n) % n; dist < best {
				at, best = i, dist
			}
		}
	}
	d := c.buf[at]
	c.buf = slices.Delete(c.buf, at, at+1)
	c.last = d.k.part
	return d
}

// fresh makes sure d has at least three quarters of a lease left, and
// says whether d is still leased.
func (c *consumer) fresh(ctx context.Context, d *delivery) bool {
	lease := c.b.cfg.Lease
	d.mu.Lock()
	left, lost := time.Until(d.deadline), d.lost
	d.mu.Unlock()
	if lost {
		return false
	}
	if left >= lease*3/4 {
		return true
	}
	err := d.Extend(ctx, lease)
	if errors.Is(err, broker.ErrLeaseLost) {
		return false
	}
	if err != nil {
		c.b.log.Warn("extending a delivery read ahead failed", "queue", c.queue, "err", err)
	}
	return true
}

// Close stops the loop (unblocking its wait), then gives back what was
// read ahead at once, as never delivered. Deliveries returned by Next stay
// valid.
func (c *consumer) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		<-c.exited
		return nil
	}
	c.closed = true
	close(c.done)
	if c.stealTimer != nil {
		c.stealTimer.Stop()
	}
	c.mu.Unlock()

	// An unblock can reach the server just before the BLPOP it is meant
	// for: repeat it until the loops have returned.
	for {
		c.mu.Lock()
		var unblock []func()
		for _, u := range c.unblock {
			unblock = append(unblock, u)
		}
		c.mu.Unlock()
		for _, u := range unblock {
			u()
		}
		select {
		case <-c.exited:
		case <-time.After(50 * time.Millisecond):
			continue
		}
		break
	}

	c.mu.Lock()
	buf := c.buf
	c.buf = nil
	c.mu.Unlock()
	var back []*delivery
	for _, d := range buf {
		if c.b.untrack(d) { // else the broker closed and gave it back
			back = append(back, d)
		}
	}
	c.b.mu.Lock()
	delete(c.b.consumers, c)
	c.b.mu.Unlock()
	if len(back) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	if err := c.b.giveBack(ctx, back, false); err != nil {
		// They come back when their leases run out.
		return fmt.Errorf("redis broker: close consumer of %q: %w", c.queue, err)
	}
	return nil
}

// report hands err to the next Next.
func (c *consumer) report(err error) {
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
	signal(c.more)
	c.b.log.Warn("consumer: redis command failed; retrying", "queue", c.queue, "err", err)
}

// sleep waits d or until Close; false on Close.
func (c *consumer) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.done:
		return false
	}
}

// ConsumerClientName names a consumer's connection (CLIENT SETNAME), the
// one its blocking pop waits on, so that CLIENT LIST tells it from the
// client's pooled connections.
const ConsumerClientName = "trawl-consume"

// conn is the loop's connection: the node that serves the queue, a
// connection of its own to it, and that connection's client id.
type conn struct {
	node *goredis.Client
	cn   *goredis.Conn
	id   int64
}

func (c *consumer) dial(ctx context.Context, k *keys) (*conn, error) {
	var node *goredis.Client
	switch cl := c.b.client.(type) {
	case *goredis.Client:
		node = cl
	case *goredis.ClusterClient:
		n, err := cl.MasterForKey(ctx, k.notify)
		if err != nil {
			return nil, err
		}
		node = n
	}
	// A connection of its own, named in CLIENT LIST (ConsumerClientName)
	// and so never handed back to the pool, where the name would stay.
	cn := node.EphemeralConn()
	var idCmd *goredis.IntCmd
	_, err := cn.Pipelined(ctx, func(p goredis.Pipeliner) error {
		p.ClientSetName(ctx, ConsumerClientName)
		idCmd = p.ClientID(ctx)
		return nil
	})
	if err != nil {
		_ = cn.Close()
		return nil, err
	}
	return &conn{node: node, cn: cn, id: idCmd.Val()}, nil
}

// loop leases messages of the partition k while there is room in the
// read-ahead, renews the leases of its deliveries waiting there, and waits
// on the partition's token when it has nothing to lease, until Close.
func (c *consumer) loop(k *keys) {
	ctx := context.Background()
	var cn *conn
	drop := func() {
		if cn != nil {
			_ = cn.cn.Close()
			cn = nil
		}
	}
	defer drop()
	backoff := consumerBackoffMin
	fail := func(err error) bool {
		drop()
		c.report(opErr("consume", c.queue, err))
		ok := c.sleep(backoff)
		backoff = min(2*backoff, consumerBackoffMax)
		return ok
	}
	for {
		select {
		case <-c.done:
			return
		default:
		}
		c.mu.Lock()
		renew := c.renewAt(k)
		due := !renew.IsZero() && !time.Now().Before(renew)
		n := 0
		held := false // held back from stealing
		if !due {
			n, held = c.roomFor(k)
		}
		room := c.room
		if held {
			room = c.gate
		}
		c.mu.Unlock()
		if n <= 0 && !due {
			if !c.awaitRoom(room, renew) {
				return
			}
			continue
		}
		if cn == nil {
			var err error
			if cn, err = c.dial(ctx, k); err != nil {
				c.unreserve(n)
				if !fail(err) {
					return
				}
				continue
			}
		}
		if due {
			if err := c.renew(ctx, cn, k); err != nil {
				if !fail(err) {
					return
				}
			}
			continue
		}
		ds, next, err := c.b.lease(ctx, cn.cn, k, n)
		c.mu.Lock()
		c.reserved -= n
		c.buf = append(c.buf, ds...)
		// A partition that failed asks again, as one that had none.
		c.active[k.part] = err == nil && len(ds) > 0
		c.noteDry()
		if len(ds) < n {
			c.roomChanged() // what it reserved and did not take is free again
		}
		c.mu.Unlock()
		if err != nil {
			if errors.Is(err, broker.ErrClosed) {
				return
			}
			if !fail(err) {
				return
			}
			continue
		}
		backoff = consumerBackoffMin
		if len(ds) > 0 {
			signal(c.more)
			continue
		}
		wait := c.idleWait()
		if next >= 0 && next+time.Millisecond < wait {
			wait = next + time.Millisecond
		}
		if !renew.IsZero() {
			wait = min(wait, time.Until(renew))
		}
		if !c.block(ctx, cn, k, wait) {
			drop()
		}
	}
}

var _ broker.PartitionPreferrer = (*consumer)(nil)

// Prefer makes the consumer lease from the partitions of own, and from the
// others only once none of own has had messages, and a Next has waited on
// an empty read-ahead, for stealAfter (broker.PartitionPreferrer); each
// such wait lets the others lease once more. An own not nil that names
// none of the partitions leaves the consumer none of its own: it leases
// only so. The loops waiting for room look again at once; a loop waiting
// on its partition's token found it empty, and its lease when the token
// comes follows the new preference.
func (c *consumer) Prefer(own []int) {
	var mask []bool // nil: all alike
	if own != nil {
		mask = make([]bool, len(c.ks))
	}
	for _, p := range own {
		if p >= 0 && p < len(c.ks) {
			mask[p] = true
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if slices.Equal(mask, c.own) {
		return
	}
	c.own = mask
	c.dry = time.Time{}
	c.noteDry()
	c.roomChanged()
	c.openGate()
}

// noteDry keeps c.dry: when none of the partitions the consumer prefers
// became active, zero while one is (and without a preference). c.mu is
// held.
func (c *consumer) noteDry() {
	wet := c.own == nil
	for p, a := range c.active {
		wet = wet || a && c.own[p]
	}
	switch {
	case wet:
		c.dry = time.Time{}
	case c.dry.IsZero():
		c.dry = time.Now()
		c.armSteal()
	}
}

// maySteal says whether the loops of the partitions the consumer does not
// prefer may lease: none of its own has been active, and a Next has
// waited on an empty read-ahead, for stealAfter. c.mu is held.
func (c *consumer) maySteal() bool {
	return !c.dry.IsZero() && !c.hungry.IsZero() && !time.Now().Before(later(c.dry, c.hungry).Add(stealAfter))
}

// armSteal has the gate opened when the loops held back from stealing
// may steal, if they may soon: none of the consumer's own partitions is
// active and a Next waits. One timer does it for all of them, where each
// woke at every change of the read-ahead (a page taken, a lease, a Next
// waiting: several times a page) to find it may not, and waited again on
// a timer of its own. c.mu is held.
func (c *consumer) armSteal() {
	if c.own == nil || c.dry.IsZero() || c.hungry.IsZero() || c.closed {
		return
	}
	at := later(c.dry, c.hungry).Add(stealAfter)
	if !c.stealAt.IsZero() && !at.Before(c.stealAt) {
		return // armed for then or sooner: stealDue arms it again if early
	}
	c.stealAt = at
	if c.stealTimer == nil {
		c.stealTimer = time.AfterFunc(time.Until(at), c.stealDue)
		return
	}
	c.stealTimer.Reset(time.Until(at))
}

// stealDue is stealTimer's: it opens the gate if the loops held back may
// steal now, and arms the timer again if they may later.
func (c *consumer) stealDue() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stealAt = time.Time{}
	if c.closed {
		return
	}
	if c.maySteal() {
		c.openGate()
		return
	}
	c.armSteal()
}

// openGate wakes the loops held back from stealing, to look again. c.mu
// is held.
func (c *consumer) openGate() {
	close(c.gate)
	c.gate = make(chan struct{})
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// owns says whether partition p is one of the consumer's own: all are
// when it prefers none. c.mu is held.
func (c *consumer) owns(p int) bool { return c.own == nil || c.own[p] }

// roomFor is how many deliveries the loop of partition k may lease now,
// and reserves them. The read-ahead is refilled once it is down to half
// (or empty), half a read-ahead at a time: a steady taker costs one lease
// call per half a prefetch, not one per message taken. A partition alone
// with messages takes all the room there is then, as an unsplit queue
// does. Where several have messages, they take turns, half a read-ahead
// each, in partition order from the one after the last that leased: a
// lease call takes as many messages however many partitions share the
// read-ahead (an even share each, 32 among 12 partitions, leased about 3
// at a time: 0.21 lease calls a page, 4.8 commands a page in all for 12
// hosts on 8 partitions), and no partition waits more than a turn of the
// others. With a preference (Prefer) the turns are taken among the
// consumer's own partitions, and a partition not its own leases nothing
// while one of its own is active, nor until none has been for stealAfter
// while a Next waits (it returns held: its loop waits for the gate, not
// for room); then the others take turns likewise (work stealing). c.mu
// is held.
func (c *consumer) roomFor(k *keys) (n int, held bool) {
	mine := 0
	for _, d := range c.buf {
		if d.k == k {
			mine++
		}
	}
	own := c.owns(k.part)
	others := false
	for p, a := range c.active {
		switch {
		case !a || p == k.part:
		case c.owns(p) == own:
			others = true
		case !own:
			return 0, true // one of its own partitions has messages
		}
	}
	if !own && !c.maySteal() {
		return 0, true
	}
	free := c.prefetch - len(c.buf) - c.reserved
	half := (c.prefetch + 1) / 2
	switch {
	case !others:
		n = min(free, c.prefetch-mine)
		if mine > 0 && n < half {
			return 0, false
		}
	case free >= half && c.first(k) == k.part:
		n = half
	}
	if n <= 0 {
		return 0, false
	}
	c.reserved += n
	if len(c.ks) > 1 {
		c.next = (k.part + 1) % len(c.ks)
		c.roomChanged() // the next partition's turn
	}
	return n, false
}

// first is the partition whose turn it is to lease: the first from c.next
// on that has messages and is as much the consumer's own as k is, or is k
// (asking to lease). c.mu is held.
func (c *consumer) first(k *keys) int {
	own := c.owns(k.part)
	for i := range len(c.ks) {
		if p := (c.next + i) % len(c.ks); c.active[p] && c.owns(p) == own || p == k.part {
			return p
		}
	}
	return k.part
}

// unreserve gives back read-ahead reserved by a loop that leased nothing.
func (c *consumer) unreserve(n int) {
	c.mu.Lock()
	c.reserved -= n
	c.roomChanged()
	c.mu.Unlock()
}

// roomChanged wakes the loops waiting for room in the read-ahead, to
// look again. c.mu is held.
func (c *consumer) roomChanged() {
	close(c.room)
	c.room = make(chan struct{})
}

// idleWait is the longest a consumer waits on its queue's token: the
// longer of BlockTimeout and the lease. What it waits for wakes it
// (Publish, Nack, a delayed Nack, Requeue and a lease call that leaves
// messages behind push the token) or ends its wait (the earliest lease or
// delay of the queue it saw); only a lease taken by another consumer
// after it looked, and then lost, is noticed as late as this. An idle
// consumer sends two commands (the lease script and BLPOP) per idleWait.
func (c *consumer) idleWait() time.Duration {
	return max(c.b.cfg.BlockTimeout, c.b.cfg.Lease)
}

// renewAt is when the read-ahead's leases of partition k are next
// renewed: lease/renewAfter after the oldest was leased or renewed; zero
// while it holds none. c.mu is held.
func (c *consumer) renewAt(k *keys) time.Time {
	var at time.Time
	for _, d := range c.buf {
		if d.k != k {
			continue
		}
		d.mu.Lock()
		t := d.deadline.Add(-c.b.cfg.Lease + c.b.cfg.Lease/renewAfter)
		d.mu.Unlock()
		if at.IsZero() || t.Before(at) {
			at = t
		}
	}
	return at
}

// awaitRoom waits until room is closed (c.room: Next took from the
// read-ahead; c.gate: the loop may steal), or renew comes (never if
// zero); false on Close.
func (c *consumer) awaitRoom(room chan struct{}, renew time.Time) bool {
	var due <-chan time.Time
	if !renew.IsZero() {
		t := time.NewTimer(time.Until(renew))
		defer t.Stop()
		due = t.C
	}
	select {
	case <-room:
		c.wakes.Add(1)
	case <-due:
	case <-c.done:
		return false
	}
	return true
}

// renew extends the leases of every delivery of partition k in the
// read-ahead to a whole lease, in one script call on cn; those whose
// leases were lost (renewed too late: another consumer took them back)
// leave the read-ahead.
func (c *consumer) renew(ctx context.Context, cn *conn, k *keys) error {
	c.mu.Lock()
	var ds []*delivery
	for _, d := range c.buf {
		if d.k == k {
			ds = append(ds, d)
		}
	}
	c.mu.Unlock()
	if len(ds) == 0 {
		return nil
	}
	held, err := c.b.extend(ctx, cn.cn, k, ds, c.b.cfg.Lease)
	if err != nil {
		return err
	}
	if lost := len(ds) - held; lost > 0 {
		c.mu.Lock()
		c.buf = slices.DeleteFunc(c.buf, (*delivery).isLost)
		c.roomChanged()
		c.mu.Unlock()
		c.b.log.Warn("read-ahead leases ran out before they were renewed; messages handed on", "queue", c.queue, "count", lost)
	}
	return nil
}

// block waits on the token of partition k for up to wait, on cn; false if
// cn is no longer usable.
func (c *consumer) block(ctx context.Context, cn *conn, k *keys, wait time.Duration) bool {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return true
	}
	node, id := cn.node, cn.id
	c.unblock[k] = func() {
		uctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = node.ClientUnblock(uctx, id).Err()
	}
	c.mu.Unlock()
	var err error
	if wait >= time.Second {
		// BLPop reads its reply with the block's own timeout (plus a
		// margin), whatever the client's ReadTimeout; it counts whole
		// seconds, so the loop may look a little early.
		err = cn.cn.BLPop(ctx, wait.Truncate(time.Second), k.notify).Err()
	} else {
		secs := strconv.FormatFloat(max(wait, time.Millisecond).Seconds(), 'f', 3, 64)
		err = cn.cn.Do(ctx, "blpop", k.notify, secs).Err()
	}
	c.mu.Lock()
	delete(c.unblock, k)
	c.mu.Unlock()
	var ne net.Error
	switch {
	case err == nil || errors.Is(err, goredis.Nil):
		return true
	case errors.As(err, &ne) && ne.Timeout():
		// A wait beyond a ReadTimeout under a second: the reply may
		// still come, so the connection is not reused.
		return false
	}
	c.report(opErr("consume", c.queue, err))
	return false
}
