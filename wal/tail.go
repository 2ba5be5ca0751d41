package wal

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
)

// ReadTail scans the WAL in opts.Dir as Open would and returns its tail,
// the highest position any epoch's records cover (0 for an empty or
// missing directory), without writing anything: it creates no segment,
// truncates and repairs nothing, and treats every epoch's last segment as
// another writer's (its torn tail or hole is the end of its data for now).
// Each epoch's last segment is synced through a read-only handle, so the
// tail it reports is durable. A segment that vanishes while it reads (the
// owner of the moment removed it) makes it read the directory again.
//
// A claimant calls it before its claim transaction commits: until then the
// directory may belong to a writer that won the claim race, and a file of
// that writer's epoch must never be created or cut by the loser. Only
// opts.FS, opts.Dir and opts.Logger are used.
func ReadTail(opts Options) (uint64, error) {
	opts.EnsureDefaults()
	if opts.Dir == "" {
		return 0, errors.New("wal: read tail: no directory")
	}
	if _, err := opts.FS.Stat(opts.Dir); errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	var err error
	for range maxTailReads {
		var tail uint64
		if tail, err = readTailOnce(opts); !errors.Is(err, fs.ErrNotExist) {
			return tail, err
		}
		// A segment listed a moment ago is gone: the shard's owner of the
		// moment removed it (wholly below its replay cursor). Read again.
	}
	return 0, err
}

// maxTailReads bounds ReadTail's reads when segments keep vanishing under
// it; each removal needs a commit of the owner's, so a few always suffice.
const maxTailReads = 8

func readTailOnce(opts Options) (uint64, error) {
	log := slog.New(slog.DiscardHandler)
	if opts.Logger != nil {
		log = opts.Logger.With("component", "wal")
	}
	w := &WAL{queue: queue{log: log, name: opts.Dir}, opts: opts, fs: opts.FS, dir: opts.Dir, readOnly: true}
	d, err := w.listDir()
	if err != nil {
		return 0, fmt.Errorf("wal: read tail of %s: %w", opts.Dir, err)
	}
	if err := w.recover(d.segs); err != nil {
		return 0, fmt.Errorf("wal: read tail of %s: %w", opts.Dir, err)
	}
	return w.assigned, nil
}
