package catalog

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// File is an existing Parquet base file to register.
type File struct {
	// Path is the file's absolute location.
	Path string
	// Rows and Bytes are its record count and size; both positive.
	Rows, Bytes int64
	// SeqFirst and SeqLast, when not both zero, are the range of the
	// file's _seq values; they become its _seq lower and upper bounds, so
	// a reader (and the ID check) can skip the file by WAL position from
	// the manifest alone.
	SeqFirst, SeqLast uint64
}

// Provenance is what one snapshot published from one shard: generations
// First..Last, written by the writer epochs Epochs.
type Provenance struct {
	Shard       string
	First, Last uint64
	Epochs      []uint64
}

// Summary properties of a base snapshot, one pair per shard:
//
//	rollwal.shard.<shard>.generations = "<first>-<last>"
//	rollwal.shard.<shard>.epochs      = "<e1>,<e2>,..."   (ascending)
const (
	summaryPrefix      = "rollwal.shard."
	summaryGenerations = ".generations"
	summaryEpochs      = ".epochs"
)

// Summary returns the snapshot summary properties of parts.
func Summary(parts []Provenance) iceberg.Properties {
	props := iceberg.Properties{}
	for _, p := range parts {
		props[summaryPrefix+p.Shard+summaryGenerations] = fmt.Sprintf("%d-%d", p.First, p.Last)
		epochs := slices.Sorted(slices.Values(p.Epochs))
		strs := make([]string, len(epochs))
		for i, e := range epochs {
			strs[i] = strconv.FormatUint(e, 10)
		}
		props[summaryPrefix+p.Shard+summaryEpochs] = strings.Join(strs, ",")
	}
	return props
}

// ParseSummary reads back the provenance of a snapshot summary, ordered
// by shard.
func ParseSummary(props map[string]string) ([]Provenance, error) {
	var out []Provenance
	for k, v := range props {
		rest, ok1 := strings.CutPrefix(k, summaryPrefix)
		shard, ok2 := strings.CutSuffix(rest, summaryGenerations)
		if !ok1 || !ok2 {
			continue
		}
		p := Provenance{Shard: shard}
		if _, err := fmt.Sscanf(v, "%d-%d", &p.First, &p.Last); err != nil || p.First > p.Last {
			return nil, fmt.Errorf("%w: summary %s=%q", ErrCorrupt, k, v)
		}
		for _, s := range strings.Split(props[summaryPrefix+shard+summaryEpochs], ",") {
			e, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%w: summary %s%s%s: %v", ErrCorrupt, summaryPrefix, shard, summaryEpochs, err)
			}
			p.Epochs = append(p.Epochs, e)
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Provenance) int { return strings.Compare(a.Shard, b.Shard) })
	return out, nil
}

// PrepareAppend prepares an append snapshot that registers existing files
// (their content is not read): it writes a manifest, a manifest list and
// the next metadata file, and returns the catalog swap still to be done.
// summary becomes the snapshot's summary properties (see Summary).
func (c *Etcd) PrepareAppend(ctx context.Context, ident table.Identifier, files []File, summary iceberg.Properties) (*PreparedCommit, error) {
	if len(files) == 0 {
		return nil, fmt.Errorf("catalog: table %v: no files to append", ident)
	}
	return c.PrepareBaseCommit(ctx, ident, BaseCommit{Files: files, Summary: summary})
}

// BaseCommit is one commit of a base table (see PrepareBaseCommit).
type BaseCommit struct {
	// Files are registered by an append snapshot with Summary; with
	// Remove, by a replace snapshot (a rewrite: compaction) that drops
	// the files Remove names (by path) and adds Files instead.
	Files   []File
	Remove  []File
	Summary iceberg.Properties
	// Properties are set on the table.
	Properties iceberg.Properties
	// Retention, when not zero, expires the snapshots it does not keep
	// in the same commit.
	Retention Retention
	// Schema, when set, is the schema version the commit's files are
	// written in. A version newer than the table's current schema (schema
	// id below Schema.SchemaID()) is added with its own field ids and made
	// current, and the name mapping becomes its EvolveNameMapping, before the
	// snapshot is made (which so names the new schema). The table's own
	// version is kept; an older one than the table's is refused
	// (ErrSchemaBehind): files must not be published in a schema the
	// table has left.
	Schema *SchemaVersion
	// Sidecar, when set, is a file made durable together with the
	// commit's metadata files (one sync for all), for a caller that must
	// place a file of its own once the commit applied: it is called with
	// the new metadata file's location and its metadata, and returns a
	// temporary path (an absolute local path, written whole, synced, never
	// renamed here) and its bytes. Only a catalog with local metadata
	// calls it; with Options.Store it is not called.
	Sidecar func(loc string, meta table.Metadata) (path string, data []byte, err error)
}

