package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rollwal/rollwal/etcdembed/etcdtest"
	"github.com/rollwal/rollwal/internal/s3test"
	"github.com/rollwal/rollwal/objstore"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/vfs"
)

// storeEnv is one catalog whose table rollwal.t lives in an object store,
// at <store>/t/base.
type storeEnv struct {
	*env
	store objstore.Store
}

func newStoreEnv(t *testing.T, store objstore.Store) *storeEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	e := &env{t: t, ctx: ctx, cli: etcd.Server(t).Client(), fs: vfs.Default, dir: t.TempDir(),
		ident: table.Identifier{"rollwal", "t"}, rows: map[string]baseRow{}}
	cat, err := New(Options{Client: e.cli, Store: store, Prefix: "rollwal-test/" + etcdtest.Name(t, "", 100) + "/iceberg"})
	fatalIf(t, err, "new catalog")
	e.cat = cat
	fatalIf(t, cat.CreateNamespace(ctx, table.Identifier{"rollwal"}, nil), "create namespace")
	_, err = cat.CreateBaseTable(ctx, e.ident, StoreLocation(store, "t/base"), schema.Rollout())
	fatalIf(t, err, "create table")
	return &storeEnv{env: e, store: store}
}

// appendStored writes n rows as a base file on local disk, uploads it to
// the store under t/base/data/<shard>/, and appends it, the way
// stageFiles does, at its store location.
func (e *storeEnv) appendStored(shard string, gen, epoch uint64, prefix string, n int, seq0 uint64) *table.Table {
	e.t.Helper()
	f := e.baseFile(shard, gen, epoch, prefix, n, seq0)
	data, err := os.ReadFile(f.Path)
	fatalIf(e.t, err, "read base file")
	name := "t/base/data/" + shard + "/" + filepath.Base(f.Path)
	fatalIf(e.t, e.store.Create(e.ctx, name, bytes.NewReader(data), int64(len(data))), "upload")
	tbl, err := e.cat.LoadTable(e.ctx, e.ident)
	fatalIf(e.t, err, "load")
	f.Path = StoreLocation(e.store, name)
	b, err := iceberg.NewDataFileBuilder(tbl.Metadata().PartitionSpec(), iceberg.EntryContentData, f.Path, iceberg.ParquetFile, nil, nil, nil, f.Rows, f.Bytes)
	fatalIf(e.t, err, "data file")
	lo, hi, _ := seqBounds(f)
	b.LowerBoundValues(map[int][]byte{SeqFieldID: lo}).UpperBoundValues(map[int][]byte{SeqFieldID: hi})
	txn := tbl.NewTransaction()
	fatalIf(e.t, txn.AddDataFiles(e.ctx, []iceberg.DataFile{b.Build()}, Summary([]Provenance{{Shard: shard, First: gen, Last: gen, Epochs: []uint64{epoch}}})), "add")
	tbl, err = txn.Commit(e.ctx)
	fatalIf(e.t, err, "commit")
	return tbl
}

// checkStored checks that the table's files are objects of the store:
// the metadata file the record names, manifest lists and manifests.
func (e *storeEnv) checkStored(tbl *table.Table) {
	e.t.Helper()
	loc := tbl.MetadataLocation()
	if !strings.HasPrefix(loc, e.store.String()+"/t/base/metadata/") {
		e.t.Fatalf("metadata location %s is not in %s", loc, e.store)
	}
	infos, err := e.store.List(e.ctx, "t/base/metadata/")
	fatalIf(e.t, err, "list")
	var metas, avro int
	for _, in := range infos {
		switch path.Ext(in.Name) {
		case ".json":
			metas++
		case ".avro":
			avro++
		}
	}
	// create, append, append: three metadata files; two snapshots of a
	// manifest list and a manifest each.
	if metas != 3 || avro != 4 {
		e.t.Fatalf("store holds %d metadata files and %d avro files, want 3 and 4: %v", metas, avro, infos)
	}
}

func twoStoredSnapshots(e *storeEnv) (*table.Table, []string) {
	e.appendStored("s0", 1, 2, "a", 6, 11)
	var first []string
	for id := range e.rows {
		first = append(first, id)
	}
	return e.appendStored("s1", 1, 1, "b", 3000, 1), first
}

