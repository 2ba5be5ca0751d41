package catalog

import (
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"
	icecat "github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/rollwal/rollwal/schema"
)

// TestAppendTwiceScansRows: two appends of real base files; iceberg-go
// loads the table back through the catalog and scans exactly their rows;
// the summaries name what each snapshot published.
func TestAppendTwiceScansRows(t *testing.T) {
	e := newEnv(t)
	f1 := e.baseFile("s0", 1, 2, "a", 20, 101)
	f2 := e.baseFile("s1", 4, 3, "b", 7, 1)
	e.appendFiles([]Provenance{{Shard: "s0", First: 1, Last: 1, Epochs: []uint64{2}}, {Shard: "s1", First: 3, Last: 4, Epochs: []uint64{3}}}, f1, f2)
	first := e.location()
	f3 := e.baseFile("s0", 2, 2, "c", 5, 121)
	e.appendFiles([]Provenance{{Shard: "s0", First: 2, Last: 2, Epochs: []uint64{2}}}, f3)

	tbl, err := e.cat.LoadTable(e.ctx, e.ident)
	fatalIf(t, err, "load")
	if v, _ := parseMetadataVersion(tbl.MetadataLocation()); v != 2 {
		t.Fatalf("metadata %s: version %d, want 2", tbl.MetadataLocation(), v)
	}
	e.scan(tbl)
	e.checkBounds(tbl, f1, f2, f3)
	snaps := tbl.Metadata().Snapshots()
	if len(snaps) != 2 {
		t.Fatalf("%d snapshots, want 2", len(snaps))
	}
	got, err := ParseSummary(snaps[0].Summary.Properties)
	fatalIf(t, err, "parse summary")
	want := []Provenance{{Shard: "s0", First: 1, Last: 1, Epochs: []uint64{2}}, {Shard: "s1", First: 3, Last: 4, Epochs: []uint64{3}}}
	if !slices.EqualFunc(got, want, equalProvenance) {
		t.Fatalf("first snapshot's provenance %+v, want %+v", got, want)
	}
	if snaps[1].Summary.Properties["added-records"] != "5" {
		t.Fatalf("second snapshot summary %v", snaps[1].Summary.Properties)
	}
	if prev := slices.Collect(tbl.Metadata().PreviousFiles()); len(prev) != 2 || prev[1].MetadataFile != first {
		t.Fatalf("metadata log %+v, want 2 entries ending at %s", prev, first)
	}
}

// checkBounds checks that the manifests name exactly files, each with its
// rows, size and _seq range as bounds.
func (e *env) checkBounds(tbl *table.Table, files ...File) {
	e.t.Helper()
	tasks, err := tbl.Scan().PlanFiles(e.ctx)
	fatalIf(e.t, err, "plan files")
	want := map[string]File{}
	for _, f := range files {
		want[f.Path] = f
	}
	for _, task := range tasks {
		df := task.File
		f, ok := want[df.FilePath()]
		delete(want, df.FilePath())
		lo, hi := df.LowerBoundValues()[SeqFieldID], df.UpperBoundValues()[SeqFieldID]
		if !ok || df.Count() != f.Rows || df.FileSizeBytes() != f.Bytes || len(lo) != 8 || len(hi) != 8 ||
			binary.LittleEndian.Uint64(lo) != f.SeqFirst || binary.LittleEndian.Uint64(hi) != f.SeqLast {
			e.t.Fatalf("manifest entry %s: rows %d bytes %d _seq bounds %x..%x; want %+v", df.FilePath(), df.Count(), df.FileSizeBytes(), lo, hi, f)
		}
	}
	if len(want) != 0 {
		e.t.Fatalf("files missing from the manifests: %v", want)
	}
}

func equalProvenance(a, b Provenance) bool {
	return a.Shard == b.Shard && a.First == b.First && a.Last == b.Last && slices.Equal(a.Epochs, b.Epochs)
}

