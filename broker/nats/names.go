package nats

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// Header names carried by the messages of a queue. They are set here and
// read here, nowhere else.
const (
	hdrPriority = "Trawl-Priority" // the message's priority; absent: 0
	hdrAttempts = "Trawl-Attempts" // deliveries before this copy; absent: 0
	hdrDelay    = "Trawl-Delay"    // on a delayed copy: the delay, in nanoseconds
	hdrReason   = "Trawl-Reason"   // on a dead letter: why it died
	hdrDeadID   = "Trawl-Dead-Id"  // on a dead letter: a unique id, the Nats-Msg-Id of its requeue
)

// maxToken bounds the length of an escaped queue name; longer ones are
// cut and completed with a hash.
const maxToken = 160

// escape maps a queue name to a token usable in both stream names and
// subjects: lower-case letters, digits and '-' stay, every other byte
// becomes '_' and two hex digits ("crawl:requests" → "crawl_3arequests").
// The mapping is injective (a '_' always starts an escape), except that
// a result longer than maxToken is cut and completed with "_zz" (never an
// escape) and 16 hex digits of the name's SHA-256.
func escape(queue string) string {
	const hexdigits = "0123456789abcdef"
	var b strings.Builder
	b.Grow(len(queue))
	for i := 0; i < len(queue); i++ {
		c := queue[i]
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('_')
		b.WriteByte(hexdigits[c>>4])
		b.WriteByte(hexdigits[c&15])
	}
	s := b.String()
	if len(s) > maxToken {
		sum := sha256.Sum256([]byte(queue))
		s = s[:maxToken-19] + "_zz" + hex.EncodeToString(sum[:8])
	}
	return s
}

// unescape reverses escape; ok is false for what escape did not make, and
// for a name it shortened with a hash.
func unescape(token string) (s string, ok bool) {
	var b strings.Builder
	b.Grow(len(token))
	for i := 0; i < len(token); i++ {
		c := token[i]
		if c != '_' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(token) {
			return "", false
		}
		v, err := strconv.ParseUint(token[i+1:i+3], 16, 8)
		if err != nil || token[i+1:i+3] != strings.ToLower(token[i+1:i+3]) {
			return "", false
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), true
}

// names are the JetStream names of one queue, built here and nowhere else.
// For the queue "books:requests" with five bands:
//
//	stream TRAWL_Q_books_3arequests     work-queue stream, subjects:
//	  trawl.books_3arequests.b0 … .b4   one per priority band (b4 highest)
//	  trawl.books_3arequests.delay      nacked copies waiting out a delay
//	stream TRAWL_D_books_3arequests     dead letters (limits retention), subject:
//	  trawl.books_3arequests.dead
//
// and the durable pull consumers "b0" … "b4" (one per band subject) and
// "delay" on the work stream. In FIFO order there is one band, b0.
//
// Partition 0 of a queue of a broker with partitions has these names;
// partition p > 0 has the token "<token>_p<p>" instead ("books_3arequests_p1":
// stream TRAWL_Q_books_3arequests_p1, subjects trawl.books_3arequests_p1.b0 …),
// which no queue's token is ('p' is no hex digit, so "_p" is no escape).
type names struct {
	queue        string
	part         int      // the partition
	tok          string   // the escaped name, with the partition's suffix
	prefix       string   // "trawl.<token>."
	work, dead   string   // stream names
	bands        []string // band subjects, lowest band first
	delay, grave string   // delay and dead-letter subjects
	consumers    []string // durable names: one per band, then "delay"
}

func namesFor(queue string, bands, part int) names {
	tok := escape(queue)
	if part > 0 {
		tok += "_p" + strconv.Itoa(part)
	}
	n := names{
		queue:  queue,
		part:   part,
		tok:    tok,
		prefix: "trawl." + tok + ".",
		work:   "TRAWL_Q_" + tok,
		dead:   "TRAWL_D_" + tok,
		delay:  "trawl." + tok + ".delay",
		grave:  "trawl." + tok + ".dead",
	}
	for i := range bands {
		n.bands = append(n.bands, "trawl."+tok+".b"+strconv.Itoa(i))
		n.consumers = append(n.consumers, "b"+strconv.Itoa(i))
	}
	n.consumers = append(n.consumers, "delay")
	return n
}

// delayIdx is the index of the delay consumer in consumers.
func (n names) delayIdx() int { return len(n.bands) }

// subjects are the work stream's subjects.
func (n names) subjects() []string {
	return append(append([]string(nil), n.bands...), n.delay)
}

// bandRange is the lowest and highest priority with a band of its own when
// there are bands bands: the bands are centred on priority 0.
func bandRange(bands int) (lo, hi int) {
	lo = -(bands - 1) / 2
	return lo, lo + bands - 1
}

// bandOf maps a priority to a band index (0: lowest).
func bandOf(prio, bands int) int {
	lo, hi := bandRange(bands)
	return min(max(prio, lo), hi) - lo
}
