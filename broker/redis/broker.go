package redis

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/internal/redislayout"
	"github.com/trawlhq/trawl/internal/redisrun"
)

// Interfaces a Broker and its deliveries implement.
var (
	_ broker.Broker           = (*Broker)(nil)
	_ broker.BatchAcker       = (*Broker)(nil)
	_ broker.BatchExtender    = (*Broker)(nil)
	_ broker.Incarnations     = (*Broker)(nil)
	_ broker.Partitioned      = (*Broker)(nil)
	_ broker.PartitionCounter = (*Broker)(nil)
	_ broker.Delivery         = (*delivery)(nil)
)

// publishChunk bounds the messages of one ZADD or LPUSH.
const publishChunk = 1000

// closeTimeout bounds giving back unsettled deliveries in Close, which has
// no context of its own.
const closeTimeout = 10 * time.Second

// Broker is a broker.Broker on Redis. It is safe for concurrent use. Any
// number of Brokers, in any number of processes, may share queues.
type Broker struct {
	cfg    Config
	client goredis.UniversalClient
	log    *slog.Logger
	mode   string
	run    *redisrun.Watch // the server's incarnation
	warned sync.Once       // the first Consume looked at the server's persistence
	turn   atomic.Uint64   // Receive's first partition, in turn

	mu        sync.Mutex
	closed    bool
	out       map[*delivery]struct{} // unsettled deliveries, given back by Close
	waiting   map[string]int         // notify key -> blocking waits on it
	parts     map[string][]*keys     // queue -> its partitions' keys (queueKeys)
	consumers map[*consumer]struct{} // open consumers, closed by Close
	done      chan struct{}          // closed by Close
	waits     sync.WaitGroup         // blocking waits in flight; Close waits for them
}

// New returns a Broker on cfg.Client after checking that the server
// answers.
func New(ctx context.Context, cfg Config) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if err := cfg.Client.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("redis broker: connect: %w", err)
	}
	b := &Broker{
		cfg:       cfg,
		client:    cfg.Client,
		log:       cfg.Logger.With("backend", "redis"),
		mode:      cfg.mode(),
		out:       map[*delivery]struct{}{},
		waiting:   map[string]int{},
		parts:     map[string][]*keys{},
		consumers: map[*consumer]struct{}{},
		done:      make(chan struct{}),
		run:       redisrun.NewWatch(cfg.Client),
	}
	b.log.Info("broker ready", "order", cfg.Order.String(), "lease", cfg.Lease, "max_deliveries", cfg.MaxDeliveries, "partitions", cfg.Partitions)
	return b, nil
}

// Partitions is the number of partitions of every queue (Config.Partitions).
func (b *Broker) Partitions() int { return b.cfg.Partitions }

// byPartition splits n items by the partition of key(i), keeping their
// order in each: the indexes of the items of each partition.
func (b *Broker) byPartition(n int, key func(i int) string) [][]int {
	out := make([][]int, b.cfg.Partitions)
	for i := range n {
		p := broker.PartitionOf(key(i), b.cfg.Partitions)
		out[p] = append(out[p], i)
	}
	return out
}

// Incarnation returns the server's run_id, which changes when it restarts
// (see broker.Incarnations); "" on a Cluster.
func (b *Broker) Incarnation(ctx context.Context) (string, error) {
	return b.run.Incarnation(ctx)
}

func opErr(op, queue string, err error) error {
	return fmt.Errorf("redis broker: %s %q: %w", op, queue, err)
}

// check validates queue and tells whether b is closed.
func (b *Broker) check(op, queue string) error {
	if queue == "" {
		return opErr(op, queue, fmt.Errorf("%w: empty queue name", broker.ErrInvalid))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return opErr(op, queue, broker.ErrClosed)
	}
	return nil
}

// memberHead is the length of a member's id and delivery count.
const memberHead = 12

// parseMember decodes an inflight member: id, attempt, message.
func parseMember(m string) (attempt int, msg broker.Message, err error) {
	if len(m) <= memberHead {
		return 0, broker.Message{}, fmt.Errorf("malformed member of %d bytes", len(m))
	}
	attempt = int(binary.BigEndian.Uint32([]byte(m[8:memberHead]))) + 1
	msg, err = parseRecord(m[memberHead:])
	return attempt, msg, err
}

// parseRecord decodes a record.
func parseRecord(rec string) (broker.Message, error) {
	i := strings.IndexByte(rec[:min(len(rec), 24)], ':')
	if i < 0 {
		return broker.Message{}, fmt.Errorf("malformed record %.20q", rec)
	}
	p, err := strconv.Atoi(rec[:i])
	if err != nil {
		return broker.Message{}, fmt.Errorf("malformed record priority %q", rec[:i])
	}
	return broker.Message{Body: []byte(rec[i+1:]), Priority: p}, nil
}

