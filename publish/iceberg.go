package publish

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/iceberg-go"
	icecat "github.com/apache/iceberg-go/catalog"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"

	"github.com/rollwal/rollwal/catalog"
	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/layout"
	"github.com/rollwal/rollwal/shardmeta"
)

// BaseVersionProperty names the base version (shardmeta.BaseState.Version)
// in the Iceberg table: as a table property, set by every base commit, it
// is the version the table's current metadata belongs to; in a snapshot's
// summary, the version that added the snapshot. A commit whose rows were
// all duplicates adds no snapshot (Iceberg has no empty append) but still
// sets the property, so the ID check and the readers' manifest can tell
// that table and state belong together.
const BaseVersionProperty = "rollwal.base-version"

// baseTable is the Iceberg table of the base: etcd is its catalog of
// record, and its record changes only in the transactions that write
// base/state.
type baseTable struct {
	cat      *catalog.Etcd
	ident    table.Identifier
	location string
	// manifests caches the files of each manifest read (manifests are
	// immutable), pruned on every listing to the current snapshot's and
	// those the last orphan sweep found live.
	manifests map[string][]shardmeta.BaseFile
	swept     map[string]bool
	// lists caches manifest lists (immutable too) for the orphan sweep;
	// readers caches the paths each readers' manifest names.
	lists   map[string][]iceberg.ManifestFile
	readers map[string][]string
	// snaps holds the files of the last few snapshots by snapshot id: a
	// commit of this coordinator knows its snapshot's files (its parent's
	// and the ones it added), so neither the readers' manifest nor the
	// next pass's ID check reads the new manifest list back.
	snaps []snapFiles
	// commitsSinceSweep counts commits since the last RemoveOrphans.
	commitsSinceSweep int
}

// manifestList returns snap's manifests, reading its list once.
func (t *baseTable) manifestList(fio icebergio.IO, snap table.Snapshot) ([]iceberg.ManifestFile, error) {
	if mfs, ok := t.lists[snap.ManifestList]; ok {
		return mfs, nil
	}
	mfs, err := snap.Manifests(fio)
	if err != nil {
		return nil, fmt.Errorf("publish: snapshot %d: manifest list: %w", snap.SnapshotID, err)
	}
	t.lists[snap.ManifestList] = mfs
	return mfs, nil
}

type snapFiles struct {
	id    int64
	files []shardmeta.BaseFile
}

// snapCacheSize bounds snaps: the current snapshot and its parent are what
// the next pass asks for.
const snapCacheSize = 2

func (t *baseTable) snapshotCached(id int64) ([]shardmeta.BaseFile, bool) {
	for _, s := range t.snaps {
		if s.id == id {
			return s.files, true
		}
	}
	return nil, false
}

func (t *baseTable) rememberSnapshot(id int64, files []shardmeta.BaseFile) {
	t.snaps = append(t.snaps, snapFiles{id, files})
	if len(t.snaps) > snapCacheSize {
		t.snaps = slices.Delete(t.snaps, 0, len(t.snaps)-snapCacheSize)
	}
}

// rememberAppend records the files of the snapshot an append commit
// made: its parent's, when known, and the ones it added, in the form its
// manifest holds them. Nothing is recorded when the parent's files are
// not known or the commit made no snapshot.
func (c *Coordinator) rememberAppend(meta table.Metadata, added []shardmeta.BaseFile) error {
	snap := meta.CurrentSnapshot()
	if snap == nil || snap.ParentSnapshotID == nil || len(added) == 0 {
		return nil
	}
	if _, ok := c.table.snapshotCached(snap.SnapshotID); ok {
		return nil
	}
	parent, ok := c.table.snapshotCached(*snap.ParentSnapshotID)
	if !ok {
		return nil
	}
	dfs, err := c.table.cat.DataFiles(meta, c.icebergFiles(added))
	if err != nil {
		return err
	}
	// In the order of the snapshot's manifest list: the new manifest
	// first, then the parent's.
	files := make([]shardmeta.BaseFile, 0, len(dfs)+len(parent))
	for _, df := range dfs {
		f, err := baseFileOf(df, c.baseLocation())
		if err != nil {
			return err
		}
		files = append(files, f)
	}
	c.table.rememberSnapshot(snap.SnapshotID, append(files, parent...))
	return nil
}

