package catalog

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go/table"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/etcdembed/etcdtest"
	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/vfs"
)

// etcd is the package's one embedded server; each test uses its own
// catalog prefix.
var etcd etcdtest.Shared

func TestMain(m *testing.M) { os.Exit(etcd.RunCheckingLeaks(m)) }

// env is one catalog with one base table, rollwal.t, at dir/base.
type env struct {
	t     *testing.T
	ctx   context.Context
	cli   *clientv3.Client
	cat   *Etcd
	fs    vfs.FS
	dir   string
	ident table.Identifier
	rows  map[string]baseRow // every row appended, by id
}

// baseRow is what a scan must return for one row.
type baseRow struct {
	prompt     string
	seq, epoch uint64
}

func newEnv(t *testing.T) *env { return newEnvFS(t, vfs.Default) }

// newEnvFS is newEnv with every file on fs.
func newEnvFS(t *testing.T, fs vfs.FS) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	e := &env{t: t, ctx: ctx, cli: etcd.Server(t).Client(), fs: fs, dir: t.TempDir(),
		ident: table.Identifier{"rollwal", "t"}, rows: map[string]baseRow{}}
	cat, err := New(Options{Client: e.cli, FS: fs, Prefix: "rollwal-test/" + etcdtest.Name(t, "", 100) + "/iceberg"})
	if err != nil {
		t.Fatal(err)
	}
	e.cat = cat
	if err := cat.CreateNamespace(ctx, table.Identifier{"rollwal"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.CreateBaseTable(ctx, e.ident, filepath.Join(e.dir, "base"), schema.Rollout()); err != nil {
		t.Fatal(err)
	}
	return e
}

// baseFile writes n rows as generation gen of shard s the way the merge
// stages base files (generation.Write into base/data/<shard>/), with _seq
// from seq0, and returns the file to register.
func (e *env) baseFile(shard string, gen, epoch uint64, prefix string, n int, seq0 uint64) File {
	e.t.Helper()
	s := schema.Rollout()
	rows := make([]schema.Row, n)
	d := generation.Data{Seq: make([]uint64, n), Epoch: make([]uint64, n)}
	for i := range rows {
		id := prefix + "-" + strconv.Itoa(i)
		rows[i] = schema.Row{"id": id, "prompt": "p " + id, "completion": "c", "reward": float64(i)}
		d.Seq[i], d.Epoch[i] = seq0+uint64(i), epoch
		e.rows[id] = baseRow{prompt: "p " + id, seq: d.Seq[i], epoch: epoch}
	}
	b, err := s.Build(rows)
	if err != nil {
		e.t.Fatal(err)
	}
	d.Rows = b
	dir := filepath.Join(e.dir, "base", "data", shard)
	if err := vfs.MkdirAllDurable(e.fs, dir, 0o755); err != nil {
		e.t.Fatal(err)
	}
	f, err := generation.Write(e.ctx, generation.Options{FS: e.fs}, dir, s, generation.Meta{Table: "t", Shard: shard, Generation: gen, Epoch: epoch}, d)
	if err != nil {
		e.t.Fatal(err)
	}
	return File{Path: f.Path, Rows: int64(n), Bytes: f.Size, SeqFirst: f.Meta.SeqFirst, SeqLast: f.Meta.SeqLast}
}

// appendFiles prepares and applies one append.
func (e *env) appendFiles(parts []Provenance, files ...File) *table.Table {
	e.t.Helper()
	p, err := e.cat.PrepareAppend(e.ctx, e.ident, files, Summary(parts))
	if err != nil {
		e.t.Fatal(err)
	}
	tbl, err := e.cat.Apply(e.ctx, p)
	if err != nil {
		e.t.Fatal(err)
	}
	return tbl
}

// twoSnapshots appends six rows of shard s0, then four of s1: two
// snapshots. It returns the table and the ids of the first.
func (e *env) twoSnapshots() (*table.Table, []string) {
	e.t.Helper()
	e.appendFiles([]Provenance{{Shard: "s0", First: 1, Last: 1, Epochs: []uint64{2}}}, e.baseFile("s0", 1, 2, "a", 6, 11))
	var first []string
	for id := range e.rows {
		first = append(first, id)
	}
	return e.appendFiles(nil, e.baseFile("s1", 1, 1, "b", 4, 1)), first
}

// location returns the metadata location the catalog key names.
func (e *env) location() string {
	e.t.Helper()
	tbl, err := e.cat.LoadTable(e.ctx, e.ident)
	if err != nil {
		e.t.Fatal(err)
	}
	return tbl.MetadataLocation()
}

// scan reads the table with iceberg-go and checks that it holds exactly
// the rows appended.
func (e *env) scan(tbl *table.Table) {
	e.t.Helper()
	at, err := tbl.Scan().ToArrowTable(e.ctx)
	if err != nil {
		e.t.Fatalf("scan: %v", err)
	}
	defer at.Release()
	got := map[string]baseRow{}
	rdr := array.NewTableReader(at, 0)
	defer rdr.Release()
	for rdr.Next() {
		rec := rdr.RecordBatch()
		col := func(name string) int { return rec.Schema().FieldIndices(name)[0] }
		ids := rec.Column(col("id")).(*array.String)
		prompts := rec.Column(col("prompt")).(*array.String)
		seqs, epochs := rec.Column(col("_seq")).(*array.Int64), rec.Column(col("_epoch")).(*array.Int64)
		for i := 0; i < int(rec.NumRows()); i++ {
			if _, dup := got[ids.Value(i)]; dup {
				e.t.Fatalf("scan: id %s twice", ids.Value(i))
			}
			got[ids.Value(i)] = baseRow{prompt: prompts.Value(i), seq: uint64(seqs.Value(i)), epoch: uint64(epochs.Value(i))}
		}
	}
	if len(got) != len(e.rows) {
		e.t.Fatalf("scan: %d rows, %d appended", len(got), len(e.rows))
	}
	for id, want := range e.rows {
		if got[id] != want {
			e.t.Fatalf("scan: row %s = %+v, want %+v", id, got[id], want)
		}
	}
}

func fatalIf(t *testing.T, err error, format string, args ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", fmt.Sprintf(format, args...), err)
	}
}
