package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"

	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/internal/pyenv"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/vfs"
)

// renamedRollout is version 2 of the rollout schema, made by hand from
// version 1's ids (prompt 4, completion 5, reward 6, metadata 7): prompt
// renamed to question, metadata dropped, a nullable float64 score added
// with the next id, 8.
func renamedRollout(t *testing.T) *schema.Schema {
	t.Helper()
	cols, next := schema.WithFieldIDs(schema.Rollout().Columns)
	if next != 8 || cols[0].Name != "prompt" || cols[0].ID != 4 || cols[3].Name != "metadata" {
		t.Fatalf("version 1 ids: %+v (next %d)", cols, next)
	}
	cols[0].Name, cols[0].Aliases = "question", []string{"prompt"}
	cols = append(cols[:3], schema.Column{Name: "score", Type: schema.Float64, Nullable: true, ID: next})
	s, err := schema.New(cols)
	fatalIf(t, err, "version 2")
	return s
}

// fileOf writes rows in schema s as a base file of shard s0, generation
// gen, with _seq from seq0.
func (e *env) fileOf(s *schema.Schema, gen uint64, rows []schema.Row, seq0 uint64) File {
	e.t.Helper()
	d := generation.Data{Seq: make([]uint64, len(rows)), Epoch: make([]uint64, len(rows))}
	for i := range rows {
		d.Seq[i], d.Epoch[i] = seq0+uint64(i), 1
	}
	b, err := s.Build(rows)
	fatalIf(e.t, err, "build rows")
	d.Rows = b
	dir := filepath.Join(e.dir, "base", "data", "s0")
	fatalIf(e.t, vfs.MkdirAllDurable(e.fs, dir, 0o755), "mkdir")
	f, err := generation.Write(e.ctx, generation.Options{FS: e.fs}, dir, s, generation.Meta{Table: "t", Shard: "s0", Generation: gen, Epoch: 1}, d)
	fatalIf(e.t, err, "write")
	return File{Path: f.Path, Rows: int64(len(rows)), Bytes: f.Size, SeqFirst: f.Meta.SeqFirst, SeqLast: f.Meta.SeqLast}
}

// TestSchemaVersionRenameMapping: a commit in schema version 2 (a column
// renamed, one dropped, one added) adds Iceberg schema 1 with rollwal's
// field ids and makes it current; the name mapping maps the renamed
// column's id to its new and its old name (and keeps the dropped column
// under its own id, which no field has), so the file written before the
// rename still resolves: iceberg-go and pyiceberg read its prompt values
// as question, score as null, and no metadata column.
func TestSchemaVersionRenameMapping(t *testing.T) {
	e := newEnv(t)
	e.appendFiles(nil, e.baseFile("s0", 1, 1, "a", 5, 1))
	v2 := renamedRollout(t)
	var rows []schema.Row
	for i := range 3 {
		rows = append(rows, schema.Row{"id": "b-" + strconv.Itoa(i), "question": "q " + strconv.Itoa(i), "completion": "c", "score": 0.5})
	}
	f2 := e.fileOf(v2, 2, rows, 100)
	commit := func(v SchemaVersion, files ...File) error {
		p, err := e.cat.PrepareBaseCommit(e.ctx, e.ident, BaseCommit{Files: files, Schema: &v})
		if err != nil {
			return err
		}
		_, err = e.cat.Apply(e.ctx, p)
		return err
	}
	fatalIf(t, commit(SchemaVersion{Version: 2, Schema: v2}, f2), "commit in version 2")

	tbl, err := e.cat.LoadTable(e.ctx, e.ident)
	fatalIf(t, err, "load")
	meta := tbl.Metadata()
	if id := meta.CurrentSchema().ID; id != 1 || len(meta.Schemas()) != 2 {
		t.Fatalf("current schema id %d of %d schemas; want 1 of 2", id, len(meta.Schemas()))
	}
	if sid := tbl.CurrentSnapshot().SchemaID; sid == nil || *sid != 1 {
		t.Fatalf("the version 2 snapshot names schema %v, want 1", sid)
	}
	if v, err := TableSchemaVersion(meta); v != 2 || err != nil {
		t.Fatalf("table schema version %d, %v; want 2", v, err)
	}
	want := map[int]string{IDFieldID: "id", 4: "question", 5: "completion", 6: "reward", 8: "score", SeqFieldID: "_seq", EpochFieldID: "_epoch"}
	for _, f := range meta.CurrentSchema().Fields() {
		if want[f.ID] != f.Name {
			t.Errorf("field %d is %q, want %q", f.ID, f.Name, want[f.ID])
		}
	}
	names := map[int][]string{}
	for _, m := range meta.NameMapping() {
		names[*m.FieldID] = m.Names
	}
	// The dropped column stays mapped, under its own id (no field has it):
	// iceberg-go refuses a file with a column the mapping does not name.
	if !slices.Equal(names[4], []string{"question", "prompt"}) || !slices.Equal(names[7], []string{"metadata"}) ||
		!slices.Equal(names[8], []string{"score"}) || len(names) != len(want)+1 {
		t.Fatalf("name mapping %v: want 4 → [question prompt], 7 → [metadata] (dropped), 8 → [score]", names)
	}

	// iceberg-go: every row, the old file's through the alias.
	at, err := tbl.Scan().ToArrowTable(e.ctx)
	fatalIf(t, err, "scan")
	defer at.Release()
	got := map[string]string{}
	nulls := 0
	rdr := array.NewTableReader(at, 0)
	defer rdr.Release()
	for rdr.Next() {
		rec := rdr.RecordBatch()
		if len(rec.Schema().FieldIndices("metadata")) != 0 {
			t.Fatal("the dropped column is in the scan")
		}
		col := func(name string) int { return rec.Schema().FieldIndices(name)[0] }
		ids, qs := rec.Column(col("id")).(*array.String), rec.Column(col("question")).(*array.String)
		scores := rec.Column(col("score")).(*array.Float64)
		for i := range int(rec.NumRows()) {
			got[ids.Value(i)] = qs.Value(i)
			if scores.IsNull(i) {
				nulls++
			}
		}
	}
	if len(got) != 8 || got["a-0"] != "p a-0" || got["a-4"] != "p a-4" || got["b-2"] != "q 2" || nulls != 5 {
		t.Fatalf("iceberg-go read question %v (%d null scores); want the old rows' prompts and 5 nulls", got, nulls)
	}
	e.pyReadsRenamed(tbl.MetadataLocation())

	// Committing in the same version again adds no schema; an older one
	// is refused.
	fatalIf(t, commit(SchemaVersion{Version: 2, Schema: v2}, e.fileOf(v2, 3, rows[:1], 200)), "second commit in version 2")
	if tbl, _ = e.cat.LoadTable(e.ctx, e.ident); len(tbl.Metadata().Schemas()) != 2 {
		t.Fatalf("%d schemas after a second commit in version 2", len(tbl.Metadata().Schemas()))
	}
	if err := commit(SchemaVersion{Version: 1, Schema: schema.Rollout()}, e.baseFile("s0", 4, 1, "c", 1, 300)); !errors.Is(err, ErrSchemaBehind) {
		t.Fatalf("commit in version 1 on a table at version 2: %v, want ErrSchemaBehind", err)
	}
}

