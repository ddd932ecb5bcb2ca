package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/dedup"
)

// StartURL is a start URL as it sits in NAME:start_urls: a plain URL, or
// JSON {"url": …, "meta": {…}, "priority": …}.
type StartURL struct {
	URL      string            `json:"url"`
	Meta     map[string]string `json:"meta,omitempty"`
	Priority int               `json:"priority,omitempty"`
}

// ParseStartURL decodes a start-URL payload. The URL must be an absolute
// http or https URL; errors wrap ErrBadPayload.
func ParseStartURL(p []byte) (StartURL, error) {
	p = bytes.TrimSpace(p)
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
	u, err := dedup.Canonicalize(s.URL)
	if err != nil {
		return StartURL{}, fmt.Errorf("%w: start url: %v", ErrBadPayload, err)
	}
	s.URL = u.String()
	return s, nil
}

// Marshal encodes s as it is stored: the plain URL when it has no meta and
// no priority, JSON otherwise.
func (s StartURL) Marshal() []byte {
	if len(s.Meta) == 0 && s.Priority == 0 {
		return []byte(s.URL)
	}
	b, _ := json.Marshal(s) // cannot fail: strings and ints only
	return b
}

// Seed validates start URLs and publishes them to the start queue of crawl
// name. Nothing is published unless every URL is valid.
func Seed(ctx context.Context, b broker.Broker, name string, starts ...StartURL) error {
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

// SeedSource validates start URLs and adds them to src. Nothing is added
// unless every URL is valid.
func SeedSource(ctx context.Context, src StartSource, starts ...StartURL) error {
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
