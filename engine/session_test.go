package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rollwal/rollwal/vfs"
)

func session(id string, seq uint64) AppendOptions {
	return AppendOptions{Producer: Producer{ID: id, Seq: seq}}
}

// mustAppendWith appends and checks how many rows were stored.
func mustAppendWith(t *testing.T, s *Shard, prefix string, from, n int, o AppendOptions, stored int) Result {
	t.Helper()
	res, err := s.AppendWith(context.Background(), rows(prefix, from, n), o)
	if err != nil {
		t.Fatalf("append %s[%d,%d) %+v: %v", prefix, from, from+n, o, err)
	}
	if res.Stored != stored || res.Stored+res.Duplicates != n {
		t.Fatalf("append %s[%d,%d) %+v: stored %d, duplicates %d; want stored %d of %d", prefix, from, from+n, o, res.Stored, res.Duplicates, stored, n)
	}
	return res
}

// reopenAfterCrash takes the crash clone of mem (what survives a power
// loss), releases the dead writer's claim as a lease expiry would, and
// opens the shard on a new host over the clone.
func reopenAfterCrash(t *testing.T, mem *vfs.MemFS, dead *Host, opts Options) (*vfs.MemFS, *Host, *Shard) {
	t.Helper()
	clone := mem.CrashClone()
	dead.Close(context.Background()) // closes over mem, not over the clone
	opts.FS = clone
	h := openHost(t, opts)
	t.Cleanup(func() { h.Close(context.Background()) })
	return clone, h, mustOpen(t, h, "s0")
}

// TestProducerRetryAtAnyPointStoresOnce: one batch of a producer session,
// retried while still in the memtable, after a flush, after a crash and
// replay, and after a crash once flushed: every retry answers all
// duplicates and stores nothing; the rows are committed exactly once.
func TestProducerRetryAtAnyPointStoresOnce(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewStrictMem()
	opts := testOptions(mem, tableName(t, ""))
	opts.NoFlushOnClose = true
	h := openHost(t, opts)
	s := mustOpen(t, h, "s0")

	mustAppendWith(t, s, "a", 0, 5, session("p1", 0), 5)
	mustAppendWith(t, s, "a", 0, 5, session("p1", 0), 0) // in the memtable
	if _, err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mustAppendWith(t, s, "a", 0, 5, session("p1", 0), 0) // flushed
	mustAppendWith(t, s, "b", 0, 3, session("p1", 5), 3) // in the WAL only
	mem, h, s = reopenAfterCrash(t, mem, h, opts)
	if next, known := s.ProducerNextSeq("p1"); !known || next != 8 {
		t.Fatalf("after replay: next seq %d (known %v), want 8", next, known)
	}
	mustAppendWith(t, s, "a", 0, 5, session("p1", 0), 0) // committed before the crash
	mustAppendWith(t, s, "b", 0, 3, session("p1", 5), 0) // replayed
	if _, err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	_, _, s = reopenAfterCrash(t, mem, h, opts)
	mustAppendWith(t, s, "b", 0, 3, session("p1", 5), 0) // committed by the replaying writer
	mustAppendWith(t, s, "c", 0, 2, session("p1", 8), 2)
	if _, err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got, m := committed(t, s.opts.FS, opts, "s0")
	if len(got) != 10 {
		t.Fatalf("committed %d distinct ids, want 10: %v", len(got), got)
	}
	for id, n := range got {
		if n != 1 {
			t.Errorf("id %s committed %d times", id, n)
		}
	}
	if m.ProducerState == nil || m.ProducerState.Producers != 1 {
		t.Fatalf("manifest producer state %+v, want one producer", m.ProducerState)
	}
}

