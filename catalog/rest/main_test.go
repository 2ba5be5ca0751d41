package rest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go/table"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/catalog"
	"github.com/rollwal/rollwal/etcdembed/etcdtest"
	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/vfs"
)

// etcd is the package's one embedded server; each test uses its own
// catalog prefix.
var etcd etcdtest.Shared

func TestMain(m *testing.M) { os.Exit(etcd.RunCheckingLeaks(m)) }

// env is an etcd catalog holding the base table rollwal.t (at dir/base),
// served by NewHandler on an httptest server.
type env struct {
	t      *testing.T
	ctx    context.Context
	cli    *clientv3.Client
	prefix string
	cat    *catalog.Etcd
	dir    string
	ident  table.Identifier
	rows   map[string]row // every row appended, by id: the model a scan must equal
	srv    *httptest.Server
}

// row is what a scan must return for one id.
type row struct {
	prompt     string
	seq, epoch uint64
}

// newBareEnv is a catalog with nothing in it (no merge ran yet), served
// with opts.
func newBareEnv(t *testing.T, opts Options) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	e := &env{t: t, ctx: ctx, cli: etcd.Server(t).Client(), dir: t.TempDir(),
		ident: catalog.BaseIdent("t"), rows: map[string]row{}}
	e.prefix = catalog.BasePrefix("rollwal-rest-test/"+etcdtest.Name(t, "", 80), "t")
	cat, err := catalog.New(catalog.Options{Client: e.cli, Prefix: e.prefix})
	if err != nil {
		t.Fatal(err)
	}
	e.cat = cat
	e.srv = httptest.NewServer(NewHandler(cat, opts))
	t.Cleanup(e.srv.Close)
	return e
}

// newEnv is newBareEnv with the base table created, empty.
func newEnv(t *testing.T, opts Options) *env {
	t.Helper()
	e := newBareEnv(t, opts)
	if err := e.cat.CreateNamespace(e.ctx, table.Identifier{catalog.BaseNamespace}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cat.CreateBaseTable(e.ctx, e.ident, filepath.Join(e.dir, "base"), schema.Rollout()); err != nil {
		t.Fatal(err)
	}
	return e
}

// baseFile writes n rows as generation gen of a shard the way the merge
// stages base files (generation.Write into base/data/<shard>/), with _seq
// from seq0, and returns the file to register.
func (e *env) baseFile(shard string, gen, epoch uint64, prefix string, n int, seq0 uint64) catalog.File {
	e.t.Helper()
	s := schema.Rollout()
	rows := make([]schema.Row, n)
	d := generation.Data{Seq: make([]uint64, n), Epoch: make([]uint64, n)}
	for i := range rows {
		id := prefix + "-" + strconv.Itoa(i)
		rows[i] = schema.Row{"id": id, "prompt": "p " + id, "completion": "c", "reward": float64(i)}
		d.Seq[i], d.Epoch[i] = seq0+uint64(i), epoch
		e.rows[id] = row{prompt: "p " + id, seq: d.Seq[i], epoch: epoch}
	}
	b, err := s.Build(rows)
	if err != nil {
		e.t.Fatal(err)
	}
	d.Rows = b
	dir := filepath.Join(e.dir, "base", "data", shard)
	if err := vfs.MkdirAllDurable(vfs.Default, dir, 0o755); err != nil {
		e.t.Fatal(err)
	}
	f, err := generation.Write(e.ctx, generation.Options{}, dir, s, generation.Meta{Table: "t", Shard: shard, Generation: gen, Epoch: epoch}, d)
	if err != nil {
		e.t.Fatal(err)
	}
	return catalog.File{Path: f.Path, Rows: int64(n), Bytes: f.Size, SeqFirst: f.Meta.SeqFirst, SeqLast: f.Meta.SeqLast}
}

// appendFiles registers files in one snapshot, as the merge does.
func (e *env) appendFiles(parts []catalog.Provenance, files ...catalog.File) {
	e.t.Helper()
	p, err := e.cat.PrepareAppend(e.ctx, e.ident, files, catalog.Summary(parts))
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.cat.Apply(e.ctx, p); err != nil {
		e.t.Fatal(err)
	}
}

// fill appends two snapshots of rows from two shards.
func (e *env) fill() {
	e.t.Helper()
	e.appendFiles([]catalog.Provenance{{Shard: "s0", First: 1, Last: 1, Epochs: []uint64{2}}}, e.baseFile("s0", 1, 2, "a", 6, 11))
	e.appendFiles([]catalog.Provenance{{Shard: "s1", First: 1, Last: 1, Epochs: []uint64{1}}}, e.baseFile("s1", 1, 1, "b", 4, 1))
}

// location is the metadata location the etcd record names, read from the
// catalog itself, not through REST.
func (e *env) location() string {
	e.t.Helper()
	tbl, err := e.cat.LoadTable(e.ctx, e.ident)
	if err != nil {
		e.t.Fatal(err)
	}
	return tbl.MetadataLocation()
}

// checkScan checks that a table read through REST holds exactly the rows
// appended, with their _seq and _epoch.
func (e *env) checkScan(tbl *table.Table) {
	e.t.Helper()
	at, err := tbl.Scan().ToArrowTable(e.ctx)
	if err != nil {
		e.t.Fatalf("scan: %v", err)
	}
	defer at.Release()
	got := map[string]row{}
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
			got[ids.Value(i)] = row{prompt: prompts.Value(i), seq: uint64(seqs.Value(i)), epoch: uint64(epochs.Value(i))}
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

// answer is one HTTP answer.
type answer struct {
	code   int
	header http.Header
	body   []byte
}

// do makes one request to the server; path is the escaped path and query.
func (e *env) do(method, path, body string, header ...string) answer {
	e.t.Helper()
	req, err := http.NewRequestWithContext(e.ctx, method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return answer{code: resp.StatusCode, header: resp.Header, body: b}
}

// errorOf decodes an ErrorModel strictly: the wrapper and its three fields,
// nothing else (no stack).
func errorOf(t *testing.T, a answer) errorBody {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(a.body))
	dec.DisallowUnknownFields()
	var m errorModel
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("answer %d %s is not an ErrorModel: %v", a.code, a.body, err)
	}
	if m.Error.Code != a.code {
		t.Fatalf("ErrorModel code %d in an answer with status %d", m.Error.Code, a.code)
	}
	return m.Error
}

// wantError checks an answer is the ErrorModel of status and type, with a
// message containing msg.
func wantError(t *testing.T, what string, a answer, status int, typ, msg string) {
	t.Helper()
	if a.code != status {
		t.Errorf("%s: status %d %s, want %d", what, a.code, a.body, status)
		return
	}
	if ct := a.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: Content-Type %q", what, ct)
	}
	m := errorOf(t, a)
	if m.Type != typ || !strings.Contains(m.Message, msg) {
		t.Errorf("%s: error %+v, want type %s and a message containing %q", what, m, typ, msg)
	}
}