// Publish adds msgs to queue, in order. Messages are stored when it
// returns; a Publish of more than 1000 messages is stored in parts, each
// atomically.
func (b *Broker) Publish(ctx context.Context, queue string, msgs ...broker.Message) error {
	if err := b.check("publish", queue); err != nil {
		return err
	}
	ks := b.queueKeys(queue)
	if len(ks) == 1 {
		return b.publish(ctx, ks[0], msgs)
	}
	for p, idx := range b.byPartition(len(msgs), func(i int) string { return msgs[i].Key }) {
		if len(idx) == 0 {
			continue
		}
		part := make([]broker.Message, len(idx))
		for j, i := range idx {
			part[j] = msgs[i]
		}
		if err := b.publish(ctx, ks[p], part); err != nil {
			return err
		}
	}
	return nil
}

// publish adds msgs to the partition of a queue whose keys are k.
func (b *Broker) publish(ctx context.Context, k *keys, msgs []broker.Message) error {
	queue := k.queue
	for len(msgs) > 0 {
		part := msgs[:min(len(msgs), publishChunk)]
		msgs = msgs[len(part):]
		// Ids come from the server's counter, so that equal priorities
		// keep the order of publishing across publishers.
		last, err := b.client.IncrBy(ctx, k.seq, int64(len(part))).Result()
		if err != nil {
			return opErr("publish", queue, err)
		}
		first := uint64(last) - uint64(len(part)) + 1
		_, err = b.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			if b.mode == "p" {
				zs := make([]goredis.Z, len(part))
				for i, m := range part {
					zs[i] = goredis.Z{Score: -float64(m.Priority), Member: newMember(first+uint64(i), m)}
				}
				p.ZAdd(ctx, k.ready, zs...)
			} else {
				vs := make([]any, len(part))
				for i, m := range part {
					vs[i] = newMember(first+uint64(i), m)
				}
				p.LPush(ctx, k.ready, vs...)
			}
			p.LPush(ctx, k.notify, "1")
			p.LTrim(ctx, k.notify, 0, 0)
			return nil
		})
		if err != nil {
			return opErr("publish", queue, err)
		}
	}
	return nil
}

// newMember encodes a message never delivered, with id: see scripts.go.
func newMember(id uint64, m broker.Message) string {
	b := make([]byte, memberHead, memberHead+len(m.Body)+8)
	binary.BigEndian.PutUint64(b, id)
	b = strconv.AppendInt(b, int64(m.Priority), 10)
	b = append(b, ':')
	b = append(b, m.Body...)
	return string(b)
}

// Receive leases up to max messages of queue, waiting until there is at
// least one. Before taking messages it gives back leases that ran out
// (or dead-letters them after MaxDeliveries) and makes nacked messages
// whose delay is over ready again, so expired work returns without any
// background process.
func (b *Broker) Receive(ctx context.Context, queue string, max int) ([]broker.Delivery, error) {
	if err := b.check("receive", queue); err != nil {
		return nil, err
	}
	if max < 1 {
		return nil, opErr("receive", queue, fmt.Errorf("%w: max %d < 1", broker.ErrInvalid, max))
	}
	ks := b.queueKeys(queue)
	for {
		if err := ctx.Err(); err != nil {
			return nil, opErr("receive", queue, err)
		}
		ds, next, err := b.leaseAll(ctx, ks, max)
		if err != nil {
			return nil, err
		}
		if len(ds) > 0 {
			out := make([]broker.Delivery, len(ds))
			for i, d := range ds {
				out[i] = d
			}
			return out, nil
		}
		wait := b.cfg.BlockTimeout
		if next >= 0 && next+time.Millisecond < wait {
			wait = next + time.Millisecond
		}
		// The blocking command outlives no deadline of the caller's.
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(dl)+time.Millisecond)
		}
		if err := b.wait(ctx, ks, wait); err != nil {
			return nil, opErr("receive", queue, err)
		}
	}
}

