package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// segment describes one segment file. The syncer updates the active
// segment's size and last under WAL.mu; other segments never change.
type segment struct {
	epoch, index uint64
	name         string
	size         int64  // bytes of whole, valid records
	first, last  uint64 // positions covered; first == 0 while empty

	// growing marks the last segment of another epoch: its writer may be
	// a zombie that still appends to it, so size, first and last describe
	// only what Open found, and the file may hold more records now.
	growing bool
}

// holds reports whether the segment has at least one record.
func (s *segment) holds() bool { return s.first != 0 }

// intersects reports whether a record of the segment may cover a position
// in (from, to].
func (s *segment) intersects(from, to uint64) bool {
	return s.holds() && s.last > from && s.first <= to
}

// readAhead is how much a window reads at once: big enough that a
// sequential scan costs one read per many records.
const readAhead = 1 << 20

// window reads a file sequentially through a buffer, handing out slices of
// it. A slice is valid until the next call.
type window struct {
	r    io.ReaderAt
	size int64 // bytes of the file that may be read
	buf  []byte
	off  int64 // file offset of buf[0]
	// small makes a read past the buffer fetch only what was asked for,
	// not readAhead: a walk over headers that skips big payloads.
	small bool
}

// at returns the n bytes at off, or fewer where size ends first.
func (w *window) at(off int64, n int) ([]byte, error) {
	n = int(min(int64(n), w.size-off))
	if off >= w.off && off+int64(n) <= w.off+int64(len(w.buf)) {
		return w.buf[off-w.off:][:n], nil
	}
	ahead := readAhead
	if w.small {
		ahead = n
	}
	want := int(min(int64(max(n, ahead)), w.size-off))
	w.buf = grow(w.buf, want)
	got, err := w.r.ReadAt(w.buf, off)
	if err != nil && !(errors.Is(err, io.EOF) && got == want) {
		w.buf, w.off = w.buf[:0], 0
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // the file shrank under us
		}
		return nil, err
	}
	w.off = off
	return w.buf[:n], nil
}

// next reads the record at off: its header and its stored payload. A
// record that is not whole and valid is reported as a *CorruptionError.
func (w *window) next(name string, epoch uint64, off int64) (recordHeader, []byte, error) {
	b, err := w.at(off, headerSize)
	if err != nil {
		return recordHeader{}, nil, err
	}
	h, err := readHeader(b, epoch, w.size-off)
	if err == nil {
		b, err = w.at(off, int(h.size()))
	}
	if err == nil {
		h, err = parseRecord(b, epoch)
	}
	if err == nil {
		err = h.validate()
	}
	if err != nil {
		return h, nil, &CorruptionError{Segment: name, Offset: off, Err: err}
	}
	return h, b[headerSize:], nil
}

// scanResult is what a scan of a segment found.
type scanResult struct {
	end  int64 // offset just past the last valid record
	torn bool  // bytes after end hold no valid record and are not all zero
	hole bool  // at end, at least headerSize zero bytes, then a valid record later on
	// stale: bytes after end hold no record of the segment's own but a
	// whole older one (see olderRecord): the rest of the spare the
	// segment was written over, perhaps after a torn record.
	stale bool
	why   error // for a torn tail, a hole or a stale rest: why the bytes at end are not a record
}

// errOlder is why a whole record of the segment's epoch is not one of its
// own: it lies below the segment's first record.
var errOlder = errors.New("wal: record older than its segment's first")

// olderRecord reports whether h, a whole record of the segment's epoch, is
// not the segment's own but an older one, left by the spare the segment
// was written over (see Options.Spares): it lies wholly below floor, the
// first position of the segment's first record (0 before that record). A
// recycled segment takes its name only once its first records are
// durable, so its first record is always its own, and any record of its
// epoch it held before lies below every position written after the spare
// was drained.
func olderRecord(h recordHeader, floor uint64) bool {
	return floor != 0 && h.validate() == nil && h.lastPos() < floor
}

