package main

import (
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// pipeOf returns w as a pipe whose reader taking each line can be waited
// for (see awaitTaken), or nil.
func pipeOf(w any) *os.File {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		return nil
	}
	return f
}

// errReaderGone is awaitTaken's error when the pipe's reader closed its
// end with bytes unread.
var errReaderGone = errors.New("the reader closed the pipe")

// awaitTaken waits until the pipe p holds no unread byte: its reader
// took all that was written to it. It returns errReaderGone if the reader
// closed its end first.
func awaitTaken(p *os.File) error {
	fd := int(p.Fd())
	wait := 50 * time.Microsecond
	for {
		n, err := unix.IoctlGetInt(fd, unix.TIOCINQ) // FIONREAD
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		if _, err := unix.Poll(fds, 0); err == nil && fds[0].Revents&(unix.POLLERR|unix.POLLHUP) != 0 {
			return errReaderGone
		}
		time.Sleep(wait)
		wait = min(2*wait, 10*time.Millisecond)
	}
}
