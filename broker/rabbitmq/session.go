package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trawlhq/trawl/broker"
)

// Connection timing.
const (
	dialTimeout  = 10 * time.Second // TCP, TLS and AMQP handshake
	heartbeat    = 10 * time.Second
	minBackoff   = 100 * time.Millisecond
	maxBackoff   = 5 * time.Second
	resendLimit  = 5 // publish rounds on one live session before giving up
	sideTimeout  = 30 * time.Second
	declareLimit = 3 // declare rounds on one live session before giving up
	// brokenWait is how long a failed operation waits to see whether its
	// connection is going down (amqp091 notices a failed write or read a
	// moment later).
	brokenWait = time.Second
	// confirmGrace is how long a publish whose context ended waits for
	// the confirms of messages already sent.
	confirmGrace = 5 * time.Second
)

// session is one AMQP connection and the channels opened on it. A broker
// has one live session at a time; when its connection drops the
// supervisor replaces it, and everything opened on the old one is void.
type session struct {
	b    *Broker
	conn *amqp.Connection
	wire *gatherConn   // the network connection under conn
	dead chan struct{} // closed by the supervisor when conn has closed
	boot string        // the server's incarnation (see learnBoot); "": unknown

	mu       sync.Mutex
	pub      *amqp.Channel   // confirm-mode channel all publishes share; nil: open on next use
	idle     []*rchan        // receive channels no Receive is using
	looks    []*amqp.Channel // channels for passive declares no count is using
	declared map[string]bool // queues declared on this connection
}

// rchan is a channel that Receives consume on, one Receive at a time, or
// that one Consumer holds for its life. Deliveries are settled on the
// channel they came from, through its methods, which keep track of the
// delivery tags not yet settled at the server (for multiple acks, and to
// close a Consumer's channel once its last delivery is settled).
type rchan struct {
	ch   *amqp.Channel
	wire *gatherConn // its connection's
	qos  int         // prefetch count set on ch

	mu      sync.Mutex
	open    map[uint64]struct{} // tags delivered on ch, not yet settled at the server
	closing bool                // close ch once open is empty (its Consumer closed)
}

func newRchan(s *session, ch *amqp.Channel) *rchan {
	return &rchan{ch: ch, wire: s.wire, open: map[uint64]struct{}{}}
}

// took records a delivery on rc.
func (rc *rchan) took(tag uint64) {
	rc.mu.Lock()
	rc.open[tag] = struct{}{}
	rc.mu.Unlock()
}

// settled forgets tags, and closes the channel of a closed Consumer once
// none is left.
func (rc *rchan) settled(tags ...uint64) {
	rc.mu.Lock()
	for _, t := range tags {
		delete(rc.open, t)
	}
	done := rc.closing && len(rc.open) == 0
	rc.mu.Unlock()
	if done {
		_ = rc.ch.Close()
	}
}

// ack acknowledges tag.
func (rc *rchan) ack(tag uint64) error {
	err := rc.ch.Ack(tag, false)
	rc.settled(tag)
	return err
}

// nack gives tag back to its queue at once (the server redelivers it
// flagged as redelivered).
func (rc *rchan) nack(tag uint64) error {
	err := rc.ch.Nack(tag, false, true)
	rc.settled(tag)
	return err
}

// ackBatch acknowledges tags (of deliveries on rc) in as few frames as it
// can: one ack with multiple=true for the longest run of them that
// leaves no other unsettled tag of rc below its end, one frame per
// remaining tag; the frames go out in one write (see gatherConn).
func (rc *rchan) ackBatch(tags []uint64) error {
	slices.Sort(tags)
	in := make(map[uint64]bool, len(tags))
	for _, t := range tags {
		in[t] = true
	}
	rc.mu.Lock()
	// The lowest unsettled tag outside the batch bounds the run.
	bound := uint64(math.MaxUint64)
	for t := range rc.open {
		if !in[t] && t < bound {
			bound = t
		}
	}
	rc.mu.Unlock()
	run := 0
	for run < len(tags) && tags[run] < bound {
		run++
	}
	if run < 2 {
		run = 0
	}
	err := rc.wire.gather(func() error {
		var err error
		if run > 0 {
			err = rc.ch.Ack(tags[run-1], true)
		}
		for _, t := range tags[run:] {
			if e := rc.ch.Ack(t, false); e != nil && err == nil {
				err = e
			}
		}
		return err
	})
	rc.settled(tags...)
	return err
}

