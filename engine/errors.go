package engine

import (
	"syscall"

	"github.com/rollwal/rollwal/errs"
	"github.com/rollwal/rollwal/memtable"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/wal"
)

// The shard's errors, checked with errors.Is. Each carries its category of
// package errs (docs/errors.md), which the server's HTTP status derives from.
var (
	// ErrFenced: this writer lost the shard's epoch; it commits nothing
	// more and refuses appends. Never retried with the same token.
	// errs.NotOwner.
	ErrFenced = shardmeta.ErrFenced
	// ErrBackpressure: the memtable memory budget is exhausted; retry later.
	// errs.Backpressure.
	ErrBackpressure = memtable.ErrBackpressure
	// ErrTooLarge: an append needs more memory than the whole memtable
	// budget (Options.MemoryBudget) holds; it never succeeds, so it is not
	// ErrBackpressure: split the batch. errs.TooLarge.
	ErrTooLarge = memtable.ErrTooLarge
	// ErrStopped: the shard stopped after a WAL write or fsync failed
	// (fail-stop); acknowledged rows are safe, nothing more is accepted.
	// errs.Closed.
	ErrStopped = wal.ErrFailed
	// ErrClosed: the shard was closed. errs.Closed.
	ErrClosed = errs.New(errs.Closed, "engine: shard closed")
	// ErrBatchTooLarge: an append carries more rows than MaxBatchRows.
	// errs.TooLarge.
	ErrBatchTooLarge = errs.New(errs.TooLarge, "engine: batch too large")
	// ErrUnknownOutcome: the rows reached the WAL but could not be
	// acknowledged (the lease lapsed meanwhile). They may or may not appear
	// in the table; a producer retries them promptly: ids keep the retry
	// from being stored twice while the first attempt is still in a
	// memtable, not once its generation is flushed (docs/guarantees.md).
	// errs.UnknownOutcome (and so is a Flush whose commit's outcome is
	// unknown: shardmeta.ErrUnknownOutcome).
	ErrUnknownOutcome = errs.New(errs.UnknownOutcome, "engine: outcome unknown: the rows may be durable but are not acknowledged")
	// ErrMergesBehind: the shard's manifest holds MaxUnmergedGenerations
	// committed generations that no merge has drained yet; appends wait
	// for a merge. It is a kind of ErrBackpressure: retry later.
	// errs.Backpressure.
	ErrMergesBehind error = &kindOf{msg: "engine: merges are behind", kinds: []error{ErrBackpressure}}
	// ErrNoSpace: the disk is full. A WAL segment could not be created or
	// reserve space, or a generation could not be written; nothing of it
	// was acknowledged. The shard refuses appends and retries by itself,
	// and takes appends again once there is space: no restart needed.
	// Status.Degraded says why meanwhile. It is a kind of ErrBackpressure
	// (retry later) and of syscall.ENOSPC. (A failed fsync is never
	// ErrNoSpace: it is ErrStopped, whatever its cause.) errs.Unavailable
	// (and errs.Backpressure, as an ErrBackpressure; errs.CategoryOf says
	// Unavailable).
	ErrNoSpace error = noSpaceError{}
	// ErrStoreDown: the object store does not take the WAL's objects
	// (WALObject): unreachable, refusing or throttling past its retries.
	// Nothing of the rows was acknowledged. Like ErrNoSpace the shard
	// refuses appends, retries by itself and takes appends again once the
	// store does; it is a kind of ErrBackpressure (retry later).
	// errs.Unavailable, as ErrNoSpace.
	ErrStoreDown error = &kindOf{msg: "engine: the object store does not take the WAL", kinds: []error{errs.Unavailable, ErrBackpressure}}
	// ErrReplay: the WAL holds something replay must not accept (an epoch
	// above the claimed one, overlapping positions). errs.Corruption.
	ErrReplay = errs.New(errs.Corruption, "engine: replay refused")
	// ErrNotApplied: a Flush's commit failed ambiguously and reading back
	// proved it had not applied; the shard retries the same commit by
	// itself, and calling Flush again is safe. errs.NotApplied.
	ErrNotApplied = shardmeta.ErrNotApplied
)

// kindOf is an error in words of its own that is a kind of others too:
// ErrMergesBehind is ErrBackpressure without the memtable's words about a
// memory budget, which is not what is short.
type kindOf struct {
	msg   string
	kinds []error
}

func (e *kindOf) Error() string   { return e.msg }
func (e *kindOf) Unwrap() []error { return e.kinds }

// noSpaceError is ErrNoSpace: it matches errs.Unavailable, ErrBackpressure
// and ENOSPC without their words in its message.
type noSpaceError struct{}

func (noSpaceError) Error() string { return "engine: disk full" }
func (noSpaceError) Unwrap() []error {
	return []error{errs.Unavailable, ErrBackpressure, syscall.ENOSPC}
}
