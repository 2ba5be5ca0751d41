package publish

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/apache/iceberg-go/table"
	"os"
	"path/filepath"
	"strings"

	"github.com/rollwal/rollwal/catalog"
	"github.com/rollwal/rollwal/layout"
	"github.com/rollwal/rollwal/objstore"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/vfs"
)

// Commit publishes a staged result in one etcd transaction guarded by the
// lock's ModRevision and the plan's base-state revision: the files join the
// base and the shards' watermarks rise to the last staged generations,
// together, and the base version goes up by one. Then it writes the
// readers' manifest of the new version.
//
// Against the current state: a part whose last generation is at or below
// the shard's watermark is already merged (a no-op: a repeat of a commit
// that landed); a part whose first generation is at or below it but whose
// last is above is a stale prefix (ErrStalePrefix). When every part is a
// no-op Commit succeeds without writing. Otherwise the state must still be
// at the plan's revision (ErrBaseMoved). A lost response is resolved by
// reading the state back: the exact state sent means committed; an
// unchanged state means ErrNotApplied; a failed read means
// ErrUnknownOutcome. Commit never retries blindly.
func (c *Coordinator) Commit(ctx context.Context, s *Staged) error {
	ahead := c.prepareAhead(ctx, s)
	st, rev, err := c.store.LoadBaseState(ctx)
	if err != nil {
		ahead.discard()
		return err
	}
	todo, err := c.partsToCommit(st, s)
	if err != nil {
		ahead.discard()
		return err
	}
	if len(todo) == 0 {
		ahead.discard()
		if err := c.checkLock(ctx); err != nil {
			return err
		}
		c.metrics.commits.WithLabelValues("noop").Inc()
		return c.writeReaderManifest(ctx, st, nil)
	}
	if rev != s.Plan.StateRevision {
		ahead.discard()
		c.metrics.commits.WithLabelValues("moved").Inc()
		return fmt.Errorf("%w: planned at revision %d (version %d), now revision %d (version %d)",
			ErrBaseMoved, s.Plan.StateRevision, s.Plan.BaseVersion, rev, st.Version)
	}
	next := st.Clone()
	next.Version++
	var added int
	for _, p := range todo {
		added += len(p.Files)
		ms := next.Shards[p.Shard]
		ms.Watermark = p.Last
		next.Shards[p.Shard] = ms
	}
	data, err := next.Encode()
	if err != nil {
		return err
	}
	// The shards are read while the Iceberg metadata is written: both must
	// hold before the transaction, neither needs the other.
	shardsErr := make(chan error, 1)
	go func() { shardsErr <- c.checkShardsUnchanged(ctx, s.Plan, todo) }()
	tc, pm, err := ahead.take(ctx, todo, next.Version)
	if serr := <-shardsErr; serr != nil {
		if pm != nil {
			pm.abort()
		}
		c.metrics.commits.WithLabelValues("moved").Inc()
		return serr
	}
	if err != nil {
		return err
	}
	if c.testHookAfterPrepare != nil {
		if err := c.testHookAfterPrepare(); err != nil {
			pm.abort()
			return err
		}
	}
	hook := c.testHookCommit
	if hook == nil {
		hook = func(err error) error { return err }
	}
	if _, err := c.putState(ctx, rev, data, hook, tc); err != nil {
		pm.abort()
		switch {
		case errors.Is(err, ErrNotApplied):
			c.metrics.commits.WithLabelValues("not_applied").Inc()
		case errors.Is(err, ErrUnknownOutcome):
			c.metrics.commits.WithLabelValues("unknown").Inc()
		}
		return err
	}
	c.metrics.commits.WithLabelValues("ok").Inc()
	c.log.Info("committed to the base", "version", next.Version, "parts", len(todo), "files", added, "metadata", tc.Location)
	if c.testHookAfterCommit != nil {
		if err := c.testHookAfterCommit(); err != nil {
			pm.abort()
			return err
		}
	}
	return pm.place(ctx)
}