// leaseAll runs the receive script on every partition ks, in turn from
// the one after the partition the previous leaseAll began with, each given
// an even share of what is left of max (a partition that has less leaves
// the rest to the next ones): no partition waits for another's backlog.
// next is the earliest of the partitions' (-1: none).
func (b *Broker) leaseAll(ctx context.Context, ks []*keys, max int) ([]*delivery, time.Duration, error) {
	if len(ks) == 1 {
		return b.lease(ctx, b.client, ks[0], max)
	}
	start := int(b.turn.Add(1) % uint64(len(ks)))
	var got []*delivery
	next := time.Duration(-1)
	for i := range ks {
		left := max - len(got)
		if left <= 0 {
			break
		}
		share := (left + len(ks) - i - 1) / (len(ks) - i)
		ds, n, err := b.lease(ctx, b.client, ks[(start+i)%len(ks)], share)
		got = append(got, ds...)
		if err != nil {
			if len(got) > 0 {
				break // delivered; the failing partition is tried again next time
			}
			return nil, 0, err
		}
		if n >= 0 && (next < 0 || n < next) {
			next = n
		}
	}
	return got, next, nil
}

// lease runs the receive script once. next is how long until the earliest
// lease or delay of the queue ends (-1: none).
func (b *Broker) lease(ctx context.Context, on goredis.Scripter, k *keys, n int) ([]*delivery, time.Duration, error) {
	// The lease ends no sooner than this (the script runs after it).
	deadline := time.Now().Add(b.cfg.Lease)
	// Not ctx: once the script has run, its deliveries must reach the
	// caller (or be given back), even if ctx ended meanwhile.
	res, err := receiveScript.Run(context.WithoutCancel(ctx), on,
		[]string{k.ready, k.inflight, k.delayed, k.dead, k.notify},
		b.mode, n, b.cfg.Lease.Milliseconds(), b.cfg.MaxDeliveries).Slice()
	if err != nil {
		return nil, 0, opErr("receive", k.queue, err)
	}
	if len(res) < 3 {
		return nil, 0, opErr("receive", k.queue, fmt.Errorf("unexpected script reply of %d values", len(res)))
	}
	expired, _ := res[0].(int64)
	malformed, _ := res[1].(int64)
	nextMS, _ := res[2].(int64)
	if expired > 0 {
		b.log.Warn("leases expired; messages given back or dead-lettered", "queue", k.queue, "count", expired)
	}
	if malformed > 0 {
		b.log.Error("malformed queue entries moved to the dead letters", "queue", k.queue, "count", malformed)
	}
	next := time.Duration(-1)
	if nextMS >= 0 {
		next = time.Duration(nextMS) * time.Millisecond
	}
	ds := make([]*delivery, 0, len(res)-3)
	var bad []error
	for _, r := range res[3:] {
		member, _ := r.(string)
		attempt, m, err := parseMember(member)
		if err != nil {
			// Not written by Publish; deliver the raw bytes, so that the
			// consumer rejects it.
			bad = append(bad, err)
			m = broker.Message{Body: []byte(member[min(len(member), memberHead):])}
		}
		ds = append(ds, &delivery{b: b, k: k, msg: m, member: member, attempt: max(attempt, 1), deadline: deadline})
	}
	if len(bad) > 0 {
		b.log.Error("undecodable message records delivered as raw bodies", "queue", k.queue, "err", errors.Join(bad...))
	}
	if len(ds) == 0 {
		return nil, next, nil
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		if err := b.giveBack(gctx, ds, false); err != nil {
			b.log.Error("give back deliveries taken while closing", "queue", k.queue, "err", err)
		}
		return nil, next, opErr("receive", k.queue, broker.ErrClosed)
	}
	for _, d := range ds {
		b.out[d] = struct{}{}
	}
	b.mu.Unlock()
	return ds, next, nil
}

// wait blocks until a token arrives on the notify list of one of the
// partitions ks, d passes, ctx ends or b closes. The blocking commands
// (one BLPOP of every list on a single server; one per partition on a
// Cluster, whose slots they are in) run in goroutines owned by b, which
// end within d; a token one takes after wait returned only costs some
// other waiter a wake-up (which then comes after its own timeout).
func (b *Broker) wait(ctx context.Context, ks []*keys, d time.Duration) error {
	var groups [][]string
	if _, cluster := b.client.(*goredis.ClusterClient); cluster {
		for _, k := range ks {
			groups = append(groups, []string{k.notify})
		}
	} else {
		all := make([]string, len(ks))
		for i, k := range ks {
			all[i] = k.notify
		}
		groups = [][]string{all}
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return broker.ErrClosed
	}
	for _, k := range ks {
		b.waiting[k.notify]++
	}
	b.waits.Add(len(groups))
	b.mu.Unlock()

	secs := strconv.FormatFloat(max(d, time.Millisecond).Seconds(), 'f', 3, 64)
	done := make(chan error, len(groups))
	for _, g := range groups {
		go func() {
			defer b.waits.Done()
			args := make([]any, 0, len(g)+2)
			args = append(args, "blpop")
			for _, key := range g {
				args = append(args, key)
			}
			err := b.client.Do(context.WithoutCancel(ctx), append(args, secs)...).Err()
			b.mu.Lock()
			for _, key := range g {
				if b.waiting[key]--; b.waiting[key] == 0 {
					delete(b.waiting, key)
				}
			}
			b.mu.Unlock()
			done <- err
		}()
	}
	select {
	case err := <-done:
		var ne net.Error
		if err == nil || errors.Is(err, goredis.Nil) || (errors.As(err, &ne) && ne.Timeout()) {
			return nil
		}
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-b.done:
		return broker.ErrClosed
	}
}

