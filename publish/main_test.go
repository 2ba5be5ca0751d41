package publish

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/apache/arrow-go/v18/arrow/array"
	icecat "github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/rollwal/rollwal/catalog"
	"github.com/rollwal/rollwal/catalog/rest"
	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/etcdembed/etcdtest"
	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/internal/pyenv"
	"github.com/rollwal/rollwal/objstore"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/vfs"
)

// etcdClient is the package's one embedded etcd; each test uses its own
// table.
var etcdClient *clientv3.Client

// etcd is the package's one embedded server.
var etcd etcdtest.Shared

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	srv, err := etcd.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start embedded etcd:", err)
		return 1
	}
	etcdClient = srv.Client()
	return etcd.RunCheckingLeaks(m)
}

func tableName(t testing.TB) string { return etcdtest.Name(t, "", 100) }

// countingFS counts opens of base data files: every base-table read starts
// with one.
type countingFS struct {
	vfs.FS
	baseOpens atomic.Int64
}

func (c *countingFS) Open(name string) (vfs.File, error) {
	if strings.Contains(filepath.ToSlash(name), "/base/data/") {
		c.baseOpens.Add(1)
	}
	return c.FS.Open(name)
}

// env is one table: its data directory, the engine options of its writers
// and every id ever acknowledged.
type env struct {
	t   *testing.T
	ctx context.Context
	fs  *countingFS
	// mem is the strict in-memory filesystem under fs, when the test
	// crashes it (newMemEnv); nil when fs is the disk.
	mem   *vfs.MemFS
	dir   string
	table string
	opts  engine.Options
	ids   map[string]bool
	// store is the object store of the last coordinator opened with one
	// (Options.Store): the base then lives there.
	store objstore.Store
	// checked: checkBase ran (it runs once, before a store's server stops).
	checked bool
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	e := &env{t: t, ctx: ctx, fs: &countingFS{FS: vfs.Default}, dir: t.TempDir(), table: tableName(t), ids: map[string]bool{}}
	e.opts = engine.Options{
		DataDir: e.dir, FS: e.fs, Table: e.table, Etcd: etcdClient,
		WALSegmentSize: 64 << 10, FlushBytes: 1 << 20, FlushAge: -1,
		MemoryBudget: 64 << 20, RequestTimeout: 5 * time.Second, LeaseTTL: 2 * time.Second,
		NoFlushOnClose: true,
	}
	t.Cleanup(func() { e.checkBase() })
	return e
}

// newMemEnv is newEnv on the strict in-memory filesystem (which forgets
// unsynced data at a crash: see crash). Readers outside the process
// (pyarrow, pyiceberg, DuckDB) do not see it.
func newMemEnv(t *testing.T) *env {
	e := newEnv(t)
	e.mem = vfs.NewStrictMem()
	e.fs.FS, e.dir = e.mem, "/data"
	e.opts.FS, e.opts.DataDir = e.fs, e.dir
	return e
}

// crash makes the filesystem what a machine crash leaves of it: every
// process on it is dead (the caller closes them), unsynced data is gone.
func (e *env) crash() {
	e.t.Helper()
	e.mem = e.mem.CrashClone()
	e.fs.FS = e.mem
}

func (e *env) host(disableExclusion bool) *engine.Host {
	e.t.Helper()
	o := e.opts
	o.DisableSourceExclusion = disableExclusion
	h, err := engine.NewHost(o)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = h.Close(context.Background()) })
	return h
}

func (e *env) open(h *engine.Host, shard string) *engine.Shard {
	e.t.Helper()
	s, err := h.Open(e.ctx, shard)
	if err != nil {
		e.t.Fatalf("open %s: %v", shard, err)
	}
	return s
}

