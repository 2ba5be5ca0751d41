package shardmeta

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollwal/rollwal/etcdembed/etcdtest"
	"github.com/rollwal/rollwal/schema"
)

func mustSchema(t *testing.T, cols ...string) *schema.Schema {
	t.Helper()
	var out []schema.Column
	for _, c := range cols {
		name, typ, _ := strings.Cut(c, " ")
		nullable := strings.HasSuffix(typ, "?")
		col, err := schema.ParseColumnType(strings.TrimSuffix(typ, "?"))
		if err != nil {
			t.Fatal(err)
		}
		col.Name, col.Nullable = name, nullable
		out = append(out, col)
	}
	s, err := schema.New(out)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSchemaRecordFailsClosed: of two writers racing to record a table's
// first schema, one records it and the other is held to it; a writer with
// other columns is refused naming the difference, and changes nothing.
func TestSchemaRecordFailsClosed(t *testing.T) {
	ctx := testCtx(t)
	cli := server(t).Client()
	keys := Keys{Prefix: "rollwal-test", Table: etcdtest.Name(t, "", MaxNameLen)}
	a := mustSchema(t, "tokens list<int32>", "reward float64")
	b := mustSchema(t, "tokens list<int64>", "reward float64")
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, s := range []*schema.Schema{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = EnsureSchema(ctx, cli, keys, s, 5*time.Second)
		}()
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Fatalf("two different schemas raced: %v, %v; want exactly one recorded", errs[0], errs[1])
	}
	winner := a
	if errs[0] != nil {
		winner = b
	}
	for _, err := range errs {
		if err != nil && (!errors.Is(err, ErrSchemaMismatch) || !strings.Contains(err.Error(), `column "tokens" is list<int`)) {
			t.Fatalf("refusal %v does not name the difference", err)
		}
	}
	rec, err := EnsureSchema(ctx, cli, keys, winner, 5*time.Second)
	if err != nil || rec.Version != 1 || rec.Fingerprint != winner.Fingerprint() {
		t.Fatalf("the same schema again: %+v, %v", rec, err)
	}
	for _, tc := range []struct {
		s    *schema.Schema
		want string
	}{
		{mustSchema(t, "tokens list<int32>"), `lacks the table's column "reward"`},
		{mustSchema(t, "tokens list<int32>", "reward float64", "judge float32"), `adds column "judge"`},
		{mustSchema(t, "toks list<int32>", "reward float64"), `column 0 is "tokens" in the table and "toks"`},
	} {
		if winner != a {
			break
		}
		if _, err := EnsureSchema(ctx, cli, keys, tc.s, 5*time.Second); !errors.Is(err, ErrSchemaMismatch) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want a mismatch with %q", err, tc.want)
		}
	}
	got, err := LoadSchema(ctx, cli, keys)
	if err != nil || got.Fingerprint != winner.Fingerprint() {
		t.Fatalf("the record changed: %+v, %v", got, err)
	}
	if _, err := cli.Put(ctx, keys.Schema(), `{"version":1,"fingerprint":"x","columns":[{"name":"a","type":"int32"}]}`); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureSchema(ctx, cli, keys, winner, 5*time.Second); err == nil || !errors.Is(err, ErrInvalidManifest) {
		t.Fatalf("a damaged record: %v", err)
	}
}

