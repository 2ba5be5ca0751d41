package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"strconv"
)

// Wire format. Every constant in this file is part of the on-disk format
// described in docs/format/wal.md: changing one makes existing segments
// unreadable.

const (
	// headerSize is the fixed size of a record header.
	headerSize = 44

	// MaxPayloadSize bounds a record's payload, both as stored and as
	// decoded. Append refuses larger payloads and readers treat a header
	// claiming more as damage, so a corrupt length can never make a reader
	// allocate an absurd buffer.
	MaxPayloadSize = 64 << 20

	// codecMask selects the compression codec from the flags word.
	codecMask = 0xff
	// kindShift and kindMask place the payload kind (Header.Kind, opaque to
	// the WAL) in bits 8–15 of the flags word. Bits 16–31 are reserved and
	// must be zero.
	kindShift = 8
	kindMask  = 0xff << kindShift

	// segmentSuffix ends every segment file name.
	segmentSuffix = ".wal"
	// maxSegmentIndex is the largest index that fits the name's six digits.
	maxSegmentIndex = 999999
)

// Header field offsets within a record header (little-endian).
const (
	offLength    = 0  // u32 stored payload length
	offCRC       = 4  // u32 CRC-32C, see recordCRC
	offFlags     = 8  // u32 codec in the low byte, other bits zero
	offEpoch     = 12 // u64 writer epoch, equal to the segment's
	offGen       = 20 // u64 generation
	offFirst     = 28 // u64 first position covered (> 0)
	offCount     = 36 // u32 number of positions covered (> 0)
	offRawLength = 40 // u32 decoded payload length
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header describes one record: it covers the positions
// [FirstPos, FirstPos+Count).
type Header struct {
	Epoch      uint64
	Generation uint64
	FirstPos   uint64
	Count      uint32
	// Kind tells the writer's readers how to decode the payload; the WAL
	// stores it and never looks at it. 0 for records of format version 1.
	Kind uint8
}

// lastPos is the highest position the record covers.
func (h Header) lastPos() uint64 { return h.FirstPos + uint64(h.Count) - 1 }

// recordHeader is a Header as stored, with the framing fields.
type recordHeader struct {
	Header
	length    uint32 // payload bytes that follow the header
	crc       uint32
	codec     Compression
	flags     uint32 // the raw flags word, so reserved bits can be checked
	rawLength uint32 // payload bytes after decompression
}

// size is the record's size on disk.
func (h recordHeader) size() int64 { return headerSize + int64(h.length) }

// appendRecord appends a framed record to dst: h's length and CRC are
// computed here from payload, which is stored as given (already
// compressed when h.codec says so).
func appendRecord(dst []byte, h recordHeader, payload []byte) []byte {
	start := len(dst)
	var hdr [headerSize]byte
	binary.LittleEndian.PutUint32(hdr[offLength:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(hdr[offFlags:], uint32(h.codec)|uint32(h.Kind)<<kindShift)
	binary.LittleEndian.PutUint64(hdr[offEpoch:], h.Epoch)
	binary.LittleEndian.PutUint64(hdr[offGen:], h.Generation)
	binary.LittleEndian.PutUint64(hdr[offFirst:], h.FirstPos)
	binary.LittleEndian.PutUint32(hdr[offCount:], h.Count)
	binary.LittleEndian.PutUint32(hdr[offRawLength:], h.rawLength)
	dst = append(dst, hdr[:]...)
	dst = append(dst, payload...)
	rec := dst[start:]
	binary.LittleEndian.PutUint32(rec[offCRC:], recordCRC(rec))
	return dst
}

// recordCRC is the CRC-32C of a framed record with its own CRC field left
// out: the length word, the rest of the header, then the payload.
func recordCRC(rec []byte) uint32 {
	c := crc32.Update(0, castagnoli, rec[:offCRC])
	return crc32.Update(c, castagnoli, rec[offFlags:])
}

// Why bytes at an offset are not a record. These are the causes a
// CorruptionError unwraps to.
var (
	errShortRecord = errors.New("wal: record cut short by the end of the file")
	errEpoch       = errors.New("wal: record epoch does not match its segment")
	errLength      = errors.New("wal: record length out of range")
	errChecksum    = errors.New("wal: record checksum mismatch")
	errInvalid     = errors.New("wal: invalid record")
	errGap         = errors.New("wal: positions are not dense")
)

// decodeHeader parses a header without judging it. b holds at least
// headerSize bytes.
func decodeHeader(b []byte) recordHeader {
	flags := binary.LittleEndian.Uint32(b[offFlags:])
	return recordHeader{
		Header: Header{
			Epoch:      binary.LittleEndian.Uint64(b[offEpoch:]),
			Generation: binary.LittleEndian.Uint64(b[offGen:]),
			FirstPos:   binary.LittleEndian.Uint64(b[offFirst:]),
			Count:      binary.LittleEndian.Uint32(b[offCount:]),
			Kind:       uint8((flags & kindMask) >> kindShift),
		},
		length:    binary.LittleEndian.Uint32(b[offLength:]),
		crc:       binary.LittleEndian.Uint32(b[offCRC:]),
		codec:     Compression(flags & codecMask),
		flags:     flags,
		rawLength: binary.LittleEndian.Uint32(b[offRawLength:]),
	}
}

// readHeader checks what can be checked from a header alone: that it is
// complete, belongs to the segment's epoch and claims a payload that fits
// in avail bytes (the header included). The epoch check is what makes a
// zero-filled region, or another epoch's bytes, never look like a record.
func readHeader(b []byte, epoch uint64, avail int64) (recordHeader, error) {
	if len(b) < headerSize {
		return recordHeader{}, errShortRecord
	}
	h := decodeHeader(b)
	switch {
	case h.Epoch != epoch:
		return h, errEpoch
	case h.length > MaxPayloadSize:
		return h, errLength
	case h.size() > avail:
		return h, errShortRecord
	}
	return h, nil
}

// parseRecord returns the header of the record at the start of b, which
// holds every byte up to the end of the file, if the record is complete,
// of the given epoch, and its CRC verifies. It does not judge the fields
// beyond that; see (recordHeader).validate.
func parseRecord(b []byte, epoch uint64) (recordHeader, error) {
	h, err := readHeader(b, epoch, int64(len(b)))
	if err != nil {
		return h, err
	}
	if recordCRC(b[:h.size()]) != h.crc {
		return h, errChecksum
	}
	return h, nil
}

// validate checks the fields of a record whose CRC verified. A failure
// here is not a torn write, which a CRC catches, but a writer bug or a
// format this reader does not know.
func (h recordHeader) validate() error {
	switch {
	case h.flags&^(codecMask|kindMask) != 0 || !h.codec.valid():
		return fmt.Errorf("%w: unknown flags %#x", errInvalid, h.flags)
	case h.Count == 0:
		return fmt.Errorf("%w: covers no position", errInvalid)
	case h.FirstPos == 0 || h.FirstPos > math.MaxUint64-uint64(h.Count)+1:
		return fmt.Errorf("%w: position range %d+%d out of bounds", errInvalid, h.FirstPos, h.Count)
	case h.rawLength > MaxPayloadSize:
		return fmt.Errorf("%w: decoded length %d above %d", errInvalid, h.rawLength, MaxPayloadSize)
	case h.codec == None && h.rawLength != h.length:
		return fmt.Errorf("%w: raw record with decoded length %d != length %d", errInvalid, h.rawLength, h.length)
	}
	return nil
}

// findRecord returns the offset of the first valid record of the epoch in
// b, or -1. It tries every byte offset; the epoch comparison rejects
// almost all of them before any CRC is computed.
func findRecord(b []byte, epoch uint64) int {
	for i := 0; i+headerSize <= len(b); i++ {
		if binary.LittleEndian.Uint64(b[i+offEpoch:]) != epoch {
			continue
		}
		if _, err := parseRecord(b[i:], epoch); err == nil {
			return i
		}
	}
	return -1
}

// allZero reports whether b holds only zero bytes: a preallocated or
// zero-extended region that was never written, the end of data.
func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// fileKind is what a file in the WAL directory is. Every name is
// <epoch, 20 digits>-<index, 6 digits><suffix>, so names sort by epoch,
// then index, and one helper (parseFileName) parses them all.
type fileKind uint8

const (
	// segmentFile, <epoch>-<index>.wal, is a segment.
	segmentFile fileKind = iota
	// spareFile, <epoch>-<index>.spare, is segment <epoch>-<index>.wal
	// drained and kept to be written over (see Options.Spares): it holds
	// that segment's records, none of the log's.
	spareFile
	// recyclingFile, <epoch>-<index>.recycling, is a spare a roll has
	// taken to become segment <epoch>-<index>.wal, before its first
	// records are durable: it holds no acknowledged record.
	recyclingFile
	numFileKinds
)

// fileSuffixes end the names of each kind. Older builds know only
// segmentSuffix and refuse any other name.
var fileSuffixes = [numFileKinds]string{segmentFile: segmentSuffix, spareFile: ".spare", recyclingFile: ".recycling"}

// fileName is the name of the file of the given kind, epoch and index.
func fileName(kind fileKind, epoch, index uint64) string {
	return fmt.Sprintf("%020d-%06d%s", epoch, index, fileSuffixes[kind])
}

// parseFileName is the inverse of fileName; it accepts exactly the names
// fileName produces, with both numbers at least 1.
func parseFileName(name string) (kind fileKind, epoch, index uint64, ok bool) {
	const epochDigits, indexDigits = 20, 6
	if len(name) <= epochDigits+1+indexDigits || name[epochDigits] != '-' {
		return 0, 0, 0, false
	}
	suffix := name[epochDigits+1+indexDigits:]
	for kind < numFileKinds && fileSuffixes[kind] != suffix {
		kind++
	}
	if kind == numFileKinds {
		return 0, 0, 0, false
	}
	epoch, ok = parseDigits(name[:epochDigits])
	if !ok {
		return 0, 0, 0, false
	}
	index, ok = parseDigits(name[epochDigits+1 : epochDigits+1+indexDigits])
	return kind, epoch, index, ok && epoch > 0 && index > 0
}

// segmentName is the file name of a segment:
// <epoch, 20 digits>-<index, 6 digits>.wal.
func segmentName(epoch, index uint64) string { return fileName(segmentFile, epoch, index) }

// parseSegmentName is the inverse of segmentName; it accepts exactly the
// names segmentName produces.
func parseSegmentName(name string) (epoch, index uint64, ok bool) {
	kind, epoch, index, ok := parseFileName(name)
	return epoch, index, ok && kind == segmentFile
}

// parseDigits parses a string of decimal digits only (no sign, no space).
func parseDigits(s string) (uint64, bool) {
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseUint(s, 10, 64)
	return v, err == nil
}