// TestObjectIOTableOnS3: a base table on versitygw: the catalog writes its
// metadata to the bucket; iceberg-go scans it back through a fresh
// catalog; pyiceberg and pyarrow read it from the s3:// URLs alone.
func TestObjectIOTableOnS3(t *testing.T) {
	srv := s3test.Start(t)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	opts := objstore.Options{Endpoint: srv.Endpoint(), Region: srv.Region(), PathStyle: true,
		AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey(), HTTPClient: &http.Client{Transport: tr}}
	store, err := objstore.Open(context.Background(), "s3://"+srv.Bucket(t)+"/lake", opts)
	fatalIf(t, err, "open store")
	e := newStoreEnv(t, store)
	tbl, first := twoStoredSnapshots(e)
	e.checkStored(tbl)
	e.scan(tbl)
	// A scan through a fresh catalog and store: every object it opens
	// (metadata file, manifest list, manifests, data files; all under
	// readChunk) costs one HEAD and one GET.
	reg := prometheus.NewPedanticRegistry()
	opts.Registerer = reg
	fresh, err := objstore.Open(context.Background(), store.String(), opts)
	fatalIf(t, err, "open store")
	e.scanFresh(Options{Store: fresh})
	heads, gets := requests(t, reg, "HeadObject"), requests(t, reg, "GetObject")
	if heads != 6 || gets != heads {
		t.Errorf("scan: %v HEADs and %v GETs, want 6 each", heads, gets)
	}
	e.readPython(tbl.MetadataLocation(), first, map[string]string{
		"py-io-impl":           "pyiceberg.io.pyarrow.PyArrowFileIO",
		"s3.endpoint":          srv.Endpoint(),
		"s3.access-key-id":     srv.AccessKey(),
		"s3.secret-access-key": srv.SecretKey(),
		"s3.region":            srv.Region(),
	}, map[string]string{"endpoint_override": strings.TrimPrefix(srv.Endpoint(), "http://"), "scheme": "http",
		"access_key": srv.AccessKey(), "secret_key": srv.SecretKey(), "region": srv.Region()})
}