// Retention bounds the snapshots a table keeps (and so its metadata
// file): those younger than MaxAge, at most MaxSnapshots of them, and
// always the current one. Zero fields do not bound.
type Retention struct {
	MaxAge       time.Duration
	MaxSnapshots int
}

func (r Retention) isZero() bool { return r.MaxAge <= 0 && r.MaxSnapshots <= 0 }

// PrepareBaseCommit prepares one commit of a base table: the table
// properties are set and, when there are files, an append snapshot
// registers them. Iceberg has no empty append, so a commit without files
// (every row it would have published was a duplicate) changes only the
// properties; that keeps one table commit per base commit. Snapshots the
// retention does not keep are expired in the same commit; their files are
// not deleted here (orphan removal does that, once no snapshot refers to
// them).
func (c *Etcd) PrepareBaseCommit(ctx context.Context, ident table.Identifier, bc BaseCommit) (*PreparedCommit, error) {
	cur, err := c.load(ctx, ident)
	if err != nil {
		return nil, err
	}
	evolve, err := schemaUpdates(cur.tbl.Metadata(), bc.Schema)
	if err != nil {
		return nil, fmt.Errorf("catalog: table %s: %w", cur.name, err)
	}
	// The snapshot is made on the table as it is with the new schema, so
	// that it names it; the commit applies the schema updates first.
	base := cur.tbl
	if len(evolve) > 0 {
		meta, err := table.UpdateTableMetadata(cur.tbl.Metadata(), evolve, cur.rec.MetadataLocation)
		if err != nil {
			return nil, fmt.Errorf("catalog: table %s: schema version %d: %w", cur.name, bc.Schema.Version, err)
		}
		base = table.New(cur.tbl.Identifier(), meta, cur.rec.MetadataLocation, c.fsF, c)
	}
	if len(bc.Files) > 0 && len(bc.Remove) == 0 {
		return c.prepareAppend(ctx, cur, base, evolve, bc)
	}
	txn := base.NewTransaction()
	if err := setProperties(txn, bc.Properties); err != nil {
		return nil, fmt.Errorf("catalog: table %s: %w", cur.name, err)
	}
	if err := c.stageFiles(ctx, txn, base.Metadata(), bc); err != nil {
		return nil, fmt.Errorf("catalog: table %s: %w", cur.name, err)
	}
	tc, err := txn.TableCommit()
	if err != nil {
		return nil, err
	}
	updates := append(evolve, tc.Updates...)
	if u := expire(base.Metadata(), bc.Retention, time.Now(), len(bc.Files) > 0 || len(bc.Remove) > 0); u != nil {
		updates = append(updates, u)
	}
	return c.prepare(cur, tc.Requirements, updates, bc.Sidecar)
}

// prepareAppend prepares a commit whose snapshot appends bc.Files (see
// appendSnapshot), with the table properties and the expiry of the
// snapshots the retention no longer keeps, the new one counted.
func (c *Etcd) prepareAppend(ctx context.Context, cur *current, base *table.Table, evolve []table.Update, bc BaseCommit) (*PreparedCommit, error) {
	adds, err := c.dataFiles(base.Metadata(), bc.Files)
	if err != nil {
		return nil, fmt.Errorf("catalog: table %s: %w", cur.name, err)
	}
	snap, reqs, err := c.appendSnapshot(ctx, base, adds, bc.Summary)
	if err != nil {
		return nil, fmt.Errorf("catalog: table %s: %w", cur.name, err)
	}
	updates := append(evolve, snap...)
	if len(bc.Properties) > 0 {
		updates = append(updates, table.NewSetPropertiesUpdate(bc.Properties))
	}
	if u := expire(base.Metadata(), bc.Retention, time.Now(), true); u != nil {
		updates = append(updates, u)
	}
	return c.prepare(cur, reqs, updates, bc.Sidecar)
}