// closeWhenSettled closes the channel now if no delivery of it is
// unsettled, else when the last one is settled.
func (rc *rchan) closeWhenSettled() {
	rc.mu.Lock()
	rc.closing = true
	rc.mu.Unlock()
	rc.settled()
}

// dial opens a session on the first node of Config.URL that answers,
// trying them in turn from the one of the last session. closed reports
// the end of its connection.
func (b *Broker) dial(ctx context.Context) (*session, <-chan *amqp.Error, error) {
	urls := b.cfg.urls()
	first := int(b.node.Load())
	var errs []error
	for k := range urls {
		i := (first + k) % len(urls)
		s, closed, err := b.dialURL(ctx, urls[i])
		if err == nil {
			if i != first {
				b.log.Warn("connected to another node", "node", hostOf(urls[i]))
			}
			b.node.Store(int32(i))
			return s, closed, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", hostOf(urls[i]), err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, nil, errors.Join(errs...)
}

// hostOf returns the host:port of an AMQP URL, which Validate parsed.
func hostOf(url string) string {
	uri, err := amqp.ParseURI(url)
	if err != nil {
		return "(unparsable URL)"
	}
	return fmt.Sprintf("%s:%d", uri.Host, uri.Port)
}

// dialURL opens a session on the node at url.
func (b *Broker) dialURL(ctx context.Context, url string) (*session, <-chan *amqp.Error, error) {
	var wire *gatherConn
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(b.cfg.Name)
	conn, err := amqp.DialConfig(url, amqp.Config{
		Heartbeat:       heartbeat,
		Locale:          "en_US",
		TLSClientConfig: b.cfg.TLS,
		Properties:      props,
		Dial: func(network, addr string) (net.Conn, error) {
			d := net.Dialer{Timeout: dialTimeout}
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// Bounds the handshakes; amqp091 clears it once open.
			if err := c.SetDeadline(time.Now().Add(dialTimeout)); err != nil {
				_ = c.Close()
				return nil, err
			}
			wire = &gatherConn{Conn: c}
			return wire, nil
		},
	})
	if err != nil {
		return nil, nil, err
	}
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	return &session{b: b, conn: conn, wire: wire, dead: make(chan struct{}), declared: map[string]bool{}}, closed, nil
}

// broken tells whether s's connection is gone.
func (s *session) broken() bool { return s.conn.IsClosed() }

// supervise replaces the session when its connection drops, with
// back-off, until the broker closes.
func (b *Broker) supervise(s *session, closed <-chan *amqp.Error) {
	defer b.wg.Done()
	for {
		var cause *amqp.Error
		select {
		case <-b.done:
			return
		case cause = <-closed:
			close(s.dead)
		}
		if !b.drop(s) {
			return // closed by Close
		}
		b.log.Warn("connection lost; reconnecting", "err", errText(cause))
		backoff := minBackoff
		for {
			ns, nclosed, err := b.dial(b.ctx)
			if err == nil {
				b.learnBoot(b.ctx, ns)
				if err = b.subscribe(b.ctx, ns); err != nil {
					_ = ns.conn.Close()
				}
			}
			if err == nil {
				if !b.install(ns) {
					_ = ns.conn.Close()
					return
				}
				s, closed = ns, nclosed
				b.log.Warn("reconnected")
				break
			}
			b.log.Warn("reconnect failed", "err", err, "retry_in", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-b.done:
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, maxBackoff)
		}
	}
}

func errText(e *amqp.Error) string {
	if e == nil {
		return "closed"
	}
	return e.Error()
}

// drop retires s after its connection dropped: its deliveries are lost
// (RabbitMQ gives their messages back). It reports false if the broker is
// closed.
func (b *Broker) drop(s *session) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	if b.cur == s {
		b.cur = nil
		b.notify()
	}
	for d := range b.out {
		if d.s == s {
			d.state = lost
			delete(b.out, d)
		}
	}
	return true
}

// install makes s the live session. It reports false if the broker is
// closed.
func (b *Broker) install(s *session) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.cur = s
	b.notify()
	return true
}

// notify wakes the callers waiting for a session. b.mu is held.
func (b *Broker) notify() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// session returns the live session, waiting while the broker reconnects.
func (b *Broker) session(ctx context.Context) (*session, error) {
	for {
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			return nil, broker.ErrClosed
		}
		s, changed := b.cur, b.changed
		b.mu.Unlock()
		if s != nil && !s.broken() {
			return s, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the connection: %w", ctx.Err())
		case <-b.done:
		case <-changed:
		}
	}
}

