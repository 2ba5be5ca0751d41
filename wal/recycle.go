package wal

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"

	"github.com/rollwal/rollwal/vfs"
)

// Recycling (Options.Spares). RemoveThrough renames a drained segment of
// this epoch to a spare instead of deleting it, and a roll writes the next
// segment over a spare: its blocks are allocated and its size is durable,
// so appends neither write zeros ahead nor make an fsync commit a size
// change, as with a pre-zeroed file.
//
// A spare keeps its old records until they are overwritten, and a
// segment written over it has them after its own. They never read as its
// own because a recycled file takes the segment's name only once its
// first records are durable:
//
//	<e>-<i>.spare --rename, dir sync--> <E>-<k>.recycling
//	  --write the first records, fsync, rename, dir sync--> <E>-<k>.wal
//
// So a segment's first record is always its own, and every older record
// of its epoch lies below it: readers take such a record, or one of an
// older epoch, for the end of data (olderRecord). The first rename makes
// the file this writer's alone (a writer of another epoch that picked the
// same spare finds it gone), and its directory sync keeps any byte written
// from then on from ever lying under the spare's name, so spares hold
// only their own segment's records. A crash before the second rename
// leaves a .recycling file holding no acknowledged record, which Open
// deletes. Sealing a recycled segment cuts it to its records, so sealed
// segments never hold older ones, and so does a clean Close, so that only
// a crash leaves an epoch's last segment with a spare's rest.

// spare is a spare file: segment epoch-index, drained.
type spare struct{ epoch, index uint64 }

func (sp spare) name() string { return fileName(spareFile, sp.epoch, sp.index) }

// path is the path of a file of the WAL directory.
func (w *WAL) path(name string) string { return filepath.Join(w.dir, name) }

// keepsSpare reports whether RemoveThrough keeps a drained segment as a
// spare rather than deleting it: it is this epoch's (another epoch's
// belongs to a writer that may be a zombie, still removing its own
// files), at least half full (a short one saves little), and there is
// room for one.
func (w *WAL) keepsSpare(s *segment) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return s.epoch == w.opts.Epoch && !s.growing && s.size >= w.opts.SegmentSize/2 &&
		len(w.spares) < w.opts.Spares
}

// makeSpare renames a drained segment to its spare name. A segment already
// gone (a newer epoch removed it: this writer is a zombie) leaves nothing
// to keep.
func (w *WAL) makeSpare(s *segment) error {
	sp := spare{epoch: s.epoch, index: s.index}
	err := w.fs.Rename(w.path(s.name), w.path(sp.name()))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.spares = append(w.spares, sp)
	w.mu.Unlock()
	w.m.spares.Inc()
	w.log.Debug("wal: kept a drained segment as a spare", "segment", s.name, "spare", sp.name())
	return nil
}

// takeSpare removes the oldest spare from the list.
func (w *WAL) takeSpare() (spare, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.spares) == 0 {
		return spare{}, false
	}
	sp := w.spares[0]
	w.spares = w.spares[1:]
	return sp, true
}

// putBack returns a spare that a roll took and left as it was.
func (w *WAL) putBack(sp spare) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.spares = append(w.spares, sp)
}

// recycle starts segment index of this epoch over a spare, if one is
// left (else it returns a nil file): it renames the spare to the
// segment's recycling name and syncs the directory (see the top of this
// file). The segment takes its own name with its first records
// (nameRecycled). The file's whole size counts as reserved.
func (w *WAL) recycle(index uint64) (*segment, vfs.File, error) {
	tmp := fileName(recyclingFile, w.opts.Epoch, index)
	for {
		sp, ok := w.takeSpare()
		if !ok {
			return nil, nil, nil
		}
		err := w.fs.Rename(w.path(sp.name()), w.path(tmp))
		if errors.Is(err, fs.ErrNotExist) {
			continue // taken or deleted by a writer of another epoch
		}
		if err != nil {
			err = fmt.Errorf("recycle spare %s: %w", sp.name(), err)
			if errors.Is(err, syscall.ENOSPC) {
				w.putBack(sp)
				err = noSpace(err)
			}
			return nil, nil, err
		}
		f, size, err := w.openRecycled(tmp)
		if err != nil {
			return nil, nil, fmt.Errorf("recycle spare %s: %w", sp.name(), err)
		}
		w.allocated, w.aheadFull = size, false
		w.recycled, w.recycling = true, tmp
		w.m.recycled.Inc()
		w.log.Debug("wal: recycling a spare", "spare", sp.name(), "segment", segmentName(w.opts.Epoch, index))
		return &segment{epoch: w.opts.Epoch, index: index, name: segmentName(w.opts.Epoch, index)}, f, nil
	}
}

// openRecycled opens a spare renamed to tmp for writing, returns its size
// and syncs the directory, so that no write to the file can land under
// the spare's name.
func (w *WAL) openRecycled(tmp string) (vfs.File, int64, error) {
	f, err := w.fs.OpenReadWrite(w.path(tmp))
	if err != nil {
		return nil, 0, err
	}
	info, err := f.Stat()
	if err == nil {
		err = vfs.SyncDir(w.fs, w.dir)
	}
	if err != nil {
		return nil, 0, errors.Join(err, f.Close())
	}
	return f, info.Size(), nil
}

// nameRecycled gives the active file, a recycled spare, its segment's name
// once the records just written to it are durable: fsync, rename, then
// directory sync. Its error is final, like an fsync's: the records are
// written and must not be written again.
func (w *WAL) nameRecycled() error {
	if err := w.syncFile(); err != nil {
		return err
	}
	if err := w.fs.Rename(w.path(w.recycling), w.path(w.active.name)); err != nil {
		return fmt.Errorf("name recycled segment %s: %w", w.active.name, err)
	}
	if err := vfs.SyncDir(w.fs, w.dir); err != nil {
		return err
	}
	w.recycling = ""
	return nil
}

// tidySpares keeps the spares Open found, up to Options.Spares, and
// deletes the rest along with every recycling file: those hold no
// acknowledged record, and a zombie that was making one a segment finds it
// gone and fails, its records unacknowledged.
func (w *WAL) tidySpares(spares []spare, unfinished []string) error {
	keep := min(len(spares), max(w.opts.Spares, 0))
	doomed := unfinished
	for _, sp := range spares[keep:] {
		doomed = append(doomed, sp.name())
	}
	w.spares = spares[:keep]
	if len(doomed) == 0 {
		return nil
	}
	for _, name := range doomed {
		if err := w.fs.Remove(w.path(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", name, err)
		}
		w.log.Info("wal: removed a spare file", "file", name, "spares", w.opts.Spares)
	}
	return vfs.SyncDir(w.fs, w.dir)
}