func setProperties(txn *table.Transaction, props iceberg.Properties) error {
	if len(props) == 0 {
		return nil
	}
	if err := txn.SetProperties(props); err != nil {
		return fmt.Errorf("properties: %w", err)
	}
	return nil
}

// SchemaVersionProperty is the table property that names the schema
// version (SchemaVersion.Version) the table's current schema is. Absent,
// the version is the current schema id + 1.
const SchemaVersionProperty = "rollwal.schema-version"

// TableSchemaVersion is the schema version of the table's current schema.
func TableSchemaVersion(meta table.Metadata) (int, error) {
	s, ok := meta.Properties()[SchemaVersionProperty]
	if !ok {
		return meta.CurrentSchema().ID + 1, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 {
		return 0, fmt.Errorf("%w: table property %s=%q is not a schema version", ErrCorrupt, SchemaVersionProperty, s)
	}
	return v, nil
}

// schemaUpdates are the updates that make v the table's current schema:
// none when it is already (or v is nil), an error when the table is at a
// newer version.
func schemaUpdates(meta table.Metadata, v *SchemaVersion) ([]table.Update, error) {
	if v == nil {
		return nil, nil
	}
	have, err := TableSchemaVersion(meta)
	if err != nil {
		return nil, err
	}
	switch {
	case v.Version < have:
		return nil, fmt.Errorf("%w: the files are in schema version %d, the table is at version %d", ErrSchemaBehind, v.Version, have)
	case v.Version == have:
		return nil, nil
	}
	sc, err := BaseSchemaVersion(*v)
	if err != nil {
		return nil, err
	}
	nm, err := EvolveNameMapping(meta.NameMapping(), *v)
	if err != nil {
		return nil, err
	}
	mapping, err := json.Marshal(nm)
	if err != nil {
		return nil, err
	}
	// Our own updates, not iceberg-go's UpdateSchema, which assigns
	// fresh field ids: ours are wire format.
	return []table.Update{
		table.NewAddSchemaUpdate(sc),
		table.NewSetCurrentSchemaUpdate(-1), // the one just added (or an equal one the table has)
		table.NewSetPropertiesUpdate(iceberg.Properties{
			table.DefaultNameMappingKey: string(mapping),
			SchemaVersionProperty:       strconv.Itoa(v.Version),
		}),
	}, nil
}

// stageFiles stages bc's replace on txn (an append is prepareAppend's).
func (c *Etcd) stageFiles(ctx context.Context, txn *table.Transaction, meta table.Metadata, bc BaseCommit) error {
	if len(bc.Files) == 0 && len(bc.Remove) == 0 {
		return nil
	}
	adds, err := c.dataFiles(meta, bc.Files)
	if err != nil {
		return err
	}
	removes, err := c.dataFiles(meta, bc.Remove)
	if err != nil {
		return err
	}
	rw := txn.NewRewrite(bc.Summary)
	for _, df := range removes {
		rw.DeleteFile(df)
	}
	for _, df := range adds {
		rw.AddDataFile(df)
	}
	if err := rw.Commit(ctx); err != nil {
		return fmt.Errorf("replace: %w", err)
	}
	return nil
}

// expire returns the update that removes the snapshots of meta that r
// does not keep at time now, or nil: those older than r.MaxAge and those
// beyond the newest r.MaxSnapshots. The current snapshot and every
// snapshot a ref other than main names are always kept; adding counts a
// new snapshot, not in meta, as the newest and the current one (meta's
// current is then its parent, kept only by the bounds).
//
// The snapshots to remove are chosen here, by count and age, rather than
// by iceberg-go's ExpireSnapshots, which takes an age only: a count turned
// into the age of the oldest kept snapshot expired that one too when the
// clock passed a millisecond between the two readings of it
// (TestExpiryCrashLeavesOneSide, about one run in a hundred).
func expire(meta table.Metadata, r Retention, now time.Time, adding bool) table.Update {
	if r.isZero() {
		return nil
	}
	keep := map[int64]bool{}
	for name, ref := range meta.Refs() {
		if name != table.MainBranch {
			keep[ref.SnapshotID] = true
		}
	}
	kept := 0
	if adding {
		kept = 1
	} else if cur := meta.CurrentSnapshot(); cur != nil {
		keep[cur.SnapshotID] = true
		kept = 1
	}
	snaps := slices.Clone(meta.Snapshots())
	slices.SortStableFunc(snaps, func(a, b table.Snapshot) int {
		return cmp.Or(cmp.Compare(b.TimestampMs, a.TimestampMs), cmp.Compare(b.SequenceNumber, a.SequenceNumber))
	})
	var doomed []int64
	for _, s := range snaps {
		switch {
		case keep[s.SnapshotID]: // a ref's, or the current one (counted above)
		case (r.MaxSnapshots <= 0 || kept < r.MaxSnapshots) && (r.MaxAge <= 0 || now.Sub(time.UnixMilli(s.TimestampMs)) <= r.MaxAge):
			kept++
		default:
			doomed = append(doomed, s.SnapshotID)
		}
	}
	if len(doomed) == 0 {
		return nil
	}
	return table.NewRemoveSnapshotsUpdate(doomed, false)
}

// DataFiles are the data files a commit of files registers, as its
// manifest will hold them (bounds included), without writing anything: a
// caller that knows a snapshot's parent files can so know the snapshot's
// files without reading its manifests back.
func (c *Etcd) DataFiles(meta table.Metadata, files []File) ([]iceberg.DataFile, error) {
	return c.dataFiles(meta, files)
}

// TableAt is the table ident at metadata meta, read from location loc
// (a prepared commit's, before it applied).
func (c *Etcd) TableAt(ident table.Identifier, meta table.Metadata, loc string) *table.Table {
	return table.New(slices.Clone(ident), meta, loc, c.fsF, c)
}

// dataFiles builds the data files of files. A file's location must be one
// the catalog's IO reads: an absolute path on the filesystem, or, with
// Options.Store, a location inside the store (StoreLocation; a file://
// store's bare absolute paths too). Anything else is refused, naming it.
func (c *Etcd) dataFiles(meta table.Metadata, files []File) ([]iceberg.DataFile, error) {
	return buildDataFiles(meta, files, c.checkDataLocation)
}

// dataFiles builds data files at absolute paths (a catalog without a store).
func dataFiles(meta table.Metadata, files []File) ([]iceberg.DataFile, error) {
	return buildDataFiles(meta, files, checkAbsolute)
}

func buildDataFiles(meta table.Metadata, files []File, check func(loc string) error) ([]iceberg.DataFile, error) {
	spec := meta.PartitionSpec()
	out := make([]iceberg.DataFile, 0, len(files))
	for _, f := range files {
		if f.Rows < 1 || f.Bytes < 1 {
			return nil, fmt.Errorf("file %q: want positive rows (%d) and bytes (%d)", f.Path, f.Rows, f.Bytes)
		}
		if err := check(f.Path); err != nil {
			return nil, err
		}
		b, err := iceberg.NewDataFileBuilder(spec, iceberg.EntryContentData, f.Path, iceberg.ParquetFile, nil, nil, nil, f.Rows, f.Bytes)
		if err != nil {
			return nil, err
		}
		if lo, hi, ok := seqBounds(f); ok {
			b.LowerBoundValues(map[int][]byte{SeqFieldID: lo}).UpperBoundValues(map[int][]byte{SeqFieldID: hi})
		}
		out = append(out, b.Build())
	}
	return out, nil
}

// seqBounds encodes a file's _seq range as Iceberg long bounds (8 bytes,
// little endian).
func seqBounds(f File) (lo, hi []byte, ok bool) {
	if f.SeqFirst == 0 && f.SeqLast == 0 || f.SeqFirst > f.SeqLast || f.SeqLast > math.MaxInt64 {
		return nil, nil, false
	}
	return binary.LittleEndian.AppendUint64(nil, f.SeqFirst), binary.LittleEndian.AppendUint64(nil, f.SeqLast), true
}

// checkDataLocation refuses a data file location the catalog's IO cannot
// read: outside the store (ErrOutsideStore) with Options.Store, not an
// absolute path without.
func (c *Etcd) checkDataLocation(loc string) error {
	if oio, ok := c.io.(objectIO); ok {
		if _, err := oio.objectName(loc); err != nil {
			return fmt.Errorf("file %q: %w", loc, err)
		}
		return nil
	}
	return checkAbsolute(loc)
}

func checkAbsolute(loc string) error {
	if !filepath.IsAbs(loc) {
		return fmt.Errorf("file %q: want an absolute path", loc)
	}
	return nil
}
