package rabbitmq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trawlhq/trawl/broker"
)

// Presence: how workers see each other's deliveries without the
// management API. AMQP tells a queue's ready messages (a passive declare)
// but not the unacknowledged ones, so every Broker reports its own: every
// reportEvery it publishes, to the fanout exchange presenceExchange, how
// many deliveries of each queue it has taken so far and how many it holds.
// Every Broker listens on an exclusive, server-named queue bound to that
// exchange; the queue's name is the Broker's id in its reports, and the
// queue lives exactly as long as the Broker's connection. See Counts for
// the rule built on it.
const (
	presenceExchange = "trawl.presence"
	// reportEvery is how often a Broker reports. An engine's idle
	// timeout must be longer (MinIdleTimeout).
	reportEvery = 500 * time.Millisecond
	// quietFor is how long a change in another worker's report counts as
	// a delivery in flight: longer than a report interval plus the time a
	// report takes to arrive, so that a page taken and finished between
	// two reports is seen (see Counts).
	quietFor = 2 * time.Second
	// staleAfter is how long a worker may go without reporting before
	// Counts asks the server whether its connection is still open.
	staleAfter = 4 * reportEvery
	// warmUp is how long a new subscription listens before Counts trusts
	// it. Its first report asks the others to report at once, so they
	// are heard within a round trip rather than a report interval; a
	// worker heard late is covered like a delivery taken between two
	// reports (see Counts).
	warmUp = 150 * time.Millisecond
	// announceEvery bounds how often a delay queue is announced. A delay
	// queue expires only a minute (delayExpiry) after its last use, so a
	// worker that announced it less than this long ago knows that every
	// listener still knows it.
	announceEvery = 30 * time.Second
	// silentWarnEvery bounds the warnings about silent workers.
	silentWarnEvery = 10 * time.Second
)

// MinIdleTimeout is the shortest idle timeout with which an engine may
// conclude from Counts over AMQP that a crawl is done: a report interval
// and a margin for the report's way and the engine's polling, and the
// age a count may have (countEvery; see Broker.Counts).
const MinIdleTimeout = 2*reportEvery + countEvery

// report is what a Broker publishes about itself.
type report struct {
	ID     string            `json:"id"`            // its presence queue
	Seq    uint64            `json:"seq"`           // 1, 2, … per subscription
	Ask    bool              `json:"ask,omitempty"` // report now, all of you: I just subscribed
	Bye    bool              `json:"bye,omitempty"` // I am closing: my deliveries come back
	Queues map[string]qstate `json:"queues,omitempty"`
	// Delays lists the delay queues it used within their expiry.
	Delays []string `json:"delays,omitempty"`
}

// qstate is one worker's deliveries of one queue.
type qstate struct {
	Taken    uint64 `json:"t"` // deliveries taken since it started
	InFlight int64  `json:"f"` // deliveries it holds
}

// peer is another worker as this Broker last heard of it.
type peer struct {
	last    report
	seen    time.Time            // when last arrived
	changed map[string]time.Time // per queue: when its state last changed
	checked time.Time            // when its connection was last found open
}

// presence is a Broker's view of the workers sharing its server.
type presence struct {
	mu       sync.Mutex
	sub      *session  // the session the subscription below belongs to
	id       string    // this Broker's presence queue on sub
	since    time.Time // when the subscription began
	seq      uint64
	peers    map[string]*peer
	vanished map[string]time.Time            // queue -> when a worker that took from it vanished
	delays   map[string]map[string]time.Time // queue -> its delay queues known -> last own use (zero: learnt)
	scans    map[string]chan struct{}        // queue -> closed when its delay queues were looked for on sub
	asked    chan struct{}                   // another worker asks for a report
	warned   time.Time                       // last warning about a silent worker
}

func newPresence() *presence {
	return &presence{
		peers:    map[string]*peer{},
		vanished: map[string]time.Time{},
		delays:   map[string]map[string]time.Time{},
		scans:    map[string]chan struct{}{},
		asked:    make(chan struct{}, 1),
	}
}

