package publish

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollwal/rollwal/catalog"
	"github.com/rollwal/rollwal/internal/pyenv"
	"github.com/rollwal/rollwal/internal/s3test"
	"github.com/rollwal/rollwal/objstore"
)

// The base table in the object store (Options.Store): generations, base
// data files, Iceberg metadata and readers' manifests are all objects of
// the store; nothing of the base is written under the data directory.

// storeObjects lists the names under the base prefix of e's table, by
// subdirectory (data, metadata, _manifest).
func (e *env) storeObjects(store objstore.Store) map[string][]string {
	e.t.Helper()
	prefix := e.table + "/base/"
	infos, err := store.List(e.ctx, prefix)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string][]string{}
	for _, in := range infos {
		rel := strings.TrimPrefix(in.Name, prefix)
		dir, _, _ := strings.Cut(rel, "/")
		out[dir] = append(out[dir], rel)
	}
	return out
}

// noLocalBase: the data directory holds nothing of the base.
func (e *env) noLocalBase() {
	e.t.Helper()
	if _, err := e.fs.Stat(e.baseDir()); !errors.Is(err, os.ErrNotExist) {
		e.t.Fatalf("%s exists (err %v): with a store nothing of the base is local", e.baseDir(), err)
	}
}

// wantStoreHoldsBase: every committed data file is an object of the store
// under <table>/base/data/, registered at its store location; the table's
// metadata is in the store; the readers' manifest names store locations.
func (e *env) wantStoreHoldsBase(store objstore.Store) {
	e.t.Helper()
	objs := e.storeObjects(store)
	tbl := e.baseTable()
	loc := catalog.StoreLocation(store, e.table+"/base")
	if tbl.Location() != loc || !strings.HasPrefix(tbl.MetadataLocation(), loc+"/metadata/") {
		e.t.Fatalf("table at %s, metadata %s; want both in the store under %s", tbl.Location(), tbl.MetadataLocation(), loc)
	}
	if len(objs["metadata"]) == 0 {
		e.t.Fatalf("no metadata objects under %s/metadata", loc)
	}
	tasks, err := tbl.Scan().PlanFiles(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, task := range tasks {
		p := task.File.FilePath()
		rel, ok := strings.CutPrefix(p, loc+"/")
		if !ok || !slices.Contains(objs["data"], rel) {
			e.t.Fatalf("data file %s: not an object of the store under %s/data (objects %v)", p, loc, objs["data"])
		}
	}
	m, ok, err := LatestStoreReaderManifest(e.ctx, store, e.table)
	if cm, cok, cerr := e.coordinatorManifest(store); cerr != nil || cok != ok || cm.Version != m.Version {
		e.t.Fatalf("Coordinator.LatestReaderManifest: v%d ok=%v err=%v; the store holds v%d", cm.Version, cok, cerr, m.Version)
	}
	if err != nil || !ok {
		e.t.Fatalf("readers' manifest in the store: ok=%v err=%v", ok, err)
	}
	if m.Location != loc || m.IcebergMetadata != tbl.MetadataLocation() {
		e.t.Fatalf("readers' manifest: location %s metadata %s; want %s and %s", m.Location, m.IcebergMetadata, loc, tbl.MetadataLocation())
	}
	for _, f := range m.Files {
		if f.Location != loc+"/"+f.Path {
			e.t.Fatalf("readers' manifest names %s at %s, want %s/%s", f.Path, f.Location, loc, f.Path)
		}
	}
	b, err := LoadBase(e.ctx, Options{Etcd: etcdClient, Table: e.table, DataDir: e.dir, FS: e.fs, Store: store})
	if err != nil || b.Location != loc || b.MetadataLocation != tbl.MetadataLocation() || len(b.Files) != len(tasks) {
		e.t.Fatalf("LoadBase: %+v, %v; want location %s, %d files", b, err, loc, len(tasks))
	}
	e.noLocalBase()
}

const pyBaseRead = `
import json, sys
from pyiceberg.table import StaticTable
t = StaticTable.from_metadata(sys.argv[1], properties=json.loads(sys.argv[2]))
json.dump({"ids": t.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist(),
           "snapshots": len(t.metadata.snapshots)}, sys.stdout)
`

// pyReadsAll: pyiceberg, from the metadata file in the bucket, reads every
// acknowledged id exactly once; it returns the table's snapshot count.
func (e *env) pyReadsAll(srv *s3test.Server) int {
	e.t.Helper()
	py := pyenv.Optional(e.t, "pyiceberg reading the base from the bucket")
	if py == "" {
		return -1
	}
	props, _ := json.Marshal(map[string]string{
		"py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO", "s3.endpoint": srv.Endpoint(),
		"s3.access-key-id": srv.AccessKey(), "s3.secret-access-key": srv.SecretKey(), "s3.region": srv.Region(),
	})
	meta := e.baseTable().MetadataLocation()
	cmd := exec.CommandContext(e.ctx, py, "-c", pyBaseRead, meta, string(props))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		e.t.Fatalf("pyiceberg: %v\n%s", err, stderr.String())
	}
	var got struct {
		IDs       []string `json:"ids"`
		Snapshots int      `json:"snapshots"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		e.t.Fatalf("pyiceberg output %.300s: %v", out, err)
	}
	seen := map[string]int{}
	for _, id := range got.IDs {
		seen[id]++
	}
	if len(got.IDs) != len(e.ids) || len(seen) != len(e.ids) {
		e.t.Fatalf("pyiceberg read %d rows (%d distinct) from %s, want %d", len(got.IDs), len(seen), meta, len(e.ids))
	}
	for id := range e.ids {
		if seen[id] != 1 {
			e.t.Fatalf("pyiceberg read id %s %d times", id, seen[id])
		}
	}
	e.t.Logf("pyiceberg read %d rows, %d snapshots, from %s", len(got.IDs), got.Snapshots, meta)
	return got.Snapshots
}

// TestBaseInStore: with the generations only in versitygw, RunOnce
// publishes into a base table that lives in the bucket (data files,
// metadata, readers' manifest), nothing of it local; pyiceberg reads every
// row once from the metadata file in the bucket; a second pass appends;
// an uploaded base file no commit names is removed by orphan removal while
// the committed ones stay.
func TestBaseInStore(t *testing.T) {
	e := newMemEnv(t)
	srv := s3test.Start(t)
	store := openS3Store(t, srv)
	e.putStoredGenerations(store, "s0", 10, 7)
	e.putStoredGenerations(store, "s1", 5)
	c := e.coordinator(withStore(store))
	if r := e.runOnce(c); r.RowsStaged != 22 {
		t.Fatalf("first RunOnce staged %d rows, want 22", r.RowsStaged)
	}
	e.wantAllIDs()
	e.wantStoreHoldsBase(store)
	first := len(e.baseTable().Metadata().Snapshots())
	if n := e.pyReadsAll(srv); n >= 0 && n != first {
		t.Fatalf("pyiceberg sees %d snapshots, iceberg-go %d", n, first)
	}

	e.putStoredGenerations(store, "s2", 8, 4)
	if r := e.runOnce(c); r.RowsStaged != 12 || r.Passes != 1 {
		t.Fatalf("second RunOnce: %+v, want one pass of 12 rows", r)
	}
	e.wantAllIDs()
	e.wantStoreHoldsBase(store)
	if got := len(e.baseTable().Metadata().Snapshots()); got != first+1 {
		t.Fatalf("%d snapshots after the second pass, want %d (an append)", got, first+1)
	}
	e.pyReadsAll(srv)

	// An orphan: a base file uploaded under a name no commit has.
	committed := e.storeObjects(store)["data"]
	victim := committed[0]
	data := readObject(t, store, e.table+"/base/"+victim)
	orphan := "data/s0/g00000000000000000009-e00000000000000000001-0badf00d-c00000000.parquet"
	if err := store.Create(e.ctx, e.table+"/base/"+orphan, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	o, err := c.RemoveOrphans(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	after := e.storeObjects(store)["data"]
	if o.DataFiles != 1 || slices.Contains(after, orphan) || !slices.Equal(after, committed) {
		t.Fatalf("orphan removal: %+v, objects %v; want the orphan %s gone and %v kept", o, after, orphan, committed)
	}
	e.wantAllIDs()
	e.wantStoreHoldsBase(store)
}

func readObject(t *testing.T, store objstore.Store, key string) []byte {
	t.Helper()
	obj, err := store.Open(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	b, err := fetchObject(obj)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// faultyStore wraps the first Create of an object under prefix: before
// runs ahead of it (its error is returned instead), after sees its error
// and returns the one to report.
type faultyStore struct {
	objstore.Store
	prefix string
	hit    atomic.Int64
	before func(name string) error
	after  func(name string, err error) error
}

func (s *faultyStore) Create(ctx context.Context, name string, r io.ReaderAt, size int64) error {
	if !strings.HasPrefix(name, s.prefix) || s.hit.Add(1) != 1 {
		return s.Store.Create(ctx, name, r, size)
	}
	if s.before != nil {
		if err := s.before(name); err != nil {
			return err
		}
	}
	err := s.Store.Create(ctx, name, r, size)
	if s.after != nil {
		err = s.after(name, err)
	}
	return err
}

// TestBaseStoreDownMidPass: versitygw stopped as a pass uploads its first
// base file fails the pass with an error naming the create and the object;
// nothing is committed; after a restart the next pass publishes every row
// once, into the bucket.
func TestBaseStoreDownMidPass(t *testing.T) {
	e := newMemEnv(t)
	srv := s3test.Start(t)
	inner := openS3Store(t, srv)
	e.putStoredGenerations(inner, "s0", 10)
	fs := &faultyStore{Store: inner, prefix: e.table + "/base/data/s1/"}
	var victim string
	fs.before = func(name string) error {
		victim = name
		return srv.Stop()
	}
	c := e.coordinator(withStore(fs))
	e.runOnce(c)
	before, _ := e.state()
	e.putStoredGenerations(inner, "s1", 6, 6)
	_, err := c.RunOnce(e.ctx)
	want := "objstore: create " + objectURL(inner, victim)
	if victim == "" || err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("RunOnce with the store stopped at the upload of %q: %v, want an error containing %q", victim, err, want)
	}
	t.Logf("the pass failed: %v", err)
	if st, _ := e.state(); st.Version != before.Version {
		t.Fatalf("the failed pass committed: base version %d, was %d", st.Version, before.Version)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if r := e.runOnce(c); r.RowsStaged != 12 {
		t.Fatalf("pass after the restart staged %d rows, want 12", r.RowsStaged)
	}
	e.wantAllIDs()
	e.wantStoreHoldsBase(inner)
	e.pyReadsAll(srv)
}

// TestBaseStoreSlowedMidPass: a pass whose every PUT answer comes after
// its attempt gave up (the server slowed: each write lands, its answer is
// lost) commits anyway, each lost answer resolved by reading the object
// back; nothing is published twice and pyiceberg reads every row once.
func TestBaseStoreSlowedMidPass(t *testing.T) {
	e := newMemEnv(t)
	srv := s3test.Start(t)
	st, slow := openS3StoreVia(t, srv, nil, time.Second)
	e.putStoredGenerations(st, "s0", 10, 5)
	c := e.coordinator(withStore(st))
	slow.Delay(2 * time.Second)
	r := e.runOnce(c)
	slow.Delay(0)
	if r.RowsStaged != 15 {
		t.Fatalf("the slowed pass staged %d rows, want 15", r.RowsStaged)
	}
	e.putStoredGenerations(st, "s1", 4)
	if r := e.runOnce(c); r.RowsStaged != 4 {
		t.Fatalf("the pass after staged %d rows, want 4", r.RowsStaged)
	}
	e.wantAllIDs()
	e.wantStoreHoldsBase(st)
	e.pyReadsAll(srv)
}

// TestBaseUploadUnknownOutcome: an upload that landed but whose outcome is
// unknown fails the pass, and nothing is committed; the next pass writes
// the file under a new attempt name; the object of the unknown upload,
// named by no commit, is an orphan that orphan removal deletes, and the
// committed files stay.
func TestBaseUploadUnknownOutcome(t *testing.T) {
	e := newMemEnv(t)
	srv := s3test.Start(t)
	inner := openS3Store(t, srv)
	e.putStoredGenerations(inner, "s0", 10, 5)
	var landed string
	fs := &faultyStore{Store: inner, prefix: e.table + "/base/data/"}
	fs.after = func(name string, err error) error {
		if err != nil {
			return err
		}
		landed = name
		return fmt.Errorf("objstore: create %s: %w (injected)", objectURL(inner, name), objstore.ErrUnknownOutcome)
	}
	c := e.coordinator(withStore(fs))
	_, err := c.RunOnce(e.ctx)
	if !errors.Is(err, objstore.ErrUnknownOutcome) || !strings.Contains(err.Error(), objectURL(inner, landed)) {
		t.Fatalf("RunOnce with an unknown upload outcome: %v, want ErrUnknownOutcome naming %s", err, landed)
	}
	e.wantNothingCommitted("an unknown upload outcome")
	e.runOnce(c)
	e.wantAllIDs()
	rel := strings.TrimPrefix(landed, e.table+"/base/")
	if objs := e.storeObjects(inner)["data"]; !slices.Contains(objs, rel) || len(objs) != 3 {
		t.Fatalf("objects %v: want the two committed files and the unknown upload's %s", objs, rel)
	}
	o, err := c.RemoveOrphans(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if objs := e.storeObjects(inner)["data"]; o.DataFiles != 1 || slices.Contains(objs, rel) || len(objs) != 2 {
		t.Fatalf("orphan removal %+v left %v; want only the unknown upload's %s gone", o, objs, rel)
	}
	e.wantAllIDs()
	e.wantStoreHoldsBase(inner)
}

// TestStoreRefusesLocalBase: a table whose base exists in the local
// directory, opened with a store, is refused at New, naming both
// locations; nothing moves.
func TestStoreRefusesLocalBase(t *testing.T) {
	e := newMemEnv(t)
	c := e.coordinator()
	c.Close()
	store := mustFileStore(t)
	_, err := New(e.ctx, Options{Etcd: etcdClient, Table: e.table, DataDir: e.dir, FS: e.fs, Store: store, LeaseTTL: 5 * time.Second})
	loc := catalog.StoreLocation(store, e.table+"/base")
	if err == nil || !strings.Contains(err.Error(), e.baseDir()) || !strings.Contains(err.Error(), loc) {
		t.Fatalf("New with a store over a local base: %v, want a refusal naming %s and %s", err, e.baseDir(), loc)
	}
	t.Logf("refused: %v", err)
	if objs, _ := store.List(e.ctx, ""); len(objs) != 0 {
		t.Fatalf("the refused New wrote %v to the store", objs)
	}
}

func mustFileStore(t *testing.T) objstore.Store {
	s, _ := storeBackends[0].open(t)
	return s
}

// TestBaseInStoreCompacts: compaction reads its input files from the
// store and uploads its output there; the table still holds every row
// once, at store locations only.
func TestBaseInStoreCompacts(t *testing.T) {
	e := newMemEnv(t)
	srv := s3test.Start(t)
	store := openS3Store(t, srv)
	e.putStoredGenerations(store, "s0", 5, 6, 7, 8)
	c := e.coordinator(withStore(store), func(o *Options) { o.Compaction = Compaction{TargetBytes: 8 << 20, MinFiles: 2} })
	r := e.runOnce(c)
	if r.Compacted != 4 {
		t.Fatalf("RunOnce compacted %d files, want the 4 staged", r.Compacted)
	}
	e.wantAllIDs()
	e.wantStoreHoldsBase(store)
	if files := e.baseFiles(); len(files) != 1 {
		t.Fatalf("%d base files after compaction, want 1", len(files))
	}
	e.pyReadsAll(srv)
}

// coordinatorManifest is Coordinator.LatestReaderManifest of a coordinator
// over store that never took the lock (it only reads).
func (e *env) coordinatorManifest(store objstore.Store) (ReaderManifest, bool, error) {
	c := &Coordinator{opts: Options{Table: e.table, Store: store, FS: e.fs}}
	return c.LatestReaderManifest(e.ctx)
}
