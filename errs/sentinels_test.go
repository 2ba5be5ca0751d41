package errs_test

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/rollwal/rollwal/catalog"
	"github.com/rollwal/rollwal/client"
	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/errs"
	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/memtable"
	"github.com/rollwal/rollwal/objstore"
	"github.com/rollwal/rollwal/publish"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/snapshot"
	"github.com/rollwal/rollwal/wal"
)

// sentinel is one exported error of a package: its category (nil: none)
// and its message, which marking must not have changed.
type sentinel struct {
	name string // package.Name
	err  error
	cat  *errs.Category
	msg  string
}

// sentinels lists every exported error variable of the packages that mark
// theirs (TestSentinelsListed keeps the list complete), and the error
// types that stand for one.
var sentinels = []sentinel{
	// wal
	{"wal.ErrCorruption", wal.ErrCorruption, errs.Corruption, "wal: corruption"},
	{"wal.ErrClosed", wal.ErrClosed, errs.Closed, "wal: closed"},
	{"wal.ErrFailed", wal.ErrFailed, errs.Closed, "wal: failed"},
	{"wal.ErrNoSpace", wal.ErrNoSpace, errs.Unavailable, "wal: out of disk space, waiting for space"},
	{"wal.ErrNewerEpoch", wal.ErrNewerEpoch, errs.NotOwner, "wal: a newer epoch has written to the log"},
	{"wal.ErrPayloadTooLarge", wal.ErrPayloadTooLarge, errs.TooLarge, "wal: payload too large"},
	{"wal.ErrStoreDown", wal.ErrStoreDown, errs.Unavailable, "wal: the object store does not take the WAL's objects; retrying"},
	{"wal.ErrRepairRefused", wal.ErrRepairRefused, errs.Corruption, "wal: repair refused"},
	{"*wal.CorruptionError", &wal.CorruptionError{Segment: "s", Offset: 7, Err: errors.New("bad crc")}, errs.Corruption,
		"wal: corrupt segment s at offset 7: bad crc"},

	// memtable
	{"memtable.ErrOutOfOrder", memtable.ErrOutOfOrder, errs.InvalidInput, "memtable: generations are released strictly in order"},
	{"memtable.ErrClosed", memtable.ErrClosed, errs.Closed, "memtable: set is closed"},
	{"memtable.ErrBackpressure", memtable.ErrBackpressure, errs.Backpressure, "memtable: memory budget exhausted"},
	{"memtable.ErrTooLarge", memtable.ErrTooLarge, errs.TooLarge, "memtable: request larger than the whole memory budget"},

	// generation
	{"generation.ErrCorrupt", generation.ErrCorrupt, errs.Corruption, "generation: corrupt file"},
	{"generation.ErrNotCopyable", generation.ErrNotCopyable, errs.InvalidInput, "generation: not copyable as it is"},
	{"*generation.CorruptError", &generation.CorruptError{Path: "p", Reason: "no footer"}, errs.Corruption,
		"generation: corrupt file p: no footer"},

	// schema
	{"schema.ErrInvalidRow", schema.ErrInvalidRow, errs.InvalidInput, "schema: invalid row"},
	{"schema.ErrBadEncoding", schema.ErrBadEncoding, errs.Corruption, "schema: bad batch encoding"},
	{"schema.ErrSchemaChange", schema.ErrSchemaChange, errs.InvalidInput, "schema: change not allowed"},
	{"*schema.RowError", &schema.RowError{Row: 1, Column: "c", Reason: "bad"}, errs.InvalidInput, `row 1, column "c": bad`},

	// snapshot
	{"snapshot.ErrConflict", snapshot.ErrConflict, errs.Conflict, "snapshot: conflict"},
	{"snapshot.ErrUnknownOutcome", snapshot.ErrUnknownOutcome, errs.UnknownOutcome, "snapshot: unknown outcome"},
	{"snapshot.ErrNotFound", snapshot.ErrNotFound, errs.NotFound, "snapshot: not found"},
	{"snapshot.ErrInvalid", snapshot.ErrInvalid, errs.InvalidInput, "snapshot: invalid"},
	{"snapshot.ErrCorrupt", snapshot.ErrCorrupt, errs.Corruption, "snapshot: corrupt stored snapshot"},
	{"*snapshot.ConflictError", &snapshot.ConflictError{}, errs.Conflict, ""},

	// objstore
	{"objstore.ErrExists", objstore.ErrExists, errs.Conflict, "objstore: object exists"},
	{"objstore.ErrNotFound", objstore.ErrNotFound, errs.NotFound, "objstore: object not found"},
	{"objstore.ErrUnknownOutcome", objstore.ErrUnknownOutcome, errs.UnknownOutcome, "objstore: outcome unknown"},
	{"objstore.ErrInvalidName", objstore.ErrInvalidName, errs.InvalidInput, "objstore: invalid name"},

	// shardmeta
	{"shardmeta.ErrInvalidManifest", shardmeta.ErrInvalidManifest, errs.Corruption, "shardmeta: invalid manifest"},
	{"shardmeta.ErrInvalidBaseState", shardmeta.ErrInvalidBaseState, errs.Corruption, "shardmeta: invalid manifest: invalid base state"},
	{"shardmeta.ErrInvalidTransition", shardmeta.ErrInvalidTransition, errs.InvalidInput, "shardmeta: invalid manifest transition"},
	{"shardmeta.ErrInvalidEpoch", shardmeta.ErrInvalidEpoch, errs.Corruption, "shardmeta: invalid epoch"},
	{"shardmeta.ErrFenced", shardmeta.ErrFenced, errs.NotOwner, "shardmeta: fenced"},
	{"shardmeta.ErrOwned", shardmeta.ErrOwned, errs.NotOwner, "shardmeta: shard owned"},
	{"shardmeta.ErrNotApplied", shardmeta.ErrNotApplied, errs.NotApplied, "shardmeta: not applied"},
	{"shardmeta.ErrUnknownOutcome", shardmeta.ErrUnknownOutcome, errs.UnknownOutcome, "shardmeta: unknown outcome"},
	{"shardmeta.ErrInvalidName", shardmeta.ErrInvalidName, errs.InvalidInput, "shardmeta: invalid name"},
	{"shardmeta.ErrSchemaMismatch", shardmeta.ErrSchemaMismatch, errs.InvalidInput, "shardmeta: the configured columns are not the table's"},
	{"*shardmeta.OwnedError", &shardmeta.OwnedError{Shard: "s0", Raw: "w1"}, errs.NotOwner, ""},

	// catalog
	{"catalog.ErrConflict", catalog.ErrConflict, errs.Conflict, "catalog: conflict"},
	{"catalog.ErrUnknownOutcome", catalog.ErrUnknownOutcome, errs.UnknownOutcome, "catalog: unknown outcome"},
	{"catalog.ErrCorrupt", catalog.ErrCorrupt, errs.Corruption, "catalog: corrupt record"},
	{"catalog.ErrSchemaBehind", catalog.ErrSchemaBehind, errs.Conflict, "catalog: schema version behind the table's"},
	{"catalog.ErrInvalidName", catalog.ErrInvalidName, errs.InvalidInput, "catalog: invalid name"},
	{"catalog.ErrNotApplied", catalog.ErrNotApplied, errs.NotApplied, "catalog: not applied"},
	{"catalog.ErrOutsideStore", catalog.ErrOutsideStore, errs.InvalidInput, "catalog: location outside the object store"},

	// publish
	{"publish.ErrLockLost", publish.ErrLockLost, errs.NotOwner, "publish: merge lock lost"},
	{"publish.ErrStalePrefix", publish.ErrStalePrefix, errs.Conflict, "publish: stale prefix; replan"},
	{"publish.ErrBaseMoved", publish.ErrBaseMoved, errs.Conflict, "publish: base state moved since the plan; replan"},
	{"publish.ErrInvalidState", publish.ErrInvalidState, errs.Corruption, "publish: invalid merge state"},
	{"publish.ErrNotApplied", publish.ErrNotApplied, errs.NotApplied, "publish: commit not applied"},
	{"publish.ErrUnknownOutcome", publish.ErrUnknownOutcome, errs.UnknownOutcome, "publish: commit outcome unknown"},
	{"publish.ErrSchemaMoved", publish.ErrSchemaMoved, errs.Conflict, "publish: schema moved on during the pass; replan"},

	// engine
	{"engine.ErrFenced", engine.ErrFenced, errs.NotOwner, "shardmeta: fenced"},
	{"engine.ErrBackpressure", engine.ErrBackpressure, errs.Backpressure, "memtable: memory budget exhausted"},
	{"engine.ErrTooLarge", engine.ErrTooLarge, errs.TooLarge, "memtable: request larger than the whole memory budget"},
	{"engine.ErrStopped", engine.ErrStopped, errs.Closed, "wal: failed"},
	{"engine.ErrClosed", engine.ErrClosed, errs.Closed, "engine: shard closed"},
	{"engine.ErrBatchTooLarge", engine.ErrBatchTooLarge, errs.TooLarge, "engine: batch too large"},
	{"engine.ErrUnknownOutcome", engine.ErrUnknownOutcome, errs.UnknownOutcome, "engine: outcome unknown: the rows may be durable but are not acknowledged"},
	{"engine.ErrMergesBehind", engine.ErrMergesBehind, errs.Backpressure, "engine: merges are behind"},
	{"engine.ErrNoSpace", engine.ErrNoSpace, errs.Unavailable, "engine: disk full"},
	{"engine.ErrStoreDown", engine.ErrStoreDown, errs.Unavailable, "engine: the object store does not take the WAL"},
	{"engine.ErrReplay", engine.ErrReplay, errs.Corruption, "engine: replay refused"},
	{"engine.ErrNotApplied", engine.ErrNotApplied, errs.NotApplied, "shardmeta: not applied"},
	{"engine.ErrSequence", engine.ErrSequence, errs.Conflict, "engine: producer sequence"},
	{"engine.ErrTooManyProducers", engine.ErrTooManyProducers, errs.LimitReached, "engine: too many producers"},
	{"engine.ErrInvalidAppend", engine.ErrInvalidAppend, errs.InvalidInput, "engine: invalid append"},
	{"*engine.SequenceError", &engine.SequenceError{Shard: "s0", Producer: "p", Unknown: true}, errs.Conflict, ""},

	// client (the Go client, over the wire: see also client's TestErrorCategories)
	{"client.ErrNotOwner", client.ErrNotOwner, errs.NotOwner, "rollwal client: the shard is not owned by this writer"},
	{"client.ErrTooLarge", client.ErrTooLarge, errs.TooLarge, "rollwal client: request too large"},
	{"client.ErrBackpressure", client.ErrBackpressure, errs.Backpressure, "rollwal client: the writer is applying backpressure"},
	{"client.ErrUnavailable", client.ErrUnavailable, errs.Unavailable, "rollwal client: the writer is unavailable"},
	{"client.ErrTooManyProducers", client.ErrTooManyProducers, errs.LimitReached, "rollwal client: the shard has no room for another producer session"},
	{"client.ErrUnauthorized", client.ErrUnauthorized, nil, "rollwal client: the writer refused the request's token"},
	{"client.ErrSequence", client.ErrSequence, errs.Conflict, "rollwal client: producer sequence refused"},
	{"client.ErrOutcomeUnknown", client.ErrOutcomeUnknown, errs.UnknownOutcome, "rollwal client: outcome unknown: the rows may or may not be stored"},
	{"client.ErrClosed", client.ErrClosed, errs.Closed, "rollwal client: batcher closed"},
	{"*client.BadRequestError", &client.BadRequestError{Message: "m"}, errs.InvalidInput, "rollwal client: bad request: m"},
	{"*client.SequenceError", &client.SequenceError{Message: "m"}, errs.Conflict, "rollwal client: sequence refused: m"},
}