// partsToCommit are the staged parts the state st has not merged yet; a
// stale prefix is ErrStalePrefix.
func (c *Coordinator) partsToCommit(st *shardmeta.BaseState, s *Staged) ([]StagedPart, error) {
	var todo []StagedPart
	for _, p := range s.Parts {
		w := st.Shards[p.Shard].Watermark
		switch {
		case p.Last <= w:
			c.log.Info("staged part already merged; no-op", "shard", p.Shard, "first", p.First, "last", p.Last, "watermark", w)
		case p.First <= w:
			c.metrics.commits.WithLabelValues("stale").Inc()
			return nil, fmt.Errorf("%w: shard %q: staged generations %d..%d but the watermark is %d", ErrStalePrefix, p.Shard, p.First, p.Last, w)
		default:
			todo = append(todo, p)
		}
	}
	return todo, nil
}

// preparedAhead is the commit of every staged part as the plan's next
// version, prepared while Commit reads the state. Commit takes it when the
// state is still the plan's and every part is still to publish, the
// common case; otherwise it is discarded, and its metadata files are
// orphans (removed by RemoveOrphans, like a crashed attempt's).
type preparedAhead struct {
	c     *Coordinator
	plan  *Plan
	parts []StagedPart
	done  chan struct{}
	tc    *catalog.PreparedCommit
	pm    *pendingManifest
	err   error
}

func (c *Coordinator) prepareAhead(ctx context.Context, s *Staged) *preparedAhead {
	a := &preparedAhead{c: c, plan: s.Plan, parts: s.Parts, done: make(chan struct{})}
	if len(s.Parts) == 0 {
		close(a.done)
		return a
	}
	go func() {
		defer close(a.done)
		a.tc, a.pm, a.err = c.prepareCommit(ctx, s.Plan, s.Parts, s.Plan.BaseVersion+1)
	}()
	return a
}

// take returns the commit of todo as base version version: the one
// prepared ahead when it is that (todo is a subsequence of the staged
// parts, so the same length is the same parts), else a new one.
func (a *preparedAhead) take(ctx context.Context, todo []StagedPart, version uint64) (*catalog.PreparedCommit, *pendingManifest, error) {
	<-a.done
	if len(todo) == len(a.parts) && version == a.plan.BaseVersion+1 {
		return a.tc, a.pm, a.err
	}
	a.discard()
	return a.c.prepareCommit(ctx, a.plan, todo, version)
}

// discard waits for the commit prepared ahead and drops it.
func (a *preparedAhead) discard() {
	<-a.done
	if a.pm != nil {
		a.pm.abort()
	}
}

// prepareCommit writes the Iceberg metadata of the commit of parts as base
// version version, and that version's readers' manifest as pending: synced
// under a temporary name together with the metadata files (a local base),
// renamed into place only once the transaction applied.
func (c *Coordinator) prepareCommit(ctx context.Context, plan *Plan, parts []StagedPart, version uint64) (*catalog.PreparedCommit, *pendingManifest, error) {
	var added []shardmeta.BaseFile
	for _, p := range parts {
		added = append(added, p.Files...)
	}
	// The readers' manifest is of the table as it will be committed,
	// rather than read back from etcd after: its metadata is what is
	// being written.
	var pm *pendingManifest
	pending := func(loc string, meta table.Metadata) (*pendingManifest, error) {
		if err := c.rememberAppend(meta, added); err != nil {
			c.log.Warn("the files of the new snapshot are read back instead", "metadata", loc, "err", err)
		}
		return c.newPendingManifest(ctx, version, c.table.cat.TableAt(c.table.ident, meta, loc))
	}
	var sidecar func(string, table.Metadata) (string, []byte, error)
	if c.opts.Store == nil {
		sidecar = func(loc string, meta table.Metadata) (_ string, _ []byte, err error) {
			if pm, err = pending(loc, meta); err != nil {
				return "", nil, err
			}
			return pm.tmp, pm.data, nil
		}
	}
	tc, err := c.prepareAppend(ctx, plan, parts, version, sidecar)
	if err != nil {
		if pm != nil {
			pm.abort()
		}
		return nil, nil, err
	}
	if pm == nil {
		if pm, err = pending(tc.Location, tc.Metadata); err != nil {
			return nil, nil, err
		}
	}
	return tc, pm, nil
}

