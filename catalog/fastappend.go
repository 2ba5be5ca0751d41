package catalog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"
)

// The append of a base commit (a fast append: one new manifest, the
// parent's manifests listed as they are), written with iceberg-go's
// manifest and manifest-list writers instead of its transaction. The
// transaction builds the two writers (their Avro schemas and compressors)
// on the commit's path and reads the parent's manifest list back on every
// commit; that was most of the CPU a merge pass spent on Iceberg
// (docs/benchmarks.md). Here the writers of the next append are built
// ahead, on a goroutine of their own, as soon as an append is prepared
// (spareWriters), and taken by the next append if the table is then where
// they expect it; and the parent's manifests come from the commit that
// wrote them (listCache) when this catalog made it.

// Iceberg snapshot summary keys (the spec's names) an append sets.
const (
	sumAddedFiles   = "added-data-files"
	sumAddedRecords = "added-records"
	sumAddedSize    = "added-files-size"
	sumTotalFiles   = "total-data-files"
	sumTotalDeletes = "total-delete-files"
	sumTotalRecords = "total-records"
	sumTotalSize    = "total-files-size"
	sumTotalPosDel  = "total-position-deletes"
	sumTotalEqDel   = "total-equality-deletes"
)

// listCache remembers the manifests of the last manifest lists this
// catalog wrote, by location: manifest lists are immutable.
type listCache struct {
	mu    sync.Mutex
	lists []cachedList
}

type cachedList struct {
	loc       string
	manifests []iceberg.ManifestFile
}

const listCacheSize = 4

func (l *listCache) get(loc string) ([]iceberg.ManifestFile, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.lists {
		if e.loc == loc {
			return e.manifests, true
		}
	}
	return nil, false
}

func (l *listCache) put(loc string, manifests []iceberg.ManifestFile) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lists = append(l.lists, cachedList{loc, manifests})
	if len(l.lists) > listCacheSize {
		l.lists = l.lists[1:]
	}
}

