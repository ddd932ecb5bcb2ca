package engine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/trawlhq/trawl/broker"
)

// Sink stores items. The engine calls Write with the items of one page
// (never empty), from the goroutines of pages processed concurrently, so
// Write must be safe for concurrent use. Write returns only once the items
// are durable (a file written and flushed, a list pushed, a transaction
// committed): the engine acknowledges a page only after its items were
// written. An error wrapping ErrBadItem fails the page (an item that
// cannot be stored for what it is: the page is retried, and
// dead-lettered past the retry limit). Any other error is the sink's
// failure, not the page's: the engine holds the page and writes it again
// (its items are written again then: a sink sees every item at least
// once), spending none of its attempts, and Run stops with
// ErrBackendFailing when writes keep failing for Config.FailureTimeout. Items are what the
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

// ErrBadItem is wrapped by a Sink's error for an item it cannot store for
// what the item is (it does not encode): the page that yielded it is at
// fault, and is retried and dead-lettered like a page whose fetch failed.
var ErrBadItem = errors.New("engine: item cannot be stored")

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
// every Write. A Write that fails leaves nothing of itself in a file the
// sink opened: the file is cut back to its last whole line, so that the
// next Write (of the same items, again) neither glues onto a torn line
// nor writes a line twice; and a file opened to append to is cut back to
// its last whole line first (a crawl killed mid-write). A writer that is
// not such a file (a pipe) may keep a torn line when a Write fails.
type JSONLines struct {
	mu     sync.Mutex
	lines  []byte        // a Write's lines, encoded
	enc    *json.Encoder // into one: what appendPage does not encode itself
	one    bytes.Buffer
	out    io.Writer // what w writes to
	w      *bufio.Writer
	file   *sinkFile // nil for a writer we don't own
	closer io.Closer // nil for a writer we don't own
	sync   func() error
	closed bool
}

// NewJSONLines writes items to w; Close flushes but does not close w.
func NewJSONLines(w io.Writer) *JSONLines {
	s := &JSONLines{w: bufio.NewWriterSize(w, 64<<10), out: w}
	s.enc = json.NewEncoder(&s.one)
	s.enc.SetEscapeHTML(false)
	return s
}

// CreateJSONLines appends items to the file at path, creating it. A
// torn last line (no newline at its end) is cut off first.
func CreateJSONLines(path string) (*JSONLines, error) {
	return openJSONLines(path, os.O_APPEND)
}

// TruncateJSONLines writes items to the file at path, creating it or
// emptying it first.
func TruncateJSONLines(path string) (*JSONLines, error) {
	return openJSONLines(path, os.O_TRUNC)
}

func openJSONLines(path string, mode int) (*JSONLines, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|mode, 0o644)
	if err != nil {
		return nil, fmt.Errorf("jsonlines sink: %w", err)
	}
	sf, err := newSinkFile(f, path, true)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("jsonlines sink: %w", err)
	}
	s := NewJSONLines(sf)
	s.closer = f
	// Only a regular file can be synced, or cut: /dev/null, a pipe or a
	// terminal answer fsync with EINVAL.
	if sf.regular {
		s.sync = f.Sync
		s.file = sf
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
	// Encoded first: an item that does not encode is the page's fault,
	// and nothing of its batch is written.
	s.lines = s.lines[:0]
	for _, it := range items {
		if p, ok := it.(*Page); ok && p != nil && p.FetchedAt.Location() == time.UTC &&
			p.FetchedAt.Year() >= 0 && p.FetchedAt.Year() <= 9999 {
			s.lines = s.appendPage(s.lines, p)
			continue
		}
		var err error
		if s.lines, err = s.appendJSON(s.lines, it); err != nil {
			return fmt.Errorf("jsonlines sink: encode: %w: %w", ErrBadItem, err)
		}
	}
	if _, err := s.w.Write(s.lines); err != nil {
		return s.undo(fmt.Errorf("jsonlines sink: write: %w", err))
	}
	if err := s.w.Flush(); err != nil {
		return s.undo(fmt.Errorf("jsonlines sink: flush: %w", err))
	}
	if s.file != nil {
		s.file.commit()
	}
	return nil
}

// appendJSON appends v's line as encoding/json writes it (HTML
// characters not escaped).
func (s *JSONLines) appendJSON(b []byte, v any) ([]byte, error) {
	s.one.Reset()
	if err := s.enc.Encode(v); err != nil {
		return b, err
	}
	return append(b, s.one.Bytes()...), nil
}