// TestApplySchemaVersions: applies of allowed changes make versions 2, 3,
// … (each kept, with its changes and field ids); a refused change names
// itself and writes nothing; two racing applies of different changes
// both land, one after the other, or the later one is refused against
// the earlier's result — never one lost.
func TestApplySchemaVersions(t *testing.T) {
	ctx := testCtx(t)
	cli := server(t).Client()
	keys := Keys{Prefix: "rollwal-test", Table: etcdtest.Name(t, "", MaxNameLen)}
	v1 := mustSchema(t, "tokens list<int32>", "score int32")
	// A record as it was written before versions: no ids, no version key.
	legacy := `{"version":1,"fingerprint":"` + v1.Fingerprint() + `","columns":[{"name":"tokens","type":"list","element":{"name":"element","type":"int32"}},{"name":"score","type":"int32"}]}`
	if _, err := cli.Put(ctx, keys.Schema(), legacy); err != nil {
		t.Fatal(err)
	}
	first, err := LoadSchemaVersion(ctx, cli, keys, 1)
	if err != nil || first.Columns[0].ID != 4 || first.Columns[1].ID != 5 || first.Columns[0].Element.ID != 6 || first.NextFieldID != 7 {
		t.Fatalf("legacy version 1: %+v, %v", first, err)
	}
	refused := mustSchema(t, "tokens list<int32>", "score string")
	if _, _, err := ApplySchema(ctx, cli, keys, refused.Columns, false, 5*time.Second); !errors.Is(err, schema.ErrSchemaChange) || !strings.Contains(err.Error(), `"score"`) {
		t.Fatalf("refused change: %v", err)
	}
	if cur, err := LoadSchema(ctx, cli, keys); err != nil || cur.Version != 1 {
		t.Fatalf("after a refusal: %+v, %v", cur, err)
	}
	dry, changes, err := ApplySchema(ctx, cli, keys, mustSchema(t, "tokens list<int32>", "score int64").Columns, true, 5*time.Second)
	if err != nil || dry.Version != 2 || len(changes) != 1 {
		t.Fatalf("dry run: %+v %v, %v", dry, changes, err)
	}
	if cur, _ := LoadSchema(ctx, cli, keys); cur.Version != 1 {
		t.Fatalf("a dry run wrote version %d", cur.Version)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, cols := range [][]schema.Column{
		mustSchema(t, "tokens list<int32>", "score int64").Columns,
		mustSchema(t, "tokens list<int32>", "score int32", "judge float64?").Columns,
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, errs[i] = ApplySchema(ctx, cli, keys, cols, false, 5*time.Second)
		}()
	}
	wg.Wait()
	cur, err := LoadSchema(ctx, cli, keys)
	if err != nil {
		t.Fatal(err)
	}
	// Each apply moves the table to its own columns: the second one's
	// columns drop what the first added, or narrow what it widened, which
	// is refused; so exactly one lands unless the drop of judge ran last.
	landed := 0
	for _, err := range errs {
		if err == nil {
			landed++
		} else if !errors.Is(err, schema.ErrSchemaChange) {
			t.Fatalf("racing apply: %v", err)
		}
	}
	if cur.Version != 1+landed {
		t.Fatalf("version %d after %d applies landed (%v)", cur.Version, landed, errs)
	}
	for v := 1; v <= cur.Version; v++ {
		rec, err := LoadSchemaVersion(ctx, cli, keys, v)
		if err != nil || rec.Version != v || (v > 1 && len(rec.Changes) == 0) {
			t.Fatalf("version %d: %+v, %v", v, rec, err)
		}
	}
	if _, err := LoadSchemaVersion(ctx, cli, keys, cur.Version+1); err == nil {
		t.Fatal("a version that does not exist was read")
	}
}

// TestApplySchemaCreatesTable: an apply to a table without a record makes
// the columns its version 1.
func TestApplySchemaCreatesTable(t *testing.T) {
	ctx := testCtx(t)
	cli := server(t).Client()
	keys := Keys{Prefix: "rollwal-test", Table: etcdtest.Name(t, "", MaxNameLen)}
	cols := mustSchema(t, "tokens list<int32>").Columns
	rec, changes, err := ApplySchema(ctx, cli, keys, cols, false, 5*time.Second)
	if err != nil || rec.Version != 1 || len(changes) != 1 {
		t.Fatalf("apply to a new table: %+v %v, %v", rec, changes, err)
	}
	if got, err := LoadSchemaVersion(ctx, cli, keys, 1); err != nil || got.Fingerprint != rec.Fingerprint {
		t.Fatalf("version 1: %+v, %v", got, err)
	}
}