// subscribe opens s's presence subscription and reports once, so that
// every listener knows this Broker before it takes anything on s.
func (b *Broker) subscribe(ctx context.Context, s *session) error {
	ch, err := s.conn.Channel()
	if err != nil {
		return fmt.Errorf("presence: open channel: %w", err)
	}
	if err := ch.ExchangeDeclare(presenceExchange, amqp.ExchangeFanout, false, false, false, false, nil); err != nil {
		return fmt.Errorf("presence: declare exchange %q: %w", presenceExchange, err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, amqp.Table{
		"x-message-ttl": int32(10 * reportEvery / time.Millisecond),
		"x-max-length":  int32(10000),
	})
	if err != nil {
		return fmt.Errorf("presence: declare queue: %w", err)
	}
	if err := ch.QueueBind(q.Name, "", presenceExchange, false, nil); err != nil {
		return fmt.Errorf("presence: bind: %w", err)
	}
	msgs, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		return fmt.Errorf("presence: consume: %w", err)
	}
	p := b.pres
	p.mu.Lock()
	p.sub, p.id, p.since, p.seq = s, q.Name, time.Now(), 0
	clear(p.scans)
	// Reports were missed while there was no subscription: whatever
	// the others did meanwhile counts as a change.
	for _, pr := range p.peers {
		for name := range pr.changed {
			pr.changed[name] = p.since
		}
	}
	p.mu.Unlock()
	b.wg.Add(1)
	go b.listen(q.Name, msgs)
	if err := b.report(ctx, s, true, false); err != nil {
		return fmt.Errorf("presence: first report: %w", err)
	}
	return nil
}

// listen takes in the reports of the others until the subscription's
// channel closes (its connection closed).
func (b *Broker) listen(id string, msgs <-chan amqp.Delivery) {
	defer b.wg.Done()
	for m := range msgs {
		var r report
		if err := json.Unmarshal(m.Body, &r); err != nil || r.ID == "" || r.ID == id {
			continue
		}
		b.pres.heard(r, time.Now())
		if r.Ask {
			select {
			case b.pres.asked <- struct{}{}:
			default:
			}
		}
	}
}

// heard records report r, arrived at now.
func (p *presence) heard(r report, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pr := p.peers[r.ID]
	if r.Bye {
		// Closing: what it holds comes back to its queues once its
		// connection is gone, in a moment. Counted as when a worker
		// vanishes, without waiting for it to fall silent.
		delete(p.peers, r.ID)
		for name := range r.Queues {
			p.vanished[name] = now
		}
		if pr != nil {
			for name := range pr.last.Queues {
				p.vanished[name] = now
			}
		}
		return
	}
	if pr == nil {
		// Its past is not ours to judge: the first report sets the
		// baseline (Counts waits warmUp for the second).
		pr = &peer{changed: map[string]time.Time{}}
		p.peers[r.ID] = pr
	} else if r.Seq <= pr.last.Seq {
		// Overtaken by a later one (a delay announcement and a
		// periodic report race): keep the later, note the change.
		for name := range keysOf(r.Queues, pr.last.Queues) {
			pr.changed[name] = now
		}
		return
	} else {
		gap := r.Seq != pr.last.Seq+1 // reports were missed
		for name := range keysOf(r.Queues, pr.last.Queues) {
			if gap || r.Queues[name] != pr.last.Queues[name] {
				pr.changed[name] = now
			}
		}
	}
	pr.last, pr.seen = r, now
	for _, d := range r.Delays {
		p.learnDelay(d, time.Time{})
	}
}

func keysOf(ms ...map[string]qstate) map[string]bool {
	out := map[string]bool{}
	for _, m := range ms {
		for k := range m {
			out[k] = true
		}
	}
	return out
}

// learnDelay records delay queue name; used is the time of this Broker's
// own use (zero for one learnt from another). p.mu is held.
func (p *presence) learnDelay(name string, used time.Time) {
	q, ok := delayFamily(name)
	if !ok {
		return
	}
	ds := p.delays[q]
	if ds == nil {
		ds = map[string]time.Time{}
		p.delays[q] = ds
	}
	if used.After(ds[name]) {
		ds[name] = used
	} else if _, ok := ds[name]; !ok {
		ds[name] = time.Time{}
	}
}

// report publishes this Broker's report on s and waits for the server
// to take it.
func (b *Broker) report(ctx context.Context, s *session, ask, bye bool) error {
	if b.bye.Load() && !bye {
		return errors.New("presence: closing")
	}
	taken := b.takenCounts()
	p := b.pres
	p.mu.Lock()
	if p.sub != s {
		p.mu.Unlock()
		return errors.New("presence: session replaced")
	}
	p.seq++
	r := report{ID: p.id, Seq: p.seq, Ask: ask, Bye: bye, Queues: map[string]qstate{}}
	now := time.Now()
	for _, ds := range p.delays {
		for name, used := range ds {
			// It may hold messages until its delay after the last
			// use, and exists until delayExpiry after that.
			if !used.IsZero() && now.Sub(used) < delayOf(name)+delayExpiry {
				r.Delays = append(r.Delays, name)
			}
		}
	}
	p.mu.Unlock()
	for q, st := range taken {
		r.Queues[q] = st
	}
	body, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = s.send(ctx, []outgoing{{exchange: presenceExchange, pub: amqp.Publishing{
		ContentType: "application/json", DeliveryMode: amqp.Transient,
		Expiration: fmt.Sprint(int64(10 * reportEvery / time.Millisecond)), Body: body,
	}}})
	return err
}

