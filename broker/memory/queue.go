package memory

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/trawlhq/trawl/broker"
)

// state is where a message is.
type state uint8

const (
	ready   state = iota // in queue.ready
	delayed              // in queue.delayed, until due
	leased               // in queue.leased, until due or settled
	dead                 // in queue.dead
	gone                 // acknowledged or purged
)

// message is a stored message. Every field is guarded by Store.mu.
type message struct {
	body    []byte
	prio    int
	seq     uint64 // publish sequence: order among equals
	attempt int    // deliveries so far
	gen     uint64 // bumped on every delivery; never reset (tells deliveries apart)
	state   state
	due     int64   // delayed: visible at; leased: lease deadline (Store.now clock)
	idx     int     // index in queue.delayed or queue.leased
	owner   *Broker // leased: the handle holding the lease
}

type deadLetter struct {
	m      *message
	reason string
}

// queue is one named queue. Every field is guarded by Store.mu.
type queue struct {
	name    string
	ready   readyHeap
	delayed timeHeap // nacked with a delay, by visible time
	leased  timeHeap // delivered, by lease deadline
	dead    []deadLetter
	wait    chan struct{} // closed (and cleared) by signal; nil when nobody waits
}

// signal wakes every Receive waiting on q.
func (q *queue) signal() {
	if q.wait != nil {
		close(q.wait)
		q.wait = nil
	}
}

// expire makes delayed messages that are due visible and gives back the
// messages of leases that have expired.
func (q *queue) expire(s *Store, now int64) {
	woke := false
	for q.delayed.len() > 0 && q.delayed.items[0].due <= now {
		m := q.delayed.pop()
		m.state = ready
		q.ready.push(m)
		woke = true
	}
	for q.leased.len() > 0 && q.leased.items[0].due <= now {
		m := q.leased.pop()
		s.log.Warn("memory broker lease expired", "queue", q.name, "attempt", m.attempt)
		q.giveBack(s, m, "lease expired")
	}
	if woke {
		q.signal()
	}
}

// nextDue is the earliest time at which expire would change q.
func (q *queue) nextDue() (int64, bool) {
	switch {
	case q.delayed.len() > 0 && q.leased.len() > 0:
		return min(q.delayed.items[0].due, q.leased.items[0].due), true
	case q.delayed.len() > 0:
		return q.delayed.items[0].due, true
	case q.leased.len() > 0:
		return q.leased.items[0].due, true
	}
	return 0, false
}

// giveBack returns m, just taken out of q.leased, to the queue for another
// attempt, or dead-letters it if it has used up its deliveries.
func (q *queue) giveBack(s *Store, m *message, why string) {
	m.owner = nil
	if m.attempt >= s.maxDeliveries {
		q.bury(s, m, fmt.Sprintf("%s after %d deliveries (max %d)", why, m.attempt, s.maxDeliveries))
		return
	}
	m.state = ready
	q.ready.push(m)
	q.signal()
}

// bury moves m, in no heap, to the dead-letter queue.
func (q *queue) bury(s *Store, m *message, reason string) {
	m.state, m.owner = dead, nil
	q.dead = append(q.dead, deadLetter{m: m, reason: reason})
	s.log.Warn("memory broker message dead-lettered", "queue", q.name, "attempt", m.attempt, "reason", reason)
}

// take leases up to max ready messages to b.
func (q *queue) take(b *Broker, now int64, max int) []broker.Delivery {
	n := min(max, q.ready.len())
	out := make([]broker.Delivery, n)
	ds := make([]delivery, n)
	deadline := now + b.s.lease
	for i := range ds {
		m := q.ready.pop()
		m.attempt++
		m.gen++
		m.state, m.owner, m.due = leased, b, deadline
		q.leased.push(m)
		ds[i] = delivery{
			b: b, q: q, m: m, gen: m.gen, attempt: m.attempt,
			msg: broker.Message{Body: bytes.Clone(m.body), Priority: m.prio},
		}
		out[i] = &ds[i]
	}
	return out
}

// delivery is a broker.Delivery.
type delivery struct {
	b       *Broker
	q       *queue
	m       *message
	gen     uint64
	attempt int
	msg     broker.Message
	settled bool // guarded by Store.mu
}

// Message returns the delivered message; its body is the delivery's own copy.
func (d *delivery) Message() broker.Message { return d.msg }

// Queue names the queue the delivery came from.
func (d *delivery) Queue() string { return d.q.name }

// Attempt is 1 on the first delivery and grows with each redelivery.
func (d *delivery) Attempt() int { return d.attempt }

// hold locks the store and checks that d may still be settled or extended.
// On success the caller holds Store.mu and must unlock it.
func (d *delivery) hold(op string) (int64, error) {
	s := d.b.s
	s.mu.Lock()
	if d.b.closed {
		s.mu.Unlock()
		return 0, closedErr(op, d.q.name)
	}
	if d.settled {
		s.mu.Unlock()
		return 0, fmt.Errorf("memory broker: %s %q: %w", op, d.q.name, broker.ErrSettled)
	}
	now := s.now()
	d.q.expire(s, now)
	if d.m.gen != d.gen || d.m.state != leased {
		s.mu.Unlock()
		return 0, fmt.Errorf("memory broker: %s %q attempt %d: %w", op, d.q.name, d.attempt, broker.ErrLeaseLost)
	}
	return now, nil
}

