package catalog

import (
	"maps"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// manifestFields is what a manifest list says of one manifest.
type manifestFields struct {
	Path                          string
	Len                           int64
	Spec                          int32
	Content                       iceberg.ManifestContent
	Snapshot                      int64
	Added, Existing, Deleted      int32
	AddedRows, ExistRows, DelRows int64
	Seq, MinSeq                   int64
	Partitions                    int
}

func fieldsOf(mf iceberg.ManifestFile) manifestFields {
	return manifestFields{mf.FilePath(), mf.Length(), mf.PartitionSpecID(), mf.ManifestContent(), mf.SnapshotID(),
		mf.AddedDataFiles(), mf.ExistingDataFiles(), mf.DeletedDataFiles(),
		mf.AddedRows(), mf.ExistingRows(), mf.DeletedRows(), mf.SequenceNum(), mf.MinSequenceNum(), len(mf.Partitions())}
}

// entryFields is what a manifest says of one data file.
type entryFields struct {
	Status   iceberg.ManifestEntryStatus
	Path     string
	Rows     int64
	Bytes    int64
	Lo, Hi   map[int][]byte
	Seq      int64
	FileSeq  int64
	Snapshot bool // the entry's snapshot is the one that added the manifest
}

func entriesOf(t *testing.T, e *env, mf iceberg.ManifestFile) []entryFields {
	t.Helper()
	entries, err := mf.FetchEntries(e.cat.io, false)
	fatalIf(t, err, "manifest %s", mf.FilePath())
	var out []entryFields
	for _, en := range entries {
		df := en.DataFile()
		fs := int64(-1)
		if p := en.FileSequenceNum(); p != nil {
			fs = *p
		}
		out = append(out, entryFields{en.Status(), df.FilePath(), df.Count(), df.FileSizeBytes(),
			df.LowerBoundValues(), df.UpperBoundValues(), en.SequenceNum(), fs, en.SnapshotID() == mf.SnapshotID()})
	}
	return out
}

// The append a base commit writes itself is the one iceberg-go's
// transaction writes for the same files on the same table: the same
// summary, parent, sequence number and schema, the same manifests listed
// in the same order with the same counts, and the same entries.
func TestAppendSnapshotIsIcebergGoAppend(t *testing.T) {
	e := newEnv(t)
	e.appendFiles([]Provenance{{Shard: "s0", First: 1, Last: 1, Epochs: []uint64{1}}}, e.baseFile("s0", 1, 1, "a", 5, 1))
	e.appendFiles(nil, e.baseFile("s1", 1, 1, "b", 3, 1))
	tbl, err := e.cat.LoadTable(e.ctx, e.ident)
	fatalIf(t, err, "load")
	files := []File{e.baseFile("s0", 2, 2, "c", 4, 6), e.baseFile("s1", 2, 2, "d", 2, 4)}
	dfs, err := e.cat.DataFiles(tbl.Metadata(), files)
	fatalIf(t, err, "data files")
	props := Summary([]Provenance{{Shard: "s0", First: 2, Last: 2, Epochs: []uint64{2}}, {Shard: "s1", First: 2, Last: 2, Epochs: []uint64{1, 2}}})

	updates, reqs, err := e.cat.appendSnapshot(e.ctx, tbl, dfs, props)
	fatalIf(t, err, "appendSnapshot")
	for _, r := range reqs {
		fatalIf(t, r.Validate(tbl.Metadata()), "requirement %s on the parent", r.GetType())
	}
	ours, err := table.UpdateTableMetadata(tbl.Metadata(), updates, e.location())
	fatalIf(t, err, "apply our updates")

	txn := tbl.NewTransaction()
	fatalIf(t, txn.AddDataFiles(e.ctx, dfs, props, table.WithoutDuplicateCheck()), "iceberg-go append")
	staged, err := txn.StagedTable()
	fatalIf(t, err, "staged")
	theirs := staged.Metadata()

	a, b := ours.CurrentSnapshot(), theirs.CurrentSnapshot()
	if a == nil || b == nil {
		t.Fatal("no current snapshot after the append")
	}
	if a.SnapshotID == tbl.Metadata().CurrentSnapshot().SnapshotID {
		t.Fatal("main did not move to the new snapshot")
	}
	if ours.LastSequenceNumber() != theirs.LastSequenceNumber() || a.SequenceNumber != b.SequenceNumber {
		t.Errorf("sequence number %d (table %d), iceberg-go %d (table %d)", a.SequenceNumber, ours.LastSequenceNumber(), b.SequenceNumber, theirs.LastSequenceNumber())
	}
	if *a.ParentSnapshotID != *b.ParentSnapshotID || *a.SchemaID != *b.SchemaID {
		t.Errorf("parent %d schema %d, iceberg-go parent %d schema %d", *a.ParentSnapshotID, *a.SchemaID, *b.ParentSnapshotID, *b.SchemaID)
	}
	if a.Summary.Operation != b.Summary.Operation || !maps.Equal(a.Summary.Properties, b.Summary.Properties) {
		t.Errorf("summary\n ours    %v %v\n iceberg %v %v", a.Summary.Operation, a.Summary.Properties, b.Summary.Operation, b.Summary.Properties)
	}
	ra, rb := maps.Collect(ours.Refs()), maps.Collect(theirs.Refs())
	if len(ra) != 1 || len(rb) != 1 || ra[table.MainBranch].SnapshotID != a.SnapshotID ||
		ra[table.MainBranch].SnapshotRefType != rb[table.MainBranch].SnapshotRefType {
		t.Errorf("refs %v, iceberg-go %v", ra, rb)
	}

	ma, err := a.Manifests(e.cat.io)
	fatalIf(t, err, "our manifest list")
	mb, err := b.Manifests(e.cat.io)
	fatalIf(t, err, "iceberg-go's manifest list")
	if len(ma) != len(mb) || len(ma) != 3 {
		t.Fatalf("%d manifests listed, iceberg-go %d, want 3", len(ma), len(mb))
	}
	for i := range ma {
		fa, fb := fieldsOf(ma[i]), fieldsOf(mb[i])
		if i == 0 { // the new manifest: its own name, length and snapshot
			if fa.Snapshot != a.SnapshotID {
				t.Errorf("new manifest added by %d, want %d", fa.Snapshot, a.SnapshotID)
			}
			fa.Path, fb.Path, fa.Len, fb.Len, fa.Snapshot, fb.Snapshot = "", "", 0, 0, 0, 0
		}
		if fa != fb {
			t.Errorf("manifest %d:\n ours    %+v\n iceberg %+v", i, fa, fb)
		}
	}
	ea, eb := entriesOf(t, e, ma[0]), entriesOf(t, e, mb[0])
	if !reflect.DeepEqual(ea, eb) {
		t.Errorf("entries of the new manifest:\n ours    %+v\n iceberg %+v", ea, eb)
	}
	if len(ea) != 2 || ea[0].Seq != a.SequenceNumber || !ea[0].Snapshot {
		t.Errorf("new entries %+v: want 2, inheriting sequence number %d and the snapshot", ea, a.SequenceNumber)
	}
}

// The parent's manifests a commit takes from the catalog's memory are the
// ones its manifest list holds on disk, field by field: a wrong sequence
// number there would be written into every later list.
func TestListCacheIsTheListOnDisk(t *testing.T) {
	e := newEnv(t)
	var tbl *table.Table
	for i := range 6 {
		f := e.baseFile("s0", uint64(i+1), 1, "r"+strconv.Itoa(i), 2, uint64(2*i+1))
		tbl = e.commit(BaseCommit{Files: []File{f}, Retention: Retention{MaxSnapshots: 3, MaxAge: time.Hour}})
	}
	head := tbl.Metadata().CurrentSnapshot()
	cached, ok := e.cat.lists.get(head.ManifestList)
	if !ok {
		t.Fatal("the last commit's manifest list is not remembered")
	}
	onDisk, err := head.Manifests(e.cat.io)
	fatalIf(t, err, "read %s", head.ManifestList)
	if len(cached) != len(onDisk) || len(onDisk) != 6 {
		t.Fatalf("%d manifests remembered, %d on disk, want 6", len(cached), len(onDisk))
	}
	for i := range onDisk {
		if c, d := fieldsOf(cached[i]), fieldsOf(onDisk[i]); c != d {
			t.Errorf("manifest %d:\n remembered %+v\n on disk    %+v", i, c, d)
		}
	}
	if n := len(tbl.Metadata().Snapshots()); n != 3 {
		t.Errorf("%d snapshots kept, want exactly 3", n)
	}
	e.scan(tbl)
}

// A commit whose parent list this catalog did not write (another
// process, or before a restart) reads it: a second catalog over the same
// keys appends on a table it never wrote.
func TestAppendReadsAParentListItDidNotWrite(t *testing.T) {
	e := newEnv(t)
	e.appendFiles(nil, e.baseFile("s0", 1, 1, "a", 3, 1))
	other, err := New(e.cat.opts)
	fatalIf(t, err, "second catalog")
	e.cat = other
	tbl := e.appendFiles(nil, e.baseFile("s0", 2, 1, "b", 2, 4))
	ms, err := tbl.Metadata().CurrentSnapshot().Manifests(other.io)
	fatalIf(t, err, "manifests")
	if len(ms) != 2 {
		t.Fatalf("%d manifests after two appends by two catalogs, want 2", len(ms))
	}
	e.scan(tbl)
}

// An append takes the writers built ahead for it only when the table is
// at the state they were built for: after another catalog's commit, the
// next append builds its own (a spare built on the old parent would list
// the wrong manifests and lose the other commit's files).
func TestSpareWritersFitOnlyTheirState(t *testing.T) {
	e := newEnv(t)
	before := sparesTaken.Load()
	for i := range 3 {
		e.appendFiles(nil, e.baseFile("s0", uint64(i+1), 1, "a"+strconv.Itoa(i), 2, uint64(2*i+1)))
	}
	if n := sparesTaken.Load() - before; n != 2 {
		t.Fatalf("%d of the 2 appends after the first took spare writers", n)
	}
	mine := e.cat
	other, err := New(mine.opts)
	fatalIf(t, err, "second catalog")
	e.cat = other
	e.appendFiles(nil, e.baseFile("s1", 1, 1, "b", 3, 1))
	e.cat = mine
	before = sparesTaken.Load()
	tbl := e.appendFiles(nil, e.baseFile("s0", 4, 1, "c", 2, 7))
	if n := sparesTaken.Load() - before; n != 0 {
		t.Fatal("an append took writers built before another catalog's commit")
	}
	ms, err := tbl.Metadata().CurrentSnapshot().Manifests(mine.io)
	fatalIf(t, err, "manifests")
	if len(ms) != 5 {
		t.Fatalf("%d manifests after 5 appends, want 5", len(ms))
	}
	e.scan(tbl)
}