// scanSegment reads a segment file of the given epoch from the start,
// calling visit with each valid record and its offset. It stops at the
// first bytes that are not a valid record of the segment, or at a record
// older than the segment's first (olderRecord), and classifies what
// follows (see classifyTail): only zeros or nothing is the end of data;
// older records with nothing of the segment's own after them are a
// spare's rest (stale), the end of data too; something else with no valid
// record after it is a torn tail; a valid record after it is corruption,
// returned as a *CorruptionError, unless the bad bytes start with a run of
// at least headerSize zeros: that is a hole, reported in the result, and
// the caller decides. A record whose CRC verified but whose fields are
// invalid is corruption too. visit's error stops the scan and is returned
// as is.
func scanSegment(r io.ReaderAt, size int64, name string, epoch uint64,
	visit func(h recordHeader, off int64) error) (scanResult, error) {
	w := &window{r: r, size: size}
	off := int64(0)
	var floor uint64
	for off < size {
		h, _, err := w.next(name, epoch, off)
		var ce *CorruptionError
		if errors.As(err, &ce) && !errors.Is(ce.Err, errInvalid) {
			return classifyTail(r, size, name, epoch, floor, off, ce.Err)
		}
		if err != nil {
			return scanResult{}, err
		}
		if olderRecord(h, floor) {
			return classifyTail(r, size, name, epoch, floor, off, olderError(h, floor))
		}
		if floor == 0 {
			floor = h.FirstPos
		}
		if err := visit(h, off); err != nil {
			return scanResult{}, err
		}
		off += h.size()
	}
	return scanResult{end: off}, nil
}

// olderError says why h, an older record, ends the segment's data.
func olderError(h recordHeader, floor uint64) error {
	return fmt.Errorf("%w: positions %d-%d, the segment starts at %d", errOlder, h.FirstPos, h.lastPos(), floor)
}

// bigRecord is the record size from which walkSealed reads only the next
// header rather than a readAhead window: past it, skipping the payload
// saves more copying than the extra read costs.
const bigRecord = 32 << 10

// walkSealed reads a sealed segment (one that is not the last of its
// epoch, synced before the next was created and never written again) by
// its headers: every header's fields are checked, and visit judges the
// positions, but only the last record's CRC is computed, and payloads of
// big records are not read. Replay checks the CRC of every record it
// returns. ok is false, with no error, when anything is amiss: the bytes
// after the records are not all zeros, a header is bad, visit refused a
// record, or the last record's CRC fails; the caller then scans the
// segment in full (scanSegment) to judge the damage. err is an I/O error.
func walkSealed(r io.ReaderAt, size int64, epoch uint64,
	visit func(h recordHeader, off int64) error) (end int64, ok bool, err error) {
	// The first header alone: the records' size picks the next reads.
	w := &window{r: r, size: size, small: true}
	last := int64(-1)
	for end < size {
		b, err := w.at(end, headerSize)
		if err != nil {
			return 0, false, err
		}
		h, herr := readHeader(b, epoch, size-end)
		if herr == nil {
			herr = h.validate()
		}
		if herr != nil {
			if zero, err := zerosTo(r, end, size); err != nil || !zero {
				return 0, false, err
			}
			break
		}
		if visit(h, end) != nil {
			return 0, false, nil
		}
		last = end
		end += h.size()
		w.small = h.size() >= bigRecord
	}
	if last < 0 {
		return end, true, nil
	}
	w.small = true
	ok, err = lastRecordVerifies(w, last, end, epoch)
	return end, ok, err
}

// lastRecordVerifies checks the CRC of the record at [off, end): the
// record whose positions the next segment must continue.
func lastRecordVerifies(w *window, off, end int64, epoch uint64) (bool, error) {
	b, err := w.at(off, int(end-off))
	if err != nil {
		return false, err
	}
	_, err = parseRecord(b, epoch)
	return err == nil, nil
}