// appendSnapshot writes the manifest and manifest list of an append
// snapshot of tbl registering files, and returns the updates that add the
// snapshot and make it the head of main, and the requirement that main is
// still at the parent. props become the summary's properties, beside the
// spec's counts and totals.
func (c *Etcd) appendSnapshot(ctx context.Context, tbl *table.Table, files []iceberg.DataFile, props iceberg.Properties) ([]table.Update, []table.Requirement, error) {
	meta := tbl.Metadata()
	if meta.Version() != 2 {
		return nil, nil, fmt.Errorf("append: table format version %d, want 2", meta.Version())
	}
	lp, err := tbl.LocationProvider()
	if err != nil {
		return nil, nil, err
	}
	parent := meta.CurrentSnapshot()
	a := &appendWrite{meta: meta, files: files, parent: parent}
	w, err := c.takeWriters(meta)
	if err != nil {
		return nil, nil, fmt.Errorf("append: %w", err)
	}
	a.id, a.seq = w.id, w.seq
	manifest, mf, err := a.writeManifest(w, lp.NewMetadataLocation(fmt.Sprintf("%s-m0.avro", w.commit)))
	if err != nil {
		return nil, nil, fmt.Errorf("append: %w", err)
	}
	listLoc := lp.NewMetadataLocation(fmt.Sprintf("snap-%d-0-%s.avro", a.id, w.commit))
	manifests := append([]iceberg.ManifestFile{mf}, w.parents...)
	if err := w.lw.AddManifests(manifests); err != nil {
		return nil, nil, fmt.Errorf("append: manifest list: %w", err)
	}
	if err := w.lw.Close(); err != nil {
		return nil, nil, fmt.Errorf("append: manifest list: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if err := c.io.WriteFile(mf.FilePath(), manifest); err != nil {
		return nil, nil, fmt.Errorf("append: write %s: %w", mf.FilePath(), err)
	}
	if err := c.io.WriteFile(listLoc, w.list.Bytes()); err != nil {
		return nil, nil, fmt.Errorf("append: write %s: %w", listLoc, err)
	}
	manifests[0] = a.listed(mf)
	c.lists.put(listLoc, manifests)
	updates, reqs, err := a.updates(listLoc, props)
	if err == nil {
		c.buildSpare(a, listLoc, manifests)
	}
	return updates, reqs, err
}

// appendWrite is one append snapshot being written.
type appendWrite struct {
	meta   table.Metadata
	files  []iceberg.DataFile
	id     int64
	seq    int64
	parent *table.Snapshot // nil for a table's first snapshot
}

func (a *appendWrite) parentID() *int64 {
	if a.parent == nil {
		return nil
	}
	id := a.parent.SnapshotID
	return &id
}

// writeManifest encodes the manifest of the added files on w's manifest
// writer, each entry inheriting the snapshot's id and sequence number.
func (a *appendWrite) writeManifest(w *writers, loc string) ([]byte, iceberg.ManifestFile, error) {
	for _, df := range a.files {
		if err := w.mw.Add(iceberg.NewManifestEntryBuilder(iceberg.EntryStatusADDED, &a.id, df).Build()); err != nil {
			return nil, nil, errors.Join(fmt.Errorf("manifest: %w", err), w.mw.Close())
		}
	}
	if err := w.mw.Close(); err != nil {
		return nil, nil, fmt.Errorf("manifest: %w", err)
	}
	mf, err := w.mw.ToManifestFile(loc, int64(w.manifest.Len()))
	if err != nil {
		return nil, nil, fmt.Errorf("manifest: %w", err)
	}
	return w.manifest.Bytes(), mf, nil
}

// listed is the new manifest as the list holds it: with the snapshot's
// sequence number, which the list writer assigned to its own copy.
func (a *appendWrite) listed(mf iceberg.ManifestFile) iceberg.ManifestFile {
	minSeq := mf.MinSequenceNum()
	if minSeq < 0 {
		minSeq = a.seq
	}
	return iceberg.NewManifestFile(2, mf.FilePath(), mf.Length(), mf.PartitionSpecID(), mf.SnapshotID()).
		SequenceNum(a.seq, minSeq).Content(mf.ManifestContent()).
		AddedFiles(mf.AddedDataFiles()).ExistingFiles(mf.ExistingDataFiles()).DeletedFiles(mf.DeletedDataFiles()).
		AddedRows(mf.AddedRows()).ExistingRows(mf.ExistingRows()).DeletedRows(mf.DeletedRows()).
		Partitions(mf.Partitions()).Build()
}

// parentManifests are the manifests of parent's list: remembered when
// this catalog wrote it, read otherwise.
func (c *Etcd) parentManifests(parent *table.Snapshot) ([]iceberg.ManifestFile, error) {
	if parent == nil {
		return nil, nil
	}
	if ms, ok := c.lists.get(parent.ManifestList); ok {
		return ms, nil
	}
	ms, err := parent.Manifests(c.io)
	if err != nil {
		return nil, fmt.Errorf("parent snapshot %d: %w", parent.SnapshotID, err)
	}
	return ms, nil
}

// writers are an append's manifest and manifest-list writers, over
// buffers, with the snapshot id, sequence number and parent's manifests
// they were made for. Building them (their Avro schemas and compressors)
// is most of an append's CPU; it depends on none of the files.
type writers struct {
	commit         uuid.UUID
	id, seq        int64
	parent         int64 // 0: none
	schema, spec   int
	manifest, list bytes.Buffer
	mw             *iceberg.ManifestWriter
	lw             *iceberg.ManifestListWriter
	parents        []iceberg.ManifestFile
}

// newWriters builds the writers of an append of snapshot id at sequence
// number seq, in schema sc and partition spec spec, on parent (nil: none)
// whose manifests are parents.
func newWriters(sc *iceberg.Schema, spec iceberg.PartitionSpec, id, seq int64, parent *table.Snapshot, parents []iceberg.ManifestFile) (*writers, error) {
	w := &writers{commit: uuid.New(), id: id, seq: seq, schema: sc.ID, spec: spec.ID(), parents: parents}
	var parentID *int64
	if parent != nil {
		w.parent, parentID = parent.SnapshotID, &parent.SnapshotID
	}
	var err error
	if w.mw, err = iceberg.NewManifestWriter(2, &w.manifest, spec, sc, id); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	if w.lw, err = iceberg.NewManifestListWriterV2(&w.list, id, seq, parentID); err != nil {
		return nil, fmt.Errorf("manifest list: %w", err)
	}
	return w, nil
}

// fits reports whether the writers were made for the next append on meta.
func (w *writers) fits(meta table.Metadata) bool {
	var parent int64
	if cur := meta.CurrentSnapshot(); cur != nil {
		parent = cur.SnapshotID
	}
	return w.parent == parent && w.seq == meta.LastSequenceNumber()+1 && meta.SnapshotByID(w.id) == nil &&
		w.schema == meta.CurrentSchema().ID && w.spec == meta.DefaultPartitionSpec()
}

// spareWriters are, per table (by uuid), the writers built ahead for the
// append that follows the last one this catalog prepared, on a goroutine
// of their own, so that the next commit finds them built.
type spareWriters struct {
	mu     sync.Mutex
	tables map[uuid.UUID]*spare
}

// sparesTaken counts the appends that took spare writers, for tests.
var sparesTaken atomic.Int64

type spare struct {
	ready chan struct{} // closed once w is set (nil when building failed)
	w     *writers
}

// buildSpare starts building the writers of the append after a, as if a
// applied; an append on any other state of the table does not take them.
func (c *Etcd) buildSpare(a *appendWrite, listLoc string, manifests []iceberg.ManifestFile) {
	// Nothing of a.meta is read on the other goroutine: iceberg-go
	// metadata is not safe to read while a commit builds on it (the
	// builder sets the id of the schema it adds), so the schema is a
	// copy and the id is chosen here.
	parent := &table.Snapshot{SnapshotID: a.id, ManifestList: listLoc}
	cur := a.meta.CurrentSchema()
	sc := iceberg.NewSchemaWithIdentifiers(cur.ID, cur.IdentifierFieldIDs, cur.Fields()...)
	spec, id := a.meta.PartitionSpec(), newSnapshotID(a.meta, a.id)
	sp := &spare{ready: make(chan struct{})}
	c.spare.mu.Lock()
	if c.spare.tables == nil {
		c.spare.tables = map[uuid.UUID]*spare{}
	}
	c.spare.tables[a.meta.TableUUID()] = sp
	c.spare.mu.Unlock()
	go func() {
		defer close(sp.ready)
		if w, err := newWriters(sc, spec, id, a.seq+1, parent, manifests); err == nil {
			sp.w = w // else the next append builds its own
		}
	}()
}

// takeWriters returns the table's spare writers when they fit meta's next
// append, else new ones. A spare is taken once.
func (c *Etcd) takeWriters(meta table.Metadata) (*writers, error) {
	c.spare.mu.Lock()
	sp := c.spare.tables[meta.TableUUID()]
	delete(c.spare.tables, meta.TableUUID())
	c.spare.mu.Unlock()
	if sp != nil {
		<-sp.ready
		if sp.w != nil && sp.w.fits(meta) {
			sparesTaken.Add(1)
			return sp.w, nil
		}
	}
	parent := meta.CurrentSnapshot()
	// The list writer and the parent's manifests on a second goroutine:
	// neither needs the manifest writer.
	var wg sync.WaitGroup
	var parents []iceberg.ManifestFile
	var perr error
	wg.Go(func() { parents, perr = c.parentManifests(parent) })
	w, err := newWriters(meta.CurrentSchema(), meta.PartitionSpec(), newSnapshotID(meta), meta.LastSequenceNumber()+1, parent, nil)
	wg.Wait()
	if err = errors.Join(err, perr); err != nil {
		return nil, err
	}
	w.parents = parents
	return w, nil
}

// updates adds the snapshot and moves main to it, keeping main's own
// retention settings.
func (a *appendWrite) updates(listLoc string, props iceberg.Properties) ([]table.Update, []table.Requirement, error) {
	sum, err := a.summary(props)
	if err != nil {
		return nil, nil, err
	}
	schemaID := a.meta.CurrentSchema().ID
	ts := time.Now().UnixMilli()
	if a.parent != nil {
		ts = max(ts, a.parent.TimestampMs)
	}
	snap := &table.Snapshot{SnapshotID: a.id, ParentSnapshotID: a.parentID(), SequenceNumber: a.seq,
		TimestampMs: ts, ManifestList: listLoc, Summary: &sum, SchemaID: &schemaID}
	var maxRefAge, maxSnapAge int64
	var minKeep int
	for name, ref := range a.meta.Refs() {
		if name != table.MainBranch || ref.SnapshotRefType != table.BranchRef {
			continue
		}
		if ref.MaxRefAgeMs != nil {
			maxRefAge = *ref.MaxRefAgeMs
		}
		if ref.MaxSnapshotAgeMs != nil {
			maxSnapAge = *ref.MaxSnapshotAgeMs
		}
		if ref.MinSnapshotsToKeep != nil {
			minKeep = *ref.MinSnapshotsToKeep
		}
	}
	return []table.Update{
			table.NewAddSnapshotUpdate(snap),
			table.NewSetSnapshotRefUpdate(table.MainBranch, a.id, table.BranchRef, maxRefAge, maxSnapAge, minKeep),
		}, []table.Requirement{
			table.AssertRefSnapshotID(table.MainBranch, a.parentID()),
		}, nil
}

// summary is the snapshot summary: the added files' counts, the totals
// carried from the parent's, then props.
func (a *appendWrite) summary(props iceberg.Properties) (table.Summary, error) {
	var files, records, size int64
	for _, df := range a.files {
		if df.ContentType() != iceberg.EntryContentData {
			return table.Summary{}, fmt.Errorf("append: %s is not a data file", df.FilePath())
		}
		files++
		records += df.Count()
		size += df.FileSizeBytes()
	}
	out := iceberg.Properties{
		sumAddedFiles: strconv.FormatInt(files, 10), sumAddedRecords: strconv.FormatInt(records, 10),
		sumAddedSize: strconv.FormatInt(size, 10),
	}
	var prev iceberg.Properties
	if a.parent != nil && a.parent.Summary != nil {
		prev = a.parent.Summary.Properties
	}
	for _, t := range []struct {
		key   string
		added int64
	}{{sumTotalFiles, files}, {sumTotalDeletes, 0}, {sumTotalRecords, records}, {sumTotalSize, size},
		{sumTotalPosDel, 0}, {sumTotalEqDel, 0}} {
		out[t.key] = strconv.FormatInt(prev.GetInt64(t.key, 0)+t.added, 10)
	}
	maps.Copy(out, props)
	maps.Copy(out, iceberg.EnvironmentContext())
	return table.Summary{Operation: table.OpAppend, Properties: out}, nil
}

// newSnapshotID is a positive snapshot id the table does not hold, nor
// taken.
func newSnapshotID(meta table.Metadata, taken ...int64) int64 {
	for {
		id := rand.Int64() // non-negative
		if id > 0 && meta.SnapshotByID(id) == nil && !slices.Contains(taken, id) {
			return id
		}
	}
}
