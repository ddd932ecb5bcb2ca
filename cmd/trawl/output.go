package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/trawlhq/trawl/engine"
)

// format is the items' format: --format, or else the extension of --out
// (.csv: csv), or else jsonl.
func (o *options) format() string {
	if o.outFormat != "" {
		return o.outFormat
	}
	if strings.EqualFold(filepath.Ext(o.out), ".csv") {
		return "csv"
	}
	return "jsonl"
}

// checkOutput validates --format against --out and --extract.
func (o *options) checkOutput() []error {
	var errs []error
	switch o.outFormat {
	case "", "jsonl", "csv":
	default:
		errs = append(errs, fmt.Errorf("--format %q: want jsonl or csv", o.outFormat))
	}
	if o.format() == "csv" {
		if o.out == "redis" || o.out == "queue" {
			errs = append(errs, fmt.Errorf("--format csv: --out=%s takes JSON items; write CSV to a file or - (stdout)", o.out))
		}
		builtin := engine.PageColumns()
		for _, e := range o.extract {
			if name, _, _ := strings.Cut(e, "="); slices.Contains(builtin, name) {
				errs = append(errs, fmt.Errorf("--extract %s=…: %q is a column of every page in CSV (%s); name the field otherwise",
					name, name, strings.Join(builtin, ", ")))
			}
		}
	}
	return errs
}

// csvColumns are the CSV columns of the page items: url, status, the
// --extract fields in the order given, then the other page fields.
func (o *options) csvColumns() []string {
	var fields []string
	for _, e := range o.extract {
		name, _, _ := strings.Cut(e, "=")
		if !slices.Contains(fields, name) {
			fields = append(fields, name)
		}
	}
	return engine.PageColumns(fields...)
}

// openFileSink opens the --out file (or stdout for "-") in the format.
func (o *options) openFileSink() (engine.Sink, error) {
	if o.format() == "csv" {
		if o.out == "-" || o.out == "" {
			return engine.NewCSV(o.stdout, o.csvColumns()), nil
		}
		open := engine.CreateCSV
		if o.flush {
			open = engine.TruncateCSV
		}
		s, err := open(o.out, o.csvColumns())
		if err != nil {
			return nil, usageError("--out: %w (--flush starts the file again)", err)
		}
		return s, nil
	}
	if o.out == "-" || o.out == "" {
		return engine.NewJSONLines(o.stdout), nil
	}
	open := engine.CreateJSONLines
	if o.flush { // a clean start: the crawl's items start again too
		open = engine.TruncateJSONLines
	}
	s, err := open(o.out)
	if err != nil {
		return nil, fmt.Errorf("--out: %w", err)
	}
	return s, nil
}
