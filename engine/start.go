package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/dedup"
)

// StartURL is a start URL as it sits in NAME:start_urls: a plain URL, or
// JSON {"url": …, "meta": {…}, "priority": …, "headers": {…}}.
type StartURL struct {
	URL      string            `json:"url"`
	Meta     map[string]string `json:"meta,omitempty"`
	Priority int               `json:"priority,omitempty"`
	// Headers are sent with the start URL's request only (not with the
	// links followed from it), over FetchConfig.Header; but for
	// Authorization, which goes with the links on the same scheme, host
	// and port. Credentials in URL become that header (Basic) and leave
	// the URL, so that they are no part of a page's identity.
	Headers map[string]string `json:"headers,omitempty"`
}

// maxStartPayload bounds a start-URL payload: a URL of MaxURLLength and
// room for JSON meta.
const maxStartPayload = 64 << 10

// ParseStartURL decodes a start-URL payload. The URL must be an absolute
// http or https URL of at most MaxURLLength bytes; errors wrap
// ErrBadPayload (and ErrURLTooLong for a URL too long).
func ParseStartURL(p []byte) (StartURL, error) {
	p = bytes.TrimSpace(p)
	if len(p) > maxStartPayload {
		return StartURL{}, fmt.Errorf("%w: start url payload of %d bytes: %w (the limit is %d bytes)",
			ErrBadPayload, len(p), ErrURLTooLong, MaxURLLength)
	}
	var s StartURL
	if len(p) > 0 && p[0] == '{' {
		dec := json.NewDecoder(bytes.NewReader(p))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			return StartURL{}, fmt.Errorf("%w: start url json: %v", ErrBadPayload, err)
		}
	} else {
		s.URL = string(p)
	}
	if len(s.URL) > MaxURLLength {
		return StartURL{}, fmt.Errorf("%w: start url of %d bytes: %w (the limit is %d bytes)",
			ErrBadPayload, len(s.URL), ErrURLTooLong, MaxURLLength)
	}
	for k, v := range s.Headers {
		if err := checkHeader(k, v); err != nil {
			return StartURL{}, fmt.Errorf("%w: start url: %v", ErrBadPayload, err)
		}
	}
	u, err := dedup.Canonicalize(s.URL)
	if err != nil {
		return StartURL{}, fmt.Errorf("%w: start url: %v", ErrBadPayload, err)
	}
	s.URL = u.String()
	if len(s.URL) > MaxURLLength { // canonical escaping can lengthen it
		return StartURL{}, fmt.Errorf("%w: start url of %d bytes: %w (the limit is %d bytes)",
			ErrBadPayload, len(s.URL), ErrURLTooLong, MaxURLLength)
	}
	return s, nil
}

// Marshal encodes s as it is stored: the plain URL when it has no meta, no
// priority and no headers, JSON otherwise.
func (s StartURL) Marshal() []byte {
	if len(s.Meta) == 0 && s.Priority == 0 && len(s.Headers) == 0 {
		return []byte(s.URL)
	}
	b, _ := json.Marshal(s) // cannot fail: strings and ints only
	return b
}

// seedBroker validates start URLs and publishes them to the start queue of crawl
// name. Nothing is published unless every URL is valid.
func seedBroker(ctx context.Context, b broker.Broker, name string, starts ...StartURL) error {
	msgs := make([]broker.Message, 0, len(starts))
	for _, s := range starts {
		p, err := ParseStartURL(s.Marshal())
		if err != nil {
			return err
		}
		s.URL = p.URL
		msgs = append(msgs, broker.Message{Body: s.Marshal(), Priority: s.Priority})
	}
	if len(msgs) == 0 {
		return nil
	}
	if err := b.Publish(ctx, StartQueue(name), msgs...); err != nil {
		return fmt.Errorf("seed %s: %w", StartQueue(name), err)
	}
	return nil
}

// ErrStartsType is wrapped by the errors of a StartSource whose store holds
// the start URLs in another type than the source reads (Redis:
// {NAME}:start_urls made a set under a worker that reads a list). No start
// URL can be taken until an operator changes the key or the configuration,
// so Run stops with the error, which names the key, instead of retrying.
var ErrStartsType = errors.New("engine: start urls of the wrong type")

