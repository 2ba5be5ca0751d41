package wal

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"

	"github.com/rollwal/rollwal/vfs"
)

// Replay calls fn with every record, of any epoch, whose positions
// intersect (from, to]: a record partly inside the range is included
// whole. Records come in ascending FirstPos order, and for equal FirstPos
// (a zombie of an older epoch overlapping a newer one) the lower epoch
// first. payload is decompressed and valid only during the call. fn's
// error stops the replay and is returned as is.
//
// Records appended but not yet written are written and synced first.
// Replay reads this epoch's segments as they were when it started, so it
// may run while appends continue; it must not overlap a RemoveThrough of
// its range. It reads other epochs' segments as they are on disk when it
// gets to them: a zombie may have appended records, or started segments,
// since Open, and those records are returned too, up to the first bytes
// past what Open found that are not (or not yet) a whole record continuing
// the epoch's positions. Every CRC is checked: Open checked only the
// last record's of each sealed segment.
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
	return mergeRecords(w.codec, readers, fn)
}

// recordReader walks one epoch's records in position order: a segment
// reader (epochReader) or an object reader (objectReader).
type recordReader interface {
	// advance moves to the next record in range, if any.
	advance() error
	// current is the record advance moved to; ok is false past the last.
	current() (h recordHeader, stored []byte, ok bool)
	// at names the file or object of the current record and its offset.
	at() (string, int64)
}

// mergeRecords calls fn with the records of all readers, lowest position
// first and, on a tie, the earlier reader's (readers are in epoch order).
func mergeRecords[R recordReader](c *codec, readers []R, fn func(h Header, payload []byte) error) error {
	for _, r := range readers {
		if err := r.advance(); err != nil {
			return err
		}
	}
	var scratch []byte // decompression buffer, reused across records
	for {
		var next R
		var h recordHeader
		var stored []byte
		found := false
		for _, r := range readers {
			if rh, rs, ok := r.current(); ok && (!found || rh.FirstPos < h.FirstPos) {
				next, h, stored, found = r, rh, rs, true
			}
		}
		if !found {
			return nil
		}
		payload, err := c.decompress(h, stored, scratch)
		if err != nil {
			name, off := next.at()
			return &CorruptionError{Segment: name, Offset: off, Err: err}
		}
		if h.codec != None {
			scratch = payload
		}
		if err := fn(h.Header, payload); err != nil {
			return err
		}
		if err := next.advance(); err != nil {
			return err
		}
	}
}

// replaySeg is a segment Replay reads.
type replaySeg struct {
	segment        // as Open found it, or as this epoch has written it so far
	start   int64  // offset of the first record to read
	next    uint64 // the position the epoch's records past what Open found continue at; 0: any
	// optional marks a segment that holds no record of the range that
	// Open found, so that its file may be gone: another writer's
	// RemoveThrough, or this one's on a lower range, may have deleted it.
	optional bool
}

// replaySegments makes sure the records up to to are in files and returns
// the segments that may hold records in (from, to], by epoch then index:
// this epoch's and other epochs' sealed segments that Open found holding
// such records, the last segment Open found of each other epoch unless it
// starts past to, and the segments other epochs have started since Open.
func (w *WAL) replaySegments(from, to uint64) ([]replaySeg, error) {
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
	known := make([]segment, len(w.segments))
	for i, s := range w.segments {
		known[i] = *s
	}
	w.mu.Unlock()
	// Listed after the snapshot, so that a segment this writer deleted in
	// between is either in neither or looks new and is optional.
	names, err := w.fs.List(w.dir)
	if err != nil {
		return nil, err
	}
	return planReplay(known, names, w.opts.Epoch, from, to), nil
}