// classifyTail decides what the bytes from off, where a bad record (or
// an older one, see olderRecord) starts, to the end of the file are. It
// reads them whole: they are a torn tail (short) or a spare's rest in the
// common case, and a full segment at worst. floor is the segment's first
// position (0 if off is 0): records older than it never count as a valid
// record after the bad bytes, since a segment written over a spare has
// them after its own.
//
// Bad bytes that start with at least headerSize zeros and have a valid
// record after them are a hole rather than plain damage: no writer ever
// wrote that header (a record's epoch is never zero), and it is what an
// older build left when it truncated the torn tail of a zombie's segment
// and the zombie went on writing at its own file offset.
func classifyTail(r io.ReaderAt, size int64, name string, epoch, floor uint64, off int64, why error) (scanResult, error) {
	zero, err := zerosTo(r, off, size)
	if err != nil || zero {
		return scanResult{end: off}, err
	}
	rest := make([]byte, size-off)
	if _, err := r.ReadAt(rest, off); err != nil && !errors.Is(err, io.EOF) {
		return scanResult{}, err
	}
	if finishedSince(rest, epoch, floor) {
		// Another epoch's writer (a zombie) finished the record since
		// the scan read it: its data ends there for now, where the scan
		// stopped, and the records after it are not damage.
		return scanResult{end: off, torn: true, why: fmt.Errorf("%w; the record was being written while read", why)}, nil
	}
	if i := findNewRecord(rest[1:], epoch, floor); i >= 0 {
		why = fmt.Errorf("%w, and a valid record follows at offset %d", why, off+1+int64(i))
		if len(rest) >= headerSize && allZero(rest[:headerSize]) {
			return scanResult{end: off, hole: true, why: why}, nil
		}
		return scanResult{}, &CorruptionError{Segment: name, Offset: off, Err: why}
	}
	if findOlderRecord(rest, epoch, floor) >= 0 {
		return scanResult{end: off, stale: true, why: why}, nil
	}
	return scanResult{end: off, torn: true, why: why}, nil
}

// finishedSince reports whether b, read again from where a scan found a
// bad record, now starts with a whole record of the segment's own.
func finishedSince(b []byte, epoch, floor uint64) bool {
	h, err := parseRecord(b, epoch)
	return err == nil && h.validate() == nil && !olderRecord(h, floor)
}

// findNewRecord is findRecord past the records older than floor (see
// olderRecord), which a spare's rest holds one after another.
func findNewRecord(b []byte, epoch, floor uint64) int {
	for base := 0; base < len(b); {
		i := findRecord(b[base:], epoch)
		if i < 0 {
			return -1
		}
		h := decodeHeader(b[base+i:])
		if !olderRecord(h, floor) {
			return base + i
		}
		base += i + int(h.size())
	}
	return -1
}

// findOlderRecord returns the offset of the first whole record in b that
// is older than a segment of epoch starting at floor: a record of an
// older epoch (a spare another epoch drained), or of epoch below floor.
// Such records are a spare's rest, not damage. -1 if there is none.
func findOlderRecord(b []byte, epoch, floor uint64) int {
	for i := 0; i+headerSize <= len(b); i++ {
		e := binary.LittleEndian.Uint64(b[i+offEpoch:])
		if e == 0 || e > epoch || (e == epoch && floor == 0) {
			continue
		}
		h, err := parseRecord(b[i:], e)
		if err == nil && h.validate() == nil && (e < epoch || h.lastPos() < floor) {
			return i
		}
	}
	return -1
}

// zerosTo reports whether the file holds only zeros from off to size: the
// zero-filled rest of a segment, up to a whole one, read a window at a
// time rather than at once.
func zerosTo(r io.ReaderAt, off, size int64) (bool, error) {
	buf := make([]byte, min(size-off, readAhead))
	for off < size {
		b := buf[:min(size-off, int64(len(buf)))]
		if _, err := r.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
			return false, err
		}
		if !allZero(b) {
			return false, nil
		}
		off += int64(len(b))
	}
	return true, nil
}