// Close gives back the deliveries not yet settled at once (they count as
// delivered: the next delivery has the next Attempt), ends waiting
// Receives with broker.ErrClosed, and waits for its blocking commands to
// end. It does not close the client.
func (b *Broker) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	cs := make([]*consumer, 0, len(b.consumers))
	for c := range b.consumers {
		cs = append(cs, c)
	}
	b.mu.Unlock()
	// Consumers first: their read-ahead goes back as never delivered.
	for _, c := range cs {
		_ = c.Close()
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	close(b.done)
	ds := make([]*delivery, 0, len(b.out))
	for d := range b.out {
		ds = append(ds, d)
	}
	b.out = nil
	var notify []string
	for key := range b.waiting {
		notify = append(notify, key)
	}
	b.mu.Unlock()

	// Shutdown order: give back what this broker holds, wake its blocked
	// commands (a token taken by another broker's waiter only wakes it
	// once), then wait for them.
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	err := b.giveBack(ctx, ds, true)
	for _, key := range notify {
		_ = b.client.LPush(ctx, key, "1").Err()
		_ = b.client.LTrim(ctx, key, 0, 0).Err()
	}
	b.waits.Wait()
	b.log.Info("broker closed", "given_back", len(ds))
	if err != nil {
		return fmt.Errorf("redis broker: close: %w", err)
	}
	return nil
}

// giveBack requeues ds at once, without dead-lettering any. delivered
// says whether they count as delivered (the next delivery has the next
// Attempt); read-ahead a consumer never returned does not.
func (b *Broker) giveBack(ctx context.Context, ds []*delivery, delivered bool) error {
	byQueue := map[*keys][]*delivery{}
	for _, d := range ds {
		byQueue[d.k] = append(byQueue[d.k], d)
	}
	var errs []error
	for _, group := range byQueue {
		k := group[0].k
		maxdel := 0 // never bury
		if !delivered {
			maxdel = -1 // and keep the count
		}
		args := []any{b.mode, maxdel, 0}
		for _, d := range group {
			args = append(args, d.member)
		}
		if err := nackScript.Run(ctx, b.client,
			[]string{k.ready, k.inflight, k.delayed, k.dead, k.notify}, args...).Err(); err != nil {
			errs = append(errs, opErr("give back", k.queue, err))
		}
	}
	return errors.Join(errs...)
}

// untrack removes d from the deliveries Close gives back; false if b is
// closed (Close has given d back).
func (b *Broker) untrack(d *delivery) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	delete(b.out, d)
	return true
}

// track adds d back after a settle failed in transit.
func (b *Broker) track(d *delivery) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.out[d] = struct{}{}
	}
}

// AckBatch acknowledges deliveries received from b in one round trip (a
// pipeline: on a Cluster, one per primary, in parallel), one ZREM per
// queue partition. It implements broker.BatchAcker, through which the
// engine settles its pages. Each delivery is settled as by its Ack; the
// errors of those that could not be (broker.ErrSettled,
// broker.ErrLeaseLost, broker.ErrClosed, broker.ErrInvalid for a delivery
// of another broker) are joined.
func (b *Broker) AckBatch(ctx context.Context, ds ...broker.Delivery) error {
	var errs []error
	byQueue := map[*keys][]*delivery{}
	var order []*keys
	for _, bd := range ds {
		d, ok := bd.(*delivery)
		if !ok || d.b != b {
			errs = append(errs, fmt.Errorf("redis broker: ack: %w: delivery of another broker", broker.ErrInvalid))
			continue
		}
		if err := d.begin("ack"); err != nil {
			errs = append(errs, err)
			continue
		}
		if _, ok := byQueue[d.k]; !ok {
			order = append(order, d.k)
		}
		byQueue[d.k] = append(byQueue[d.k], d)
	}
	var acks []*ack
	for _, k := range order {
		for group := range slices.Chunk(byQueue[k], ackChunk) {
			acks = append(acks, b.newAck(group))
		}
	}
	if len(acks) == 0 {
		return errors.Join(errs...)
	}
	_, err := b.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for _, a := range acks {
			a.queue(ctx, p)
		}
		return nil
	})
	for _, a := range acks {
		errs = append(errs, a.settle(err)...)
	}
	return errors.Join(errs...)
}

