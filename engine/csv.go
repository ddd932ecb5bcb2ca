package engine

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// PageColumns are the CSV columns of Page items with the given extracted
// fields: "url", "status", the fields in the order given, then "title",
// "depth", "content_type", "length", "links" and "fetched_at".
func PageColumns(fields ...string) []string {
	cols := append([]string{"url", "status"}, fields...)
	return append(cols, pageTail...)
}

// pageTail are the columns of a Page after its fields.
var pageTail = []string{"title", "depth", "content_type", "length", "links", "fetched_at", "referrer", "error"}

// ErrColumns is wrapped by the error of CreateCSV when the file already
// starts with another header row.
var ErrColumns = errors.New("engine: csv columns differ")

// CSV is a Sink that writes items as CSV rows (RFC 4180, as encoding/csv
// reads them) under a header row naming its columns. Every Write is
// flushed to the writer before it returns, as JSONLines does; Close
// flushes, syncs a file it opened, and closes it.
//
// A row takes, for each column:
//   - of a Page (or *Page): the field of that name (see PageColumns); an
//     extracted field (Page.Fields) with several values gives them joined
//     by a line feed, in one cell;
//   - of any other item: the member of that name of the item's JSON
//     object (a struct with json tags, a map); strings are written as they
//     are, null or a missing member as an empty cell, other values as JSON.
//     An item that does not encode as a JSON object is an error.
type CSV struct {
	mu      sync.Mutex
	buf     *bufio.Writer
	out     io.Writer // what buf writes to
	file    *sinkFile // nil for a writer we don't own
	w       *csv.Writer
	columns []string
	header  bool // the header row is written (or was in the file)
	closer  io.Closer
	sync    func() error
	closed  bool
}

// NewCSV writes items to w under a header row of columns, written with
// the first Write; Close flushes but does not close w.
func NewCSV(w io.Writer, columns []string) *CSV {
	buf := bufio.NewWriterSize(w, 64<<10)
	return &CSV{buf: buf, out: w, w: csv.NewWriter(buf), columns: slices.Clone(columns)}
}

// CreateCSV appends items to the CSV file at path, creating it. A file
// that has content must start with the same header row: otherwise
// CreateCSV fails with ErrColumns.
func CreateCSV(path string, columns []string) (*CSV, error) {
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() && fi.Size() > 0 {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("csv sink: %w", err)
		}
		head, err := csv.NewReader(bufio.NewReader(f)).Read()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("csv sink: %s: read the header row: %w", path, err)
		}
		if !slices.Equal(head, columns) {
			return nil, fmt.Errorf("%w: %s has columns %s, this crawl writes %s",
				ErrColumns, path, strings.Join(head, ","), strings.Join(columns, ","))
		}
		s, err := openCSV(path, os.O_APPEND, columns)
		if s != nil {
			s.header = true
		}
		return s, err
	}
	return openCSV(path, os.O_APPEND, columns)
}

// TruncateCSV writes items to the CSV file at path, creating it or
// emptying it first.
func TruncateCSV(path string, columns []string) (*CSV, error) {
	return openCSV(path, os.O_TRUNC, columns)
}

func openCSV(path string, mode int, columns []string) (*CSV, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|mode, 0o644)
	if err != nil {
		return nil, fmt.Errorf("csv sink: %w", err)
	}
	// A record may span lines (a quoted line feed): no torn tail is cut
	// on open, where the record's start is not known; a failed Write is.
	sf, err := newSinkFile(f, path, false)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("csv sink: %w", err)
	}
	s := NewCSV(sf, columns)
	s.closer = f
	if sf.regular {
		s.sync = f.Sync
		s.file = sf
	}
	return s, nil
}

// Columns returns the sink's columns.
func (s *CSV) Columns() []string { return slices.Clone(s.columns) }

// Write writes one row per item and flushes them to the writer. Nothing
// is written if an item cannot be turned into a row.
func (s *CSV) Write(_ context.Context, items []any) error {
	rows := make([][]string, 0, len(items))
	for _, it := range items {
		row, err := s.row(it)
		if err != nil {
			return err
		}
		rows = append(rows, row)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("csv sink: write: %w", os.ErrClosed)
	}
	header := s.header
	if !s.header {
		if err := s.w.Write(s.columns); err != nil {
			return s.undo(header, fmt.Errorf("csv sink: %w", err))
		}
		s.header = true
	}
	if err := s.w.WriteAll(rows); err != nil { // WriteAll flushes the csv.Writer
		return s.undo(header, fmt.Errorf("csv sink: %w", err))
	}
	if err := s.buf.Flush(); err != nil {
		return s.undo(header, fmt.Errorf("csv sink: flush: %w", err))
	}
	if s.file != nil {
		s.file.commit()
	}
	return nil
}

// undo drops what a failed Write left, as JSONLines.undo does; header is
// whether the header row was written before it.
func (s *CSV) undo(header bool, err error) error {
	s.buf.Reset(s.out)
	s.w = csv.NewWriter(s.buf)
	if s.file != nil {
		s.header = header
		if e := s.file.rollback(); e != nil {
			return errors.Join(err, fmt.Errorf("csv sink: %w", e))
		}
	}
	return err
}

// row is the row of one item.
func (s *CSV) row(it any) ([]string, error) {
	if p, ok := it.(Page); ok {
		it = &p
	}
	row := make([]string, len(s.columns))
	if p, ok := it.(*Page); ok {
		for i, c := range s.columns {
			row[i] = p.cell(c)
		}
		return row, nil
	}
	b, err := json.Marshal(it)
	if err != nil {
		return nil, fmt.Errorf("csv sink: encode %T: %w: %w", it, ErrBadItem, err)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("csv sink: %w: an item of type %T is not a JSON object; CSV needs named members", ErrBadItem, it)
	}
	for i, c := range s.columns {
		v, ok := obj[c]
		if !ok || string(v) == "null" {
			continue
		}
		var str string
		if json.Unmarshal(v, &str) == nil {
			row[i] = str
		} else {
			row[i] = string(v)
		}
	}
	return row, nil
}

// cell is the value of column c of p.
func (p *Page) cell(c string) string {
	switch c {
	case "url":
		return p.URL
	case "status":
		return strconv.Itoa(p.Status)
	case "title":
		return p.Title
	case "depth":
		return strconv.Itoa(p.Depth)
	case "content_type":
		return p.ContentType
	case "length":
		return strconv.Itoa(p.Length)
	case "links":
		return strconv.Itoa(p.Links)
	case "fetched_at":
		return p.FetchedAt.Format(time.RFC3339Nano)
	case "referrer":
		return p.Referrer
	case "error":
		return p.Error
	}
	if v, ok := p.Fields[c]; ok {
		return strings.Join(v, "\n")
	}
	return p.Meta[c]
}

// Close flushes, syncs and closes the file (if the sink opened it). It is
// idempotent.
func (s *CSV) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.w.Flush()
	err := s.w.Error()
	if e := s.buf.Flush(); err == nil {
		err = e
	}
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
		return fmt.Errorf("csv sink: close: %w", err)
	}
	return nil
}
