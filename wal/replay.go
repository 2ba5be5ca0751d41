package wal

import (
	"path/filepath"

	"github.com/rollwal/rollwal/internal/vfs"
)

// Replay calls fn with every record, of any epoch, whose positions
// intersect (from, to]: a record partly inside the range is included
// whole. Records come in ascending FirstPos order, and for equal FirstPos
// (a zombie of an older epoch overlapping a newer one) the lower epoch
// first. payload is decompressed and valid only during the call. fn's
// error stops the replay and is returned as is.
//
// Records appended but not yet written are written and synced first.
// Replay reads segments as they were when it started, so it may run while
// appends continue; it must not overlap a RemoveThrough of its range.
func (w *WAL) Replay(from, to uint64, fn func(h Header, payload []byte) error) (err error) {
	if from >= to {
		return nil
	}
	segs, err := w.replaySegments(from, to)
	if err != nil {
		return err
	}
	readers := w.epochReaders(segs, from, to)
	defer func() {
		for _, r := range readers {
			if cerr := r.close(); cerr != nil && err == nil {
				err = cerr
			}
		}
	}()
	return w.merge(readers, fn)
}

// merge calls fn with the records of all readers, lowest position first.
func (w *WAL) merge(readers []*epochReader, fn func(h Header, payload []byte) error) error {
	for _, r := range readers {
		if err := r.advance(); err != nil {
			return err
		}
	}
	var scratch []byte // decompression buffer, reused across records
	for r := lowest(readers); r != nil; r = lowest(readers) {
		payload, err := w.codec.decompress(r.h, r.stored, scratch)
		if err != nil {
			return &CorruptionError{Segment: r.segs[r.seg].name, Offset: r.recOff, Err: err}
		}
		if r.h.codec != None {
			scratch = payload
		}
		if err := fn(r.h.Header, payload); err != nil {
			return err
		}
		if err := r.advance(); err != nil {
			return err
		}
	}
	return nil
}

// replaySegments makes sure the records up to to are in files and returns
// a snapshot of the segments that may hold records in (from, to].
func (w *WAL) replaySegments(from, to uint64) ([]segment, error) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil, ErrClosed
	}
	need := min(to, w.assigned)
	inMemory := need > w.written
	w.mu.Unlock()
	if inMemory {
		if err := w.SyncTo(need); err != nil {
			return nil, err
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var segs []segment
	for _, s := range w.segments {
		if s.intersects(from, to) {
			segs = append(segs, *s)
		}
	}
	return segs, nil
}

// epochReaders groups segments (ordered by epoch, then index) into one
// reader per epoch, in ascending epoch order.
func (w *WAL) epochReaders(segs []segment, from, to uint64) []*epochReader {
	var readers []*epochReader
	for i, s := range segs {
		if i == 0 || segs[i-1].epoch != s.epoch {
			readers = append(readers, &epochReader{fs: w.fs, dir: w.dir, from: from, to: to})
		}
		r := readers[len(readers)-1]
		r.segs = append(r.segs, s)
	}
	return readers
}

// lowest returns the reader whose current record comes next: lowest
// FirstPos, and on a tie the lowest epoch (readers are in epoch order).
func lowest(readers []*epochReader) *epochReader {
	var best *epochReader
	for _, r := range readers {
		if r.ok && (best == nil || r.h.FirstPos < best.h.FirstPos) {
			best = r
		}
	}
	return best
}

// epochReader walks the records of one epoch's segments that intersect
// (from, to], in position order.
type epochReader struct {
	fs       vfs.FS
	dir      string
	segs     []segment
	from, to uint64

	seg int      // index in segs of the open segment
	f   vfs.File // nil when no segment is open
	win window
	off int64 // offset of the next record in the open segment

	// The current record, when ok.
	ok     bool
	h      recordHeader
	stored []byte // valid until the next advance
	recOff int64
}

// advance moves to the next record in range, or sets ok to false.
func (r *epochReader) advance() error {
	r.ok = false
	for r.seg < len(r.segs) {
		s := &r.segs[r.seg]
		if r.f == nil {
			if err := r.open(s); err != nil {
				return err
			}
		}
		if r.off >= s.size {
			if err := r.close(); err != nil {
				return err
			}
			r.seg++
			continue
		}
		h, stored, err := r.win.next(s.name, s.epoch, r.off)
		if err != nil {
			return err
		}
		r.recOff, r.off = r.off, r.off+h.size()
		if h.lastPos() <= r.from {
			continue
		}
		if h.FirstPos > r.to {
			r.seg = len(r.segs) // positions only grow within an epoch
			return r.close()
		}
		r.ok, r.h, r.stored = true, h, stored
		return nil
	}
	return nil
}

func (r *epochReader) open(s *segment) error {
	f, err := r.fs.Open(filepath.Join(r.dir, s.name))
	if err != nil {
		return err
	}
	r.f, r.off = f, 0
	r.win = window{r: f, size: s.size, buf: r.win.buf[:0]}
	return nil
}

func (r *epochReader) close() error {
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}