// checkShardsUnchanged makes sure every generation about to be published is
// still in its shard's manifest exactly as planned. Generations are
// immutable and drained only below the watermark, so a difference means
// the shard was rewritten behind the plan (an operator reset, a bug): fail
// with ErrBaseMoved and replan rather than publish rows the shard no
// longer claims.
func (c *Coordinator) checkShardsUnchanged(ctx context.Context, plan *Plan, parts []StagedPart) error {
	for _, p := range parts {
		m, _, err := c.store.Load(ctx, p.Shard)
		if err != nil {
			return fmt.Errorf("publish: shard %q: %w", p.Shard, err)
		}
		have := make(map[uint64]shardmeta.Generation, len(m.Flushed))
		for _, g := range m.Flushed {
			have[g.Number] = g
		}
		for _, pg := range plan.generations(p.Shard) {
			if pg.Number < p.First || pg.Number > p.Last {
				continue
			}
			if g, ok := have[pg.Number]; !ok || g != pg.Generation {
				return fmt.Errorf("%w: shard %q no longer lists generation %d as planned (file %s)", ErrBaseMoved, p.Shard, pg.Number, pg.File)
			}
		}
	}
	return nil
}

// checkLock fails with ErrLockLost unless base/lock is still ours.
func (c *Coordinator) checkLock(ctx context.Context) error {
	rctx, cancel := c.rpc(ctx)
	defer cancel()
	resp, err := c.cli.Get(rctx, c.keys.BaseLock())
	if err != nil {
		return fmt.Errorf("publish: read lock: %w", err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].ModRevision != c.lockRev {
		c.metrics.commits.WithLabelValues("lock_lost").Inc()
		return fmt.Errorf("%w: %s no longer holds revision %d", ErrLockLost, c.keys.BaseLock(), c.lockRev)
	}
	return nil
}

// ReaderManifest is the readers' manifest, <base>/_manifest/<version>.json:
// the files of one base version, for readers without an Iceberg library,
// and the Iceberg metadata file of that version for those with one.
type ReaderManifest struct {
	Version uint64 `json:"version"`
	// IcebergMetadata is the table metadata file whose current snapshot is
	// this version (absolute).
	IcebergMetadata string `json:"iceberg_metadata"`
	// Location is the base's store location when the base lives in an
	// object store (Options.Store); absent for a local base.
	Location string               `json:"location,omitempty"`
	Rows     int64                `json:"rows"`
	Files    []ReaderManifestFile `json:"files"`
}

// ReaderManifestFile names one data file relative to the base directory
// (or the base's Location) and, for a base in an object store, by its
// store location.
type ReaderManifestFile struct {
	Path     string `json:"path"`
	Location string `json:"location,omitempty"`
	Rows     int64  `json:"rows"`
}

// ReaderManifestName is the file name of version v's readers' manifest.
func ReaderManifestName(v uint64) string { return fmt.Sprintf("%020d.json", v) }

// writeReaderManifest writes the readers' manifest of st's version if it is
// missing (temp → fsync → rename → fsync dir), from the table at that
// version: tbl, or when nil the table's current snapshot, which must be
// that version's. Version 0 has none.
func (c *Coordinator) writeReaderManifest(ctx context.Context, st *shardmeta.BaseState, tbl *table.Table) error {
	if c.opts.Store != nil {
		if st.Version == 0 {
			return nil
		}
		if _, err := c.opts.Store.Stat(ctx, layout.ReaderManifestKey(c.opts.Table, ReaderManifestName(st.Version))); err == nil {
			return nil
		} else if !errors.Is(err, objstore.ErrNotFound) {
			return fmt.Errorf("publish: readers' manifest: %w", err)
		}
		return c.replaceReaderManifest(ctx, st, tbl)
	}
	final := filepath.Join(layout.ReaderManifestDir(c.baseDir), ReaderManifestName(st.Version))
	if _, err := c.opts.FS.Stat(final); err == nil {
		return nil
	}
	return c.replaceReaderManifest(ctx, st, tbl)
}

// replaceReaderManifest is writeReaderManifest replacing a manifest that
// exists (atomically: rename).
func (c *Coordinator) replaceReaderManifest(ctx context.Context, st *shardmeta.BaseState, tbl *table.Table) error {
	pm, err := c.stageReaderManifest(ctx, st, tbl)
	if err != nil {
		return err
	}
	return pm.place(ctx)
}

// pendingManifest is a readers' manifest written and synced under its
// temporary name (a local base) or held (a base in a store), to be placed
// once the version it describes is committed.
type pendingManifest struct {
	c       *Coordinator
	version uint64
	data    []byte
	// tmp and final are set for a local base; none for version 0.
	tmp, final string
}

// stageReaderManifest writes version st.Version's readers' manifest as
// pending, from tbl (or, when nil, the table's current snapshot).
func (c *Coordinator) stageReaderManifest(ctx context.Context, st *shardmeta.BaseState, tbl *table.Table) (*pendingManifest, error) {
	pm, err := c.newPendingManifest(ctx, st.Version, tbl)
	if err != nil || pm.tmp == "" {
		return pm, err
	}
	if err := vfs.MkdirAllDurable(c.opts.FS, filepath.Dir(pm.tmp), 0o755); err != nil {
		return nil, fmt.Errorf("publish: readers' manifest: %w", err)
	}
	f, err := c.opts.FS.Create(pm.tmp)
	if err != nil {
		return nil, fmt.Errorf("publish: readers' manifest: %w", err)
	}
	_, err = f.Write(pm.data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		pm.abort()
		return nil, fmt.Errorf("publish: readers' manifest %s: %w", pm.final, err)
	}
	return pm, nil
}

// newPendingManifest is version's readers' manifest from tbl (or, when
// nil, the table's current snapshot), not written yet.
func (c *Coordinator) newPendingManifest(ctx context.Context, version uint64, tbl *table.Table) (*pendingManifest, error) {
	pm := &pendingManifest{c: c, version: version}
	if version == 0 {
		return pm, nil
	}
	var b *baseSnapshot
	var err error
	if tbl != nil {
		b, err = c.baseOf(ctx, tbl, version)
	} else {
		b, err = c.loadBase(ctx, version)
	}
	if err != nil {
		return nil, err
	}
	if pm.data, err = c.readerManifestOf(b, version); err != nil {
		return nil, err
	}
	if c.opts.Store == nil {
		dir := layout.ReaderManifestDir(c.baseDir)
		pm.final = filepath.Join(dir, ReaderManifestName(version))
		pm.tmp = filepath.Join(dir, ".tmp-"+ReaderManifestName(version))
	}
	return pm, nil
}

func (c *Coordinator) readerManifestOf(b *baseSnapshot, version uint64) ([]byte, error) {
	m := ReaderManifest{Version: version, IcebergMetadata: b.tbl.MetadataLocation(), Files: []ReaderManifestFile{}}
	if c.opts.Store != nil {
		m.Location = c.baseLocation()
	}
	for _, f := range b.files {
		rf := ReaderManifestFile{Path: f.Path, Rows: f.Rows}
		if c.opts.Store != nil {
			rf.Location = c.fileLocation(f.Path)
		}
		m.Files = append(m.Files, rf)
		m.Rows += f.Rows
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// place puts the manifest under its name (durably: the rename's directory
// is synced).
func (pm *pendingManifest) place(ctx context.Context) error {
	c := pm.c
	switch {
	case pm.version == 0:
		return nil
	case c.opts.Store != nil:
		return c.putStoreReaderManifest(ctx, pm.version, pm.data)
	}
	err := c.opts.FS.Rename(pm.tmp, pm.final)
	if err == nil {
		err = vfs.SyncDir(c.opts.FS, filepath.Dir(pm.final))
	}
	if err != nil {
		pm.abort()
		return fmt.Errorf("publish: readers' manifest %s: %w", pm.final, err)
	}
	return nil
}

// abort removes the temporary file of a manifest that will not be placed.
func (pm *pendingManifest) abort() {
	if pm.tmp != "" {
		_ = pm.c.opts.FS.Remove(pm.tmp)
	}
}

// LatestReaderManifest reads the highest-numbered readers' manifest under
// baseDir; ok is false when there is none.
func LatestReaderManifest(fs vfs.FS, baseDir string) (m ReaderManifest, ok bool, err error) {
	dir := layout.ReaderManifestDir(baseDir)
	names, err := fs.List(dir)
	if errors.Is(err, os.ErrNotExist) {
		return m, false, nil
	} else if err != nil {
		return m, false, err
	}
	latest := ""
	for _, n := range names {
		if len(n) == len(ReaderManifestName(0)) && filepath.Ext(n) == ".json" && n > latest {
			latest = n
		}
	}
	if latest == "" {
		return m, false, nil
	}
	m, err = readReaderManifest(fs, filepath.Join(dir, latest))
	return m, err == nil, err
}

func readReaderManifest(fs vfs.FS, path string) (m ReaderManifest, err error) {
	data, err := vfs.ReadFile(fs, path)
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("publish: readers' manifest %s: %w", path, err)
	}
	return m, nil
}

// Result summarises a RunOnce.
type Result struct {
	Passes      int
	Generations int
	RowsRead    int64
	RowsStaged  int64
	Dropped     int64
	Version     uint64
	// Compacted is the number of small base files the run compacted
	// (one more commit when not 0).
	Compacted int
}

// SweepEvery is how many commits RunOnce lets pass between orphan sweeps
// (New sweeps too): a sweep reads the lists of every live snapshot and
// the kept readers' manifests, which costs more than a small merge.
const SweepEvery = 16

// maintain runs after RunOnce's passes: it compacts (unless disabled) when
// a pass committed, and sweeps orphans every SweepEvery commits.
func (c *Coordinator) maintain(ctx context.Context, res *Result) error {
	if res.Passes > 0 && !c.opts.Compaction.Disabled {
		cr, err := c.Compact(ctx)
		if err != nil {
			return fmt.Errorf("publish: merged to version %d, then compaction failed: %w", res.Version, err)
		}
		res.Version, res.Compacted = cr.Version, cr.FilesIn
	}
	c.sweepAfter(ctx, *res)
	return nil
}

// sweepAfter removes orphans (RemoveOrphans) once SweepEvery commits
// passed since the last sweep. A failed removal is logged, not returned:
// the commits stand and the next run sweeps again.
func (c *Coordinator) sweepAfter(ctx context.Context, res Result) {
	c.table.commitsSinceSweep += res.Passes
	if res.Compacted > 0 {
		c.table.commitsSinceSweep++
	}
	if c.table.commitsSinceSweep < SweepEvery {
		return
	}
	if _, err := c.RemoveOrphans(ctx); err != nil {
		c.log.Warn("removing orphan files failed; the next run retries", "err", err)
	}
}

// maxSchemaReplans bounds how often one RunOnce replans because the
// schema moved on during a pass (ErrSchemaMoved): each schema change of a
// running table costs at most one.
const maxSchemaReplans = 3

// RunOnce does whole merge passes until nothing is left to merge: it first
// repairs a missing readers' manifest of the committed version, then
// plans, stages and commits, replanning after each commit (a plan staged
// in parts by the memory budget needs one pass per part), then maintains
// the table (maintain). Each pass publishes in the table's schema version
// current when it was planned; a pass that meets a newer one
// (ErrSchemaMoved) is planned again, up to maxSchemaReplans times.
func (c *Coordinator) RunOnce(ctx context.Context) (Result, error) {
	var res Result
	st, _, err := c.store.LoadBaseState(ctx)
	if err != nil {
		return res, stateErr(err)
	}
	if err := c.writeReaderManifest(ctx, st, nil); err != nil {
		return res, err
	}
	res.Version = st.Version
	moved := 0
	for {
		plan, err := c.Plan(ctx)
		if err != nil {
			return res, err
		}
		res.Version = plan.BaseVersion
		if plan.Empty() {
			return res, c.maintain(ctx, &res)
		}
		staged, err := c.Stage(ctx, plan)
		if errors.Is(err, ErrSchemaMoved) && moved < maxSchemaReplans {
			// The next plan reads the newer record.
			moved++
			c.log.Info("the schema moved on during the pass; replanning", "schema_version", plan.SchemaVersion, "err", err)
			continue
		}
		if err != nil {
			return res, err
		}
		if err := c.Commit(ctx, staged); err != nil {
			return res, err
		}
		res.Passes++
		for _, p := range staged.Parts {
			res.Generations += len(p.Generations)
		}
		res.RowsRead += staged.RowsRead
		res.RowsStaged += staged.RowsStaged
		res.Dropped += staged.DroppedInBase + staged.DroppedInPass
		res.Version = plan.BaseVersion + 1
	}
}

// putStoreReaderManifest creates the readers' manifest object of version
// v (replacing one that exists: only a migration rewrites one, and the
// lock holder alone writes it).
func (c *Coordinator) putStoreReaderManifest(ctx context.Context, v uint64, data []byte) error {
	key := layout.ReaderManifestKey(c.opts.Table, ReaderManifestName(v))
	err := c.opts.Store.Create(ctx, key, bytes.NewReader(data), int64(len(data)))
	if errors.Is(err, objstore.ErrExists) {
		if err = c.opts.Store.Delete(ctx, key); err == nil {
			err = c.opts.Store.Create(ctx, key, bytes.NewReader(data), int64(len(data)))
		}
	}
	if err != nil {
		return fmt.Errorf("publish: readers' manifest: %w", err)
	}
	return nil
}

// LatestStoreReaderManifest reads the highest-numbered readers' manifest
// of table's base in store (under <table>/base/_manifest/); ok is false
// when there is none.
func LatestStoreReaderManifest(ctx context.Context, store objstore.Store, table string) (m ReaderManifest, ok bool, err error) {
	prefix := layout.ReaderManifestPrefix(table)
	infos, err := store.List(ctx, prefix)
	if err != nil {
		return m, false, err
	}
	latest := ""
	for _, in := range infos {
		n := strings.TrimPrefix(in.Name, prefix)
		if len(n) == len(ReaderManifestName(0)) && strings.HasSuffix(n, ".json") && n > latest {
			latest = n
		}
	}
	if latest == "" {
		return m, false, nil
	}
	m, err = readStoreReaderManifest(ctx, store, prefix+latest)
	return m, err == nil, err
}

func readStoreReaderManifest(ctx context.Context, store objstore.Store, key string) (m ReaderManifest, err error) {
	obj, err := store.Open(ctx, key)
	if err != nil {
		return m, err
	}
	defer obj.Close()
	data, err := fetchObject(obj)
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("publish: readers' manifest %s: %w", objectURL(store, key), err)
	}
	return m, nil
}

// LatestReaderManifest reads the newest readers' manifest of the base,
// wherever it lives: under BaseDir, or with Options.Store in the store
// (LatestStoreReaderManifest). ok is false when there is none.
func (c *Coordinator) LatestReaderManifest(ctx context.Context) (ReaderManifest, bool, error) {
	if c.opts.Store != nil {
		return LatestStoreReaderManifest(ctx, c.opts.Store, c.opts.Table)
	}
	return LatestReaderManifest(c.opts.FS, c.baseDir)
}