// keepManifests records the manifests of every live snapshot: the cache
// keeps them across listings of the current snapshot.
func (t *baseTable) keepManifests(live map[string]bool) {
	t.swept = live
	for p := range t.manifests {
		if !live[p] {
			delete(t.manifests, p)
		}
	}
}

func (c *Coordinator) openBaseTable() error {
	cat, err := catalog.New(catalog.Options{Client: c.cli, Prefix: catalog.BasePrefix(c.opts.Prefix, c.opts.Table),
		FS: c.opts.FS, Store: c.opts.Store, RequestTimeout: c.opts.RequestTimeout, Logger: c.opts.Logger})
	if err != nil {
		return err
	}
	c.table = &baseTable{cat: cat, ident: catalog.BaseIdent(c.opts.Table), location: c.baseLocation(),
		manifests: map[string][]shardmeta.BaseFile{}, lists: map[string][]iceberg.ManifestFile{}, readers: map[string][]string{}}
	return nil
}

// ensureTable creates the base's namespace and Iceberg table when they do
// not exist yet, the table in the current version of the table's schema. Both creates are put-if-absent, so a repeat after a crash
// (or a race with another coordinator's New) is harmless.
func (c *Coordinator) ensureTable(ctx context.Context) error {
	t := c.table
	err := t.cat.CreateNamespace(ctx, table.Identifier{catalog.BaseNamespace}, nil)
	if err != nil && !errors.Is(err, icecat.ErrNamespaceAlreadyExists) {
		return fmt.Errorf("publish: create namespace %s: %w", catalog.BaseNamespace, err)
	}
	if _, err := t.cat.LoadTable(ctx, t.ident); err == nil {
		return nil
	} else if !errors.Is(err, icecat.ErrNoSuchTable) {
		return fmt.Errorf("publish: load table %v: %w", t.ident, err)
	}
	ps, err := c.loadPassSchema(ctx)
	if err != nil {
		return err
	}
	_, err = t.cat.CreateBaseTableVersion(ctx, t.ident, t.location, *ps.catalogVersion())
	if err != nil && !errors.Is(err, icecat.ErrTableAlreadyExists) {
		return fmt.Errorf("publish: create table %v: %w", t.ident, err)
	}
	c.log.Info("created the base's Iceberg table", "table", t.ident, "location", t.location)
	return nil
}

// baseSnapshot is the base as the current Iceberg snapshot holds it.
type baseSnapshot struct {
	tbl *table.Table
	// version is the snapshot's SummaryBaseVersion, 0 without a snapshot.
	version uint64
	files   []shardmeta.BaseFile
}

// loadBase reads the base table's current snapshot and its files. It
// must belong to want (the state's version): the table changes only with
// the state, so anything else is a table written behind the merge's back,
// and the ID check would run against the wrong files.
func (c *Coordinator) loadBase(ctx context.Context, want uint64) (*baseSnapshot, error) {
	tbl, err := c.table.cat.LoadTable(ctx, c.table.ident)
	if err != nil {
		return nil, fmt.Errorf("publish: load table %v: %w", c.table.ident, err)
	}
	return c.baseOf(ctx, tbl, want)
}

// baseOf is the base snapshot of table tbl, which must be at base version
// want.
func (c *Coordinator) baseOf(ctx context.Context, tbl *table.Table, want uint64) (*baseSnapshot, error) {
	var err error
	b := &baseSnapshot{tbl: tbl}
	if b.version, err = tableVersion(tbl); err != nil {
		return nil, err
	}
	if b.version != want {
		return nil, fmt.Errorf("%w: the Iceberg table is at base version %d, base/state at %d (%s)",
			ErrInvalidState, b.version, want, tbl.MetadataLocation())
	}
	snap := tbl.CurrentSnapshot()
	if snap == nil {
		return b, nil
	}
	b.files, err = c.table.snapshotFiles(ctx, tbl, snap, c.baseLocation())
	return b, err
}

// tableVersion is the table's BaseVersionProperty, 0 when absent (a table
// no base commit has written yet).
func tableVersion(tbl *table.Table) (uint64, error) {
	s, ok := tbl.Metadata().Properties()[BaseVersionProperty]
	if !ok {
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: table property %s=%q (%s): not a base version", ErrInvalidState, BaseVersionProperty, s, tbl.MetadataLocation())
	}
	return v, nil
}

