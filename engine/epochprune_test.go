package engine

import (
	"context"
	"testing"

	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/vfs"
)

// TestCrashLoopKeepsEpochRecordsBounded: a writer that appends after every
// open and dies before its first flush, 40 times over. Every claim
// inherits a WAL tail no commit covers, so its epoch record must stay for
// the replay; once replayFlushClaims of them are waiting, the open commits
// the replayed tail before it serves, and the next claim drops the records
// behind it. No row is lost.
func TestCrashLoopKeepsEpochRecordsBounded(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(vfs.NewStrictMem(), tableName(t, ""))
	opts.NoFlushOnClose = true
	most := 0
	for i := range 40 {
		h := openHost(t, opts)
		s := mustOpen(t, h, "s0")
		if _, err := s.Append(ctx, rows("r", i, 1), Source{}); err != nil {
			t.Fatal(err)
		}
		m := s.Manifest()
		if n, bound := len(m.Epochs), shardmeta.MaxEpochRecords(len(m.Flushed)); n > bound {
			t.Fatalf("open %d: %d epoch records with %d generations flushed, more than %d: %+v", i, n, len(m.Flushed), bound, m.Epochs)
		}
		if n := m.UncoveredEpochs(); n > replayFlushClaims {
			t.Fatalf("open %d: %d claims above the replay cursor, more than %d", i, n, replayFlushClaims)
		}
		most = max(most, len(m.Epochs))
		if err := h.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	h := openHost(t, opts)
	defer h.Close(ctx)
	s := mustOpen(t, h, "s0")
	if _, err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, g := range s.Manifest().Flushed {
		n += g.Rows
	}
	if n != 40 {
		t.Fatalf("%d rows committed, want the 40 appended", n)
	}
	t.Logf("at most %d epoch records over 41 claims; %d now", most, len(s.Manifest().Epochs))
}

// TestCrashLoopOfOffsetsKeepsEpochRecordsBounded: the same crash loop
// where each life only moves a source offset (a batch of no rows). The
// replay then yields no rows but a memtable with meta, which must be
// committed like rows once replayFlushClaims claims wait, or every life
// adds an epoch record for good (seen in the simulation: 18 records with
// no generation flushed).
func TestCrashLoopOfOffsetsKeepsEpochRecordsBounded(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(vfs.NewStrictMem(), tableName(t, ""))
	opts.NoFlushOnClose = true
	for i := range 40 {
		h := openHost(t, opts)
		s := mustOpen(t, h, "s0")
		if _, err := s.Append(ctx, nil, Source{Name: "upstream", Offset: int64(i + 1)}); err != nil {
			t.Fatal(err)
		}
		m := s.Manifest()
		if n, bound := len(m.Epochs), shardmeta.MaxEpochRecords(len(m.Flushed)); n > bound {
			t.Fatalf("open %d: %d epoch records with %d generations flushed, more than %d: %+v", i, n, len(m.Flushed), bound, m.Epochs)
		}
		if err := h.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	h := openHost(t, opts)
	defer h.Close(ctx)
	s := mustOpen(t, h, "s0")
	if _, err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.Manifest().SourceOffsets["upstream"]; got != 40 {
		t.Fatalf("source offset %d committed, want 40", got)
	}
}