// ackChunk bounds the deliveries of one ZREM.
const ackChunk = 1000

// ack is the acknowledgement of deliveries of one queue partition, begun
// with begin: one ZREM of all while every lease surely still runs
// (nothing but a Purge can have taken a member away), whose count checks
// that; else one ZREM per delivery, to tell which leases were lost.
type ack struct {
	group []*delivery
	one   bool              // one ZREM for all
	all   *goredis.IntCmd   // the one ZREM
	each  []*goredis.IntCmd // else a ZREM per delivery
}

func (b *Broker) newAck(group []*delivery) *ack {
	margin := max(b.cfg.Lease/10, 250*time.Millisecond)
	safe := len(group) > 1
	for _, d := range group {
		d.mu.Lock()
		safe = safe && time.Until(d.deadline) > margin
		d.mu.Unlock()
	}
	return &ack{group: group, one: safe}
}

// queue adds the acknowledgement's commands to p.
func (a *ack) queue(ctx context.Context, p goredis.Pipeliner) {
	k := a.group[0].k
	if a.one {
		members := make([]any, len(a.group))
		for i, d := range a.group {
			members[i] = d.member
		}
		a.all = p.ZRem(ctx, k.inflight, members...)
		return
	}
	a.each = make([]*goredis.IntCmd, len(a.group))
	for i, d := range a.group {
		a.each[i] = p.ZRem(ctx, k.inflight, d.member)
	}
}

// settle ends the deliveries' settles with the pipeline's outcome (err:
// its first error) and returns the errors of those not acknowledged.
func (a *ack) settle(err error) []error {
	k := a.group[0].k
	if a.one {
		n, cerr := a.all.Result()
		for _, d := range a.group {
			d.end(true, cerr)
		}
		switch {
		case cerr != nil:
			return []error{opErr("ack", k.queue, cerr)}
		case int(n) != len(a.group):
			return []error{opErr("ack", k.queue, fmt.Errorf("%d of %d leases were gone (queue purged?): %w",
				len(a.group)-int(n), len(a.group), broker.ErrLeaseLost))}
		}
		return nil
	}
	var errs []error
	failed := false
	for i, d := range a.group {
		n, cerr := a.each[i].Result()
		if cerr != nil {
			d.end(false, cerr)
			failed = true
			continue
		}
		d.end(n == 1, nil)
		if n != 1 {
			errs = append(errs, d.err("ack", broker.ErrLeaseLost))
		}
	}
	if failed && err != nil {
		errs = append(errs, opErr("ack", k.queue, err))
	}
	return errs
}

// Counts counts queue: ready includes the delayed messages (the :delayed
// key, also counted as Delayed); leases that ran out but were not yet
// given back count as in flight.
func (b *Broker) Counts(ctx context.Context, queue string) (broker.Counts, error) {
	parts, err := b.PartitionCounts(ctx, queue)
	return broker.SumCounts(parts), err
}

// PartitionCounts counts each partition of queue as Counts does, in
// partition order (one with a single partition).
func (b *Broker) PartitionCounts(ctx context.Context, queue string) ([]broker.Counts, error) {
	if err := b.check("count", queue); err != nil {
		return nil, err
	}
	ks := b.queueKeys(queue)
	out := make([]broker.Counts, len(ks))
	for i, k := range ks {
		res, err := countScript.Run(ctx, b.client, []string{k.ready, k.inflight, k.delayed, k.dead}, b.mode).Int64Slice()
		if err == nil && len(res) != 4 {
			err = fmt.Errorf("unexpected script reply of %d values", len(res))
		}
		if err != nil {
			return nil, opErr("count", queue, err)
		}
		out[i] = broker.Counts{Ready: res[0], InFlight: res[1], Dead: res[2], Delayed: res[3]}
	}
	return out, nil
}

// Purge deletes queue's messages: ready, delayed, in flight and dead.
// Deliveries of it still out fail to settle with broker.ErrLeaseLost.
func (b *Broker) Purge(ctx context.Context, queue string) error {
	if err := b.check("purge", queue); err != nil {
		return err
	}
	for _, k := range b.queueKeys(queue) {
		// seq stays, so that ids are never reused.
		if err := b.client.Del(ctx, k.ready, k.inflight, k.delayed, k.dead, k.notify).Err(); err != nil {
			return opErr("purge", queue, err)
		}
	}
	return nil
}