// requests is writer_objstore_requests_total of an S3 op, all outcomes.
func requests(t *testing.T, g prometheus.Gatherer, op string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	fatalIf(t, err, "gather")
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "writer_objstore_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "op" && l.GetValue() == op {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// TestObjectIOTableOnFileStore: the same on a file:// store.
func TestObjectIOTableOnFileStore(t *testing.T) {
	store, err := objstore.Open(context.Background(), "file://"+t.TempDir(), objstore.Options{})
	fatalIf(t, err, "open store")
	e := newStoreEnv(t, store)
	tbl, first := twoStoredSnapshots(e)
	e.checkStored(tbl)
	e.scan(tbl)
	e.scanFresh(Options{Store: store})
	e.readPython(tbl.MetadataLocation(), first, map[string]string{}, nil)
}

// scanFresh loads the table through a second catalog over the same keys
// (nothing cached) and scans it.
func (e *storeEnv) scanFresh(o Options) {
	e.t.Helper()
	o.Client, o.Prefix = e.cli, e.cat.opts.Prefix
	cat, err := New(o)
	fatalIf(e.t, err, "second catalog")
	tbl, err := cat.LoadTable(e.ctx, e.ident)
	fatalIf(e.t, err, "load through second catalog")
	e.scan(tbl)
}

// pyStoreRead reads the table at a metadata location with pyiceberg
// (argv[2]: its properties), and, when argv[3] is not null, every data
// file of the current snapshot with pyarrow's S3FileSystem (argv[3]: its
// arguments).
const pyStoreRead = `
import json, sys
import pyarrow.parquet as pq, pyarrow.fs as pafs
from pyiceberg.table import StaticTable
t = StaticTable.from_metadata(sys.argv[1], properties=json.loads(sys.argv[2]))
snaps = t.metadata.snapshots
cur = t.scan().to_arrow()
old = t.scan(snapshot_id=snaps[0].snapshot_id).to_arrow()
out = {
    "rows": sorted([r["id"], r["prompt"], int(r["_seq"]), int(r["_epoch"])] for r in cur.select(["id", "prompt", "_seq", "_epoch"]).to_pylist()),
    "first_ids": sorted(old.column("id").to_pylist()),
    "summary": snaps[0].summary.additional_properties,
}
fsargs = json.loads(sys.argv[3])
if fsargs is not None:
    s3 = pafs.S3FileSystem(**fsargs)
    ids = []
    for task in t.scan().plan_files():
        p = task.file.file_path
        assert p.startswith("s3://"), p
        ids += pq.read_table(p[len("s3://"):], filesystem=s3, columns=["id"]).column("id").to_pylist()
    out["pyarrow_ids"] = sorted(ids)
json.dump(out, sys.stdout)
`

func (e *storeEnv) readPython(loc string, first []string, props, fsArgs map[string]string) {
	e.t.Helper()
	py := rollwalPython(e.t)
	pj, _ := json.Marshal(props)
	fj, _ := json.Marshal(fsArgs)
	cmd := exec.CommandContext(e.ctx, py, "-c", pyStoreRead, loc, string(pj), string(fj))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		e.t.Fatalf("pyiceberg: %v\n%s", err, stderr.String())
	}
	var got struct {
		Rows       [][]any           `json:"rows"`
		FirstIDs   []string          `json:"first_ids"`
		Summary    map[string]string `json:"summary"`
		PyarrowIDs []string          `json:"pyarrow_ids"`
	}
	fatalIf(e.t, json.Unmarshal(out, &got), "python output %.500s", out)
	var ids []string
	for id := range e.rows {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	slices.Sort(first)
	if len(got.Rows) != len(ids) {
		e.t.Fatalf("pyiceberg read %d rows, want %d", len(got.Rows), len(ids))
	}
	for i, r := range got.Rows {
		want := e.rows[ids[i]]
		if len(r) != 4 || r[0] != ids[i] || r[1] != want.prompt || r[2] != float64(want.seq) || r[3] != float64(want.epoch) {
			e.t.Fatalf("pyiceberg row %d = %v, want [%s %s %d %d]", i, r, ids[i], want.prompt, want.seq, want.epoch)
		}
	}
	if !slices.Equal(got.FirstIDs, first) {
		e.t.Fatalf("pyiceberg read the first snapshot as %v, want %v", got.FirstIDs, first)
	}
	if got.Summary["rollwal.shard.s0.generations"] != "1-1" || got.Summary["rollwal.shard.s0.epochs"] != "2" {
		e.t.Fatalf("pyiceberg summary %v", got.Summary)
	}
	if fsArgs != nil && !slices.Equal(got.PyarrowIDs, ids) {
		e.t.Fatalf("pyarrow read %d ids, want %d", len(got.PyarrowIDs), len(ids))
	}
}

// TestObjectIOLocations: locations map to object names under the store's
// URL; others are refused, naming the location.
func TestObjectIOLocations(t *testing.T) {
	dir := t.TempDir()
	store, err := objstore.Open(context.Background(), "file://"+dir, objstore.Options{})
	fatalIf(t, err, "open")
	o := newObjectIO(store)
	for loc, want := range map[string]string{
		"file://" + dir + "/t/base/metadata/x.avro": "t/base/metadata/x.avro",
		dir + "/t/base/x.parquet":                   "t/base/x.parquet",
	} {
		got, err := o.objectName(loc)
		if err != nil || got != want {
			t.Errorf("objectName(%q) = %q, %v; want %q", loc, got, err, want)
		}
	}
	for _, loc := range []string{
		"s3://bucket/t/x.avro",
		"file://" + dir + "x/t",
		"file://" + dir,
		"file://" + dir + "/",
		"file://" + dir + "/t//x",
		"file://" + dir + "/t/../../x",
		"/elsewhere/t/x",
		"relative/x",
	} {
		_, err := o.objectName(loc)
		if err == nil || !strings.Contains(err.Error(), loc) {
			t.Errorf("objectName(%q) = %v, want an error naming it", loc, err)
		}
		if _, err := o.Create(loc); err == nil {
			t.Errorf("Create(%q) succeeded", loc)
		}
	}
	if _, err := o.objectName("s3://bucket/x"); !errors.Is(err, ErrOutsideStore) {
		t.Errorf("outside: %v, want ErrOutsideStore", err)
	}
}

// TestObjectIOWriteRead: a written object reads back byte for byte through
// Read, Seek and ReadAt, small (fetched whole) and larger than the
// read-ahead; an existing name is refused and keeps its bytes; Remove
// deletes; a missing object is fs.ErrNotExist.
func TestObjectIOWriteRead(t *testing.T) {
	store, err := objstore.Open(context.Background(), "file://"+t.TempDir(), objstore.Options{})
	fatalIf(t, err, "open")
	o := newObjectIO(store)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{0, 1, 100, readChunk, readChunk + 1, 3*readChunk + 17} {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		loc := StoreLocation(store, "d/"+time.Now().Format("150405.000000000"))
		w, err := o.Create(loc)
		fatalIf(t, err, "create")
		_, err = w.ReadFrom(bytes.NewReader(data))
		fatalIf(t, err, "write")
		fatalIf(t, w.Close(), "close")
		if err := o.WriteFile(loc, []byte("other")); !errors.Is(err, objstore.ErrExists) || !strings.Contains(err.Error(), loc) {
			t.Fatalf("second write: %v, want ErrExists naming %s", err, loc)
		}
		got, err := o.ReadFile(loc)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("size %d: ReadFile: %d bytes, %v", size, len(got), err)
		}
		f, err := o.Open(loc)
		fatalIf(t, err, "open")
		if st, _ := f.Stat(); st.Size() != int64(size) {
			t.Fatalf("stat size %d, want %d", st.Size(), size)
		}
		var seq bytes.Buffer
		_, err = io.CopyBuffer(&seq, struct{ io.Reader }{f}, make([]byte, 4096))
		if err != nil || !bytes.Equal(seq.Bytes(), data) {
			t.Fatalf("size %d: Read: %d bytes, %v", size, seq.Len(), err)
		}
		for range 20 {
			off := rng.IntN(size + 1)
			n := rng.IntN(size - off + 2)
			p := make([]byte, n)
			k, err := f.ReadAt(p, int64(off))
			wantN := min(n, size-off)
			if k != wantN || !bytes.Equal(p[:k], data[off:off+k]) || (k < n) != (err == io.EOF) {
				t.Fatalf("size %d: ReadAt(%d, %d) = %d, %v", size, n, off, k, err)
			}
			if _, err := f.Seek(int64(off), io.SeekStart); err != nil {
				t.Fatal(err)
			}
			q := make([]byte, n)
			k, _ = io.ReadFull(f, q)
			if k != wantN || !bytes.Equal(q[:k], data[off:off+k]) {
				t.Fatalf("size %d: Seek %d, Read %d = %d bytes", size, off, n, k)
			}
		}
		fatalIf(t, f.Close(), "close")
		fatalIf(t, o.Remove(loc), "remove")
		if _, err := o.Open(loc); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("open removed: %v, want ErrNotExist", err)
		}
	}
}

// TestObjectIOWriteLimit: a write beyond the limit (maxObjectWrite) fails, naming the
// location, and creates nothing.
func TestObjectIOWriteLimit(t *testing.T) {
	store, err := objstore.Open(context.Background(), "file://"+t.TempDir(), objstore.Options{})
	fatalIf(t, err, "open")
	o := newObjectIO(store)
	o.maxWrite = 1000
	if err := o.WriteFile(StoreLocation(store, "big"), make([]byte, 1001)); err == nil || !strings.Contains(err.Error(), "/big") {
		t.Fatalf("WriteFile beyond the limit: %v", err)
	}
	loc := StoreLocation(store, "big")
	w, err := o.Create(loc)
	fatalIf(t, err, "create")
	chunk := make([]byte, 300)
	var werr error
	for i := 0; i < 5 && werr == nil; i++ {
		_, werr = w.Write(chunk)
	}
	if werr == nil || !strings.Contains(werr.Error(), loc) {
		t.Fatalf("write beyond the limit: %v", werr)
	}
	if err := w.Close(); err == nil {
		t.Fatal("close after a failed write succeeded")
	}
	if _, err := store.Stat(context.Background(), "big"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("stat: %v, want ErrNotFound", err)
	}
}