// pubChannel returns the publishing channel, opening it if needed.
func (s *session) pubChannel() (*amqp.Channel, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pub != nil && !s.pub.IsClosed() {
		return s.pub, nil
	}
	ch, err := s.conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("enable publisher confirms: %w", err)
	}
	s.pub = ch
	return ch, nil
}

// takeR returns a receive channel for one Receive's exclusive use.
func (s *session) takeR() (*rchan, error) {
	s.mu.Lock()
	for len(s.idle) > 0 {
		rc := s.idle[len(s.idle)-1]
		s.idle = s.idle[:len(s.idle)-1]
		if !rc.ch.IsClosed() {
			s.mu.Unlock()
			return rc, nil
		}
	}
	s.mu.Unlock()
	ch, err := s.conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	return newRchan(s, ch), nil
}

// putR gives a receive channel back for other Receives.
func (s *session) putR(rc *rchan) {
	if rc.ch.IsClosed() {
		return
	}
	s.mu.Lock()
	s.idle = append(s.idle, rc)
	s.mu.Unlock()
}

// side runs f on a fresh channel, closed afterwards: for operations the
// server may answer by closing the channel (a declare with other
// arguments, a queue that does not exist).
func (s *session) side(f func(ch *amqp.Channel) error) error {
	ch, err := s.conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	return f(ch)
}

// outgoing is a message to publish and the queue it goes to.
type outgoing struct {
	exchange string // "" : the default exchange, to queue
	queue    string
	pub      amqp.Publishing
}

// send publishes msgs on s, in one write (see gatherConn), and waits
// until the server has confirmed them. It returns the indices of the
// messages not confirmed (all of them when the channel closed before they
// were sent) with the reason.
func (s *session) send(ctx context.Context, msgs []outgoing) ([]int, error) {
	all := func() []int {
		idx := make([]int, len(msgs))
		for i := range idx {
			idx[i] = i
		}
		return idx
	}
	ch, err := s.pubChannel()
	if err != nil {
		return all(), err
	}
	dcs := make([]*amqp.DeferredConfirmation, len(msgs))
	sendErr := s.wire.gather(func() error {
		for i, m := range msgs {
			if m.pub.Headers != nil && s.boot != "" {
				m.pub.Headers[hBoot] = s.boot // stamped in this incarnation (see learnBoot)
			}
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, m.exchange, m.queue, false, false, m.pub)
			if err != nil {
				return err
			}
			dcs[i] = dc
		}
		return nil
	})
	if sendErr != nil {
		sendErr = fmt.Errorf("send: %w", sendErr)
	}
	var left []int
	nacked := 0
	var grace <-chan time.Time // runs once ctx has ended
	for i, dc := range dcs {
		if dc == nil {
			left = append(left, i)
			continue
		}
	wait:
		for {
			select {
			case <-dc.Done():
				break wait
			case <-ctx.Done():
				if grace == nil {
					// The messages are on their way: wait a little
					// for the server to say whether it took them.
					t := time.NewTimer(confirmGrace)
					defer t.Stop()
					grace = t.C
				}
				ctx = context.WithoutCancel(ctx)
			case <-grace:
				// What is not confirmed yet counts as not sent.
				for j := i; j < len(dcs); j++ {
					if dcs[j] == nil || !dcs[j].Acked() {
						left = append(left, j)
					}
				}
				return left, fmt.Errorf("waiting for confirms: %w", context.DeadlineExceeded)
			}
		}
		if !dc.Acked() {
			nacked++
			left = append(left, i)
		}
	}
	switch {
	case sendErr != nil:
		return left, sendErr
	case nacked > 0 && ch.IsClosed():
		return left, errors.New("channel closed before the server confirmed every message")
	case nacked > 0:
		return left, fmt.Errorf("server refused %d of %d messages (basic.nack)", nacked, len(msgs))
	}
	return nil, nil
}

// pick returns the messages of msgs at the indices idx.
func pick(msgs []outgoing, idx []int) []outgoing {
	out := make([]outgoing, len(idx))
	for i, j := range idx {
		out[i] = msgs[j]
	}
	return out
}

// ensure declares queue q and its dead-letter queue once per connection.
func (s *session) ensure(q string) error {
	s.mu.Lock()
	ok := s.declared[q]
	s.mu.Unlock()
	if ok {
		return nil
	}
	b := s.b
	mainArgs := amqp.Table{
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": deadQueue(q),
	}
	if b.cfg.Order == broker.Priority {
		mainArgs["x-max-priority"] = int32(b.cfg.MaxPriority)
	}
	if err := s.declare(q, b.cfg.typed(mainArgs)); err != nil {
		return err
	}
	if err := s.declare(deadQueue(q), b.cfg.typed(amqp.Table{})); err != nil {
		return err
	}
	if err := s.checkPartitions(q); err != nil {
		return err
	}
	s.mu.Lock()
	s.declared[q] = true
	s.mu.Unlock()
	s.b.scan(s, q) // for Counts, in the background
	return nil
}

