package local

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/trawlhq/trawl/dedup"
)

// The journal holds the fingerprints added since the last save, so that
// they survive a kill -9. It is a series of files named PATH.journal.N
// (N = 1, 2, …), each
//
//	offset  size  field
//	0       8     magic "TRAWLJR\x00"
//	8       4     format version (1)
//	12      …     records
//
// and each record, one per Add that found new fingerprints, all integers
// little-endian:
//
//	0       4     count of fingerprints; 0 marks a Purge
//	4       4     CRC-32C of the fingerprints
//	8       4     CRC-32C of the 8 bytes before
//	12      16·count  the fingerprints
//
// Replaying a record is adding its fingerprints again, which changes
// nothing if the snapshot already holds them: a journal file that a save
// covered but could not delete (a kill in between) is harmless.
const (
	journalMagic      = "TRAWLJR\x00"
	journalVersion    = 1
	journalHeaderSize = 12
	recordHeaderSize  = 12
	maxRecord         = 1 << 24 // fingerprints in one record
)

// journal is the journal file being appended to.
type journal struct {
	base string // Config.Path; files are base.journal.N
	gen  uint64 // N of the current file
	file *os.File
	size int64 // bytes written to file
	err  error // set when a failed write could not be undone
	buf  []byte
}

// journalName returns the name of journal file gen of base.
func journalName(base string, gen uint64) string {
	return base + ".journal." + strconv.FormatUint(gen, 10)
}

// journalFiles returns the generations of base's journal files, oldest
// first.
func journalFiles(base string) ([]uint64, error) {
	entries, err := os.ReadDir(filepath.Dir(base))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	prefix := filepath.Base(base) + ".journal."
	var gens []uint64
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		if gen, err := strconv.ParseUint(rest, 10, 64); err == nil && gen > 0 {
			gens = append(gens, gen)
		}
	}
	slices.Sort(gens)
	return gens, nil
}

// createJournal creates journal file gen of base (truncating any file of
// that name) and writes its header.
func createJournal(base string, gen uint64) (*journal, error) {
	if err := os.MkdirAll(filepath.Dir(base), 0o755); err != nil {
		return nil, err
	}
	name := journalName(base, gen)
	file, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	hdr := binary.LittleEndian.AppendUint32([]byte(journalMagic), journalVersion)
	if _, err := file.Write(hdr); err != nil {
		file.Close()
		os.Remove(name)
		return nil, fmt.Errorf("journal %s: %w", name, err)
	}
	return &journal{base: base, gen: gen, file: file, size: int64(len(hdr))}, nil
}

// add appends one record holding fps[i] for every i with keep[i]: a
// single write.
func (j *journal) add(fps []dedup.Fingerprint, keep []bool) error {
	n := 0
	for _, k := range keep {
		if k {
			n++
		}
	}
	buf := slices.Grow(j.buf[:0], recordHeaderSize+dedup.Size*n)[:recordHeaderSize]
	for i := range fps {
		if keep[i] {
			buf = append(buf, fps[i][:]...)
		}
	}
	j.buf = buf
	return j.write(buf, uint32(n))
}

// purge appends a record that says the filter was emptied.
func (j *journal) purge() error {
	j.buf = append(j.buf[:0], make([]byte, recordHeaderSize)...)
	return j.write(j.buf, 0)
}

// write fills in the header of rec, which holds count fingerprints, and
// appends it. A failed or short write is cut off again, so that no torn
// record stays before later ones; if that fails too, every later write
// fails.
func (j *journal) write(rec []byte, count uint32) error {
	if j.err != nil {
		return j.err
	}
	binary.LittleEndian.PutUint32(rec[0:], count)
	binary.LittleEndian.PutUint32(rec[4:], crc32.Checksum(rec[recordHeaderSize:], castagnoli))
	binary.LittleEndian.PutUint32(rec[8:], crc32.Checksum(rec[:8], castagnoli))
	n, err := j.file.Write(rec)
	if err == nil {
		j.size += int64(n)
		return nil
	}
	err = fmt.Errorf("journal %s: %w", j.file.Name(), err)
	if n > 0 {
		if terr := j.file.Truncate(j.size); terr != nil {
			j.err = fmt.Errorf("%w; cutting off the partial record failed: %w", err, terr)
			return j.err
		}
	}
	return err
}

// close closes the file, syncing it first if sync is set.
func (j *journal) close(sync bool) error {
	var err error
	if sync {
		err = j.file.Sync()
	}
	return errors.Join(err, j.file.Close())
}

// replayJournal reads journal file gen of base and calls add with the
// fingerprints of each record, in order, or with nil for a purge. It
// reports whether the file ended in a torn record (a write cut short by a
// crash), which is ignored; a damaged record before the end is an error
// wrapping ErrCorrupt.
func replayJournal(base string, gen uint64, add func([]dedup.Fingerprint)) (records int, torn bool, err error) {
	data, err := os.ReadFile(journalName(base, gen))
	if err != nil {
		return 0, false, err
	}
	corrupt := func(off int, format string, a ...any) error {
		return fmt.Errorf("%w: journal %s at byte %d: %s", ErrCorrupt, journalName(base, gen), off, fmt.Sprintf(format, a...))
	}
	if len(data) < journalHeaderSize {
		return 0, len(data) > 0, nil // created, header not written yet
	}
	if string(data[:8]) != journalMagic {
		return 0, false, corrupt(0, "not a trawl filter journal")
	}
	if v := binary.LittleEndian.Uint32(data[8:]); v != journalVersion {
		return 0, false, corrupt(8, "format version %d, want %d", v, journalVersion)
	}
	var fps []dedup.Fingerprint
	for off := journalHeaderSize; off < len(data); {
		rest := data[off:]
		if len(rest) < recordHeaderSize {
			return records, true, nil
		}
		if crc32.Checksum(rest[:8], castagnoli) != binary.LittleEndian.Uint32(rest[8:]) {
			if allZero(rest) { // the file grew, its data never reached the disk
				return records, true, nil
			}
			return records, false, corrupt(off, "record header checksum mismatch")
		}
		count := binary.LittleEndian.Uint32(rest)
		if count > maxRecord {
			return records, false, corrupt(off, "record of %d fingerprints", count)
		}
		end := recordHeaderSize + dedup.Size*int(count)
		if len(rest) < end {
			return records, true, nil
		}
		payload := rest[recordHeaderSize:end]
		if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(rest[4:]) {
			if len(rest) == end || allZero(rest[end:]) {
				return records, true, nil
			}
			return records, false, corrupt(off, "record checksum mismatch")
		}
		records++
		if count == 0 {
			add(nil)
		} else {
			fps = slices.Grow(fps[:0], int(count))[:count]
			for i := range fps {
				copy(fps[i][:], payload[dedup.Size*i:])
			}
			add(fps)
		}
		off += end
	}
	return records, false, nil
}

// allZero reports whether b holds only zero bytes.
func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// removeFile removes name; one already gone is no error.
func removeFile(name string) error {
	if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
