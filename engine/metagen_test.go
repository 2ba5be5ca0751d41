package engine

import (
	"context"
	"testing"

	"github.com/rollwal/rollwal/vfs"
)

// TestMetaGenerationAfterFlushedCommits: a generation of meta alone (an
// append of no rows moved a source offset) flushed
// while an earlier generation waits for a merge commits, and its
// positions are covered: the replay cursor passes them, and the next open
// replays nothing. (Found by the simulation: the commit was refused as an
// invalid manifest, replay cursor beyond the last flushed seq_last, and
// the shard could never flush again.)
func TestMetaGenerationAfterFlushedCommits(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(vfs.NewStrictMem(), tableName(t, ""))
	h := openHost(t, opts)
	s := mustOpen(t, h, "s0")
	if _, err := s.Append(ctx, rows("a", 0, 3), Source{Name: "up", Offset: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, nil, Source{Name: "up", Offset: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Flush(ctx); err != nil {
		t.Fatalf("flush of a generation of meta alone: %v", err)
	}
	m := s.Manifest()
	if len(m.Flushed) != 1 || m.SourceOffsets["up"] != 2 || m.ReplayCursor <= m.Flushed[0].SeqLast {
		t.Fatalf("manifest after the meta generation: %d flushed, offset %d, cursor %d", len(m.Flushed), m.SourceOffsets["up"], m.ReplayCursor)
	}
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	h2 := openHost(t, opts)
	defer h2.Close(ctx)
	s2 := mustOpen(t, h2, "s0")
	if m2 := s2.Manifest(); m2.SourceOffsets["up"] != 2 || len(m2.Flushed) != 1 {
		t.Fatalf("after reopen: %+v", m2)
	}
}
