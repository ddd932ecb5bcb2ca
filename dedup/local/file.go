package local

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// ErrCorrupt is wrapped by New's error when the file at Config.Path is not a
// filter file or is damaged (truncated, checksum mismatch).
var ErrCorrupt = errors.New("corrupt file")

// ErrMismatch is wrapped by New's error when the file at Config.Path holds a
// filter made for another Capacity or FPRate.
var ErrMismatch = errors.New("file made for other settings")

// errNoFile is returned by readFile when the file does not exist.
var errNoFile = errors.New("no file")

// The file layout (format version 3), all integers little-endian:
//
//	offset  size  field
//	0       8     magic "TRAWLBF\x00"
//	8       4     format version (3)
//	12      4     bit-position scheme of new layers (2: see layer.testAndSet)
//	16      8     Config.Capacity when the file was first written
//	24      8     Config.FPRate, the bound (IEEE 754 bits)
//	32      8     n, the number of fingerprints added
//	40      8     the number of layers
//	48      …     each layer: its capacity, false-positive rate, m (bits),
//	              k (bit positions per fingerprint), n, bit-position scheme
//	              (8 bytes each), then its bits in ⌈m/64⌉ 64-bit words
//	end     4     CRC-32C of everything before
//
// Older versions are read, their layers in schemeDoubleHashing (the header's
// scheme must be 1). Version 2 has no scheme in the layer headers (40
// bytes). Version 1, written by trawl before filters grew, has one fixed
// layer: capacity, rate, m, k and n at offsets 16 to 48, the bits, the
// CRC; it is read as a filter whose first layer is that one.
const (
	fileMagic       = "TRAWLBF\x00"
	fileVersion     = 3
	headerSize      = 48
	layerHeaderSize = 48
	v1HeaderSize    = 56
	maxLayers       = 64
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// snapshot is what a filter file holds.
type snapshot struct {
	version  uint32
	capacity uint64  // Config.Capacity
	fpRate   float64 // Config.FPRate
	n        uint64
	layers   []*layer
}

// writeFile writes a filter file atomically: a temporary file in the same
// directory is written, synced and renamed over path, and the directory is
// synced.
func writeFile(path string, s snapshot) (err error) {
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
	hdr := make([]byte, 0, headerSize)
	hdr = append(hdr, fileMagic...)
	hdr = binary.LittleEndian.AppendUint32(hdr, fileVersion)
	hdr = binary.LittleEndian.AppendUint32(hdr, schemeMixed)
	hdr = binary.LittleEndian.AppendUint64(hdr, s.capacity)
	hdr = binary.LittleEndian.AppendUint64(hdr, math.Float64bits(s.fpRate))
	hdr = binary.LittleEndian.AppendUint64(hdr, s.n)
	hdr = binary.LittleEndian.AppendUint64(hdr, uint64(len(s.layers)))
	w.Write(hdr)
	buf := make([]byte, 0, 64<<10)
	for _, l := range s.layers {
		buf = buf[:0]
		buf = binary.LittleEndian.AppendUint64(buf, l.capacity)
		buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(l.fpRate))
		buf = binary.LittleEndian.AppendUint64(buf, l.m)
		buf = binary.LittleEndian.AppendUint64(buf, l.k)
		buf = binary.LittleEndian.AppendUint64(buf, l.n)
		buf = binary.LittleEndian.AppendUint64(buf, l.scheme)
		w.Write(buf)
		for words := l.words; len(words) > 0; {
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
	return syncDir(dir)
}

// removeTemps removes the temporary files of saves that a crash cut short.
func removeTemps(path string, log *slog.Logger) {
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		return // no directory yet, or one New reports on its own
	}
	prefix := filepath.Base(path) + ".tmp-"
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			name := filepath.Join(filepath.Dir(path), e.Name())
			if err := os.Remove(name); err != nil {
				log.Warn("dedup filter: leftover temporary file not removed", "file", name, "err", err)
			}
		}
	}
}

// syncDir makes renames and removals in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return nil // not every system opens directories
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	return nil
}

