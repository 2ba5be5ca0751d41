package engine

import (
	"context"
	"errors"
	"path"
	"strings"
	"syscall"
	"testing"

	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/publish"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/vfs"
)

// TestFsyncFailureStopsWriter: a failed WAL fsync is never retried and
// never acknowledged; the shard stops, and what was acknowledged before
// survives a crash.
func TestFsyncFailureStopsWriter(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewStrictMem()
	inj := &vfs.Injector{}
	opts := testOptions(vfs.Inject(mem, inj), tableName(t, ""))
	h := openHost(t, opts)
	s := mustOpen(t, h, "s0")
	if _, err := s.Append(ctx, rows("ok", 0, 10), Source{}); err != nil {
		t.Fatal(err)
	}
	syncs := inj.Count(vfs.OpSync)
	inj.FailAt(syncs+1, vfs.OpSync, syscall.EIO)
	if _, err := s.Append(ctx, rows("lost", 0, 10), Source{}); !errors.Is(err, ErrStopped) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("append over a failed fsync: %v; want ErrStopped wrapping EIO", err)
	}
	syncsAfterFailure := inj.Count(vfs.OpSync)
	if _, err := s.Append(ctx, rows("later", 0, 1), Source{}); !errors.Is(err, ErrStopped) {
		t.Fatalf("append after the failure: %v; want ErrStopped", err)
	}
	if _, err := s.Flush(ctx); err == nil {
		t.Fatal("flush after the failure succeeded")
	}
	if n := inj.Count(vfs.OpSync); n != syncsAfterFailure {
		t.Fatalf("%d more fsyncs after the failure: the writer retried", n-syncsAfterFailure)
	}
	h.Close(ctx)

	opts.FS = mem.CrashClone()
	h = openHost(t, opts)
	defer h.Close(ctx)
	s = mustOpen(t, h, "s0")
	got := memtableIDs(s)
	for _, r := range rows("ok", 0, 10) {
		if got[r["id"].(string)] != 1 {
			t.Fatalf("acknowledged id %s lost after the fsync failure", r["id"])
		}
	}
}

// TestNoSpace: ENOSPC gives a clear error and loses nothing acknowledged.
func TestNoSpace(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewStrictMem()
	inj := &vfs.Injector{}
	opts := testOptions(vfs.Inject(mem, inj), tableName(t, ""))
	h := openHost(t, opts)
	s := mustOpen(t, h, "s0")
	acked := map[string]bool{}
	inj.NoSpaceAfter(64 << 10)
	var err error
	for i := 0; err == nil && i < 10000; i++ {
		batch := rows("n", i*10, 10)
		if _, err = s.Append(ctx, batch, Source{}); err == nil {
			for _, r := range batch {
				acked[r["id"].(string)] = true
			}
		}
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("append on a full disk: %v; want an error wrapping ENOSPC", err)
	}
	if len(acked) == 0 {
		t.Fatal("the disk filled before any append: the test proves nothing")
	}
	h.Close(ctx)

	opts.FS = mem.CrashClone()
	h = openHost(t, opts)
	defer h.Close(ctx)
	s = mustOpen(t, h, "s0")
	inGen, _ := committed(t, opts.FS, opts, "s0")
	inMem := memtableIDs(s)
	for id := range acked {
		if inGen[id]+inMem[id] != 1 {
			t.Fatalf("acknowledged id %s: %d in generations, %d in memtable", id, inGen[id], inMem[id])
		}
	}
}

// TestDiskFullRecovers: a full disk is not fatal. A generation that cannot
// be written, and a WAL that cannot reserve its next step or create its
// next segment, make the shard refuse appends with ErrNoSpace (a kind of
// backpressure) and say "disk full" in Status; once space is back the same
// shard, never reopened, takes appends and flushes again by itself, and
// every acknowledged row is in committed generations, also after a crash.
func TestDiskFullRecovers(t *testing.T) {
	for _, c := range []struct {
		name                 string
		segment, preallocate int64
	}{
		{"reserve-step", 256 << 10, 64 << 10},  // the WAL's next step within a segment
		{"segment-create", 64 << 10, 64 << 10}, // the WAL's next segment
	} {
		t.Run(c.name, func(t *testing.T) {
			mem := vfs.NewStrictMem()
			inj := &vfs.Injector{}
			opts := testOptions(vfs.Inject(mem, inj), tableName(t, ""))
			opts.WALSegmentSize, opts.WALPreallocate = c.segment, c.preallocate
			diskFullRecovers(t, mem, inj, opts)
		})
	}
}