// TestBaseSchemaFieldIDs: the catalog keeps rollwal's field ids (it does
// not assign fresh ones), the name mapping maps every column to its id,
// the sort order is _seq ascending and the table is unpartitioned.
func TestBaseSchemaFieldIDs(t *testing.T) {
	e := newEnv(t)
	tbl, err := e.cat.LoadTable(e.ctx, e.ident)
	fatalIf(t, err, "load")
	meta := tbl.Metadata()
	want := map[string]int{"id": 1, "_seq": 2, "_epoch": 3, "prompt": 4, "completion": 5, "reward": 6, "metadata": 7}
	var order []string
	for _, f := range meta.CurrentSchema().Fields() {
		order = append(order, f.Name)
		if f.ID != want[f.Name] {
			t.Errorf("field %s has id %d, want %d", f.Name, f.ID, want[f.Name])
		}
	}
	if got := strings.Join(order, ","); got != "id,prompt,completion,reward,metadata,_seq,_epoch" {
		t.Errorf("field order %s", got)
	}
	if len(meta.NameMapping()) != len(want) {
		t.Errorf("name mapping %v has %d entries, want %d", meta.NameMapping(), len(meta.NameMapping()), len(want))
	}
	for _, m := range meta.NameMapping() {
		if m.FieldID == nil || *m.FieldID != want[m.Names[0]] {
			t.Errorf("name mapping %v", m)
		}
	}
	if ids := meta.CurrentSchema().IdentifierFieldIDs; !slices.Equal(ids, []int{IDFieldID}) {
		t.Errorf("identifier fields %v", ids)
	}
	so := meta.SortOrder()
	if so.OrderID() != SeqSortOrderID || so.Len() != 1 {
		t.Errorf("sort order %v", so)
	}
	if !meta.PartitionSpec().IsUnpartitioned() || meta.Version() != 2 {
		t.Errorf("spec %v, format v%d", meta.PartitionSpec(), meta.Version())
	}
}

// TestStaleHandleRefused: a commit from a handle loaded before another
// commit landed is refused, through iceberg-go's own Transaction.Commit
// (requirement check) and through two commits prepared against the same
// revision (the mod-revision guard); the refused ones change nothing.
func TestStaleHandleRefused(t *testing.T) {
	e := newEnv(t)
	stale, err := e.cat.LoadTable(e.ctx, e.ident)
	fatalIf(t, err, "load")
	f1 := e.baseFile("s0", 1, 1, "a", 3, 1)
	p1, err := e.cat.PrepareAppend(e.ctx, e.ident, []File{f1}, nil)
	fatalIf(t, err, "prepare 1")
	f2 := e.baseFile("s0", 2, 1, "b", 3, 4)
	p2, err := e.cat.PrepareAppend(e.ctx, e.ident, []File{f2}, nil)
	fatalIf(t, err, "prepare 2")
	if _, err := e.cat.Apply(e.ctx, p1); err != nil {
		t.Fatal(err)
	}
	delete(e.rows, "b-0")
	delete(e.rows, "b-1")
	delete(e.rows, "b-2")
	at := e.location()
	if _, err := e.cat.Apply(e.ctx, p2); !errors.Is(err, ErrConflict) {
		t.Fatalf("second commit prepared at the same revision: %v, want ErrConflict", err)
	}
	txn := stale.NewTransaction()
	fatalIf(t, txn.AddDataFiles(e.ctx, mustDataFiles(t, stale, f2), nil), "stale add")
	if _, err := txn.Commit(e.ctx); !errors.Is(err, ErrConflict) || !errors.Is(err, table.ErrCommitFailed) {
		t.Fatalf("commit from a stale handle: %v, want ErrConflict (ErrCommitFailed)", err)
	}
	if got := e.location(); got != at {
		t.Fatalf("a refused commit moved the table to %s", got)
	}
	tbl, err := e.cat.LoadTable(e.ctx, e.ident)
	fatalIf(t, err, "load")
	e.scan(tbl)
}

func mustDataFiles(t *testing.T, tbl *table.Table, files ...File) []iceberg.DataFile {
	t.Helper()
	dfs, err := dataFiles(tbl.Metadata(), files)
	fatalIf(t, err, "data files")
	return dfs
}