// TestOutOfOrderBatchIsRefusedInEngine: a batch beyond the next expected
// sequence is refused, naming it, and stores nothing; so is a batch that
// straddles it, and one of an unknown producer that does not start at 0.
func TestOutOfOrderBatchIsRefusedInEngine(t *testing.T) {
	opts := testOptions(vfs.NewStrictMem(), tableName(t, ""))
	h := openHost(t, opts)
	defer h.Close(context.Background())
	s := mustOpen(t, h, "s0")
	ctx := context.Background()
	refused := func(o AppendOptions, n int, expected uint64, unknown bool) {
		t.Helper()
		_, err := s.AppendWith(ctx, rows("x", int(o.Producer.Seq), n), o)
		var se *SequenceError
		if !errors.As(err, &se) || !errors.Is(err, ErrSequence) || se.Expected != expected || se.Unknown != unknown {
			t.Fatalf("append %+v: %v; want a SequenceError expecting %d (unknown %v)", o, err, expected, unknown)
		}
	}
	refused(session("p", 4), 2, 0, true)
	mustAppendWith(t, s, "x", 0, 4, session("p", 0), 4)
	refused(session("p", 6), 2, 4, false)
	refused(session("p", 2), 4, 4, false) // straddles 4
	mustAppendWith(t, s, "x", 4, 2, session("p", 4), 2)
	if got := memtableIDs(s); len(got) != 6 {
		t.Fatalf("memtable holds %d ids, want 6", len(got))
	}
}

// TestConcurrentBatchesOfOneProducer: two batches of one producer race;
// whichever arrives first out of order is refused with the expected
// sequence and, retried after the earlier one, lands. Nothing is lost or
// stored twice.
func TestConcurrentBatchesOfOneProducer(t *testing.T) {
	opts := testOptions(vfs.NewStrictMem(), tableName(t, ""))
	h := openHost(t, opts)
	defer h.Close(context.Background())
	s := mustOpen(t, h, "s0")
	ctx := context.Background()
	for round := range 50 {
		base := uint64(round * 20)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := range 2 {
			wg.Go(func() {
				o := session("p", base+uint64(10*i))
				_, errs[i] = s.AppendWith(ctx, rows("r", int(base)+10*i, 10), o)
			})
		}
		wg.Wait()
		if errs[0] != nil {
			t.Fatalf("round %d: the earlier batch failed: %v", round, errs[0])
		}
		if errs[1] != nil {
			var se *SequenceError
			if !errors.As(errs[1], &se) || se.Expected != base {
				t.Fatalf("round %d: the later batch: %v; want a SequenceError expecting %d", round, errs[1], base)
			}
			mustAppendWith(t, s, "r", int(base)+10, 10, session("p", base+10), 10)
		}
	}
	got := memtableIDs(s)
	if len(got) != 1000 {
		t.Fatalf("%d ids stored, want 1000", len(got))
	}
}

// TestProducerExpiryAndLimit: a shard tracks at most MaxProducers; a new
// producer beyond them is refused until one has been idle for
// ProducerExpiry, and an expired producer's next batch is answered as
// unknown. The committed state forgets expired producers as well.
func TestProducerExpiryAndLimit(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	opts := testOptions(vfs.NewStrictMem(), tableName(t, ""))
	opts.Now, opts.MaxProducers, opts.ProducerExpiry = clock, 2, time.Hour
	h := openHost(t, opts)
	defer h.Close(context.Background())
	s := mustOpen(t, h, "s0")
	ctx := context.Background()
	mustAppendWith(t, s, "a", 0, 1, session("a", 0), 1)
	advance(30 * time.Minute)
	mustAppendWith(t, s, "b", 0, 1, session("b", 0), 1)
	if _, err := s.AppendWith(ctx, rows("c", 0, 1), session("c", 0)); !errors.Is(err, ErrTooManyProducers) {
		t.Fatalf("a third producer: %v, want ErrTooManyProducers", err)
	}
	advance(45 * time.Minute) // a is idle 75 min, b 45 min
	mustAppendWith(t, s, "c", 0, 1, session("c", 0), 1)
	_, err := s.AppendWith(ctx, rows("a", 1, 1), session("a", 1))
	var se *SequenceError
	if !errors.As(err, &se) || !se.Unknown {
		t.Fatalf("the expired producer's next batch: %v, want an unknown-producer SequenceError", err)
	}
	if _, err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if ps := s.Manifest().ProducerState; ps == nil || ps.Producers != 2 {
		t.Fatalf("committed producer state %+v, want b and c", ps)
	}
}