// readFile reads and checks a filter file. It returns errNoFile if there is
// none, and an error wrapping ErrCorrupt if it is not a valid filter file.
func readFile(path string) (snapshot, error) {
	var s snapshot
	file, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, errNoFile
	}
	if err != nil {
		return s, err
	}
	defer file.Close()
	st, err := file.Stat()
	if err != nil {
		return s, err
	}
	corrupt := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, a...))
	}

	crc := crc32.New(castagnoli)
	r := io.TeeReader(bufio.NewReaderSize(file, 1<<20), crc)
	var hdr [v1HeaderSize]byte
	if _, err := io.ReadFull(r, hdr[:headerSize]); err != nil {
		return s, corrupt("header: %v", err)
	}
	if string(hdr[:8]) != fileMagic {
		return s, corrupt("not a trawl filter file")
	}
	s.version = binary.LittleEndian.Uint32(hdr[8:])
	if s.version < 1 || s.version > fileVersion {
		return s, corrupt("format version %d, want 1 to %d (a file from a newer trawl?)", s.version, fileVersion)
	}
	if v := binary.LittleEndian.Uint32(hdr[12:]); s.version < 3 && v != schemeDoubleHashing {
		return s, corrupt("bit-position scheme %d, want %d", v, schemeDoubleHashing)
	}
	s.capacity = binary.LittleEndian.Uint64(hdr[16:])
	s.fpRate = math.Float64frombits(binary.LittleEndian.Uint64(hdr[24:]))
	size := uint64(headerSize) + 4 // what the file must hold, so far
	var nlayers uint64
	var layerHdr []byte
	if s.version == 1 {
		// One layer, whose header shares the file's: m, k, n follow.
		if _, err := io.ReadFull(r, hdr[headerSize:]); err != nil {
			return s, corrupt("header: %v", err)
		}
		nlayers, size = 1, v1HeaderSize+4
		layerHdr = hdr[16:56] // capacity, rate, m, k, n: a layer's header
		s.n = binary.LittleEndian.Uint64(hdr[48:])
	} else {
		s.n = binary.LittleEndian.Uint64(hdr[32:])
		nlayers = binary.LittleEndian.Uint64(hdr[40:])
		if nlayers == 0 || nlayers > maxLayers {
			return s, corrupt("%d layers", nlayers)
		}
	}
	if math.IsNaN(s.fpRate) || s.fpRate <= 0 || s.fpRate >= 1 {
		return s, corrupt("false-positive rate %v", s.fpRate)
	}

	var total uint64
	buf := make([]byte, 64<<10)
	for i := range nlayers {
		scheme := uint64(schemeDoubleHashing)
		switch s.version {
		case 2, 3:
			n := layerHeaderSize
			if s.version == 2 {
				n = 40 // no scheme
			}
			layerHdr = buf[:n]
			if _, err := io.ReadFull(r, layerHdr); err != nil {
				return s, corrupt("layer %d: %v", i, err)
			}
			size += uint64(n)
			if s.version == 3 {
				scheme = binary.LittleEndian.Uint64(layerHdr[40:])
			}
		}
		l := &layer{
			capacity: binary.LittleEndian.Uint64(layerHdr[0:]),
			fpRate:   math.Float64frombits(binary.LittleEndian.Uint64(layerHdr[8:])),
			m:        binary.LittleEndian.Uint64(layerHdr[16:]),
			k:        binary.LittleEndian.Uint64(layerHdr[24:]),
			n:        binary.LittleEndian.Uint64(layerHdr[32:]),
			scheme:   scheme,
		}
		if l.scheme != schemeDoubleHashing && l.scheme != schemeMixed {
			return s, corrupt("layer %d: bit-position scheme %d, want %d or %d", i, l.scheme, schemeDoubleHashing, schemeMixed)
		}
		if l.m == 0 || l.m > maxBits || l.k == 0 || l.k > 64 || l.capacity == 0 ||
			math.IsNaN(l.fpRate) || l.fpRate <= 0 || l.fpRate >= 1 {
			return s, corrupt("layer %d: bad parameters capacity=%d rate=%v m=%d k=%d", i, l.capacity, l.fpRate, l.m, l.k)
		}
		nw := wordsFor(l.m)
		if size += 8 * nw; size > uint64(st.Size()) {
			return s, corrupt("size %d bytes, too short for layer %d of %d bits", st.Size(), i, l.m)
		}
		l.words = make([]uint64, nw)
		for j := uint64(0); j < nw; {
			chunk := buf[:min(uint64(len(buf)), 8*(nw-j))]
			if _, err := io.ReadFull(r, chunk); err != nil {
				return s, corrupt("layer %d bits: %v", i, err)
			}
			for ; len(chunk) > 0; chunk = chunk[8:] {
				l.words[j] = binary.LittleEndian.Uint64(chunk)
				j++
			}
		}
		total += l.n
		s.layers = append(s.layers, l)
	}
	if size != uint64(st.Size()) {
		return s, corrupt("size %d bytes, want %d", st.Size(), size)
	}
	if total != s.n {
		return s, corrupt("layers hold %d fingerprints, header says %d", total, s.n)
	}
	sum := crc.Sum32()
	var tail [4]byte
	if _, err := io.ReadFull(r, tail[:]); err != nil {
		return s, corrupt("checksum: %v", err)
	}
	if got := binary.LittleEndian.Uint32(tail[:]); got != sum {
		return s, corrupt("checksum %08x, computed %08x", got, sum)
	}
	return s, nil
}
