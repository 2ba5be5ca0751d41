package engine

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/rollwal/rollwal/snapshot"
	"github.com/rollwal/rollwal/vfs"
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

// failingStore fails the first n persists, as a snapshot store that is
// down would, then passes them to the real store.
type failingStore struct {
	snapshot.Store
	mu   sync.Mutex
	left int
}

func (f *failingStore) Persist(ctx context.Context, k snapshot.Key, v snapshot.Snapshot) error {
	f.mu.Lock()
	fail := f.left > 0
	f.left--
	f.mu.Unlock()
	if fail {
		return errors.New("injected: snapshot store unavailable")
	}
	return f.Store.Persist(ctx, k, v)
}

// TestFailedPersistIsRetried: a persist that failed after a commit is
// retried in the background, with nothing else changing the offset, until
// it lands; and a writer that died between its commit and its persist has
// its successor persist the committed offset.
func TestFailedPersistIsRetried(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(vfs.NewStrictMem(), tableName(t, ""))
	real, err := snapshot.NewEtcd(etcdClient, "snapshots/"+opts.Table, snapshot.EtcdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	store := &failingStore{Store: real, left: 3}
	opts.Snapshots = store
	h := openHost(t, opts)
	defer h.Close(ctx)
	s := mustOpen(t, h, "s0")
	if _, err := s.Append(ctx, rows("p", 0, 3), Source{Name: "stream-a", Offset: 30}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	key := snapshot.Key{Table: opts.Table, Shard: "s0", Source: "stream-a"}
	waitFor(t, "the failed persist to be retried and land", func() bool {
		got, err := real.Get(ctx, key)
		return err == nil && got.Offset == 30
	})
}
