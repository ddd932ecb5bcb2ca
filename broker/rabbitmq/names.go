package rabbitmq

import (
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trawlhq/trawl/broker"
)

// Queue names. A broker queue Q is the AMQP queue Q on the default
// exchange, beside Q+":dead" for its dead letters and, while nacks with a
// delay are pending, Q+":delay:<ms>" for each delay (one of delaySteps).
func deadQueue(q string) string { return q + ":dead" }

func delayQueue(q string, d time.Duration) string {
	return q + ":delay:" + strconv.FormatInt(d.Milliseconds(), 10)
}

// familyPattern matches the names of q and of its dead and delay queues,
// for the management API's regular-expression filter.
func familyPattern(q string) string {
	return "^" + regexp.QuoteMeta(q) + "(:dead|:delay:[0-9]+)?$"
}

// delayFamily returns the queue a delay queue name belongs to, or false
// if name is not a delay queue's.
func delayFamily(name string) (string, bool) {
	i := strings.LastIndex(name, ":delay:")
	if i <= 0 {
		return "", false
	}
	if _, err := strconv.ParseUint(name[i+len(":delay:"):], 10, 63); err != nil {
		return "", false
	}
	return name[:i], true
}

// delayOf returns the delay of a delay queue's name (maxDelay if it cannot
// tell).
func delayOf(name string) time.Duration {
	i := strings.LastIndex(name, ":delay:")
	if i < 0 {
		return maxDelay
	}
	ms, err := strconv.ParseInt(name[i+len(":delay:"):], 10, 64)
	if err != nil || ms < 0 || time.Duration(ms) > maxDelay/time.Millisecond {
		return maxDelay
	}
	return time.Duration(ms) * time.Millisecond
}

// maxDelay caps the delay of a nack.
const maxDelay = 24 * time.Hour

// delaySteps are the delays a nack can wait, so that the delay queues a
// queue can have are few and known in advance (Counts looks for them
// without the management API): 100ms times powers of √2, rounded up to
// 100ms below 10s and to the second above, up to maxDelay. 300ms, 600ms
// and 1.2s, trawl's default retry back-offs, are steps; a delay is never
// stretched by more than √2.
var delaySteps = func() []time.Duration {
	var steps []time.Duration
	for k := 0; ; k++ {
		d := time.Duration(float64(100*time.Millisecond) * math.Pow(math.Sqrt2, float64(k)))
		step := 100 * time.Millisecond
		if d > 10*time.Second {
			step = time.Second
		}
		d = (d + step - 1) / step * step
		if d >= maxDelay {
			return append(steps, maxDelay)
		}
		if len(steps) == 0 || d > steps[len(steps)-1] {
			steps = append(steps, d)
		}
	}
}()

// roundDelay returns the smallest of delaySteps at least d.
func roundDelay(d time.Duration) time.Duration {
	i, _ := slices.BinarySearch(delaySteps, d)
	if i == len(delaySteps) {
		return maxDelay
	}
	return delaySteps[i]
}

// delayExpiry is how long an unused delay queue outlives its delay before
// the server deletes it (x-expires).
const delayExpiry = time.Minute

// Headers a message carries.
const (
	// hAttempt is the delivery attempt the next delivery of the message
	// is (1 when published).
	hAttempt = "x-trawl-attempt"
	// hPriority is the message's broker priority, unclamped.
	hPriority = "x-trawl-priority"
	// hReason says why a dead letter is dead.
	hReason = "x-trawl-reason"
)

// header reads an integer header of any AMQP integer type.
func header(h amqp.Table, key string) (int64, bool) {
	switch v := h[key].(type) {
	case int8:
		return int64(v), true
	case uint8:
		return int64(v), true
	case int16:
		return int64(v), true
	case uint16:
		return int64(v), true
	case int32:
		return int64(v), true
	case uint32:
		return int64(v), true
	case int64:
		return v, true
	case int:
		return int64(v), true
	}
	return 0, false
}

// wireMessage is a message as carried: its body and priority, the attempt
// its next delivery is, and a dead letter's reason.
type wireMessage struct {
	msg     broker.Message
	attempt int
	reason  string
}

// decode reads a delivery. Messages published by other clients, without
// trawl's headers, are attempt 1 with the AMQP priority less the offset.
func (b *Broker) decode(d *amqp.Delivery) wireMessage {
	w := wireMessage{msg: broker.Message{Body: d.Body}, attempt: 1}
	if p, ok := header(d.Headers, hPriority); ok {
		w.msg.Priority = int(p)
	} else if b.cfg.Order == broker.Priority {
		w.msg.Priority = int(d.Priority) - b.cfg.PriorityOffset
	}
	if a, ok := header(d.Headers, hAttempt); ok && a > 0 {
		w.attempt = int(a)
	}
	if r, ok := d.Headers[hReason].(string); ok {
		w.reason = r
	}
	return w
}

// publishing encodes w for publishing.
func (b *Broker) publishing(w wireMessage) amqp.Publishing {
	h := amqp.Table{
		hAttempt:  int32(min(w.attempt, 1<<31-1)),
		hPriority: int64(w.msg.Priority),
	}
	if w.reason != "" {
		h[hReason] = w.reason
	}
	mode := amqp.Persistent
	if b.cfg.NonDurable {
		mode = amqp.Transient
	}
	return amqp.Publishing{
		Headers:      h,
		DeliveryMode: mode,
		Priority:     b.cfg.amqpPriority(w.msg.Priority),
		Body:         w.msg.Body,
	}
}
