package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

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
			return StartURL{}, fmt.Errorf("%w: start url json: %v", ErrBadPayload, jsonTypeError(err))
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

// jsonTypeError words err, a StartURL's decoding error, for one who wrote
// the JSON: a value of the wrong type names its field and what it wants
// ("meta" holds a number, want strings as its values), not Go's types
// ("cannot unmarshal number into Go struct field StartURL.meta of type
// string"); other errors are err.
func jsonTypeError(err error) error {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || te.Field == "" {
		return err
	}
	article := "a"
	if strings.ContainsRune("aeiou", rune(te.Value[0])) {
		article = "an"
	}
	switch {
	case te.Field == "priority":
		return fmt.Errorf("%q is %s %s, want a whole number", te.Field, article, te.Value)
	case te.Type.Kind() == reflect.Map: // meta, headers
		return fmt.Errorf(`%q is %s %s, want an object of strings, {"name": "value"}`, te.Field, article, te.Value)
	case te.Field == "meta" || te.Field == "headers": // one of their values
		return fmt.Errorf("%q holds %s %s, want strings as its values", te.Field, article, te.Value)
	}
	return fmt.Errorf("%q is %s %s, want a string", te.Field, article, te.Value)
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
// Config.Starts): Redis keeps them in a plain list (or set), as
// scrapy-redis does, so that "redis-cli rpush '{NAME}:start_urls' URL"
// feeds a running crawl. Taking is at least once and leases nothing: a
// payload taken stays in the source until the engine drops it, once it is
// in the frontier (claimed in the filter, so that taking it again
// publishes nothing twice) or rejected. A worker killed with a batch
// loses nothing and leaves nothing to wait for: the batch is where it was,
// taken again at once by any worker. It is the one interface of a start
// source; the engine asserts nothing else on it.
type StartSource interface {
	// TakeStarts returns up to max payloads without removing them and
	// without blocking, those first in line first.
	TakeStarts(ctx context.Context, max int) ([][]byte, error)
	// DropStarts drops the payloads of one TakeStarts (taken, in its
	// order) from the source, but for those of keep (a sub-multiset of
	// taken that could not be moved into the frontier), which stay where
	// they are taken next, in their order. A payload of taken already
	// dropped (another worker took and dropped it first) is not dropped
	// again. It must work on a store that refuses to grow (a Redis server
	// out of memory): it only shrinks it.
	DropStarts(ctx context.Context, taken, keep [][]byte) error
	// RejectStart keeps a payload the engine rejects (not a start URL, too
	// long) with the reason, where an operator can see and requeue it (the
	// start URLs' dead letters); the engine drops it afterwards.
	RejectStart(ctx context.Context, payload []byte, reason string) error
	// AddStarts appends payloads.
	AddStarts(ctx context.Context, payloads ...[]byte) error
	// PendingStarts counts the payloads waiting, those taken and not yet
	// dropped included, so that the crawl is not found done meanwhile.
	PendingStarts(ctx context.Context) (int64, error)
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
// it is counted, logged at Warn and kept with the reason in the source's
// dead letters (the caller drops it from the start URLs).
func (c *Crawler) rejectStart(ctx context.Context, p []byte, err error) {
	c.fail(ErrorBadURL, nil)
	c.stats.Inc(StatStartURLsRejected)
	kept := "dead-lettered"
	if e := c.cfg.Starts.RejectStart(ctx, p, err.Error()); e != nil {
		kept = "dropped: keeping it failed: " + e.Error()
	}
	c.log.Warn("start url rejected", "queue", StartQueue(c.cfg.Name), "bytes", len(p), "err", err, "outcome", kept)
}
