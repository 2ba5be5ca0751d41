package publish

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/apache/iceberg-go"

	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/internal/pyenv"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/vfs"
)

// evolvedSchemas are versions 1 and 2 of a table: version 1 is prompt
// string, n int32 (ids 4 and 5, as WithFieldIDs assigns them); version 2,
// made by hand, renames prompt to question (its old name kept as an
// alias), widens n to int64 and adds a nullable float64 score with the
// next id, 6. configured is version 2 as an operator configures it.
func evolvedSchemas(t *testing.T) (v1, v2 *schema.Schema, configured []schema.Column) {
	t.Helper()
	cols, next := schema.WithFieldIDs([]schema.Column{{Name: "prompt", Type: schema.String}, {Name: "n", Type: schema.Int32}})
	v1, err := schema.New(cols)
	if err != nil {
		t.Fatal(err)
	}
	if cols[0].ID != 4 || cols[1].ID != 5 || next != 6 {
		t.Fatalf("version 1 ids %d, %d, next %d; want 4, 5, 6", cols[0].ID, cols[1].ID, next)
	}
	cols2, _ := schema.WithFieldIDs(cols)
	cols2[0].Name, cols2[0].Aliases = "question", []string{"prompt"}
	cols2[1].Type = schema.Int64
	cols2 = append(cols2, schema.Column{Name: "score", Type: schema.Float64, Nullable: true, ID: next})
	if v2, err = schema.New(cols2); err != nil {
		t.Fatal(err)
	}
	configured = []schema.Column{{Name: "question", Type: schema.String, RenamedFrom: "prompt"}, {Name: "n", Type: schema.Int64},
		{Name: "score", Type: schema.Float64, Nullable: true}}
	return v1, v2, configured
}

// genSpec is one generation to write: its schema, the version the
// manifest records and its rows.
type genSpec struct {
	s       *schema.Schema
	version int
	rows    []schema.Row
}

// putGenerations writes gens as generations first, first+1, … of shard s0
// (epoch 1, positions from seq0) with generation.Write, and makes them the
// shard manifest's flushed generations.
func (e *env) putGenerations(first, seq0 uint64, gens ...genSpec) {
	e.t.Helper()
	dir := filepath.Join(e.dir, e.table, "shards", "s0", "gen")
	if err := vfs.MkdirAllDurable(e.fs, dir, 0o755); err != nil {
		e.t.Fatal(err)
	}
	m := &shardmeta.Manifest{Version: shardmeta.ManifestVersion, WriterEpoch: 1, CurrentGeneration: first + uint64(len(gens)),
		Epochs: []shardmeta.EpochRecord{{Epoch: 1, StartGeneration: 1}}}
	seq := seq0
	for i, g := range gens {
		b, err := g.s.Build(g.rows)
		if err != nil {
			e.t.Fatal(err)
		}
		d := generation.Data{Rows: b}
		for range g.rows {
			d.Seq, d.Epoch = append(d.Seq, seq), append(d.Epoch, 1)
			seq++
		}
		num := first + uint64(i)
		f, err := generation.Write(e.ctx, generation.Options{FS: e.fs}, dir, g.s, generation.Meta{Table: e.table, Shard: "s0", Generation: num, Epoch: 1}, d)
		if err != nil {
			e.t.Fatal(err)
		}
		m.Flushed = append(m.Flushed, shardmeta.Generation{Number: num, File: f.Name, Rows: f.Meta.Rows, Bytes: f.Size,
			SeqFirst: f.Meta.SeqFirst, SeqLast: f.Meta.SeqLast, Epoch: 1, SchemaVersion: g.version})
		m.ReplayCursor = f.Meta.SeqLast
	}
	e.putManifest("s0", m)
}

// rowsOf are n rows with ids prefix-i: in version 1 (prompt, n int32) or
// version 2 (question, n beyond int32, score).
func rowsOf(prefix string, n, version int) []schema.Row {
	var out []schema.Row
	for i := range n {
		id := fmt.Sprintf("%s-%d", prefix, i)
		if version == 1 {
			out = append(out, schema.Row{"id": id, "prompt": "p " + id, "n": math.MaxInt32 - i})
		} else {
			out = append(out, schema.Row{"id": id, "question": "q " + id, "n": int64(1)<<40 + int64(i), "score": float64(i) / 2})
		}
	}
	return out
}

// evolvedRow is a row as version 2 reads it.
type evolvedRow struct {
	Question string
	N        int64
	Score    *float64
}

