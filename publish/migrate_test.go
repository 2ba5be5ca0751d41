package publish

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
)

// legacyBase writes what the previous version's merge left of oneShard's
// generations: one base file per generation named without its checksum,
// base/state in format 1 listing the files (with their index checksums),
// the watermark and cutoff at the last generation, and the shard drained.
func (e *env) legacyBase() *shardmeta.BaseState {
	e.t.Helper()
	m, err := engine.LoadManifest(e.ctx, etcdClient, "rollwal", e.table, "s0")
	if err != nil {
		e.t.Fatal(err)
	}
	dir := filepath.Join(e.baseDir(), "data", "s0")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		e.t.Fatal(err)
	}
	st := shardmeta.NewBaseState()
	st.Version = 1
	for _, g := range m.Flushed {
		meta, d, err := generation.Read(e.fs, filepath.Join(e.dir, e.table, "shards", "s0", "gen", g.File), schema.Rollout())
		if err != nil {
			e.t.Fatal(err)
		}
		f, err := generation.Write(e.ctx, generation.Options{FS: e.fs}, dir, schema.Rollout(), meta, d)
		if err != nil {
			e.t.Fatal(err)
		}
		crc := f.IndexCRC
		st.Files = append(st.Files, shardmeta.BaseFile{Path: "data/s0/" + f.Name, Rows: f.Meta.Rows, Bytes: f.Size,
			Shard: "s0", SeqFirst: f.Meta.SeqFirst, SeqLast: f.Meta.SeqLast, IndexCRC: &crc})
	}
	last := m.Flushed[len(m.Flushed)-1].Number
	st.Shards["s0"] = shardmeta.ShardMergeState{Watermark: last, ObservedEpoch: &m.WriterEpoch, Cutoff: &last}
	e.putState(st)
	e.drain("s0", false)
	// The previous version's readers' manifest (no iceberg_metadata).
	rm := ReaderManifest{Version: st.Version}
	for _, f := range st.Files {
		rm.Files = append(rm.Files, ReaderManifestFile{Path: f.Path, Rows: f.Rows})
		rm.Rows += f.Rows
	}
	data, err := json.Marshal(rm)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(e.baseDir(), "_manifest"), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.baseDir(), "_manifest", ReaderManifestName(st.Version)), data, 0o644); err != nil {
		e.t.Fatal(err)
	}
	return st
}

// TestMigrateLegacyBase: a base whose state still lists its files (written
// by the version before the Iceberg table) becomes the table's first
// snapshot, once, at the state's own version; the list leaves the state;
// later merges append to it and every reader sees each row once.
func TestMigrateLegacyBase(t *testing.T) {
	e := newEnv(t)
	oneShard(e)
	legacy := e.legacyBase()
	c := e.coordinator()
	st, _ := e.state()
	if st.Version != legacy.Version || len(st.Files) != 0 || st.Shards["s0"].Watermark != legacy.Shards["s0"].Watermark {
		t.Fatalf("state after the migration: %+v", st)
	}
	files := e.baseFiles()
	if len(files) != len(legacy.Files) {
		t.Fatalf("the table holds %d files, the legacy state listed %d", len(files), len(legacy.Files))
	}
	e.wantAllIDs()
	if m, _, err := LatestReaderManifest(e.fs, e.baseDir()); err != nil || m.IcebergMetadata != e.baseTable().MetadataLocation() {
		t.Fatalf("the readers' manifest of the migrated version names metadata %q (%v), want the table's %s", m.IcebergMetadata, err, e.baseTable().MetadataLocation())
	}
	c.Close()
	// Once: a second coordinator finds nothing to migrate.
	c = e.coordinator()
	if got := e.baseTable().Metadata().Snapshots(); len(got) != 1 {
		t.Fatalf("%d snapshots after a second New, want the migration's 1", len(got))
	}
	h := e.host(false)
	s := e.open(h, "s0")
	e.appendRows(s, "b", 0, 7)
	e.flush(s)
	if err := h.Close(e.ctx); err != nil {
		t.Fatal(err)
	}
	if r := e.runOnce(c); r.RowsStaged != 7 || r.Version != 2 {
		t.Fatalf("merge after the migration: %+v, want 7 rows at version 2", r)
	}
	e.wantAllIDs()
}

// TestMigrationFailsClosed: a legacy state naming a file that is missing,
// of another size, or whose index fails its checksum is not migrated:
// New fails naming the file, and neither the state nor the table changes.
func TestMigrationFailsClosed(t *testing.T) {
	for name, damage := range map[string]func(t *testing.T, path string, st *shardmeta.BaseState){
		"missing": func(t *testing.T, path string, _ *shardmeta.BaseState) {
			if err := os.Rename(path, path+".away"); err != nil {
				t.Fatal(err)
			}
		},
		"other size": func(t *testing.T, _ string, st *shardmeta.BaseState) { st.Files[0].Bytes++ },
		"index checksum": func(t *testing.T, _ string, st *shardmeta.BaseState) {
			bad := *st.Files[0].IndexCRC ^ 1
			st.Files[0].IndexCRC = &bad
		},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			oneShard(e)
			legacy := e.legacyBase()
			path := filepath.Join(e.baseDir(), filepath.FromSlash(legacy.Files[0].Path))
			damaged := legacy.Clone()
			damage(t, path, damaged)
			e.putState(damaged)
			_, before := e.state()
			_, err := New(e.ctx, Options{Etcd: etcdClient, Prefix: "rollwal", Table: e.table, DataDir: e.dir, FS: e.fs})
			if !errors.Is(err, ErrInvalidState) || !strings.Contains(err.Error(), legacy.Files[0].Path) {
				t.Fatalf("New over a damaged legacy base: %v, want ErrInvalidState naming %s", err, legacy.Files[0].Path)
			}
			if _, after := e.state(); after != before {
				t.Fatalf("the state moved from revision %d to %d", before, after)
			}
			if tbl := e.baseTable(); tbl.CurrentSnapshot() != nil {
				t.Fatalf("the table has a snapshot: %s", tbl.MetadataLocation())
			}
			// Repaired, it migrates (and the cleanup's check reads it).
			_ = os.Rename(path+".away", path)
			e.putState(legacy)
			e.coordinator()
			e.wantAllIDs()
		})
	}
}
