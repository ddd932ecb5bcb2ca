package local

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
)

// ErrCorrupt is wrapped by New's error when the file at Config.Path is not a
// filter file or is damaged (truncated, checksum mismatch).
var ErrCorrupt = errors.New("corrupt file")

// ErrMismatch is wrapped by New's error when the file at Config.Path holds a
// filter made for another Capacity or FPRate.
var ErrMismatch = errors.New("file made for other settings")

// errNoFile is returned by readFile when the file does not exist.
var errNoFile = errors.New("no file")

// The file layout, all integers little-endian:
//
//	offset  size  field
//	0       8     magic "TRAWLBF\x00"
//	8       4     format version (1)
//	12      4     bit-position scheme (1: see Filter.testAndSet)
//	16      8     capacity
//	24      8     false-positive rate (IEEE 754 bits)
//	32      8     m, the number of bits
//	40      8     k, the number of bit positions per fingerprint
//	48      8     n, the number of fingerprints added
//	56      8·⌈m/64⌉  the bits, in 64-bit words
//	end     4     CRC-32C of everything before
const (
	fileMagic   = "TRAWLBF\x00"
	fileVersion = 1
	fileScheme  = 1
	headerSize  = 56
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// fileHeader holds the fields of a file before the bits.
type fileHeader struct {
	capacity uint64
	fpRate   float64
	m, k, n  uint64
}

// writeFile writes a filter file atomically: a temporary file in the same
// directory is written, synced and renamed over path, and the directory is
// synced.
func writeFile(path string, h fileHeader, words []uint64) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()

	crc := crc32.New(castagnoli)
	w := bufio.NewWriterSize(io.MultiWriter(tmp, crc), 1<<20)
	var hdr [headerSize]byte
	copy(hdr[:], fileMagic)
	binary.LittleEndian.PutUint32(hdr[8:], fileVersion)
	binary.LittleEndian.PutUint32(hdr[12:], fileScheme)
	binary.LittleEndian.PutUint64(hdr[16:], h.capacity)
	binary.LittleEndian.PutUint64(hdr[24:], math.Float64bits(h.fpRate))
	binary.LittleEndian.PutUint64(hdr[32:], h.m)
	binary.LittleEndian.PutUint64(hdr[40:], h.k)
	binary.LittleEndian.PutUint64(hdr[48:], h.n)
	w.Write(hdr[:])
	buf := make([]byte, 0, 64<<10)
	for len(words) > 0 {
		chunk := words[:min(len(words), cap(buf)/8)]
		words = words[len(chunk):]
		buf = buf[:0]
		for _, x := range chunk {
			buf = binary.LittleEndian.AppendUint64(buf, x)
		}
		if _, err := w.Write(buf); err != nil {
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if _, err := tmp.Write(binary.LittleEndian.AppendUint32(nil, crc.Sum32())); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil { // make the rename durable
		defer d.Close()
		if err := d.Sync(); err != nil {
			return fmt.Errorf("sync directory: %w", err)
		}
	}
	return nil
}

// readFile reads and checks a filter file. It returns errNoFile if there is
// none, and an error wrapping ErrCorrupt if it is not a valid filter file.
func readFile(path string) (fileHeader, []uint64, error) {
	var h fileHeader
	file, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return h, nil, errNoFile
	}
	if err != nil {
		return h, nil, err
	}
	defer file.Close()
	st, err := file.Stat()
	if err != nil {
		return h, nil, err
	}
	corrupt := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, a...))
	}

	crc := crc32.New(castagnoli)
	r := io.TeeReader(bufio.NewReaderSize(file, 1<<20), crc)
	var hdr [headerSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return h, nil, corrupt("header: %v", err)
	}
	if string(hdr[:8]) != fileMagic {
		return h, nil, corrupt("not a trawl filter file")
	}
	if v := binary.LittleEndian.Uint32(hdr[8:]); v != fileVersion {
		return h, nil, corrupt("format version %d, want %d", v, fileVersion)
	}
	if s := binary.LittleEndian.Uint32(hdr[12:]); s != fileScheme {
		return h, nil, corrupt("bit-position scheme %d, want %d", s, fileScheme)
	}
	h.capacity = binary.LittleEndian.Uint64(hdr[16:])
	h.fpRate = math.Float64frombits(binary.LittleEndian.Uint64(hdr[24:]))
	h.m = binary.LittleEndian.Uint64(hdr[32:])
	h.k = binary.LittleEndian.Uint64(hdr[40:])
	h.n = binary.LittleEndian.Uint64(hdr[48:])
	if h.m == 0 || h.m > maxBits || h.k == 0 || h.k > 64 {
		return h, nil, corrupt("bad parameters m=%d k=%d", h.m, h.k)
	}
	nw := wordsFor(h.m)
	if want := headerSize + 8*nw + 4; uint64(st.Size()) != want {
		return h, nil, corrupt("size %d bytes, want %d for %d bits", st.Size(), want, h.m)
	}

	words := make([]uint64, nw)
	buf := make([]byte, 64<<10)
	for i := uint64(0); i < nw; {
		chunk := buf[:min(uint64(len(buf)), 8*(nw-i))]
		if _, err := io.ReadFull(r, chunk); err != nil {
			return h, nil, corrupt("bits: %v", err)
		}
		for ; len(chunk) > 0; chunk = chunk[8:] {
			words[i] = binary.LittleEndian.Uint64(chunk)
			i++
		}
	}
	sum := crc.Sum32()
	var tail [4]byte
	if _, err := io.ReadFull(r, tail[:]); err != nil {
		return h, nil, corrupt("checksum: %v", err)
	}
	if got := binary.LittleEndian.Uint32(tail[:]); got != sum {
		return h, nil, corrupt("checksum %08x, computed %08x", got, sum)
	}
	return h, words, nil
}