func (e *env) appendRows(s *engine.Shard, prefix string, from, n int) {
	e.t.Helper()
	rows := make([]schema.Row, n)
	for i := range rows {
		id := prefix + "-" + strconv.Itoa(from+i)
		rows[i] = schema.Row{"id": id, "prompt": "p " + id, "completion": "c", "reward": float64(i)}
		e.ids[id] = true
	}
	if _, err := s.Append(e.ctx, rows, engine.Source{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) flush(s *engine.Shard) uint64 {
	e.t.Helper()
	g, err := s.Flush(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return g
}

func (e *env) coordinator(mod ...func(*Options)) *Coordinator {
	e.t.Helper()
	o := Options{Etcd: etcdClient, Prefix: "rollwal", Table: e.table, DataDir: e.dir, FS: e.fs, LeaseTTL: 5 * time.Second, OrphanGrace: -1}
	for _, f := range mod {
		f(&o)
	}
	if o.Store != nil && e.store == nil {
		// Cleanups run last-registered first: this one runs before the
		// store's server (started before this call) is stopped.
		e.t.Cleanup(e.checkBase)
	}
	if o.Store != nil {
		e.store = o.Store
	}
	c, err := New(e.ctx, o)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

func (e *env) runOnce(c *Coordinator) Result {
	e.t.Helper()
	r, err := c.RunOnce(e.ctx)
	if err != nil {
		e.t.Fatalf("RunOnce: %v", err)
	}
	return r
}

func (e *env) keys() shardmeta.Keys { return shardmeta.Keys{Prefix: "rollwal", Table: e.table} }

func (e *env) state() (*shardmeta.BaseState, int64) {
	e.t.Helper()
	st, rev, err := shardmeta.NewStore(etcdClient, e.keys(), shardmeta.StoreOptions{}).LoadBaseState(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return st, rev
}

func (e *env) putManifest(shard string, m *shardmeta.Manifest) {
	e.t.Helper()
	data, err := m.Encode()
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := etcdClient.Put(e.ctx, e.keys().Manifest(shard), string(data)); err != nil {
		e.t.Fatal(err)
	}
}

// drain does what the shard owner's next commit does (the shard must be
// closed): drop the generations the base watermark covers. With lag it
// also sets the replay cursor back to 0, leaving it lagging the flushes.
func (e *env) drain(shard string, lag bool) {
	e.t.Helper()
	m, err := engine.LoadManifest(e.ctx, etcdClient, "rollwal", e.table, shard)
	if err != nil {
		e.t.Fatal(err)
	}
	st, _ := e.state()
	w := st.Shards[shard].Watermark
	var keep []shardmeta.Generation
	for _, g := range m.Flushed {
		if g.Number > w {
			keep = append(keep, g)
		}
	}
	m.Flushed = keep
	if lag {
		if len(keep) != 0 {
			e.t.Fatalf("shard %s: cannot lag the cursor with %d unmerged generations", shard, len(keep))
		}
		m.ReplayCursor = 0
	}
	e.putManifest(shard, m)
}

// planStage plans and stages one pass of c.
func (e *env) planStage(c *Coordinator) (*Plan, *Staged) {
	e.t.Helper()
	p, err := c.Plan(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	staged, err := c.Stage(e.ctx, p)
	if err != nil {
		e.t.Fatal(err)
	}
	return p, staged
}

// drainTo drains every merged generation of a closed shard and sets its
// replay cursor back to cursor.
func (e *env) drainTo(shard string, cursor uint64) {
	e.t.Helper()
	e.drain(shard, false)
	m, err := engine.LoadManifest(e.ctx, etcdClient, "rollwal", e.table, shard)
	if err != nil {
		e.t.Fatal(err)
	}
	m.ReplayCursor = cursor
	e.putManifest(shard, m)
}

// baseTable loads the base's Iceberg table through a catalog of its own
// (nil before the first coordinator created it).
func (e *env) baseTable() *table.Table {
	e.t.Helper()
	cat, err := catalog.New(catalog.Options{Client: etcdClient, Prefix: catalog.BasePrefix("rollwal", e.table), FS: e.fs.FS, Store: e.store})
	if err != nil {
		e.t.Fatal(err)
	}
	tbl, err := cat.LoadTable(e.ctx, catalog.BaseIdent(e.table))
	if errors.Is(err, icecat.ErrNoSuchTable) {
		return nil
	} else if err != nil {
		e.t.Fatal(err)
	}
	return tbl
}

// restCatalog serves the base's catalog read-only over the Iceberg REST
// protocol (what writer serve's iceberg.rest_listen serves).
func (e *env) restCatalog() *httptest.Server {
	e.t.Helper()
	cat, err := catalog.New(catalog.Options{Client: etcdClient, Prefix: catalog.BasePrefix("rollwal", e.table), FS: e.fs.FS})
	if err != nil {
		e.t.Fatal(err)
	}
	return httptest.NewServer(rest.NewHandler(cat, rest.Options{}))
}

// baseFiles lists the data files of the base table's current snapshot,
// as iceberg-go plans a scan of it (paths relative to the base directory).
func (e *env) baseFiles() []shardmeta.BaseFile {
	e.t.Helper()
	tbl := e.baseTable()
	if tbl == nil || tbl.CurrentSnapshot() == nil {
		return nil
	}
	tasks, err := tbl.Scan().PlanFiles(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []shardmeta.BaseFile
	for _, task := range tasks {
		rel, err := relOf(task.File.FilePath(), e.baseLocation())
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, shardmeta.BaseFile{Path: rel, Rows: task.File.Count(), Bytes: task.File.FileSizeBytes()})
	}
	return out
}

// baseLocation is the base's location: the store's when the base is in
// one, else the base directory.
func (e *env) baseLocation() string {
	if e.store != nil {
		return catalog.StoreLocation(e.store, e.table+"/base")
	}
	return e.baseDir()
}

// readBaseFile reads the base file at rel (relative to the base) from
// wherever the base lives.
func (e *env) readBaseFile(rel string) (generation.Data, error) {
	if e.store == nil {
		_, d, err := generation.ReadStored(e.fs.FS, filepath.Join(e.baseDir(), filepath.FromSlash(rel)))
		return d, err
	}
	key := e.table + "/base/" + rel
	b, err := fetchGeneration(e.ctx, e.store, key)
	if err != nil {
		return generation.Data{}, err
	}
	_, d, err := generation.ReadStoredFrom(bytes.NewReader(b), int64(len(b)), objectURL(e.store, key))
	return d, err
}

// latestReaderManifest is the newest readers' manifest, wherever the base
// lives.
func (e *env) latestReaderManifest() (ReaderManifest, bool, error) {
	if e.store != nil {
		return LatestStoreReaderManifest(e.ctx, e.store, e.table)
	}
	return LatestReaderManifest(e.fs.FS, e.baseDir())
}

func (e *env) baseDir() string {
	d, err := filepath.Abs(filepath.Join(e.dir, e.table, "base"))
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

// baseIDs reads every committed base file and counts each id.
func (e *env) baseIDs() (map[string]int, int64) {
	e.t.Helper()
	ids := map[string]int{}
	var rows int64
	for _, f := range e.baseFiles() {
		d, err := e.readBaseFile(f.Path)
		if err != nil {
			e.t.Fatalf("base file %s: %v", f.Path, err)
		}
		if int64(d.Rows.Len()) != f.Rows {
			e.t.Fatalf("base file %s: %d rows, the table says %d", f.Path, d.Rows.Len(), f.Rows)
		}
		for _, id := range d.Rows.IDs {
			ids[id]++
		}
		rows += int64(d.Rows.Len())
	}
	return ids, rows
}

// checkBase is the global invariant: base rows == distinct ids, every id
// once; iceberg-go's scan of the table returns the same rows; the current
// snapshot is the state's version; the latest readers' manifest names
// exactly the committed files; pyarrow, pyiceberg (from the metadata file
// and through the REST catalog) and DuckDB's iceberg_scan (when
// ROLLWAL_PYTHON is set) read the same.
func (e *env) checkBase() {
	t := e.t
	if t.Failed() || e.checked {
		return
	}
	e.checked = true
	ids, rows := e.baseIDs()
	if int64(len(ids)) != rows {
		for id, n := range ids {
			if n > 1 {
				t.Errorf("id %s is in the base %d times", id, n)
			}
		}
		t.Fatalf("base has %d rows for %d distinct ids", rows, len(ids))
	}
	st, _ := e.state()
	if st.Version == 0 {
		return
	}
	e.checkScan(st.Version, ids)
	m, ok, err := e.latestReaderManifest()
	if err != nil || !ok {
		t.Fatalf("readers' manifest: ok=%v err=%v", ok, err)
	}
	if files := e.baseFiles(); m.Version != st.Version || len(m.Files) != len(files) || m.Rows != rows {
		t.Fatalf("readers' manifest v%d (%d files, %d rows) disagrees with state v%d (%d files, %d rows)",
			m.Version, len(m.Files), m.Rows, st.Version, len(files), rows)
	}
	if tbl := e.baseTable(); m.IcebergMetadata != tbl.MetadataLocation() {
		t.Fatalf("readers' manifest v%d names metadata %s, the catalog %s", m.Version, m.IcebergMetadata, tbl.MetadataLocation())
	}
	scanned := map[string]int64{}
	for _, f := range e.baseFiles() {
		scanned[f.Path] = f.Rows
	}
	for _, f := range m.Files {
		if rows, ok := scanned[f.Path]; !ok || rows != f.Rows {
			t.Fatalf("readers' manifest v%d names %s (%d rows); a scan of the table plans it: %v (%d rows)", m.Version, f.Path, f.Rows, ok, rows)
		}
	}
	if e.mem != nil || e.store != nil {
		return // the base is in this process's memory only, or in a store (its tests read it back themselves)
	}
	py := pyenv.Optional(t, "the base read back by pyarrow, pyiceberg and DuckDB")
	if py == "" {
		return
	}
	const script = `
import json, os, sys
import pyarrow.parquet as pq
from pyiceberg.table import StaticTable
base = sys.argv[1]
names = sorted(n for n in os.listdir(os.path.join(base, "_manifest")) if n.endswith(".json") and not n.startswith("."))
m = json.load(open(os.path.join(base, "_manifest", names[-1])))
ids = []
for f in m["files"]:
    t = pq.read_table(os.path.join(base, f["path"]), columns=["id"])
    assert t.num_rows == f["rows"], (f, t.num_rows)
    ids += t.column("id").to_pylist()
ice = StaticTable.from_metadata(m["iceberg_metadata"]).scan(selected_fields=("id",)).to_arrow().column("id").to_pylist()
assert sorted(ice) == sorted(ids), ("pyiceberg and the readers' manifest disagree", len(ice), len(ids))
import importlib.metadata, duckdb
con = duckdb.connect()
con.execute("SET extension_directory = ?", [str(importlib.metadata.distribution("duckdb-ext-iceberg").locate_file("duckdb_ext/extensions"))])
con.execute("SET autoinstall_known_extensions = false")
con.execute("SET enable_progress_bar = false")
con.execute("LOAD iceberg")
duck = [r[0] for r in con.execute("SELECT id FROM iceberg_scan(?)", [m["iceberg_metadata"]]).fetchall()]
assert sorted(duck) == sorted(ids), ("DuckDB iceberg_scan and the readers' manifest disagree", len(duck), len(ids))
from pyiceberg.catalog import load_catalog
rest = load_catalog("rollwal", **{"type": "rest", "uri": sys.argv[2]}).load_table(("rollwal", sys.argv[3]))
via = rest.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist()
assert sorted(via) == sorted(ids), ("pyiceberg through the REST catalog and the readers' manifest disagree", len(via), len(ids))
json.dump({"version": m["version"], "rows": len(ids), "distinct": len(set(ids))}, sys.stdout)
`
	srv := e.restCatalog()
	defer srv.Close()
	cmd := exec.Command(py, "-c", script, e.baseDir(), srv.URL, e.table)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pyarrow: %v\n%s", err, stderr.String())
	}
	var got struct {
		Version        uint64
		Rows, Distinct int64
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("pyarrow output %q: %v", out, err)
	}
	if got.Version != st.Version || got.Rows != rows || got.Distinct != int64(len(ids)) {
		t.Fatalf("pyarrow read v%d %d rows %d distinct; Go read v%d %d rows %d distinct",
			got.Version, got.Rows, got.Distinct, st.Version, rows, len(ids))
	}
}

// wantAllIDs checks that the base holds exactly the acknowledged ids.
func (e *env) wantAllIDs() {
	e.t.Helper()
	ids, _ := e.baseIDs()
	if len(ids) != len(e.ids) {
		e.t.Fatalf("base has %d distinct ids, %d were acknowledged", len(ids), len(e.ids))
	}
	for id := range e.ids {
		if ids[id] != 1 {
			e.t.Fatalf("id %s is in the base %d times", id, ids[id])
		}
	}
}

func genFlags(p *Plan, shard string) map[uint64]bool {
	out := map[uint64]bool{}
	for _, sp := range p.Shards {
		if sp.Shard == shard {
			for _, g := range sp.Generations {
				out[g.Number] = g.IDCheck
			}
		}
	}
	return out
}

// checkScan: iceberg-go's own scan of the current snapshot returns exactly
// ids, and the table is at base version v.
func (e *env) checkScan(v uint64, ids map[string]int) {
	e.t.Helper()
	tbl := e.baseTable()
	if got := tbl.Metadata().Properties()[BaseVersionProperty]; got != strconv.FormatUint(v, 10) {
		e.t.Fatalf("the table is at base version %q, the state at %d", got, v)
	}
	at, err := tbl.Scan(table.WithSelectedFields("id")).ToArrowTable(e.ctx)
	if err != nil {
		e.t.Fatalf("iceberg-go scan: %v", err)
	}
	defer at.Release()
	got := map[string]int{}
	for _, chunk := range at.Column(0).Data().Chunks() {
		col := chunk.(*array.String)
		for i := range col.Len() {
			got[col.Value(i)]++
		}
	}
	if len(got) != len(ids) || at.NumRows() != int64(len(ids)) {
		e.t.Fatalf("iceberg-go scan: %d rows, %d distinct; the files hold %d distinct", at.NumRows(), len(got), len(ids))
	}
	for id := range ids {
		if got[id] != 1 {
			e.t.Fatalf("iceberg-go scan: id %s %d times", id, got[id])
		}
	}
}