// TestOffsetsOfReplayedAndDuplicateBatchesCommit: source offsets travel in
// the WAL, so a crash before the flush loses none; and a batch whose rows
// were all duplicates still moves its source's offset with the next
// commit.
func TestOffsetsOfReplayedAndDuplicateBatchesCommit(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewStrictMem()
	opts := testOptions(mem, tableName(t, ""))
	opts.NoFlushOnClose = true
	h := openHost(t, opts)
	s := mustOpen(t, h, "s0")
	if _, err := s.Append(ctx, rows("o", 0, 4), Source{Name: "stream-a", Offset: 40}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, rows("o", 0, 4), Source{Name: "stream-b", Offset: 7}); err != nil { // all duplicates
		t.Fatal(err)
	}
	_, _, s = reopenAfterCrash(t, mem, h, opts)
	if _, err := s.Append(ctx, rows("o", 0, 4), Source{Name: "stream-a", Offset: 44}); err != nil { // duplicates again
		t.Fatal(err)
	}
	if _, err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got := s.Manifest().SourceOffsets
	if got["stream-a"] != 44 || got["stream-b"] != 7 {
		t.Fatalf("committed offsets %v, want stream-a 44 and stream-b 7", got)
	}
}

// TestReplayCursorCoversWholeRecords: a generation's seq range covers
// every WAL position its records took, rows or not, so the replay cursor
// never stops short of (or inside) a record that committed: here a record
// of meta alone (every row a duplicate) ends the memtable, and after the
// flush the cursor is past it, so no later replay reads it again.
func TestReplayCursorCoversWholeRecords(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(vfs.NewStrictMem(), tableName(t, ""))
	h := openHost(t, opts)
	defer h.Close(ctx)
	s := mustOpen(t, h, "s0")
	res, err := s.Append(ctx, rows("c", 0, 3), Source{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, rows("c", 0, 3), Source{Name: "stream", Offset: 9}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	m := s.Manifest()
	if want := res.LastSeq + 1; m.ReplayCursor != want || m.Flushed[0].SeqLast != want {
		t.Fatalf("replay cursor %d, generation seq_last %d; want both %d (the position of the meta-only record)",
			m.ReplayCursor, m.Flushed[0].SeqLast, want)
	}
	if m.SourceOffsets["stream"] != 9 {
		t.Fatalf("committed offsets %v", m.SourceOffsets)
	}
}

// TestSourceOffsetRange: an offset outside 0..MaxSourceOffset is refused
// as invalid and writes nothing: a negative one ("latest") would commit
// nothing useful, one at the top of int64 would pin its source for good.
func TestSourceOffsetRange(t *testing.T) {
	opts := testOptions(vfs.NewStrictMem(), tableName(t, ""))
	h := openHost(t, opts)
	defer h.Close(context.Background())
	s := mustOpen(t, h, "s0")
	for _, off := range []int64{-5, MaxSourceOffset + 1} {
		if _, err := s.Append(context.Background(), rows("o", 0, 1), Source{Name: "a", Offset: off}); !errors.Is(err, ErrInvalidAppend) {
			t.Fatalf("offset %d: %v, want ErrInvalidAppend", off, err)
		}
	}
	if len(memtableIDs(s)) != 0 {
		t.Fatal("a refused append stored rows")
	}
	if _, err := s.Append(context.Background(), rows("o", 0, 1), Source{Name: "a", Offset: MaxSourceOffset}); err != nil {
		t.Fatalf("the largest offset: %v", err)
	}
}
