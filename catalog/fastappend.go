package catalog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"
)

// The append of a base commit (a fast append: one new manifest, the
// parent's manifests listed as they are), written with iceberg-go's
// manifest and manifest-list writers instead of its transaction. The
// transaction builds the two writers one after the other and reads the
// parent's manifest list back on every commit; that was most of the CPU a
// merge pass spent on Iceberg (docs/benchmarks.md). Here the list writer
// is built and the parent's manifests found on a second goroutine while
// the manifest is written, and the parent's manifests come from the
// commit that wrote them (listCache) when this catalog made it.

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
	a := &appendWrite{meta: meta, files: files, id: newSnapshotID(meta), seq: meta.LastSequenceNumber() + 1,
		parent: meta.CurrentSnapshot()}
	commit := uuid.New()
	manifestLoc := lp.NewMetadataLocation(fmt.Sprintf("%s-m0.avro", commit))
	listLoc := lp.NewMetadataLocation(fmt.Sprintf("snap-%d-0-%s.avro", a.id, commit))

	var wg sync.WaitGroup
	var lw *iceberg.ManifestListWriter
	var parents []iceberg.ManifestFile
	var listErr error
	var list bytes.Buffer
	wg.Go(func() {
		if lw, listErr = iceberg.NewManifestListWriterV2(&list, a.id, a.seq, a.parentID()); listErr == nil {
			parents, listErr = c.parentManifests(a.parent)
		}
	})
	manifest, mf, err := a.writeManifest(manifestLoc)
	wg.Wait()
	if err = errors.Join(err, listErr); err != nil {
		return nil, nil, fmt.Errorf("append: %w", err)
	}
	manifests := append([]iceberg.ManifestFile{mf}, parents...)
	if err := lw.AddManifests(manifests); err != nil {
		return nil, nil, fmt.Errorf("append: manifest list: %w", err)
	}
	if err := lw.Close(); err != nil {
		return nil, nil, fmt.Errorf("append: manifest list: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if err := c.io.WriteFile(manifestLoc, manifest); err != nil {
		return nil, nil, fmt.Errorf("append: write %s: %w", manifestLoc, err)
	}
	if err := c.io.WriteFile(listLoc, list.Bytes()); err != nil {
		return nil, nil, fmt.Errorf("append: write %s: %w", listLoc, err)
	}
	manifests[0] = a.listed(mf)
	c.lists.put(listLoc, manifests)
	return a.updates(listLoc, props)
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

// writeManifest encodes the manifest of the added files, each entry
// inheriting the snapshot's id and sequence number.
func (a *appendWrite) writeManifest(loc string) ([]byte, iceberg.ManifestFile, error) {
	var buf bytes.Buffer
	w, err := iceberg.NewManifestWriter(2, &buf, a.meta.PartitionSpec(), a.meta.CurrentSchema(), a.id)
	if err != nil {
		return nil, nil, fmt.Errorf("manifest: %w", err)
	}
	for _, df := range a.files {
		if err := w.Add(iceberg.NewManifestEntryBuilder(iceberg.EntryStatusADDED, &a.id, df).Build()); err != nil {
			return nil, nil, errors.Join(fmt.Errorf("manifest: %w", err), w.Close())
		}
	}
	if err := w.Close(); err != nil {
		return nil, nil, fmt.Errorf("manifest: %w", err)
	}
	mf, err := w.ToManifestFile(loc, int64(buf.Len()))
	if err != nil {
		return nil, nil, fmt.Errorf("manifest: %w", err)
	}
	return buf.Bytes(), mf, nil
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

// newSnapshotID is a positive snapshot id the table does not hold.
func newSnapshotID(meta table.Metadata) int64 {
	for {
		id := rand.Int64() // non-negative
		if id > 0 && meta.SnapshotByID(id) == nil {
			return id
		}
	}
}