// TestCatalogReadSide: namespaces, listing, existence, create twice,
// drop of a non-empty namespace, rename.
func TestCatalogReadSide(t *testing.T) {
	e := newEnv(t)
	ns := table.Identifier{"rollwal"}
	nss, err := e.cat.ListNamespaces(e.ctx, nil)
	fatalIf(t, err, "list namespaces")
	if len(nss) != 1 || nss[0][0] != "rollwal" {
		t.Fatalf("namespaces %v", nss)
	}
	sc, _ := BaseSchema(mustRollout())
	if _, err := e.cat.CreateTable(e.ctx, e.ident, sc, icecat.WithLocation(e.dir+"/x")); !errors.Is(err, icecat.ErrTableAlreadyExists) {
		t.Fatalf("create twice: %v", err)
	}
	if _, err := e.cat.CreateTable(e.ctx, table.Identifier{"nope", "t"}, sc, icecat.WithLocation(e.dir+"/x")); !errors.Is(err, icecat.ErrNoSuchNamespace) {
		t.Fatalf("create in a missing namespace: %v", err)
	}
	if err := e.cat.DropNamespace(e.ctx, ns); !errors.Is(err, icecat.ErrNamespaceNotEmpty) {
		t.Fatalf("drop non-empty namespace: %v", err)
	}
	if _, err := e.cat.RenameTable(e.ctx, e.ident, table.Identifier{"rollwal", "u"}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for id, err := range e.cat.ListTables(e.ctx, ns) {
		fatalIf(t, err, "list tables")
		names = append(names, strings.Join(id, "."))
	}
	if strings.Join(names, ",") != "rollwal.u" {
		t.Fatalf("tables %v", names)
	}
	if ok, err := e.cat.CheckTableExists(e.ctx, e.ident); ok || err != nil {
		t.Fatalf("renamed-away table exists=%v err=%v", ok, err)
	}
	if _, err := e.cat.LoadTable(e.ctx, e.ident); !errors.Is(err, icecat.ErrNoSuchTable) {
		t.Fatalf("load renamed-away table: %v", err)
	}
	fatalIf(t, e.cat.DropTable(e.ctx, table.Identifier{"rollwal", "u"}), "drop table")
	fatalIf(t, e.cat.DropNamespace(e.ctx, ns), "drop namespace")
	if ok, _ := e.cat.CheckNamespaceExists(e.ctx, ns); ok {
		t.Fatal("dropped namespace exists")
	}
}

// TestNestedBaseSchema: lists and structs become Iceberg lists and
// structs, the fields inside them numbered after the user columns, depth
// first, with their nullability, and the name mapping reaches them.
func TestNestedBaseSchema(t *testing.T) {
	var cols []schema.Column
	for _, c := range []struct{ name, typ string }{
		{"tokens", "list<int32>"}, {"messages", "list<struct<role: string, content: string?>>"},
		{"judge", "struct<score: float32?>"}, {"at", "timestamp"}, {"image", "binary"},
	} {
		col, err := schema.ParseColumnType(c.typ)
		fatalIf(t, err, "parse")
		col.Name = c.name
		cols = append(cols, col)
	}
	s, err := schema.New(cols)
	fatalIf(t, err, "schema")
	sc, err := BaseSchema(s)
	fatalIf(t, err, "base schema")
	want := "table {\n\t1: id: required string\n" +
		"\t4: tokens: required list<int>\n" +
		"\t5: messages: required list<struct<11: role: required string, 12: content: optional string>>\n" +
		"\t6: judge: required struct<13: score: optional float>\n" +
		"\t7: at: required timestamptz\n\t8: image: required binary\n" +
		"\t2: _seq: required long\n\t3: _epoch: required long\n}"
	if got := sc.String(); got != want {
		t.Errorf("schema:\n%s\nwant:\n%s", got, want)
	}
	if f, ok := sc.FindFieldByName("tokens.element"); !ok || f.ID != 9 || !f.Required {
		t.Errorf("tokens.element: %+v %v", f, ok)
	}
	if f, ok := sc.FindFieldByName("messages.element"); !ok || f.ID != 10 {
		t.Errorf("messages.element: %+v %v", f, ok)
	}
	mapped := map[string]int{}
	var walk func(prefix string, fields []iceberg.MappedField)
	walk = func(prefix string, fields []iceberg.MappedField) {
		for _, m := range fields {
			if m.FieldID != nil {
				mapped[prefix+m.Names[0]] = *m.FieldID
			}
			walk(prefix+m.Names[0]+".", m.Fields)
		}
	}
	walk("", sc.NameMapping())
	for name, id := range map[string]int{"tokens.element": 9, "messages.element.role": 11, "messages.element.content": 12, "judge.score": 13} {
		if mapped[name] != id {
			t.Errorf("name mapping: %s → %d, want %d (%v)", name, mapped[name], id, mapped)
		}
	}
}