// DropPartitions deletes the keys of queue's n partitions that its m
// partitions do not use (a partition's tag depends on the count: see
// redislayout.Retired), with whatever they hold, their id counters and
// wake-up tokens too: what trawl repartition leaves of a queue it moved
// from n partitions to m. m = 0 deletes every key of a queue of n
// partitions (Purge keeps its id counters). The argument order is the
// NATS and RabbitMQ brokers': they delete partitions m to n-1.
func (b *Broker) DropPartitions(ctx context.Context, queue string, m, n int) error {
	if err := b.check("drop partitions of", queue); err != nil {
		return err
	}
	for _, p := range redislayout.Retired(queue, n, m) {
		k := partitionKeys(queue, p, n)
		// One DEL per partition: its keys share a slot of their own.
		if err := b.client.Del(ctx, k.ready, k.inflight, k.delayed, k.dead, k.notify, k.seq).Err(); err != nil {
			return opErr("drop partitions of", queue, err)
		}
	}
	return nil
}

// DeadLetters returns up to max of queue's dead letters, oldest first (of
// a queue with partitions: those of the first partition, then of the next
// ones).
func (b *Broker) DeadLetters(ctx context.Context, queue string, max int) ([]broker.DeadLetter, error) {
	if err := b.check("read dead letters of", queue); err != nil {
		return nil, err
	}
	if max < 1 {
		return nil, opErr("read dead letters of", queue, fmt.Errorf("%w: max %d < 1", broker.ErrInvalid, max))
	}
	var out []broker.DeadLetter
	for _, k := range b.queueKeys(queue) {
		if len(out) >= max {
			break
		}
		es, err := b.client.LRange(ctx, k.dead, 0, int64(max-len(out))-1).Result()
		if err != nil {
			return nil, opErr("read dead letters of", queue, err)
		}
		for _, e := range es {
			out = append(out, parseDeadLetter(e))
		}
	}
	return out, nil
}

// parseDeadLetter decodes len(reason) ":" reason record; what does not
// parse is returned whole as the body.
func parseDeadLetter(e string) broker.DeadLetter {
	raw := broker.DeadLetter{Message: broker.Message{Body: []byte(e)}, Reason: "unparseable dead letter"}
	i := strings.IndexByte(e[:min(len(e), 12)], ':')
	if i < 0 {
		return raw
	}
	n, err := strconv.Atoi(e[:i])
	if err != nil || n < 0 || i+1+n > len(e) {
		return raw
	}
	m, err := parseRecord(e[i+1+n:])
	if err != nil {
		return raw
	}
	return broker.DeadLetter{Message: m, Reason: e[i+1 : i+1+n]}
}

// Requeue moves up to max of queue's oldest dead letters back to it, as
// new messages (each to the partition it died in).
func (b *Broker) Requeue(ctx context.Context, queue string, max int) (int, error) {
	if err := b.check("requeue dead letters of", queue); err != nil {
		return 0, err
	}
	if max < 1 {
		return 0, opErr("requeue dead letters of", queue, fmt.Errorf("%w: max %d < 1", broker.ErrInvalid, max))
	}
	total := 0
	for _, k := range b.queueKeys(queue) {
		if total >= max {
			break
		}
		n, err := requeueScript.Run(ctx, b.client, []string{k.dead, k.ready, k.seq, k.notify}, b.mode, max-total).Int()
		total += n
		if err != nil {
			return total, opErr("requeue dead letters of", queue, err)
		}
	}
	return total, nil
}

// delivery is a broker.Delivery of a Broker.
type delivery struct {
	b       *Broker
	k       *keys
	msg     broker.Message
	member  string // the inflight member: the lease token
	attempt int

	mu       sync.Mutex
	deadline time.Time // the lease runs at least until then
	busy     bool      // a settle is in progress
	settled  bool
	lost     bool // the lease expired and the message went back
}

func (d *delivery) Message() broker.Message { return d.msg }
func (d *delivery) Queue() string           { return d.k.queue }
func (d *delivery) Attempt() int            { return d.attempt }

func (d *delivery) err(op string, err error) error {
	return fmt.Errorf("redis broker: %s %q (attempt %d): %w", op, d.k.queue, d.attempt, err)
}

// begin starts settling d, or says why it cannot be.
func (d *delivery) begin(op string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.settled || d.busy:
		return d.err(op, broker.ErrSettled)
	case d.lost:
		return d.err(op, broker.ErrLeaseLost)
	case !d.b.untrack(d):
		return d.err(op, broker.ErrClosed)
	}
	d.busy = true
	return nil
}

// end finishes a settle begun by begin: held tells whether the lease was
// still d's; a non-nil err leaves the outcome unknown and d unsettled.
func (d *delivery) end(held bool, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.busy = false
	switch {
	case err != nil:
		d.b.track(d)
	case held:
		d.settled = true
	default:
		d.lost = true
	}
}