// planReplay picks the segments Replay reads, see replaySegments. known
// is the WAL's segment list, names the directory's entries now; names that
// are not segments are left to the next Open to judge.
func planReplay(known []segment, names []string, epoch, from, to uint64) []replaySeg {
	lastIndex := map[uint64]uint64{} // per other epoch, its highest index known
	lastPos := map[uint64]uint64{}   // per other epoch, its highest position known
	for _, s := range known {
		if s.epoch != epoch {
			lastIndex[s.epoch] = max(lastIndex[s.epoch], s.index)
			lastPos[s.epoch] = max(lastPos[s.epoch], s.last)
		}
	}
	next := func(e uint64) uint64 {
		if p := lastPos[e]; p != 0 {
			return p + 1
		}
		return 0
	}
	var plan []replaySeg
	for _, s := range known {
		switch {
		case s.intersects(from, to):
			plan = append(plan, replaySeg{segment: s, next: next(s.epoch)})
		case s.growing && !(s.holds() && s.first > to):
			// Only what a zombie appended since Open can be in range.
			plan = append(plan, replaySeg{segment: s, start: s.size, next: next(s.epoch), optional: true})
		}
	}
	for _, name := range names {
		e, index, ok := parseSegmentName(name)
		if !ok || e == epoch {
			continue
		}
		if top, seen := lastIndex[e]; seen && index <= top {
			continue // known, or deleted by this writer since Open
		}
		if lastPos[e] >= to {
			continue // its records continue past to
		}
		plan = append(plan, replaySeg{
			segment: segment{epoch: e, index: index, name: name, growing: true},
			next:    next(e), optional: true,
		})
	}
	slices.SortFunc(plan, func(a, b replaySeg) int {
		if a.epoch != b.epoch {
			return cmpUint(a.epoch, b.epoch)
		}
		return cmpUint(a.index, b.index)
	})
	return plan
}

// epochReaders groups segments (ordered by epoch, then index) into one
// reader per epoch, in ascending epoch order.
func (w *WAL) epochReaders(segs []replaySeg, from, to uint64) []*epochReader {
	var readers []*epochReader
	for i, s := range segs {
		if i == 0 || segs[i-1].epoch != s.epoch {
			readers = append(readers, &epochReader{fs: w.fs, dir: w.dir, log: w.log,
				from: from, to: to, next: s.next})
		}
		r := readers[len(readers)-1]
		r.segs = append(r.segs, s)
	}
	return readers
}

func (r *epochReader) current() (recordHeader, []byte, bool) { return r.h, r.stored, r.ok }

func (r *epochReader) at() (string, int64) { return r.segs[r.seg].name, r.recOff }

// epochReader walks the records of one epoch's segments that intersect
// (from, to], in position order.
type epochReader struct {
	fs       vfs.FS
	dir      string
	log      *slog.Logger
	segs     []replaySeg
	from, to uint64
	next     uint64 // where records past what Open found must continue; 0: any

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
			err := r.open(s)
			if s.optional && errors.Is(err, fs.ErrNotExist) {
				r.seg++
				continue
			}
			if err != nil {
				return err
			}
		}
		if r.off >= r.win.size {
			if err := r.close(); err != nil {
				return err
			}
			r.seg++
			continue
		}
		h, stored, err := r.win.next(s.name, s.epoch, r.off)
		pastOpen := s.growing && r.off >= s.size
		if pastOpen {
			if why := r.pastEnd(h, err); why != "" {
				// Zeros to the end are the segment's reserved rest: the
				// epoch goes on in the next segment, if its writer
				// started one.
				zero, err := zerosTo(r.f, r.off, r.win.size)
				if err != nil {
					return err
				}
				if zero {
					r.off = r.win.size
					continue
				}
				r.log.Debug("wal: replay stops reading another epoch here", "segment", s.name,
					"offset", r.off, "reason", why)
				r.seg = len(r.segs)
				return r.close()
			}
		}
		if err != nil {
			return err
		}
		if pastOpen {
			r.next = h.lastPos() + 1
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

// pastEnd judges what advance read past what Open found in another
// epoch's last segment, or in a segment started since: why the epoch's
// records end there, or "" if h is the next one. Those bytes may be a
// zombie's write in progress, a torn tail, or anything after one, and none
// of it is this writer's to repair, so they end the epoch rather than fail
// the replay. An I/O error is not judged here.
func (r *epochReader) pastEnd(h recordHeader, err error) string {
	var ce *CorruptionError
	switch {
	case errors.As(err, &ce):
		return ce.Err.Error()
	case err != nil:
		return ""
	case r.next != 0 && h.FirstPos != r.next:
		return fmt.Sprintf("%v: record starts at position %d, expected %d", errGap, h.FirstPos, r.next)
	}
	return ""
}

// open opens s at its first record to read. A segment of another epoch
// that may have grown is read up to its size now.
func (r *epochReader) open(s *replaySeg) error {
	f, err := r.fs.Open(filepath.Join(r.dir, s.name))
	if err != nil {
		return err
	}
	size := s.size
	if s.growing {
		info, err := f.Stat()
		if err != nil {
			return errors.Join(err, f.Close())
		}
		// A file shorter than Open found fails the reads of what is
		// missing rather than end early.
		size = max(size, info.Size())
	}
	r.f, r.off = f, s.start
	r.win = window{r: f, size: size, buf: r.win.buf[:0]}
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