// snapshotFiles lists the data files of snap from its manifests (each
// manifest read once per coordinator); base is the base's location.
func (t *baseTable) snapshotFiles(ctx context.Context, tbl *table.Table, snap *table.Snapshot, base string) ([]shardmeta.BaseFile, error) {
	if files, ok := t.snapshotCached(snap.SnapshotID); ok {
		return files, nil
	}
	files, err := t.readSnapshotFiles(ctx, tbl, snap, base)
	if err != nil {
		return nil, err
	}
	t.rememberSnapshot(snap.SnapshotID, files)
	return files, nil
}

func (t *baseTable) readSnapshotFiles(ctx context.Context, tbl *table.Table, snap *table.Snapshot, base string) ([]shardmeta.BaseFile, error) {
	fio, err := tbl.FS(ctx)
	if err != nil {
		return nil, err
	}
	mfs, err := t.manifestList(fio, *snap)
	if err != nil {
		return nil, err
	}
	var out []shardmeta.BaseFile
	live := make(map[string]bool, len(mfs))
	for _, mf := range mfs {
		if mf.ManifestContent() != iceberg.ManifestContentData {
			return nil, fmt.Errorf("%w: snapshot %d has a delete manifest %s (base tables hold data files only)", ErrInvalidState, snap.SnapshotID, mf.FilePath())
		}
		live[mf.FilePath()] = true
		files, err := t.manifestFiles(fio, mf, base)
		if err != nil {
			return nil, err
		}
		out = append(out, files...)
	}
	for p := range t.manifests {
		if !live[p] && !t.swept[p] {
			delete(t.manifests, p)
		}
	}
	return out, nil
}

func (t *baseTable) manifestFiles(fio icebergio.IO, mf iceberg.ManifestFile, base string) ([]shardmeta.BaseFile, error) {
	if files, ok := t.manifests[mf.FilePath()]; ok {
		return files, nil
	}
	entries, err := mf.FetchEntries(fio, true)
	if err != nil {
		return nil, fmt.Errorf("publish: manifest %s: %w", mf.FilePath(), err)
	}
	files := make([]shardmeta.BaseFile, 0, len(entries))
	for _, e := range entries {
		f, err := baseFileOf(e.DataFile(), base)
		if err != nil {
			return nil, fmt.Errorf("%w: manifest %s: %w", ErrInvalidState, mf.FilePath(), err)
		}
		files = append(files, f)
	}
	t.manifests[mf.FilePath()] = files
	return files, nil
}

// baseFileOf is what the ID check needs of a registered data file: its
// path under the base (at location base), its shard (from the path), its
// _seq range (from the bounds of field 2) and its index checksum (from its
// name).
func baseFileOf(df iceberg.DataFile, base string) (shardmeta.BaseFile, error) {
	rel, err := relOf(df.FilePath(), base)
	if err != nil {
		return shardmeta.BaseFile{}, err
	}
	f := shardmeta.BaseFile{Path: rel, Rows: df.Count(), Bytes: df.FileSizeBytes()}
	parts := strings.Split(f.Path, "/")
	lo, okLo := df.LowerBoundValues()[catalog.SeqFieldID]
	hi, okHi := df.UpperBoundValues()[catalog.SeqFieldID]
	if len(parts) == 3 && okLo && okHi && len(lo) == 8 && len(hi) == 8 {
		f.Shard, f.SeqFirst, f.SeqLast = parts[1], binary.LittleEndian.Uint64(lo), binary.LittleEndian.Uint64(hi)
	}
	_, _, _, crc, ok, err := generation.ParseBaseName(parts[len(parts)-1])
	if err != nil {
		return shardmeta.BaseFile{}, err
	}
	if ok {
		f.IndexCRC = &crc
	}
	return f, nil
}

// icebergFiles turns staged base files into the catalog's form.
func (c *Coordinator) icebergFiles(files []shardmeta.BaseFile) []catalog.File {
	out := make([]catalog.File, 0, len(files))
	for _, f := range files {
		out = append(out, catalog.File{Path: c.fileLocation(f.Path),
			Rows: f.Rows, Bytes: f.Bytes, SeqFirst: f.SeqFirst, SeqLast: f.SeqLast})
	}
	return out
}

