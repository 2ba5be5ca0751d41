package wal

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/rollwal/rollwal/errs"
	"github.com/rollwal/rollwal/vfs"
)

// ErrRepairRefused: Repair found damage it will not cut — a bad record
// with whole records after it, or a hole of zeros with whole records after
// it — and changed nothing.
var ErrRepairRefused = errs.New(errs.Corruption, "wal: repair refused")

// Repair is what `writer wal repair` does, beside the format it repairs:
// it scans the WAL in opts.Dir (see Scan; opts.Record may check payloads
// further) and, when cut is true, truncates every torn tail the scan
// found — bytes after the last whole record of an epoch's last segment,
// which Open passes over — syncing each cut so that it survives a crash.
// With cut false it changes nothing and reports what it would cut.
//
// It cuts nothing at all when the damage is anything else: a bad record
// that comes before a whole one (Scan's *CorruptionError), or a hole of
// zeros with whole records after it; both are ErrRepairRefused, since
// cutting would drop whole records. Run it only while no writer appends
// to the WAL (the caller holds the data directory's lock).
func Repair(opts ScanOptions, cut bool) (ScanReport, error) {
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	rep, err := Scan(opts)
	if err != nil {
		return rep, &refusal{cause: err,
			msg: fmt.Sprintf("%v; only a torn tail at the end of an epoch's last segment can be cut, and this damage comes before one", err)}
	}
	for _, t := range rep.Tails {
		if t.Hole {
			return rep, &refusal{cause: t.Reason,
				msg: fmt.Sprintf("segment %s has a hole of zeros at offset %d and whole records after it (%v); cutting would drop them", t.Segment, t.Offset, t.Reason)}
		}
	}
	if !cut {
		return rep, nil
	}
	for _, t := range rep.Tails {
		if err := truncateSynced(opts, filepath.Join(opts.Dir, t.Segment), t.Offset); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// truncateSynced cuts a segment to size and syncs it, as Open's own
// repair of this epoch's tail does.
func truncateSynced(opts ScanOptions, path string, size int64) error {
	f, err := opts.FS.OpenReadWrite(path)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err != nil {
		return fmt.Errorf("wal: repair: truncate %s: %w", path, err)
	}
	return nil
}

// refusal is an ErrRepairRefused that says only why: its cause, and what
// cutting would do.
type refusal struct {
	msg   string
	cause error
}

func (e *refusal) Error() string        { return e.msg }
func (e *refusal) Is(target error) bool { return target == ErrRepairRefused }
func (e *refusal) Unwrap() error        { return e.cause }