// checkPartitions returns an error wrapping ErrQueueMismatch if q has a
// partition beyond this broker's count (Config.Partitions): a broker
// opened with fewer partitions than its queue's would leave the others
// undrained and count the queue done. The partitions of a queue are
// declared in order (declareAll), and those a repartition leaves behind
// are deleted (DropPartitions), so the first beyond the count tells.
func (s *session) checkPartitions(q string) error {
	name := partName(q, s.b.cfg.Partitions)
	err := s.side(func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclarePassive(name, false, false, false, false, nil)
		return err
	})
	switch {
	case isNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("check the partitions of %q: %w", q, err)
	}
	return fmt.Errorf("%w: queue %q has more partitions than this broker's %d (%q exists): open the broker with the queue's partition count (trawl: --partitions, stored with the crawl in the deployment's Redis)",
		ErrQueueMismatch, q, s.b.cfg.Partitions, name)
}

// ensureDelay declares the delay queue of q for delay d. Declaring it
// again each time restarts its expiry clock.
func (s *session) ensureDelay(q string, d time.Duration) error {
	ms := d.Milliseconds()
	return s.declare(delayQueue(q, d), s.b.cfg.typed(amqp.Table{
		"x-message-ttl":             int32(ms),
		"x-expires":                 int32(ms + delayExpiry.Milliseconds()),
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": q,
	}))
}

// typed adds to the arguments of a queue declaration those of the queue
// type. A quorum queue that dead-letters (the main queue, to its dead
// letters; a delay queue, back to the main queue) does so at least once,
// which RabbitMQ allows only with reject-publish overflow; the queues
// have no length limit, so that overflow never applies.
func (c Config) typed(args amqp.Table) amqp.Table {
	if c.QueueType != Quorum {
		if len(args) == 0 {
			return nil
		}
		return args
	}
	args["x-queue-type"] = "quorum"
	if c.Partitions > 1 {
		args["x-queue-leader-locator"] = "balanced"
	}
	if _, ok := args["x-dead-letter-exchange"]; ok {
		args["x-dead-letter-strategy"] = "at-least-once"
		args["x-overflow"] = "reject-publish"
	}
	return args
}

// declare declares queue name with args, recreating it when it exists
// with other arguments and Config.Recreate is set.
func (s *session) declare(name string, args amqp.Table) error {
	b := s.b
	durable := !b.cfg.NonDurable
	decl := func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(name, durable, false, false, false, args)
		return err
	}
	err := s.side(decl)
	var ae *amqp.Error
	if err == nil || !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
		if err != nil {
			return fmt.Errorf("declare queue %q: %w", name, err)
		}
		return nil
	}
	if !b.cfg.Recreate {
		return fmt.Errorf("%w: queue %q: the server says %q; set Recreate (--amqp-recreate) to delete it and declare it anew, losing its messages",
			ErrQueueMismatch, name, ae.Reason)
	}
	b.log.Warn("queue exists with other arguments; deleting and declaring it anew", "queue", name, "reason", ae.Reason)
	err = s.side(func(ch *amqp.Channel) error {
		if _, err := ch.QueueDelete(name, false, false, false); err != nil {
			return fmt.Errorf("delete queue %q: %w", name, err)
		}
		return decl(ch)
	})
	if err != nil {
		return fmt.Errorf("recreate queue %q: %w", name, err)
	}
	return nil
}

// forget makes s declare q again on next use (after the server said it
// does not exist).
func (s *session) forget(q string) {
	s.mu.Lock()
	delete(s.declared, q)
	s.mu.Unlock()
}

// isSoft tells whether err is a channel exception (the channel is
// closed, the connection lives) or one of the broker's own.
func isSoft(err error) bool {
	if errors.Is(err, ErrQueueMismatch) {
		return true
	}
	var ae *amqp.Error
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.Code {
	case amqp.ContentTooLarge, amqp.NoRoute, amqp.NoConsumers, amqp.AccessRefused,
		amqp.NotFound, amqp.ResourceLocked, amqp.PreconditionFailed:
		return true
	}
	return false
}

// isNotFound tells whether err is the server's 404 NOT_FOUND.
func isNotFound(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == amqp.NotFound
}