// pyReadsRenamed: pyiceberg reads the table at loc with the current
// schema: the rows of the file written before the rename have their
// prompt as question.
func (e *env) pyReadsRenamed(loc string) {
	e.t.Helper()
	py := pyenv.Optional(e.t, "pyiceberg reads a renamed column through the name mapping")
	if py == "" {
		return
	}
	const script = `
import json, sys
from pyiceberg.table import StaticTable
t = StaticTable.from_metadata(sys.argv[1]).scan().to_arrow()
json.dump({"names": t.schema.names, "rows": {i: [q, s] for i, q, s in zip(t.column("id").to_pylist(), t.column("question").to_pylist(), t.column("score").to_pylist())}}, sys.stdout)
`
	cmd := exec.CommandContext(e.ctx, py, "-c", script, loc)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		e.t.Fatalf("pyiceberg: %v\n%s", err, stderr.String())
	}
	var got struct {
		Names []string          `json:"names"`
		Rows  map[string][2]any `json:"rows"`
	}
	fatalIf(e.t, json.Unmarshal(out, &got), "pyiceberg output %s", out)
	if !slices.Equal(got.Names, []string{"id", "question", "completion", "reward", "score", "_seq", "_epoch"}) {
		e.t.Fatalf("pyiceberg columns %v", got.Names)
	}
	if a := got.Rows["a-3"]; len(got.Rows) != 8 || a[0] != "p a-3" || a[1] != nil || got.Rows["b-1"][0] != "q 1" || got.Rows["b-1"][1] != 0.5 {
		e.t.Fatalf("pyiceberg read %v", got.Rows)
	}
}

// TestBaseSchemaVersionUsesColumnIDs: a version's Iceberg schema takes the
// columns' own ids and its schema id is the version minus one; an id-less
// schema gets the ids of version 1.
func TestBaseSchemaVersionUsesColumnIDs(t *testing.T) {
	sc, err := BaseSchemaVersion(SchemaVersion{Version: 2, Schema: renamedRollout(t)})
	fatalIf(t, err, "base schema")
	if sc.ID != 1 {
		t.Errorf("schema id %d, want 1", sc.ID)
	}
	if f, ok := sc.FindFieldByName("score"); !ok || f.ID != 8 || f.Required || !f.Type.Equals(iceberg.PrimitiveTypes.Float64) {
		t.Errorf("score: %+v %v", f, ok)
	}
	if f, ok := sc.FindFieldByName("question"); !ok || f.ID != 4 {
		t.Errorf("question: %+v %v", f, ok)
	}
	plain, err := BaseSchema(schema.Rollout())
	fatalIf(t, err, "base schema of the rollout")
	cols, _ := schema.WithFieldIDs(schema.Rollout().Columns)
	s, err := schema.New(cols)
	fatalIf(t, err, "with ids")
	withIDs, err := BaseSchema(s)
	fatalIf(t, err, "base schema with ids")
	if !plain.Equals(withIDs) || plain.ID != 0 {
		t.Errorf("the rollout without ids:\n%s\nwith ids:\n%s", plain, withIDs)
	}
	if _, err := BaseSchemaVersion(SchemaVersion{Version: 0, Schema: s}); err == nil {
		t.Error("schema version 0 accepted")
	}
}