// takenCounts returns this Broker's deliveries per queue it ever took from.
func (b *Broker) takenCounts() map[string]qstate {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]qstate, len(b.taken))
	for q, n := range b.taken {
		out[q] = qstate{Taken: n}
	}
	for d := range b.out {
		st := out[d.queue]
		st.InFlight++
		out[d.queue] = st
	}
	for q, n := range b.ahead {
		st := out[q]
		st.InFlight += n
		out[q] = st
	}
	return out
}

// reportLoop reports every reportEvery until the broker closes.
func (b *Broker) reportLoop() {
	defer b.wg.Done()
	t := time.NewTicker(reportEvery)
	defer t.Stop()
	for {
		select {
		case <-b.done:
			return
		case <-t.C:
		case <-b.pres.asked:
		}
		b.mu.Lock()
		s := b.cur
		b.mu.Unlock()
		if s == nil || s.broken() {
			continue
		}
		ctx, cancel := context.WithTimeout(b.ctx, 4*reportEvery)
		if err := b.report(ctx, s, false, false); err != nil && !b.isClosed() {
			b.log.Debug("presence report failed", "err", err)
		}
		cancel()
	}
}

// announceDelay makes sure every listener knows delay queue name before
// a message goes into it: a worker that dies right after must not leave
// a message where nobody looks.
func (b *Broker) announceDelay(ctx context.Context, s *session, name string) error {
	p := b.pres
	now := time.Now()
	p.mu.Lock()
	q, _ := delayFamily(name)
	last := p.delays[q][name]
	p.learnDelay(name, now)
	p.mu.Unlock()
	if !last.IsZero() && now.Sub(last) < announceEvery {
		return nil
	}
	if err := b.report(ctx, s, false, false); err != nil {
		p.mu.Lock()
		p.delays[q][name] = last
		p.mu.Unlock()
		return fmt.Errorf("announce delay queue %q: %w", name, err)
	}
	return nil
}

// waitWarm waits until s's subscription has listened for warmUp.
func (b *Broker) waitWarm(ctx context.Context, s *session) error {
	p := b.pres
	p.mu.Lock()
	sub, since := p.sub, p.since
	p.mu.Unlock()
	if sub != s {
		return errors.New("presence: no subscription on this connection yet")
	}
	wait := warmUp - time.Since(since)
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-b.done:
		return errClosedWhileWaiting
	}
}

var errClosedWhileWaiting = errors.New("closed")

// inspector passive-declares queues on one channel, and opens another
// when the server closes it (it does for a queue that does not exist).
// Its channel comes from, and goes back to, its session's pool: an idle
// worker counts its queues several times a second.
type inspector struct {
	s  *session
	ch *amqp.Channel
}

func newInspector(s *session) *inspector {
	in := &inspector{s: s}
	s.mu.Lock()
	if n := len(s.looks); n > 0 {
		in.ch = s.looks[n-1]
		s.looks = s.looks[:n-1]
	}
	s.mu.Unlock()
	return in
}

// inspect returns name's ready messages; exists is false for a queue that
// does not exist. A queue that exists exclusively for another connection
// exists.
func (in *inspector) inspect(name string) (ready int64, exists bool, err error) {
	if in.ch == nil || in.ch.IsClosed() {
		ch, err := in.s.conn.Channel()
		if err != nil {
			return 0, false, fmt.Errorf("open channel: %w", err)
		}
		in.ch = ch
	}
	q, err := in.ch.QueueDeclarePassive(name, false, false, false, false, nil)
	if err == nil {
		return int64(q.Messages), true, nil
	}
	in.ch = nil // the server closed it
	var ae *amqp.Error
	switch {
	case isNotFound(err):
		return 0, false, nil
	case errors.As(err, &ae) && ae.Code == amqp.ResourceLocked:
		return 0, true, nil
	}
	return 0, false, fmt.Errorf("inspect queue %q: %w", name, err)
}

// close gives the channel back to the pool.
func (in *inspector) close() {
	if in.ch == nil || in.ch.IsClosed() {
		return
	}
	in.s.mu.Lock()
	defer in.s.mu.Unlock()
	if len(in.s.looks) >= 4 {
		_ = in.ch.Close()
		return
	}
	in.s.looks = append(in.s.looks, in.ch)
}