// appendPage appends p's line, the bytes appendJSON writes for it,
// without reflection (encoding/json was about 4.5 µs of a worker's CPU a
// page, BENCHMARKS.md, issue 26, session 14): what it does not write
// itself (a string to escape, the maps) goes through appendJSON. p's
// FetchedAt is in UTC, of a year 0 to 9999 (else it encodes as
// encoding/json does, or fails as it does).
func (s *JSONLines) appendPage(b []byte, p *Page) []byte {
	b = append(b, `{"url":`...)
	b = s.appendString(b, p.URL)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(p.Status), 10)
	if p.Title != "" {
		b = append(b, `,"title":`...)
		b = s.appendString(b, p.Title)
	}
	b = append(b, `,"depth":`...)
	b = strconv.AppendInt(b, int64(p.Depth), 10)
	if p.ContentType != "" {
		b = append(b, `,"content_type":`...)
		b = s.appendString(b, p.ContentType)
	}
	b = append(b, `,"length":`...)
	b = strconv.AppendInt(b, int64(p.Length), 10)
	b = append(b, `,"links":`...)
	b = strconv.AppendInt(b, int64(p.Links), 10)
	b = append(b, `,"fetched_at":"`...)
	b = p.FetchedAt.AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	if p.Referrer != "" {
		b = append(b, `,"referrer":`...)
		b = s.appendString(b, p.Referrer)
	}
	if p.Error != "" {
		b = append(b, `,"error":`...)
		b = s.appendString(b, p.Error)
	}
	if len(p.Fields) > 0 {
		b = append(b, `,"fields":`...)
		b = s.appendValue(b, p.Fields)
	}
	if len(p.Meta) > 0 {
		b = append(b, `,"meta":`...)
		b = s.appendValue(b, p.Meta)
	}
	return append(b, "}\n"...)
}

// appendString appends str as a JSON string: as it is between quotes
// when it has only printable ASCII but '"' and '\\' (what encoding/json
// writes unescaped), else as encoding/json escapes it.
func (s *JSONLines) appendString(b []byte, str string) []byte {
	for i := 0; i < len(str); i++ {
		if c := str[i]; c < 0x20 || c > 0x7f || c == '"' || c == '\\' {
			return s.appendValue(b, str)
		}
	}
	b = append(b, '"')
	b = append(b, str...)
	return append(b, '"')
}

// appendValue appends v, a string or a map of strings (which always
// encode), as encoding/json does, without its line's newline.
func (s *JSONLines) appendValue(b []byte, v any) []byte {
	n := len(b)
	b, _ = s.appendJSON(b, v)
	return b[:max(n, len(b)-1)]
}

// undo drops what the failed Write left: its buffered lines, the buffer's
// error (a bufio.Writer fails every later write once one failed), and in
// a file of its own the bytes written since the last whole line.
func (s *JSONLines) undo(err error) error {
	s.w.Reset(s.out)
	if s.file != nil {
		if e := s.file.rollback(); e != nil {
			return errors.Join(err, fmt.Errorf("jsonlines sink: %w", e))
		}
	}
	return err
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

// sinkFile is a sink's file of whole records, each ending in a newline:
// it knows where the last whole record ends, and cuts the file back to
// it after a failed write.
type sinkFile struct {
	f       *os.File
	w       io.Writer // f; a test's writer that fails
	path    string
	regular bool
	end     int64 // the size up to the last whole record
	size    int64 // the size, with what was written since
}

// newSinkFile wraps f, just opened from path; with cut, a regular file's
// torn last line is cut off.
func newSinkFile(f *os.File, path string, cut bool) (*sinkFile, error) {
	sf := &sinkFile{f: f, w: f, path: path}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return sf, nil
	}
	sf.regular = true
	if !cut {
		sf.end, sf.size = fi.Size(), fi.Size()
		return sf, nil
	}
	end, err := lastRecordEnd(f, fi.Size())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if end < fi.Size() {
		if err := f.Truncate(end); err != nil {
			return nil, fmt.Errorf("%s: cut the torn last line: %w", path, err)
		}
	}
	sf.end, sf.size = end, end
	return sf, nil
}

// lastRecordEnd returns the offset just after the last newline of f, of
// the given size (0 when it has none).
func lastRecordEnd(f *os.File, size int64) (int64, error) {
	buf := make([]byte, 64<<10)
	for off := size; off > 0; {
		n := min(int64(len(buf)), off)
		off -= n
		if _, err := f.ReadAt(buf[:n], off); err != nil {
			return 0, err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			return off + int64(i) + 1, nil
		}
	}
	return 0, nil
}

// Write writes to the file, counting what was written.
func (sf *sinkFile) Write(p []byte) (int, error) {
	n, err := sf.w.Write(p)
	sf.size += int64(n)
	return n, err
}

// commit records that the file ends in a whole record.
func (sf *sinkFile) commit() { sf.end = sf.size }

// rollback cuts the file back to its last whole record.
func (sf *sinkFile) rollback() error {
	if !sf.regular || sf.size == sf.end {
		return nil
	}
	if err := sf.f.Truncate(sf.end); err != nil {
		return fmt.Errorf("%s: cut a torn write: %w", sf.path, err)
	}
	if _, err := sf.f.Seek(sf.end, io.SeekStart); err != nil {
		return fmt.Errorf("%s: cut a torn write: %w", sf.path, err)
	}
	sf.size = sf.end
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
			return fmt.Errorf("queue sink: encode: %w: %w", ErrBadItem, err)
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
