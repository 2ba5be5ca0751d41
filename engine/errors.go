package engine

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/rollwal/rollwal/memtable"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/wal"
)

// Error categories, checked with errors.Is.
var (
	// ErrFenced: this writer lost the shard's epoch; it commits nothing
	// more and refuses appends. Never retried with the same token.
	ErrFenced = shardmeta.ErrFenced
	// ErrBackpressure: the memtable memory budget is exhausted; retry later.
	ErrBackpressure = memtable.ErrBackpressure
	// ErrStopped: the shard stopped after a WAL write or fsync failed
	// (fail-stop); acknowledged rows are safe, nothing more is accepted.
	ErrStopped = wal.ErrFailed
	// ErrClosed: the shard was closed.
	ErrClosed = errors.New("engine: shard closed")
	// ErrBatchTooLarge: an append carries more rows than MaxBatchRows.
	ErrBatchTooLarge = errors.New("engine: batch too large")
	// ErrUnknownOutcome: the rows reached the WAL but could not be
	// acknowledged (the lease lapsed meanwhile). They may or may not appear
	// in the table; a producer retries them promptly: ids keep the retry
	// from being stored twice while the first attempt is still in a
	// memtable, not once its generation is flushed (docs/guarantees.md).
	ErrUnknownOutcome = errors.New("engine: outcome unknown: the rows may be durable but are not acknowledged")
	// ErrMergesBehind: the shard's manifest holds MaxUnmergedGenerations
	// committed generations that no merge has drained yet; appends wait
	// for a merge. It is a kind of ErrBackpressure: retry later.
	ErrMergesBehind = fmt.Errorf("%w: merges are behind", ErrBackpressure)
	// ErrNoSpace: the disk is full. A WAL segment could not be created or
	// reserve space, or a generation could not be written; nothing of it
	// was acknowledged. The shard refuses appends and retries by itself,
	// and takes appends again once there is space: no restart needed.
	// Status.Degraded says why meanwhile. It is a kind of ErrBackpressure
	// (retry later) and of syscall.ENOSPC. (A failed fsync is never
	// ErrNoSpace: it is ErrStopped, whatever its cause.)
	ErrNoSpace error = noSpaceError{}
	// ErrStoreDown: the object store does not take the WAL's objects
	// (WALObject): unreachable, refusing or throttling past its retries.
	// Nothing of the rows was acknowledged. Like ErrNoSpace the shard
	// refuses appends, retries by itself and takes appends again once the
	// store does; it is a kind of ErrBackpressure (retry later).
	ErrStoreDown = fmt.Errorf("%w: the object store does not take the WAL", ErrBackpressure)
	// ErrReplay: the WAL holds something replay must not accept (an epoch
	// above the claimed one, overlapping positions).
	ErrReplay = errors.New("engine: replay refused")
)

// noSpaceError is ErrNoSpace: it matches both ErrBackpressure and ENOSPC
// without either's words in its message.
type noSpaceError struct{}

func (noSpaceError) Error() string   { return "engine: disk full" }
func (noSpaceError) Unwrap() []error { return []error{ErrBackpressure, syscall.ENOSPC} }
