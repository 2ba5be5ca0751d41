package engine

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/vfs"
)

// setWatermark stands in for a merge coordinator's commit: the base state
// says generations of shard up to w are merged.
func setWatermark(t *testing.T, opts Options, shard string, w uint64) {
	t.Helper()
	b := shardmeta.NewBaseState()
	epoch, cutoff := uint64(1), w
	b.Shards[shard] = shardmeta.ShardMergeState{Watermark: w, ObservedEpoch: &epoch, Cutoff: &cutoff}
	data, err := b.Encode()
	if err != nil {
		t.Fatal(err)
	}
	key := shardmeta.Keys{Prefix: "rollwal", Table: opts.Table}.BaseState()
	if _, err := etcdClient.Put(context.Background(), key, string(data)); err != nil {
		t.Fatal(err)
	}
}

// TestDrainAfterWatermark: generations leave the shard manifest only once
// the base watermark covers them, with the next flush or an explicit Drain,
// and their files are deleted after that commit, never before.
func TestDrainAfterWatermark(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewStrictMem()
	opts := testOptions(fs, tableName(t, ""))
	h := openHost(t, opts)
	defer h.Close(ctx)
	s := mustOpen(t, h, "s0")
	for i := range 3 {
		if _, err := s.Append(ctx, rows("g", i*10, 10), Source{}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	files := func() []string {
		var out []string
		for _, g := range s.Manifest().Flushed {
			out = append(out, g.File)
		}
		return out
	}
	before := files()
	if n, err := s.Drain(ctx); err != nil || n != 0 {
		t.Fatalf("drain with no watermark: %d, %v", n, err)
	}
	setWatermark(t, opts, "s0", 1)
	if _, err := s.Append(ctx, rows("g", 30, 10), Source{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.Manifest().Flushed; len(got) != 3 || got[0].Number != 2 {
		t.Fatalf("after a flush with watermark 1: generations %+v; want 2, 3, 4", got)
	}
	if _, err := fs.Stat(filepath.Join(s.GenerationDir(), before[0])); err == nil {
		t.Fatal("the drained generation's file is still there")
	}
	setWatermark(t, opts, "s0", 3)
	// The flusher's tick may drain first: either way two generations go.
	if n, err := s.Drain(ctx); err != nil || n != 0 && n != 2 {
		t.Fatalf("drain with watermark 3: %d, %v; want 2 (or 0 after a background drain)", n, err)
	}
	for _, f := range before[1:] {
		if _, err := fs.Stat(filepath.Join(s.GenerationDir(), f)); err == nil {
			t.Fatalf("drained file %s is still there", f)
		}
	}
	if got := s.Manifest().Flushed; len(got) != 1 || got[0].Number != 4 {
		t.Fatalf("generations %+v; want only 4", got)
	}
}
