package wal

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"

	"github.com/rollwal/rollwal/vfs"
)

// RemoveThrough deletes the segments whose records all lie at or below
// cursor (segments without records included); it renames a drained
// segment of this epoch to a spare instead while there is room for one
// (Options.Spares). It never deletes the
// active segment, nor, while the active segment is still empty, the
// segment holding the tail: that segment is what tells the next Open where
// positions continue. Segments are deleted oldest first, with a directory
// sync after each, so that a crash leaves a prefix of them deleted, never
// a hole in an epoch's positions.
//
// The last segment Open found of another epoch is judged by what it holds
// now, since a zombie may have appended to it: it is kept while it holds a
// record above cursor. A zombie may still append to it after that check;
// such records were written after this epoch's claim, so no replay needs
// them. Segments other epochs started after Open are not this WAL's to
// delete; a later epoch's RemoveThrough will.
func (w *WAL) RemoveThrough(cursor uint64) error {
	w.removeMu.Lock()
	defer w.removeMu.Unlock()
	victims, err := w.removable(cursor)
	if err != nil {
		return err
	}
	for _, s := range victims {
		if s.growing {
			last, err := w.lastOnDisk(s)
			if err != nil {
				return fmt.Errorf("wal: remove segment: %w", err)
			}
			if last > cursor {
				w.log.Debug("wal: keeping another epoch's segment that grew past the cursor",
					"segment", s.name, "last", last, "cursor", cursor)
				continue
			}
		}
		if err := w.discard(s); err != nil {
			return fmt.Errorf("wal: remove segment: %w", err)
		}
		if err := vfs.SyncDir(w.fs, w.dir); err != nil {
			// Like a failed fsync, a failed directory sync leaves
			// the directory's durable state unknown.
			w.fail(err)
			return w.Err()
		}
		w.forget(s)
		w.log.Debug("wal: removed segment", "segment", s.name, "last", s.last, "cursor", cursor)
	}
	return nil
}

// discard deletes a drained segment, or keeps it as a spare (see
// Options.Spares). A segment already gone is not an error.
func (w *WAL) discard(s *segment) error {
	if w.keepsSpare(s) {
		return w.makeSpare(s)
	}
	err := w.fs.Remove(w.path(s.name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// removable lists the segments RemoveThrough may delete, oldest first.
func (w *WAL) removable(cursor uint64) ([]*segment, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usable(); err != nil {
		return nil, err
	}
	var keep *segment
	if !w.active.holds() {
		keep = w.tailSegment()
	}
	var victims []*segment
	for _, s := range w.segments {
		if s != w.active && s != keep && s.last <= cursor {
			victims = append(victims, s)
		}
	}
	return victims, nil
}

// tailSegment returns the segment holding the highest position, or nil.
// Callers hold mu.
func (w *WAL) tailSegment() *segment {
	var tail *segment
	for _, s := range w.segments {
		if s.holds() && (tail == nil || s.last > tail.last) {
			tail = s
		}
	}
	return tail
}

// forget drops a deleted segment from the list.
func (w *WAL) forget(s *segment) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.segments = slices.DeleteFunc(w.segments, func(x *segment) bool { return x == s })
}

// lastOnDisk returns the highest position in s, another epoch's last
// segment at Open: what Open found, or the last of the records that
// continue it on disk now. Bytes that do not continue it end the search,
// as they end Replay's. A segment already gone holds nothing more.
func (w *WAL) lastOnDisk(s *segment) (last uint64, err error) {
	f, err := w.fs.Open(filepath.Join(w.dir, s.name))
	if errors.Is(err, fs.ErrNotExist) {
		return s.last, nil
	}
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	info, err := f.Stat()
	if err != nil {
		return 0, err
	}
	win := &window{r: f, size: info.Size()}
	last = s.last
	for off := s.size; off < info.Size(); {
		h, _, err := win.next(s.name, s.epoch, off)
		var ce *CorruptionError
		if errors.As(err, &ce) || (err == nil && last != 0 && h.FirstPos != last+1) {
			break
		}
		if err != nil {
			return 0, err
		}
		last, off = h.lastPos(), off+h.size()
	}
	return last, nil
}
