package wal

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"time"

	"github.com/rollwal/rollwal/vfs"
)

// Open opens the WAL in opts.Dir for a writer of opts.Epoch. It scans every
// segment of every epoch, repairs a torn tail of opts.Epoch's own and
// leaves every other epoch's files as they are (see the package
// documentation for the corruption policy), makes what it found durable,
// and starts a new segment for opts.Epoch. The first record appended gets
// position Tail()+1.
func Open(opts Options) (*WAL, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	start := time.Now()
	w, err := newWAL(opts)
	if err != nil {
		return nil, err
	}
	if err := w.open(); err != nil {
		w.codec.close()
		return nil, fmt.Errorf("wal: open %s: %w", opts.Dir, err)
	}
	w.log.Info("wal opened", "dir", w.dir, "epoch", opts.Epoch, "segments", len(w.segments),
		"tail", w.assigned, "active", w.active.name, "duration", time.Since(start))
	go w.runSyncer()
	return w, nil
}

func newWAL(opts Options) (*WAL, error) {
	c, err := newCodec(opts.Compression)
	if err != nil {
		return nil, err
	}
	w := &WAL{
		queue:      newQueue(opts.Logger.With("component", "wal"), newMetrics(opts.Registerer), opts.Dir),
		opts:       opts,
		fs:         opts.FS,
		dir:        opts.Dir,
		codec:      c,
		syncerDone: make(chan struct{}),
	}
	w.writeBehind = writeBehind
	w.init()
	return w, nil
}

// open does the work of Open before the syncer starts; nothing else runs.
// Its new segment is created, never recycled: a recycled file needs
// records to take a segment's name with (see recycle.go).
func (w *WAL) open() error {
	if err := w.ensureDir(); err != nil {
		return err
	}
	d, err := w.listDir()
	if err != nil {
		return err
	}
	if err := w.recover(d.segs); err != nil {
		return err
	}
	if err := w.tidySpares(d.spares, d.unfinished); err != nil {
		return err
	}
	if w.assigned < w.opts.After {
		w.assigned, w.written, w.synced = w.opts.After, w.opts.After, w.opts.After
	}
	next, err := w.nextIndex(d)
	if err != nil {
		return err
	}
	seg, f, err := w.createSegment(next)
	if err != nil {
		return err
	}
	w.segments = append(d.segs, seg)
	w.active, w.file = seg, f
	return nil
}

// ensureDir creates the directory and any missing parents, and syncs the
// directory holding each new entry, so that the whole path survives a
// crash.
func (w *WAL) ensureDir() error {
	missing, err := missingDirs(w.fs, w.dir)
	if err != nil || len(missing) == 0 {
		return err
	}
	if err := w.fs.MkdirAll(w.dir, 0o755); err != nil {
		return err
	}
	// missing runs from w.dir up; its entries live in their parents.
	for _, d := range missing {
		if err := vfs.SyncDir(w.fs, filepath.Dir(d)); err != nil {
			return err
		}
	}
	return vfs.SyncDir(w.fs, w.dir)
}

// missingDirs returns dir and those of its ancestors that do not exist,
// deepest first.
func missingDirs(fsys vfs.FS, dir string) ([]string, error) {
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		_, err := fsys.Stat(d)
		if err == nil {
			return missing, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			return missing, nil
		}
	}
}

// dirFiles is what the WAL directory holds.
type dirFiles struct {
	segs       []*segment // by epoch, then index
	spares     []spare    // by epoch, then index
	unfinished []string   // recycling files
}

// listDir parses the directory's names. Any name that is not a segment, a
// spare or a recycling file is an error: the directory belongs to the
// WAL, and a stray file is a sign of a wrong path or of damage. So is a
// file of an epoch newer than this writer's, unless it only reads.
func (w *WAL) listDir() (dirFiles, error) {
	names, err := w.fs.List(w.dir)
	if err != nil {
		return dirFiles{}, err
	}
	var d dirFiles
	for _, name := range names {
		kind, epoch, index, ok := parseFileName(name)
		if !ok {
			return dirFiles{}, fmt.Errorf("wal: unexpected file %q in the WAL directory", name)
		}
		if epoch > w.opts.Epoch && !w.readOnly {
			return dirFiles{}, fmt.Errorf("%w: file %s is of epoch %d, this writer's is %d",
				ErrNewerEpoch, name, epoch, w.opts.Epoch)
		}
		switch kind {
		case segmentFile:
			d.segs = append(d.segs, &segment{epoch: epoch, index: index, name: name})
		case spareFile:
			d.spares = append(d.spares, spare{epoch: epoch, index: index})
		case recyclingFile:
			d.unfinished = append(d.unfinished, name)
		}
	}
	// Zero-padded names sort by epoch then index; sort anyway rather
	// than trust the FS's order.
	slices.SortFunc(d.segs, func(a, b *segment) int { return cmpNumbers(a.epoch, a.index, b.epoch, b.index) })
	slices.SortFunc(d.spares, func(a, b spare) int { return cmpNumbers(a.epoch, a.index, b.epoch, b.index) })
	return d, nil
}

// cmpNumbers orders files by epoch, then index.
func cmpNumbers(epochA, indexA, epochB, indexB uint64) int {
	if epochA != epochB {
		return cmpUint(epochA, epochB)
	}
	return cmpUint(indexA, indexB)
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// nextIndex returns the index of the segment this epoch starts now: one
// past its last, and past its spares (so that the segment's spare name,
// one day, is free), so that Open never appends to an existing file. An
// epoch that already holds records may only continue if it still holds
// the tail; otherwise its positions could not stay dense.
func (w *WAL) nextIndex(d dirFiles) (uint64, error) {
	next, last := uint64(1), uint64(0)
	for _, s := range d.segs {
		if s.epoch == w.opts.Epoch {
			next = max(next, s.index+1)
			if s.holds() {
				last = s.last
			}
		}
	}
	for _, sp := range d.spares {
		if sp.epoch == w.opts.Epoch {
			next = max(next, sp.index+1)
		}
	}
	if last != 0 && last != w.assigned {
		return 0, fmt.Errorf("wal: epoch %d ends at position %d but another epoch wrote up to %d; open with a new epoch",
			w.opts.Epoch, last, w.assigned)
	}
	return next, nil
}
