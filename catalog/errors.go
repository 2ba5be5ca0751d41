package catalog

import (
	"errors"

	icecat "github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
)

var (
	// ErrConflict: a commit was refused because the table moved: a
	// requirement failed against the current metadata, or the catalog key
	// was swapped since the commit was prepared. Nothing was committed.
	// It matches table.ErrCommitFailed too (errors.Is), which is what
	// iceberg-go treats as a clean conflict.
	ErrConflict = errors.New("catalog: conflict")
	// ErrUnknownOutcome: a commit request failed ambiguously and reading
	// back failed too; it may or may not have applied.
	ErrUnknownOutcome = errors.New("catalog: unknown outcome")
	// ErrCorrupt: a catalog record in etcd does not decode.
	ErrCorrupt = errors.New("catalog: corrupt record")
	// ErrSchemaBehind: a base commit's files are in an older schema
	// version than the table's current one. Nothing was written.
	ErrSchemaBehind = errors.New("catalog: schema version behind the table's")
	// ErrInvalidName: a namespace or table name outside
	// [A-Za-z0-9._-]{1,128}, or a nested namespace.
	ErrInvalidName = errors.New("catalog: invalid name")
)

// conflictError is a refused commit: it matches ErrConflict and
// table.ErrCommitFailed and carries the cause.
type conflictError struct{ msg string }

func (e *conflictError) Error() string { return "catalog: conflict: " + e.msg }

func (e *conflictError) Is(target error) bool {
	return target == ErrConflict || target == table.ErrCommitFailed
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
var ErrNotApplied = errors.New("catalog: not applied")