// settle runs one settling script whose reply is 0 when the lease was lost.
func (d *delivery) settle(ctx context.Context, op string, run func(context.Context) (int64, error)) (int64, error) {
	if err := d.begin(op); err != nil {
		return 0, err
	}
	r, err := run(ctx)
	d.end(r != 0, err)
	switch {
	case err != nil:
		return 0, d.err(op, err)
	case r == 0:
		return 0, d.err(op, broker.ErrLeaseLost)
	}
	return r, nil
}

// Ack removes the message for good.
func (d *delivery) Ack(ctx context.Context) error {
	_, err := d.settle(ctx, "ack", func(ctx context.Context) (int64, error) {
		return d.b.client.ZRem(ctx, d.k.inflight, d.member).Result()
	})
	return err
}

// Nack gives the message back, visible again after delay, or moves it to
// the dead letters if it was delivered MaxDeliveries times.
func (d *delivery) Nack(ctx context.Context, delay time.Duration) error {
	ms := int64(0)
	if delay > 0 {
		ms = max(1, delay.Milliseconds())
	}
	r, err := d.settle(ctx, "nack", func(ctx context.Context) (int64, error) {
		k := d.k
		res, err := nackScript.Run(ctx, d.b.client,
			[]string{k.ready, k.inflight, k.delayed, k.dead, k.notify},
			d.b.mode, d.b.cfg.MaxDeliveries, ms, d.member).Int64Slice()
		if err == nil && len(res) != 1 {
			err = fmt.Errorf("unexpected script reply of %d values", len(res))
		}
		if err != nil {
			return 0, err
		}
		return res[0], nil
	})
	if r == 3 {
		d.b.log.Warn("message dead-lettered after its last delivery", "queue", d.k.queue, "attempt", d.attempt)
	}
	return err
}

// Release gives the message back at once with its delivery count as it
// was. The script's first write is the ZREM of the lease, which a server
// out of memory (maxmemory, noeviction) allows: the rest of the script
// runs then, for it must not stop half-way.
func (d *delivery) Release(ctx context.Context) error {
	_, err := d.settle(ctx, "release", func(ctx context.Context) (int64, error) {
		k := d.k
		res, err := nackScript.Run(ctx, d.b.client,
			[]string{k.ready, k.inflight, k.delayed, k.dead, k.notify},
			d.b.mode, -1, 0, d.member).Int64Slice()
		if err == nil && len(res) != 1 {
			err = fmt.Errorf("unexpected script reply of %d values", len(res))
		}
		if err != nil {
			return 0, err
		}
		return res[0], nil
	})
	return err
}

// Reject moves the message to the dead letters with reason.
func (d *delivery) Reject(ctx context.Context, reason string) error {
	_, err := d.settle(ctx, "reject", func(ctx context.Context) (int64, error) {
		return rejectScript.Run(ctx, d.b.client, []string{d.k.inflight, d.k.dead}, d.member, reason).Int64()
	})
	return err
}

// Extend moves the lease's end to dur from now (server time).
func (d *delivery) Extend(ctx context.Context, dur time.Duration) error {
	if err := d.extendable(dur); err != nil {
		return err
	}
	if d.b.isClosed() {
		return d.err("extend", broker.ErrClosed)
	}
	held, err := d.b.extend(ctx, d.b.client, d.k, []*delivery{d}, dur)
	if err != nil {
		return d.err("extend", err)
	}
	if held == 0 {
		return d.err("extend", broker.ErrLeaseLost)
	}
	return nil
}

// extendable says why d's lease cannot be extended by dur, if it cannot.
func (d *delivery) extendable(dur time.Duration) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.settled || d.busy:
		return d.err("extend", broker.ErrSettled)
	case d.lost:
		return d.err("extend", broker.ErrLeaseLost)
	case dur < time.Millisecond:
		return d.err("extend", fmt.Errorf("%w: duration %v < 1ms", broker.ErrInvalid, dur))
	}
	return nil
}