func diskFullRecovers(t *testing.T, mem *vfs.MemFS, inj *vfs.Injector, opts Options) {
	ctx := context.Background()
	h := openHost(t, opts)
	s := mustOpen(t, h, "s0")
	epoch := s.Epoch()
	acked := map[string]bool{}
	ack := func(batch []schema.Row, res Result) {
		if res.Stored+res.Duplicates != len(batch) {
			t.Fatalf("append of %d rows acknowledged %d", len(batch), res.Stored+res.Duplicates)
		}
		for _, r := range batch {
			acked[r["id"].(string)] = true
		}
	}
	appendOK := func(batch []schema.Row) {
		t.Helper()
		res, err := s.Append(ctx, batch, Source{})
		if err != nil {
			t.Fatal(err)
		}
		ack(batch, res)
	}

	// A generation file cannot be written.
	appendOK(rows("gen", 0, 20))
	inj.NoSpaceAfter(0)
	if _, err := s.Flush(ctx); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("flush on a full disk: %v; want ENOSPC", err)
	}
	expectDiskFull(t, s)
	inj.NoSpaceAfter(1 << 40)
	waitFor(t, "the flusher to commit the generation the full disk refused", func() bool {
		return len(s.Manifest().Flushed) == 1 && s.Status().Degraded == ""
	})

	// The WAL cannot reserve space. Appends go on into the space it
	// reserved already, then meet the full disk.
	inj.NoSpaceAfter(0)
	var queued []schema.Row // met the full disk on its way to the WAL
	walAcked := 0
	for i := 0; queued == nil && i < 10000; i++ {
		batch := rows("wal", i*10, 10)
		res, err := s.Append(ctx, batch, Source{})
		switch {
		case err == nil:
			ack(batch, res)
			walAcked++
		case errors.Is(err, ErrUnknownOutcome) && errors.Is(err, ErrNoSpace):
			queued = batch
		case errors.Is(err, ErrNoSpace):
			i = 10000 // refused before the WAL: done filling
		default:
			t.Fatalf("append on a full disk: %v; want ErrNoSpace", err)
		}
	}
	if walAcked == 0 {
		t.Fatal("no append fit the WAL's reserved space: the test proves nothing about reservation")
	}
	expectDiskFull(t, s)
	inj.NoSpaceAfter(1 << 40)
	waitFor(t, "the shard to take appends again", func() bool { return s.Status().Degraded == "" })
	if queued != nil {
		// Queued on the full disk: now durable, a retry is acknowledged
		// as duplicates.
		res, err := s.Append(ctx, queued, Source{})
		if err != nil || res.Duplicates != len(queued) {
			t.Fatalf("retry of the batch queued on the full disk: %+v, %v; want all duplicates", res, err)
		}
		ack(queued, res)
	}
	appendOK(rows("after", 0, 20))
	if _, err := s.Flush(ctx); err != nil {
		t.Fatalf("flush once space is back: %v", err)
	}
	if s.Epoch() != epoch || s.Status().Stopped != "" {
		t.Fatalf("the shard was reopened (epoch %d → %d) or stopped (%q)", epoch, s.Epoch(), s.Status().Stopped)
	}
	checkCommitted(t, opts, acked, nil)
	h.Close(ctx)

	opts.FS = mem.CrashClone()
	h = openHost(t, opts)
	defer h.Close(ctx)
	s = mustOpen(t, h, "s0")
	checkCommitted(t, opts, acked, s)
	if _, err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	checkMergedOnce(t, opts, acked)
}

// checkMergedOnce merges the table's committed generations into its base
// and checks that the base holds every acknowledged id once and nothing
// refused.
func checkMergedOnce(t *testing.T, opts Options, acked map[string]bool) {
	t.Helper()
	ctx := context.Background()
	c, err := publish.New(ctx, publish.Options{Etcd: opts.Etcd, Table: opts.Table, DataDir: opts.DataDir, FS: opts.FS,
		RequestTimeout: opts.RequestTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.RunOnce(ctx); err != nil {
		t.Fatalf("merge: %v", err)
	}
	m, ok, err := publish.LatestReaderManifest(opts.FS, c.BaseDir())
	if err != nil || !ok {
		t.Fatalf("readers' manifest: ok %v, %v", ok, err)
	}
	inBase := map[string]int{}
	for _, f := range m.Files {
		_, d, err := generation.Read(opts.FS, path.Join(c.BaseDir(), f.Path), schema.Rollout())
		if err != nil {
			t.Fatalf("base file %s: %v", f.Path, err)
		}
		for _, id := range d.Rows.IDs {
			inBase[id]++
		}
	}
	for id := range acked {
		if inBase[id] != 1 {
			t.Fatalf("acknowledged id %s is in the base %d times", id, inBase[id])
		}
	}
	for id, n := range inBase {
		if !acked[id] {
			t.Fatalf("id %s is in the base (%d times) but was never acknowledged", id, n)
		}
	}
}

// expectDiskFull checks that s refuses appends for a full disk, writes
// nothing of them and says so in Status without being stopped.
func expectDiskFull(t *testing.T, s *Shard) {
	t.Helper()
	st := s.Status()
	if !strings.HasPrefix(st.Degraded, "disk full: ") || st.Stopped != "" {
		t.Fatalf("status on a full disk: degraded %q, stopped %q; want degraded naming a full disk, not stopped", st.Degraded, st.Stopped)
	}
	tail := s.w.Tail()
	_, err := s.Append(context.Background(), rows("refused", 0, 5), Source{})
	if !errors.Is(err, ErrNoSpace) || !errors.Is(err, ErrBackpressure) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("append on a full disk: %v; want ErrNoSpace, ErrBackpressure and ENOSPC", err)
	}
	if s.w.Tail() != tail {
		t.Fatal("an append refused for a full disk reached the WAL")
	}
}

// checkCommitted checks that every id of acked is once in the committed
// generations plus open's memtables (nil: none), and no refused one is.
func checkCommitted(t *testing.T, opts Options, acked map[string]bool, open *Shard) {
	t.Helper()
	inGen, _ := committed(t, opts.FS, opts, "s0")
	inMem := map[string]int{}
	if open != nil {
		inMem = memtableIDs(open)
	}
	for id := range acked {
		if inGen[id]+inMem[id] != 1 {
			t.Fatalf("acknowledged id %s: %d in committed generations, %d in the memtable", id, inGen[id], inMem[id])
		}
	}
	for id := range inGen {
		if strings.HasPrefix(id, "refused-") {
			t.Fatalf("id %s of an append refused for a full disk was stored", id)
		}
	}
}