// Ack removes the message for good.
func (d *delivery) Ack(context.Context) error {
	if _, err := d.hold("ack"); err != nil {
		return err
	}
	defer d.b.s.mu.Unlock()
	d.settled = true
	d.q.leased.remove(d.m.idx)
	d.m.state, d.m.owner = gone, nil
	return nil
}

// Nack gives the message back, visible after delay, or dead-letters it if
// it has used up its deliveries.
func (d *delivery) Nack(_ context.Context, delay time.Duration) error {
	now, err := d.hold("nack")
	if err != nil {
		return err
	}
	s := d.b.s
	defer s.mu.Unlock()
	d.settled = true
	q, m := d.q, d.m
	q.leased.remove(m.idx)
	m.owner = nil
	switch {
	case m.attempt >= s.maxDeliveries:
		q.bury(s, m, fmt.Sprintf("nacked after %d deliveries (max %d)", m.attempt, s.maxDeliveries))
	case delay <= 0:
		m.state = ready
		q.ready.push(m)
		q.signal()
	default:
		m.state, m.due = delayed, now+int64(delay)
		q.delayed.push(m)
		q.signal() // waiters recompute their timers
	}
	return nil
}

// Release gives the message back at once, its delivery not counted.
func (d *delivery) Release(context.Context) error {
	if _, err := d.hold("release"); err != nil {
		return err
	}
	s := d.b.s
	defer s.mu.Unlock()
	d.settled = true
	q, m := d.q, d.m
	q.leased.remove(m.idx)
	m.owner = nil
	m.attempt = max(0, m.attempt-1)
	m.state = ready
	q.ready.push(m)
	q.signal()
	return nil
}

// Reject dead-letters the message at once.
func (d *delivery) Reject(_ context.Context, reason string) error {
	if _, err := d.hold("reject"); err != nil {
		return err
	}
	s := d.b.s
	defer s.mu.Unlock()
	d.settled = true
	d.q.leased.remove(d.m.idx)
	d.q.bury(s, d.m, reason)
	return nil
}

// Extend makes the lease run at least dur from now (dur <= 0: the store's
// lease). It never shortens a lease.
func (d *delivery) Extend(_ context.Context, dur time.Duration) error {
	now, err := d.hold("extend lease of")
	if err != nil {
		return err
	}
	s := d.b.s
	defer s.mu.Unlock()
	if dur <= 0 {
		dur = time.Duration(s.lease)
	}
	if deadline := now + int64(dur); deadline > d.m.due {
		d.m.due = deadline
		d.q.leased.fix(d.m.idx)
	}
	return nil
}

// readyHeap orders visible messages by the store's order mode.
type readyHeap struct {
	order broker.Order
	items []*message
}

func (h *readyHeap) len() int { return len(h.items) }

func (h *readyHeap) less(a, b *message) bool {
	switch h.order {
	case broker.Priority:
		if a.prio != b.prio {
			return a.prio > b.prio
		}
		return a.seq < b.seq
	case broker.LIFO:
		return a.seq > b.seq
	default:
		return a.seq < b.seq
	}
}

func (h *readyHeap) push(m *message) {
	h.items = append(h.items, m)
	i := len(h.items) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(h.items[i], h.items[p]) {
			break
		}
		h.items[i], h.items[p] = h.items[p], h.items[i]
		i = p
	}
}

func (h *readyHeap) pop() *message {
	top := h.items[0]
	last := len(h.items) - 1
	h.items[0] = h.items[last]
	h.items[last] = nil
	h.items = h.items[:last]
	i, n := 0, last
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && h.less(h.items[r], h.items[l]) {
			c = r
		}
		if !h.less(h.items[c], h.items[i]) {
			break
		}
		h.items[i], h.items[c] = h.items[c], h.items[i]
		i = c
	}
	return top
}

// timeHeap orders messages by due time and keeps message.idx current, so
// that a message can be removed or re-sorted in place.
type timeHeap struct {
	items []*message
}

func (h *timeHeap) len() int { return len(h.items) }

func (h *timeHeap) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].idx = i
	h.items[j].idx = j
}

func (h *timeHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if h.items[i].due >= h.items[p].due {
			break
		}
		h.swap(i, p)
		i = p
	}
}

// down sinks items[i] and says whether it moved.
func (h *timeHeap) down(i int) bool {
	i0, n := i, len(h.items)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && h.items[r].due < h.items[l].due {
			c = r
		}
		if h.items[c].due >= h.items[i].due {
			break
		}
		h.swap(i, c)
		i = c
	}
	return i > i0
}

func (h *timeHeap) push(m *message) {
	m.idx = len(h.items)
	h.items = append(h.items, m)
	h.up(m.idx)
}

func (h *timeHeap) pop() *message { return h.remove(0) }

func (h *timeHeap) remove(i int) *message {
	m := h.items[i]
	last := len(h.items) - 1
	if i != last {
		h.swap(i, last)
	}
	h.items[last] = nil
	h.items = h.items[:last]
	if i != last && !h.down(i) {
		h.up(i)
	}
	m.idx = -1
	return m
}

func (h *timeHeap) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}
