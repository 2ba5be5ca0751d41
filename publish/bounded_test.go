package publish

import (
	"context"
	"flag"
	"path/filepath"
	"testing"
	"time"

	"github.com/rollwal/rollwal/catalog"
)

var flagMerges = flag.Int("publish.merges", 10000, "merges of TestManyMergesStayBounded")

// TestManyMergesStayBounded: 10,000 merges of one small generation each
// (on the strict in-memory filesystem) keep every etcd value of the table
// and the Iceberg metadata file bounded, the manifest list short, the
// readers' manifests and metadata files at their bounds, and the table
// readable with every row once.
func TestManyMergesStayBounded(t *testing.T) {
	// Two cores shared with other packages' tests: more than newEnv's two
	// minutes in all, and slow etcd answers now and then. Cancelled after
	// newEnv's cleanup, which reads the base with it.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	t.Cleanup(cancel)
	e := newMemEnv(t)
	e.ctx = ctx
	e.opts.RequestTimeout = 30 * time.Second
	// Minutes on two shared cores: a 2 s writer lease lapsed once in CI (at
	// load 13) and fenced the shard; this test is about bounds, not leases.
	e.opts.LeaseTTL = 30 * time.Second
	h := e.host(false)
	s := e.open(h, "s0")
	c := e.coordinator(func(o *Options) {
		o.SnapshotRetention = catalog.Retention{MaxSnapshots: 20}
		o.RequestTimeout = e.opts.RequestTimeout
	})
	var maxState, maxRecord, maxMeta int
	for i := range *flagMerges {
		e.appendRows(s, "m", i, 1)
		e.flush(s)
		if r := e.runOnce(c); r.Passes != 1 {
			t.Fatalf("merge %d: %d passes", i, r.Passes)
		}
		if i%500 == 499 || i == *flagMerges-1 {
			st, rec, meta := e.sizes()
			maxState, maxRecord, maxMeta = max(maxState, st), max(maxRecord, rec), max(maxMeta, meta)
			t.Logf("after %d merges: base/state %d B, table record %d B, metadata %d B", i+1, st, rec, meta)
		}
	}
	if maxState > 200 || maxRecord > 400 || maxMeta > 64<<10 {
		t.Fatalf("largest base/state %d B (bound 200), table record %d B (400), metadata file %d B (64 KiB)", maxState, maxRecord, maxMeta)
	}
	if _, err := c.RemoveOrphans(e.ctx); err != nil {
		t.Fatal(err)
	}
	tbl := e.baseTable()
	if n := len(tbl.Metadata().Snapshots()); n > 20 {
		t.Fatalf("%d snapshots, retention 20", n)
	}
	fio, err := tbl.FS(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	mfs, err := tbl.CurrentSnapshot().Manifests(fio)
	if err != nil {
		t.Fatal(err)
	}
	data, meta, readers := e.count("data/s0"), e.count("metadata"), e.count("_manifest")
	t.Logf("%d merges: %d data files, %d manifests in the current snapshot, %d metadata files, %d readers' manifests",
		*flagMerges, data, len(mfs), meta, readers)
	// Live: the current snapshot's files (fewer than MinFiles small ones
	// and the compacted ones), those of the retained snapshots and of the
	// kept readers' manifests (from before the last compaction or two).
	if data > 3*DefaultCompactionMinFiles || len(mfs) > 110 || meta > 20*115+101 || readers > KeepReaderManifests {
		t.Fatal("files under the base grow with the merges")
	}
}

// count is the number of files in a directory under the base.
func (e *env) count(dir string) int {
	e.t.Helper()
	names, err := e.fs.List(filepath.Join(e.baseDir(), filepath.FromSlash(dir)))
	if err != nil {
		e.t.Fatal(err)
	}
	return len(names)
}

// sizes returns the sizes of base/state, the table's catalog record and
// its current metadata file.
func (e *env) sizes() (state, record, meta int) {
	e.t.Helper()
	resp, err := etcdClient.Get(e.ctx, e.keys().BaseState())
	if err != nil {
		e.t.Fatal(err)
	}
	state = len(resp.Kvs[0].Value)
	resp, err = etcdClient.Get(e.ctx, "/"+catalog.BasePrefix("rollwal", e.table)+"/tables/rollwal/"+e.table)
	if err != nil || len(resp.Kvs) != 1 {
		e.t.Fatalf("table record: %v", err)
	}
	record = len(resp.Kvs[0].Value)
	info, err := e.fs.Stat(e.baseTable().MetadataLocation())
	if err != nil {
		e.t.Fatal(err)
	}
	return state, record, int(info.Size())
}