// wantEvolved is every row of prefix a and b (written in version 1) and c
// (version 2), as version 2 reads them: old rows null in score, n widened,
// their prompt as question.
func wantEvolved(n int) map[string]evolvedRow {
	want := map[string]evolvedRow{}
	for _, p := range []string{"a", "b"} {
		for i := range n {
			id := fmt.Sprintf("%s-%d", p, i)
			want[id] = evolvedRow{Question: "p " + id, N: math.MaxInt32 - int64(i)}
		}
	}
	for i := range n {
		id := fmt.Sprintf("c-%d", i)
		s := float64(i) / 2
		want[id] = evolvedRow{Question: "q " + id, N: int64(1)<<40 + int64(i), Score: &s}
	}
	return want
}

// TestMergePublishesInCurrentSchemaVersion: a shard's generations written
// in schema versions 1 and 2 (2 renames a column, widens int32 to int64
// and adds a nullable float64) are merged, by a coordinator that started
// at version 1 and is not restarted, into base files of version 2: old
// rows null in the new column, widened values equal. The Iceberg table's
// current schema is id 1 with rollwal's field ids; iceberg-go and
// pyiceberg read every row with it, the base file written in version 1
// included (through the name mapping's alias).
func TestMergePublishesInCurrentSchemaVersion(t *testing.T) {
	e := newEnv(t)
	v1, v2, configured := evolvedSchemas(t)
	const n = 5
	c := e.coordinator(func(o *Options) { o.Schema, o.Compaction.Disabled = v1, true })
	e.putGenerations(1, 1, genSpec{v1, 0, rowsOf("a", n, 1)})
	if r := e.runOnce(c); r.RowsStaged != n {
		t.Fatalf("first merge staged %d rows, want %d", r.RowsStaged, n)
	}
	rec, _, err := shardmeta.ApplySchema(e.ctx, etcdClient, e.keys(), configured, false, 5e9)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := json.Marshal(rec.Columns); rec.Version != 2 || string(got) != string(mustJSON(t, v2.Columns)) {
		t.Fatalf("recorded version %d %s; the test's version 2 is %s", rec.Version, got, mustJSON(t, v2.Columns))
	}
	// One writer still on version 1, one on version 2.
	e.putGenerations(2, 1+n, genSpec{v1, 1, rowsOf("b", n, 1)}, genSpec{v2, 2, rowsOf("c", n, 2)})
	if r := e.runOnce(c); r.RowsStaged != 2*n || r.Generations != 2 {
		t.Fatalf("second merge: %+v, want %d rows of 2 generations", r, 2*n)
	}

	got := map[string]evolvedRow{}
	for _, f := range e.baseFiles() {
		meta, d, err := generation.ReadStored(e.fs.FS, filepath.Join(e.baseDir(), filepath.FromSlash(f.Path)))
		if err != nil {
			t.Fatal(err)
		}
		want := v2
		if meta.Generation == 1 {
			want = v1 // published before version 2; never rewritten
		}
		if have, want := string(mustJSON(t, d.Rows.Schema.Columns)), string(mustJSON(t, want.Columns)); have != want {
			t.Fatalf("base file %s of generation %d has columns %s, want %s", f.Path, meta.Generation, have, want)
		}
		if meta.Generation == 1 {
			continue
		}
		for i, id := range d.Rows.IDs {
			r := evolvedRow{Question: d.Rows.Cols[0].Str[i], N: d.Rows.Cols[1].I64[i]}
			if !d.Rows.Cols[2].IsNull(i) {
				s := d.Rows.Cols[2].F64[i]
				r.Score = &s
			}
			got[id] = r
		}
	}
	want := wantEvolved(n)
	for id, w := range want {
		if id[0] == 'a' {
			continue
		}
		if g, ok := got[id]; !ok || g.Question != w.Question || g.N != w.N || (g.Score == nil) != (w.Score == nil) || g.Score != nil && *g.Score != *w.Score {
			t.Fatalf("base row %s = %+v, want %+v", id, g, w)
		}
	}

	tbl := e.baseTable()
	sc := tbl.Metadata().CurrentSchema()
	wantFields := map[string]struct {
		id  int
		typ iceberg.Type
		req bool
	}{"id": {1, iceberg.PrimitiveTypes.String, true}, "question": {4, iceberg.PrimitiveTypes.String, true}, "n": {5, iceberg.PrimitiveTypes.Int64, true},
		"score": {6, iceberg.PrimitiveTypes.Float64, false}, "_seq": {2, iceberg.PrimitiveTypes.Int64, true}, "_epoch": {3, iceberg.PrimitiveTypes.Int64, true}}
	if sc.ID != 1 || sc.NumFields() != len(wantFields) {
		t.Fatalf("current schema %d:\n%s\nwant id 1 with %d fields", sc.ID, sc, len(wantFields))
	}
	for _, f := range sc.Fields() {
		if w := wantFields[f.Name]; f.ID != w.id || !f.Type.Equals(w.typ) || f.Required != w.req {
			t.Errorf("field %s: id %d %s required %v; want %d %s %v", f.Name, f.ID, f.Type, f.Required, w.id, w.typ, w.req)
		}
	}
	if sid := tbl.CurrentSnapshot().SchemaID; sid == nil || *sid != 1 {
		t.Fatalf("the current snapshot names schema %v, want 1", sid)
	}
	e.pyReadsEvolved(tbl.MetadataLocation(), want)

	// A coordinator configured with no schema takes the recorded one
	// (the default, the rollout schema, is not the table's).
	c.Close()
	e.runOnce(e.coordinator())
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// pyReadsEvolved: pyiceberg scans the table at loc with its current
// schema and reads exactly want.
func (e *env) pyReadsEvolved(loc string, want map[string]evolvedRow) {
	e.t.Helper()
	py := pyenv.Optional(e.t, "pyiceberg reads a table of two schema versions")
	if py == "" {
		return
	}
	const script = `
import json, sys
from pyiceberg.table import StaticTable
t = StaticTable.from_metadata(sys.argv[1]).scan().to_arrow()
cols = [t.column(c).to_pylist() for c in ("id", "question", "n", "score")]
json.dump({"types": {f.name: str(f.type) for f in t.schema},
           "rows": {i: {"Question": q, "N": n, "Score": s} for i, q, n, s in zip(*cols)}}, sys.stdout)
`
	cmd := exec.CommandContext(e.ctx, py, "-c", script, loc)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		e.t.Fatalf("pyiceberg: %v\n%s", err, stderr.String())
	}
	var got struct {
		Types map[string]string     `json:"types"`
		Rows  map[string]evolvedRow `json:"rows"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		e.t.Fatalf("pyiceberg output %s: %v", out, err)
	}
	if got.Types["n"] != "int64" || got.Types["score"] != "double" || got.Types["question"] != "large_string" && got.Types["question"] != "string" {
		e.t.Fatalf("pyiceberg types %v", got.Types)
	}
	if len(got.Rows) != len(want) {
		e.t.Fatalf("pyiceberg read %d rows, want %d", len(got.Rows), len(want))
	}
	for id, w := range want {
		g := got.Rows[id]
		if g.Question != w.Question || g.N != w.N || (g.Score == nil) != (w.Score == nil) || g.Score != nil && *g.Score != *w.Score {
			e.t.Fatalf("pyiceberg row %s = %+v, want %+v", id, g, w)
		}
	}
}

// TestStageRefusesNewerSchemaVersion: a generation in a newer schema
// version than the pass's is never converted backwards. A plan made at
// version 1 (the record moved on since) fails in Stage with
// ErrSchemaMoved; so does a generation whose manifest entry claims version
// 1 but whose file has a field id version 1 does not (RunOnce replans a
// few times, then returns it); and a plan at the current version merges
// it.
func TestStageRefusesNewerSchemaVersion(t *testing.T) {
	e := newEnv(t)
	v1, v2, configured := evolvedSchemas(t)
	c := e.coordinator(func(o *Options) { o.Schema = v1 })
	// The manifest says version 1: a file of version 2 is found by its ids.
	e.putGenerations(1, 1, genSpec{v2, 0, rowsOf("c", 3, 2)})
	if _, err := c.RunOnce(e.ctx); !errors.Is(err, ErrSchemaMoved) {
		t.Fatalf("RunOnce with a version 2 file at version 1: %v, want ErrSchemaMoved", err)
	}
	if _, _, err := shardmeta.ApplySchema(e.ctx, etcdClient, e.keys(), configured, false, 5e9); err != nil {
		t.Fatal(err)
	}
	e.putGenerations(1, 1, genSpec{v2, 2, rowsOf("c", 3, 2)})
	p, err := c.Plan(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p.SchemaVersion != 2 {
		t.Fatalf("plan at schema version %d, want 2 (the current one)", p.SchemaVersion)
	}
	stale := *p
	stale.SchemaVersion, stale.Schema, stale.nextFieldID = 1, v1, 6
	if _, err := c.Stage(e.ctx, &stale); !errors.Is(err, ErrSchemaMoved) {
		t.Fatalf("stage a version 2 generation at version 1: %v, want ErrSchemaMoved", err)
	}
	staged, err := c.Stage(e.ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Commit(e.ctx, staged); err != nil {
		t.Fatal(err)
	}
	if id := e.baseTable().Metadata().CurrentSchema().ID; id != 1 {
		t.Fatalf("the table's current schema is %d, want 1", id)
	}
	if staged.RowsStaged != 3 {
		t.Fatalf("staged %d rows, want 3", staged.RowsStaged)
	}
}