func (b *Broker) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// ExtendBatch extends the leases of ds, deliveries received from b, to dur
// from now, as Extend does each, in one script call per queue partition
// (of up to extendChunk leases; several calls go in one pipeline). It
// implements broker.BatchExtender, through which the engine keeps the
// leases of what a worker holds: thousands of deliveries every third of a
// lease, which one by one cost a script call each.
func (b *Broker) ExtendBatch(ctx context.Context, dur time.Duration, ds ...broker.Delivery) []error {
	errs := make([]error, len(ds))
	type group struct {
		k   *keys
		ds  []*delivery
		idx []int // their indexes in ds
	}
	var groups []*group
	open := map[*keys]*group{} // the group of each partition being filled
	closed := b.isClosed()
	for i, bd := range ds {
		d, ok := bd.(*delivery)
		switch {
		case !ok || d.b != b:
			errs[i] = fmt.Errorf("redis broker: extend: %w: delivery of another broker", broker.ErrInvalid)
			continue
		case closed:
			errs[i] = d.err("extend", broker.ErrClosed)
			continue
		}
		if err := d.extendable(dur); err != nil {
			errs[i] = err
			continue
		}
		g := open[d.k]
		if g == nil || len(g.ds) == extendChunk {
			g = &group{k: d.k}
			open[d.k] = g
			groups = append(groups, g)
		}
		g.ds = append(g.ds, d)
		g.idx = append(g.idx, i)
	}
	if len(groups) == 0 {
		return errs
	}
	// The leases end no sooner than this (the scripts run after it).
	deadline := time.Now().Add(dur)
	cmds := make([]*goredis.Cmd, len(groups))
	if len(groups) == 1 {
		g := groups[0]
		cmds[0] = extendScript.Run(ctx, b.client, []string{g.k.inflight}, extendArgs(g.ds, dur)...)
	} else {
		_, _ = b.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for i, g := range groups {
				cmds[i] = extendScript.EvalSha(ctx, p, []string{g.k.inflight}, extendArgs(g.ds, dur)...)
			}
			return nil
		})
	}
	for i, g := range groups {
		res, err := cmds[i].Int64Slice()
		if goredis.HasErrorPrefix(err, "NOSCRIPT") {
			// Not loaded on that server yet: Run loads it.
			res, err = extendScript.Run(ctx, b.client, []string{g.k.inflight}, extendArgs(g.ds, dur)...).Int64Slice()
		}
		for j, e := range extendOutcomes(g.ds, deadline, res, err) {
			errs[g.idx[j]] = e
		}
	}
	return errs
}

// extendChunk bounds the leases of one extension script call.
const extendChunk = 1000

// extend moves the leases of ds (all of queue k) to dur from now, in one
// script call on on, and says how many were still held (or settled
// meanwhile); the others are marked lost.
func (b *Broker) extend(ctx context.Context, on goredis.Scripter, k *keys, ds []*delivery, dur time.Duration) (int, error) {
	// The leases end no sooner than this (the script runs after it).
	deadline := time.Now().Add(dur)
	res, err := extendScript.Run(ctx, on, []string{k.inflight}, extendArgs(ds, dur)...).Int64Slice()
	if err == nil && len(res) != len(ds) {
		err = fmt.Errorf("unexpected script reply of %d values for %d leases", len(res), len(ds))
	}
	if err != nil {
		return 0, err
	}
	held := 0
	for i, d := range ds {
		if !errors.Is(d.extended(deadline, res[i] == 1), broker.ErrLeaseLost) {
			held++
		}
	}
	return held, nil
}

// extendArgs are extendScript's arguments for the leases of ds.
func extendArgs(ds []*delivery, dur time.Duration) []any {
	args := make([]any, 0, 1+len(ds))
	args = append(args, dur.Milliseconds())
	for _, d := range ds {
		args = append(args, d.member)
	}
	return args
}

// extendOutcomes records extendScript's reply res (or its error err) for
// the leases of ds, extended to deadline, and returns each one's error:
// nil where extended, ErrSettled where settled since the script was sent
// (its member is gone because it was settled), ErrLeaseLost where lost.
func extendOutcomes(ds []*delivery, deadline time.Time, res []int64, err error) []error {
	if err == nil && len(res) != len(ds) {
		err = fmt.Errorf("unexpected script reply of %d values for %d leases", len(res), len(ds))
	}
	out := make([]error, len(ds))
	for i, d := range ds {
		if err != nil {
			out[i] = d.err("extend", err)
		} else {
			out[i] = d.extended(deadline, res[i] == 1)
		}
	}
	return out
}

// extended records the outcome of an extension of d's lease to deadline
// (held: the script found the lease) and returns d's error: nil if held,
// ErrSettled if d was settled since the extension was sent (its member is
// gone because it was settled), ErrLeaseLost if lost.
func (d *delivery) extended(deadline time.Time, held bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case held:
		if deadline.After(d.deadline) {
			d.deadline = deadline
		}
		return nil
	case d.settled || d.busy:
		return d.err("extend", broker.ErrSettled)
	}
	if !d.lost {
		d.lost = true
		d.b.untrack(d)
	}
	return d.err("extend", broker.ErrLeaseLost)
}

// isLost tells whether d's lease is known to be lost.
func (d *delivery) isLost() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lost
}
