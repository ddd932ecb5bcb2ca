package engine

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/trawlhq/trawl/broker"
)

// Sink stores items. The engine calls Write with the items of one page
// (never empty), from the goroutines of pages processed concurrently, so
// Write must be safe for concurrent use. Write returns only once the items
// are durable (a file written and flushed, a list pushed, a transaction
// committed): the engine acknowledges a page only after its items were
// written. An error fails the page's writes: the page is nacked and
// processed again later (its items are written again then: a sink sees
// every item at least once), and Run stops with ErrBackendFailing when
// writes keep failing (see Config.FailureTimeout). Items are what the
// callbacks return: *Page from the default callback, anything from others.
//
// Close is called once, by whoever opened the sink, after Run returned;
// the engine itself never closes Config.Sink.
//
// JSONLines, CSV and QueueSink are the sinks trawl ships; a library user
// implements Sink to store items elsewhere (a database, an object store).
type Sink interface {
	Write(ctx context.Context, items []any) error
	Close() error
}

// Page is the item the default callback emits for every fetched page and,
// with Config.ErrorItems, for every page that failed (Status is the final
// status, 0 when no response came, and Error says why).
type Page struct {
	URL         string              `json:"url"`
	Status      int                 `json:"status"`
	Title       string              `json:"title,omitempty"`
	Depth       int                 `json:"depth"`
	ContentType string              `json:"content_type,omitempty"`
	Length      int                 `json:"length"`
	Links       int                 `json:"links"`
	FetchedAt   time.Time           `json:"fetched_at"`
	Referrer    string              `json:"referrer,omitempty"` // with Config.ErrorItems: the page linking here
	Error       string              `json:"error,omitempty"`    // why the page failed (error items only)
	Fields      map[string][]string `json:"fields,omitempty"`
	Meta        map[string]string   `json:"meta,omitempty"`
}

// JSONLines writes one JSON document per line to a writer, flushing after
// every Write.
type JSONLines struct {
	mu     sync.Mutex
	w      *bufio.Writer
	closer io.Closer // nil for a writer we don't own
	sync   func() error
	closed bool
}

// NewJSONLines writes items to w; Close flushes but does not close w.
func NewJSONLines(w io.Writer) *JSONLines {
	return &JSONLines{w: bufio.NewWriterSize(w, 64<<10)}
}

// CreateJSONLines appends items to the file at path, creating it.
func CreateJSONLines(path string) (*JSONLines, error) {
	return openJSONLines(path, os.O_APPEND)
}

// TruncateJSONLines writes items to the file at path, creating it or
// emptying it first.
func TruncateJSONLines(path string) (*JSONLines, error) {
	return openJSONLines(path, os.O_TRUNC)
}

func openJSONLines(path string, mode int) (*JSONLines, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|mode, 0o644)
	if err != nil {
		return nil, fmt.Errorf("jsonlines sink: %w", err)
	}
	s := NewJSONLines(f)
	s.closer = f
	// Only a regular file can be synced: /dev/null, a pipe or a terminal
	// answer fsync with EINVAL.
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		s.sync = f.Sync
	}
	return s, nil
}

// Write encodes items, one per line, and flushes them to the writer.
func (s *JSONLines) Write(_ context.Context, items []any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("jsonlines sink: write: %w", os.ErrClosed)
	}
	enc := json.NewEncoder(s.w)
	enc.SetEscapeHTML(false)
	for _, it := range items {
		if err := enc.Encode(it); err != nil {
			return fmt.Errorf("jsonlines sink: encode: %w", err)
		}
	}
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("jsonlines sink: flush: %w", err)
	}
	return nil
}

// Close flushes, syncs and closes the file (if the sink opened it).
// It is idempotent.
func (s *JSONLines) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.w.Flush()
	if s.sync != nil {
		if e := s.sync(); err == nil {
			err = e
		}
	}
	if s.closer != nil {
		if e := s.closer.Close(); err == nil {
			err = e
		}
	}
	if err != nil {
		return fmt.Errorf("jsonlines sink: close: %w", err)
	}
	return nil
}

// QueueSink publishes items as JSON messages to a broker queue (for
// example ItemsQueue(name)), where a downstream consumer takes them. Write
// returns once the broker has taken them.
type QueueSink struct {
	Broker broker.Broker
	Queue  string
}

// Write publishes items, one message each, in one call.
func (s QueueSink) Write(ctx context.Context, items []any) error {
	msgs := make([]broker.Message, len(items))
	for i, it := range items {
		b, err := json.Marshal(it)
		if err != nil {
			return fmt.Errorf("queue sink: encode: %w", err)
		}
		msgs[i] = broker.Message{Body: b}
	}
	if err := s.Broker.Publish(ctx, s.Queue, msgs...); err != nil {
		return fmt.Errorf("queue sink: %w", err)
	}
	return nil
}

// Close does nothing; the broker is not closed.
func (QueueSink) Close() error { return nil }
