package engine

import (
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/rollwal/rollwal/internal/vfs"
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
