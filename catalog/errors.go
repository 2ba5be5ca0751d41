package catalog

import (
	icecat "github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/rollwal/rollwal/errs"
)

// The catalog's errors, checked with errors.Is. Each carries its category of package errs (see docs/errors.md).
var (
	// ErrConflict: a commit was refused because the table moved: a
	// requirement failed against the current metadata, or the catalog key
	// was swapped since the commit was prepared. Nothing was committed.
	// It matches table.ErrCommitFailed too (errors.Is), which is what
	// iceberg-go treats as a clean conflict.
	ErrConflict = errs.New(errs.Conflict, "catalog: conflict")
	// ErrUnknownOutcome: a commit request failed ambiguously and reading
	// back failed too; it may or may not have applied.
	ErrUnknownOutcome = errs.New(errs.UnknownOutcome, "catalog: unknown outcome")
	// ErrCorrupt: a catalog record in etcd does not decode.
	ErrCorrupt = errs.New(errs.Corruption, "catalog: corrupt record")
	// ErrSchemaBehind: a base commit's files are in an older schema
	// version than the table's current one. Nothing was written.
	ErrSchemaBehind = errs.New(errs.Conflict, "catalog: schema version behind the table's")
	// ErrInvalidName: a namespace or table name outside
	// [A-Za-z0-9._-]{1,128}, or a nested namespace.
	ErrInvalidName = errs.New(errs.InvalidInput, "catalog: invalid name")
)

// conflictError is a refused commit: it matches ErrConflict (and so
// errs.Conflict) and table.ErrCommitFailed and carries the cause.
type conflictError struct{ msg string }

func (e *conflictError) Error() string { return "catalog: conflict: " + e.msg }

func (e *conflictError) Is(target error) bool {
	return target == ErrConflict || target == errs.Conflict || target == table.ErrCommitFailed
}

func conflict(msg string) error { return &conflictError{msg: msg} }

// notFound marks a missing table or namespace with iceberg-go's sentinel,
// so callers of the Catalog interface recognise it.
func noSuchTable(name string) error {
	return &markedError{mark: icecat.ErrNoSuchTable, msg: "table " + name}
}

func noSuchNamespace(name string) error {
	return &markedError{mark: icecat.ErrNoSuchNamespace, msg: "namespace " + name}
}

type markedError struct {
	mark error
	msg  string
}

func (e *markedError) Error() string { return "catalog: " + e.mark.Error() + ": " + e.msg }
func (e *markedError) Unwrap() error { return e.mark }

// ErrNotApplied: a commit request failed ambiguously and reading back
// proved that it has not applied: the key still holds the revision the
// commit was prepared against. Applying the same PreparedCommit again is
// safe; its guard lets at most one attempt apply.
var ErrNotApplied = errs.New(errs.NotApplied, "catalog: not applied")
