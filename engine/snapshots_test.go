package engine

import (
	"context"
	"testing"

	"github.com/rollwal/rollwal/internal/vfs"
	"github.com/rollwal/rollwal/snapshot"
)

// TestSnapshotsFollowCommits: after each manifest commit the writer persists
// the highest offset per source that committed generations cover; a persist
// a newer writer already overtook is refused and logged, not fatal; a
// reopened shard exposes the stored resume points.
func TestSnapshotsFollowCommits(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(vfs.NewStrictMem(), tableName(t, ""))
	store, err := snapshot.NewEtcd(etcdClient, "snapshots/"+opts.Table, snapshot.EtcdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	opts.Snapshots = store
	key := snapshot.Key{Table: opts.Table, Shard: "s0", Source: "p0"}
	h := openHost(t, opts)
	s := mustOpen(t, h, "s0")
	offset := func() int64 {
		t.Helper()
		snap, err := store.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return snap.Offset
	}
	if _, err := s.Append(ctx, rows("s", 0, 5), Source{Name: "p0", Offset: 41}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Get(ctx, key); err == nil {
		t.Fatal("an offset was persisted before any commit covered it")
	}
	if _, err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := offset(); got != 41 {
		t.Fatalf("offset after the first commit = %d, want 41", got)
	}
	// A newer writer (in another process, say) moved the snapshot on.
	if err := store.Persist(ctx, key, snapshot.Snapshot{Offset: 100}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, rows("s", 5, 5), Source{Name: "p0", Offset: 50}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Flush(ctx); err != nil {
		t.Fatalf("a refused snapshot persist failed the flush: %v", err)
	}
	if got := offset(); got != 100 {
		t.Fatalf("offset = %d after a stale persist, want 100 kept", got)
	}
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	h = openHost(t, opts)
	defer h.Close(ctx)
	s = mustOpen(t, h, "s0")
	if got := s.Snapshots()["p0"].Offset; got != 100 {
		t.Fatalf("reopened shard exposes offset %d for p0, want 100", got)
	}
}