// prepareAppend writes the Iceberg metadata of a data commit: the files
// of parts, a summary naming the base version and, per shard, the
// generations and writer epochs published; the plan's schema version
// becomes the table's current schema when it is newer.
func (c *Coordinator) prepareAppend(ctx context.Context, plan *Plan, parts []StagedPart, version uint64,
	sidecar func(string, table.Metadata) (string, []byte, error)) (*catalog.PreparedCommit, error) {
	var files []shardmeta.BaseFile
	var prov []catalog.Provenance
	for _, p := range parts {
		files = append(files, p.Files...)
		pr := catalog.Provenance{Shard: p.Shard, First: p.First, Last: p.Last}
		for _, g := range plan.generations(p.Shard) {
			if g.Number >= p.First && g.Number <= p.Last && !slices.Contains(pr.Epochs, g.Epoch) {
				pr.Epochs = append(pr.Epochs, g.Epoch)
			}
		}
		prov = append(prov, pr)
	}
	v := strconv.FormatUint(version, 10)
	summary := catalog.Summary(prov)
	summary[BaseVersionProperty] = v
	p, err := c.table.cat.PrepareBaseCommit(ctx, c.table.ident, catalog.BaseCommit{Files: c.icebergFiles(files), Summary: summary,
		Properties: iceberg.Properties{BaseVersionProperty: v}, Retention: c.opts.SnapshotRetention,
		Schema: plan.passSchema().catalogVersion(), Sidecar: sidecar})
	if err != nil {
		return nil, fmt.Errorf("publish: Iceberg metadata of base version %d: %w", version, err)
	}
	return p, nil
}

// Base is the committed base table as a reader sees it: the state's
// version and merge state, and the files of the Iceberg snapshot
// committed with it.
type Base struct {
	Version uint64
	Shards  map[string]shardmeta.ShardMergeState
	// MetadataLocation is the Iceberg table's current metadata file;
	// empty before the first coordinator created the table.
	MetadataLocation string
	// Files are paths relative to the base (Location), as in the state
	// before the table was Iceberg.
	Files []shardmeta.BaseFile
	// Location is where the base lives: the local base directory, or with
	// Options.Store its store location (s3://bucket/prefix/<table>/base).
	// File f is at Location + "/" + f.Path.
	Location string
}

// LoadBase reads the committed base without taking the lock or writing
// anything: base/state, then the Iceberg table's current snapshot, which
// must be the state's version. A base still in base/state format 1 (not
// migrated yet) is returned from the state's own file list.
func LoadBase(ctx context.Context, opts Options) (*Base, error) {
	opts.ensureDefaults()
	if opts.Etcd == nil {
		return nil, errors.New("publish: no etcd client")
	}
	keys := shardmeta.Keys{Prefix: opts.Prefix, Table: opts.Table}
	if err := keys.Validate(); err != nil {
		return nil, err
	}
	baseDir, err := filepath.Abs(layout.BaseDir(opts.DataDir, opts.Table))
	if err != nil {
		return nil, err
	}
	c := &Coordinator{opts: opts, keys: keys, cli: opts.Etcd, baseDir: baseDir, log: opts.Logger,
		store: shardmeta.NewStore(opts.Etcd, keys, shardmeta.StoreOptions{RequestTimeout: opts.RequestTimeout, Logger: opts.Logger})}
	if err := c.openBaseTable(); err != nil {
		return nil, err
	}
	st, _, err := c.store.LoadBaseState(ctx)
	if err != nil {
		return nil, stateErr(err)
	}
	out := &Base{Version: st.Version, Shards: st.Shards, Files: st.Files, Location: c.baseLocation()}
	b, err := c.loadBase(ctx, st.Version)
	switch {
	case errors.Is(err, icecat.ErrNoSuchTable), err != nil && len(st.Files) > 0:
		return out, nil // never merged by this version, or not migrated yet
	case err != nil:
		return nil, err
	}
	out.MetadataLocation, out.Files = b.tbl.MetadataLocation(), b.files
	return out, nil
}