// StartSource keeps a crawl's start URLs outside the broker (see
// Config.Starts): Redis keeps them in a plain list, as scrapy-redis does,
// so that "redis-cli lpush NAME:start_urls URL" feeds a running crawl.
type StartSource interface {
	// TakeStarts removes and returns up to max payloads without blocking.
	TakeStarts(ctx context.Context, max int) ([][]byte, error)
	// AddStarts appends payloads.
	AddStarts(ctx context.Context, payloads ...[]byte) error
	// PendingStarts counts the payloads waiting.
	PendingStarts(ctx context.Context) (int64, error)
}

// StartReturner is implemented by start sources that can put back
// payloads taken by TakeStarts when they could not be moved into the
// frontier, even where AddStarts would be refused: a Redis server out of
// memory (maxmemory, noeviction) refuses every push, but returning what
// was just taken grows nothing on balance. Without it the engine puts them
// back with AddStarts; a start URL that cannot be put back is lost.
type StartReturner interface {
	// ReturnStarts puts back payloads taken by TakeStarts, where they are
	// taken next.
	ReturnStarts(ctx context.Context, payloads ...[]byte) error
}

// StartLeaser is implemented by start sources that take start URLs at
// least once: a batch taken by TakeLeased stays recorded in the source
// until it is confirmed (StartBatch.Done) once its requests are in the
// frontier, or returned (StartBatch.Return) when they could not be moved
// there. A batch neither confirmed nor returned when lease is over (its
// worker died) goes back where it is taken next, and PendingStarts counts
// it until then, so the crawl is not found done meanwhile. Taking a batch
// again is safe: start URLs are rechecked against the publication marks
// and only what was not published is. The engine prefers it to TakeStarts
// and leases for Config.Lease.
type StartLeaser interface {
	// TakeLeased takes up to max payloads for lease without blocking; it
	// returns a nil batch when none is waiting.
	TakeLeased(ctx context.Context, max int, lease time.Duration) (StartBatch, error)
}

// StartBatch is a batch of start URLs taken by StartLeaser.TakeLeased.
type StartBatch interface {
	// Payloads are the payloads taken, in order.
	Payloads() [][]byte
	// Done confirms the batch: it is dropped from the source for good.
	Done(ctx context.Context) error
	// Return drops the lease and puts payloads (those of the batch that
	// could not be moved into the frontier) back where they are taken
	// next, in their order, even where AddStarts would be refused (see
	// StartReturner).
	Return(ctx context.Context, payloads ...[]byte) error
}

// StartRejecter is implemented by start sources that keep the payloads
// the engine rejects (not a start URL, too long), with the reason, where an
// operator can see them: Redis keeps them in the list
// {NAME}:start_urls:dead. Without it, a rejected payload is counted
// (StatStartURLsRejected) and logged at Warn, and nothing else remains.
type StartRejecter interface {
	RejectStart(ctx context.Context, payload []byte, reason string) error
}

// seedSource validates start URLs and adds them to src. Nothing is added
// unless every URL is valid.
func seedSource(ctx context.Context, src StartSource, starts ...StartURL) error {
	ps := make([][]byte, 0, len(starts))
	for _, s := range starts {
		p, err := ParseStartURL(s.Marshal())
		if err != nil {
			return err
		}
		s.URL = p.URL
		ps = append(ps, s.Marshal())
	}
	if len(ps) == 0 {
		return nil
	}
	if err := src.AddStarts(ctx, ps...); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	return nil
}

// rejectStart handles a payload of Config.Starts that is not a start URL:
// it is counted and logged at Warn, and kept with the reason if the source
// is a StartRejecter.
func (c *Crawler) rejectStart(ctx context.Context, p []byte, err error) {
	c.fail(ErrorBadURL, nil)
	c.stats.Inc(StatStartURLsRejected)
	kept := "dropped (this start source keeps no dead letters)"
	if r, ok := c.cfg.Starts.(StartRejecter); ok {
		if e := r.RejectStart(ctx, p, err.Error()); e != nil {
			kept = "dropped: keeping it failed: " + e.Error()
		} else {
			kept = "dead-lettered"
		}
	}
	c.log.Warn("start url rejected", "queue", StartQueue(c.cfg.Name), "bytes", len(p), "err", err, "outcome", kept)
}
