//go:build !linux

package main

import (
	"errors"
	"os"
)

// pipeOf returns nil: only Linux tells how much of a pipe is unread, so
// elsewhere an item is acknowledged once written to the pipe.
func pipeOf(any) *os.File { return nil }

// errReaderGone is awaitTaken's error when the pipe's reader closed its
// end with bytes unread.
var errReaderGone = errors.New("the reader closed the pipe")

// awaitTaken is never called where pipeOf returns nil.
func awaitTaken(*os.File) error { return nil }