// scan looks, once per subscription, for the delay queues queue has,
// among the names delaySteps allows: those left by workers that went away
// before this subscription began (later ones are announced). It returns a
// channel closed when the look is over; it runs in the background, from
// the first use of queue.
func (b *Broker) scan(s *session, queue string) <-chan struct{} {
	closed := b.isClosed()
	p := b.pres
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sub != s || closed {
		done := make(chan struct{})
		close(done) // an old session: its counts fail anyway
		return done
	}
	if done, ok := p.scans[queue]; ok {
		return done
	}
	done := make(chan struct{})
	p.scans[queue] = done
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer close(done)
		in := newInspector(s)
		defer in.close()
		for _, d := range delaySteps {
			name := delayQueue(queue, d)
			_, ok, err := in.inspect(name)
			if err != nil {
				// The connection is going: the next session scans again.
				b.log.Debug("looking for delay queues failed", "queue", queue, "err", err)
				p.mu.Lock()
				if p.scans[queue] == done {
					delete(p.scans, queue)
				}
				p.mu.Unlock()
				return
			}
			if ok {
				p.mu.Lock()
				p.learnDelay(name, time.Time{})
				p.mu.Unlock()
			}
		}
	}()
	return done
}

// countAMQP counts queue on s without the management API; see Counts.
func (b *Broker) countAMQP(ctx context.Context, s *session, queue string) (c broker.Counts, err error) {
	if err := b.waitWarm(ctx, s); err != nil {
		return c, err
	}
	in := newInspector(s)
	defer in.close()
	p := b.pres
	select {
	case <-b.scan(s, queue):
	case <-ctx.Done():
		return c, ctx.Err()
	}
	// Delay queues first: a message leaves one only for queue itself,
	// so it cannot slip past both looks.
	p.mu.Lock()
	names := slices.Sorted(maps.Keys(p.delays[queue]))
	p.mu.Unlock()
	for _, name := range names {
		n, ok, err := in.inspect(name)
		if err != nil {
			return c, err
		}
		if !ok {
			p.mu.Lock()
			if used := p.delays[queue][name]; time.Since(used) > announceEvery {
				delete(p.delays[queue], name) // expired; a new one is announced
			}
			p.mu.Unlock()
			continue
		}
		c.Ready += n
		c.Delayed += n
	}
	n, _, err := in.inspect(queue)
	if err != nil {
		return c, err
	}
	c.Ready += n
	if c.Dead, _, err = in.inspect(deadQueue(queue)); err != nil {
		return c, err
	}
	c.InFlight, err = b.inFlight(in, queue)
	return c, err
}

// inFlight counts the deliveries of queue held by this Broker and, from
// their reports, by every other; see Counts.
func (b *Broker) inFlight(in *inspector, queue string) (int64, error) {
	var n int64
	b.mu.Lock()
	for d := range b.out {
		if d.queue == queue {
			n++
		}
	}
	n += b.ahead[queue]
	b.mu.Unlock()
	p := b.pres
	now := time.Now()
	p.mu.Lock()
	peers := maps.Clone(p.peers)
	if now.Sub(p.vanished[queue]) < quietFor {
		n++
	}
	p.mu.Unlock()
	var silent []string
	for id, pr := range peers {
		p.mu.Lock()
		st, seen, checked, changed := pr.last.Queues[queue], pr.seen, pr.checked, pr.changed[queue]
		p.mu.Unlock()
		if now.Sub(seen) <= staleAfter {
			n += st.InFlight
			if st.InFlight == 0 && now.Sub(changed) < quietFor {
				n++ // it took or settled something a moment ago
			}
			continue
		}
		if now.Sub(checked) > staleAfter {
			_, open, err := in.inspect(id)
			if err != nil {
				return 0, err
			}
			if !open {
				// Its connection closed, and with it the server gave
				// its deliveries back to their queues: they are ready
				// now, or in a moment.
				p.mu.Lock()
				if p.peers[id] == pr {
					delete(p.peers, id)
					for q := range pr.last.Queues {
						p.vanished[q] = now
					}
				}
				p.mu.Unlock()
				if _, ok := pr.last.Queues[queue]; ok {
					n++
				}
				continue
			}
			p.mu.Lock()
			pr.checked = now
			p.mu.Unlock()
		}
		// Connected but silent (stopped, or cut off from the server's
		// exchange): what it holds is unknown, so it holds something.
		n += max(st.InFlight, 1)
		silent = append(silent, fmt.Sprintf("%s (%v)", id, now.Sub(seen).Round(time.Second)))
	}
	if len(silent) > 0 {
		p.mu.Lock()
		warn := now.Sub(p.warned) >= silentWarnEvery
		if warn {
			p.warned = now
		}
		p.mu.Unlock()
		if warn {
			b.log.Warn("waiting for workers that stopped reporting but are still connected; a crawl cannot be done while they may hold pages",
				"queue", queue, "workers", silent)
		}
	}
	return n, nil
}
