package wal

import (
	"fmt"

	"github.com/rollwal/rollwal/errs"
)

// The WAL's errors, checked with errors.Is. Each carries its category of
// package errs (errs.Corruption, errs.Closed, ...).
var (
	// ErrCorruption marks damage that Open or Replay will not repair nor
	// pass over: a bad record with a valid one after it (but for a hole in
	// another epoch's last segment), a torn record that is not at the end
	// of its epoch, or positions that are not dense. Every
	// *CorruptionError satisfies errors.Is(err, ErrCorruption).
	ErrCorruption = errs.New(errs.Corruption, "wal: corruption")
	// ErrClosed is returned by calls on a closed WAL.
	ErrClosed = errs.New(errs.Closed, "wal: closed")
	// ErrFailed marks a WAL that stopped after a write or sync failed. The
	// failure is permanent: an fsync error may have dropped dirty pages, so
	// nothing written since the last good sync can be trusted. The error
	// also wraps the cause, so errors.Is(err, syscall.ENOSPC) works.
	ErrFailed = errs.New(errs.Closed, "wal: failed")
	// ErrNoSpace marks a WAL waiting for disk space: creating or
	// reserving space for a segment, or a write that wrote nothing, failed
	// with ENOSPC. Nothing of the records involved reached a file, so
	// unlike ErrFailed this is not permanent: the WAL refuses Append and
	// answers SyncTo of positions not yet durable with it, and retries in
	// the background until the records are written. The error also wraps
	// the cause (errors.Is(err, syscall.ENOSPC) holds). A failed fsync is
	// never this: it is ErrFailed whatever its cause.
	ErrNoSpace = errs.New(errs.Unavailable, "wal: out of disk space, waiting for space")
	// ErrNewerEpoch is returned by Open when the directory holds segments
	// (or spare or recycling files) of an epoch newer than Options.Epoch:
	// another writer has taken over, so this one must not append.
	ErrNewerEpoch = errs.New(errs.NotOwner, "wal: a newer epoch has written to the log")
	// ErrPayloadTooLarge is returned by Prepare and Append for a payload
	// over MaxPayloadSize: the caller's request is too large, nothing was
	// written, and the same bytes would be refused again.
	ErrPayloadTooLarge = errs.New(errs.TooLarge, "wal: payload too large")
)

// CorruptionError locates damage: the segment file (its name within the
// WAL directory) and the byte offset of the first bad record.
type CorruptionError struct {
	Segment string
	Offset  int64
	Err     error
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("wal: corrupt segment %s at offset %d: %v", e.Segment, e.Offset, e.Err)
}

// Is makes errors.Is(err, ErrCorruption) and errors.Is(err,
// errs.Corruption) hold.
func (e *CorruptionError) Is(target error) bool {
	return target == ErrCorruption || target == errs.Corruption
}

// Unwrap returns the cause.
func (e *CorruptionError) Unwrap() error { return e.Err }

// failed wraps the cause of a failure so that both ErrFailed and the cause
// match errors.Is.
func failed(cause error) error { return fmt.Errorf("%w: %w", ErrFailed, cause) }

// noSpace marks cause, an ENOSPC that left the files as they were, as
// ErrNoSpace.
func noSpace(cause error) error { return fmt.Errorf("%w: %w", ErrNoSpace, cause) }