// TestSentinelCategories checks that every package's sentinel errors
// carry their category, and only that one (CategoryOf names it), and that
// marking them changed neither their message nor what they matched before.
func TestSentinelCategories(t *testing.T) {
	for _, s := range sentinels {
		t.Run(s.name, func(t *testing.T) {
			got, ok := errs.CategoryOf(s.err)
			switch {
			case s.cat == nil && ok:
				t.Errorf("has category %v, want none", got)
			case s.cat != nil && (!ok || got != s.cat):
				t.Errorf("CategoryOf = %v, %t; want %v", got, ok, s.cat)
			case s.cat != nil && !errors.Is(s.err, s.cat):
				t.Errorf("errors.Is(err, %v) = false", s.cat)
			}
			if s.msg != "" && s.err.Error() != s.msg {
				t.Errorf("message %q, want %q (unchanged)", s.err.Error(), s.msg)
			}
			// Wrapped as the packages wrap them, they keep their category.
			if w := wrapf(s.err); s.cat != nil {
				if c, _ := errs.CategoryOf(w); c != s.cat {
					t.Errorf("wrapped: CategoryOf = %v, want %v", c, s.cat)
				}
			}
		})
	}
}

func wrapf(err error) error { return errors.Join(errors.New("context"), err) }

// TestSentinelRelations keeps the errors.Is relations between sentinels
// that callers rely on, and that no two categories' sentinels match each
// other.
func TestSentinelRelations(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err, is   error
		wantMatch bool
	}{
		{"ErrMergesBehind is ErrBackpressure", engine.ErrMergesBehind, engine.ErrBackpressure, true},
		{"ErrNoSpace is ErrBackpressure", engine.ErrNoSpace, engine.ErrBackpressure, true},
		{"ErrNoSpace is ENOSPC", engine.ErrNoSpace, syscall.ENOSPC, true},
		{"ErrNoSpace is errs.Backpressure too", engine.ErrNoSpace, errs.Backpressure, true},
		{"ErrStoreDown is ErrBackpressure", engine.ErrStoreDown, engine.ErrBackpressure, true},
		{"ErrStoreDown is errs.Backpressure too", engine.ErrStoreDown, errs.Backpressure, true},
		{"ErrInvalidBaseState is ErrInvalidManifest", shardmeta.ErrInvalidBaseState, shardmeta.ErrInvalidManifest, true},
		{"CorruptionError is ErrCorruption", &wal.CorruptionError{Err: errors.New("x")}, wal.ErrCorruption, true},
		{"CorruptError is ErrCorrupt", &generation.CorruptError{}, generation.ErrCorrupt, true},
		{"RowError is ErrInvalidRow", &schema.RowError{}, schema.ErrInvalidRow, true},
		{"SequenceError is ErrSequence", &engine.SequenceError{}, engine.ErrSequence, true},
		{"OwnedError is ErrOwned", &shardmeta.OwnedError{}, shardmeta.ErrOwned, true},
		{"memtable ErrTooLarge is not ErrBackpressure", memtable.ErrTooLarge, memtable.ErrBackpressure, false},
		{"memtable ErrTooLarge is not errs.Backpressure", memtable.ErrTooLarge, errs.Backpressure, false},
		{"ErrMergesBehind is not Unavailable", engine.ErrMergesBehind, errs.Unavailable, false},
		{"wal ErrClosed is not engine ErrClosed", wal.ErrClosed, engine.ErrClosed, false},
		{"engine ErrUnknownOutcome is not shardmeta's", engine.ErrUnknownOutcome, shardmeta.ErrUnknownOutcome, false},
	} {
		if got := errors.Is(tc.err, tc.is); got != tc.wantMatch {
			t.Errorf("%s: errors.Is = %t, want %t", tc.name, got, tc.wantMatch)
		}
	}
}

// TestSentinelsListed parses the packages and fails for an exported error
// variable (Err*) that the sentinels table does not list: a new sentinel
// needs its category.
func TestSentinelsListed(t *testing.T) {
	listed := map[string]bool{}
	for _, s := range sentinels {
		listed[s.name] = true
	}
	var missing []string
	for _, pkg := range []string{"wal", "memtable", "generation", "schema", "snapshot", "objstore", "shardmeta", "catalog", "publish", "engine", "client"} {
		files, err := filepath.Glob(filepath.Join("..", pkg, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		fset := token.NewFileSet()
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range af.Decls {
				gd, ok := d.(*ast.GenDecl)
				if !ok || gd.Tok != token.VAR {
					continue
				}
				for _, spec := range gd.Specs {
					for _, n := range spec.(*ast.ValueSpec).Names {
						if strings.HasPrefix(n.Name, "Err") && n.IsExported() && !listed[pkg+"."+n.Name] {
							missing = append(missing, pkg+"."+n.Name)
						}
					}
				}
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("sentinels without a category in the table: %s", strings.Join(missing, ", "))
	}
}
