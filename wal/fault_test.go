package wal

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"

	"github.com/rollwal/rollwal/internal/vfs"
)

// durableCheck opens what a crash of mem would leave with a new epoch and
// checks that every acknowledged position is there with its payload
// (payloadFor(first, 1)).
func durableCheck(t *testing.T, mem *vfs.MemFS, acked []uint64, epoch uint64) {
	t.Helper()
	w := open(t, mem.CrashClone(), epoch)
	defer mustClose(t, w)
	found := map[uint64][]byte{}
	err := w.Replay(0, w.Tail(), func(h Header, p []byte) error {
		found[h.FirstPos] = bytes.Clone(p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, pos := range acked {
		if !bytes.Equal(found[pos], payloadFor(pos, 1)) {
			t.Fatalf("acknowledged position %d lost or changed after a crash (tail %d)", pos, w.Tail())
		}
	}
}

// A failed fsync stops the WAL for good: the waiter, every later call and
// Close report it, and the fsync is never retried.
func TestFsyncFailureIsFailStop(t *testing.T) {
	mem := vfs.NewStrictMem()
	inj := &vfs.Injector{}
	w := open(t, vfs.Inject(mem, inj), 1)
	acked := []uint64{appendSynced(t, w, 1, 1, payloadFor(1, 1))}

	inj.FailAt(inj.Count(vfs.OpSync)+1, vfs.OpSync, syscall.EIO)
	first, err := w.Append(1, 1, payloadFor(2, 1))
	if err != nil {
		t.Fatal(err)
	}
	err = w.SyncTo(first)
	if !errors.Is(err, ErrFailed) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("SyncTo after a failed fsync: %v, want ErrFailed and EIO", err)
	}
	syncs := inj.Count(vfs.OpSync)
	if _, err := w.Append(1, 1, []byte("more")); !errors.Is(err, ErrFailed) {
		t.Errorf("Append after failure: %v", err)
	}
	if err := w.SyncTo(1); !errors.Is(err, ErrFailed) {
		t.Errorf("SyncTo of an already durable position after failure: %v", err)
	}
	if err := w.Err(); !errors.Is(err, syscall.EIO) {
		t.Errorf("Err() = %v", err)
	}
	if err := w.Close(); !errors.Is(err, ErrFailed) {
		t.Errorf("Close after failure: %v", err)
	}
	if n := inj.Count(vfs.OpSync); n != syncs {
		t.Errorf("%d more fsyncs after the failure: a failed fsync must not be retried", n-syncs)
	}
	durableCheck(t, mem, acked, 2)
}

// Every SyncTo waiting when the fsync fails gets the failure; none is
// told its record is durable.
func TestFsyncFailureReachesAllWaiters(t *testing.T) {
	mem := vfs.NewStrictMem()
	inj := &vfs.Injector{}
	w := open(t, vfs.Inject(mem, inj), 1)
	inj.FailAt(inj.Count(vfs.OpSync)+1, vfs.OpSync, syscall.EIO)
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Go(func() {
			first, err := w.Append(1, 1, payloadFor(uint64(i), 1))
			if err == nil {
				err = w.SyncTo(first)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	// The first fsync fails; each waiter either shared it or came later.
	for i, err := range errs {
		if !errors.Is(err, ErrFailed) {
			t.Errorf("writer %d: %v, want ErrFailed", i, err)
		}
	}
	if err := w.Close(); !errors.Is(err, syscall.EIO) {
		t.Errorf("Close: %v", err)
	}
}

// Running out of space fails the WAL with an error that is still ENOSPC,
// and nothing reported durable is lost in a crash.
func TestNoSpace(t *testing.T) {
	for _, budget := range []int64{0, 100, 5000, 20000} {
		t.Run(fmt.Sprint(budget), func(t *testing.T) {
			mem := vfs.NewStrictMem()
			inj := &vfs.Injector{}
			w := open(t, vfs.Inject(mem, inj), 1, segmentSize(4<<10))
			inj.NoSpaceAfter(budget)
			var acked []uint64
			var err error
			for i := 0; i < 1000 && err == nil; i++ {
				var first uint64
				first, err = w.Append(1, 1, payloadFor(w.Tail()+1, 1))
				if err == nil {
					err = w.SyncTo(first)
				}
				if err == nil {
					acked = append(acked, first)
				}
			}
			if !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, ErrFailed) {
				t.Fatalf("after %d records: %v, want ENOSPC and ErrFailed", len(acked), err)
			}
			if err := w.Close(); !errors.Is(err, syscall.ENOSPC) {
				t.Errorf("Close: %v", err)
			}
			durableCheck(t, mem, acked, 2)
		})
	}
}

// crashWorkload appends, syncs, rolls and removes segments on fs until an
// operation fails. It returns the positions SyncTo acknowledged (with
// payloadFor(pos, 1)) and still expected, those above the last
// RemoveThrough cursor. Everything runs in this goroutine or the syncer,
// in a fixed order, so the Injector's numbering is repeatable.
func crashWorkload(fs vfs.FS) (acked []uint64) {
	w, err := Open(testOptions(fs, 1, segmentSize(600)))
	if err != nil {
		return nil
	}
	defer w.Close()
	for i := range 24 {
		var batch []uint64
		for range 1 + i%3 {
			first, err := w.Append(1, 1, payloadFor(w.Tail()+1, 1))
			if err != nil {
				return acked
			}
			batch = append(batch, first)
		}
		if w.SyncTo(w.Tail()) != nil {
			return acked
		}
		acked = append(acked, batch...)
		if i%8 == 7 {
			// Positions at or below the cursor may go from here on.
			cursor := acked[len(acked)/2]
			acked = acked[len(acked)/2+1:]
			if w.RemoveThrough(cursor) != nil {
				return acked
			}
		}
	}
	return acked
}

// A crash at any mutating operation, with everything not synced lost,
// keeps every acknowledged record, and the log reopens.
func TestCrashAtEveryOperation(t *testing.T) {
	counter := &vfs.Injector{}
	if acked := crashWorkload(vfs.Inject(vfs.NewStrictMem(), counter)); len(acked) < 10 {
		t.Fatalf("workload acknowledged only %d records without faults", len(acked))
	}
	total := counter.Ops()
	for k := int64(1); k <= total+1; k++ {
		mem := vfs.NewStrictMem()
		inj := &vfs.Injector{}
		inj.CrashAt(k)
		acked := crashWorkload(vfs.Inject(mem, inj))
		w, err := Open(testOptions(mem.CrashClone(), 2))
		if err != nil {
			t.Fatalf("crash at op %d of %d: reopen: %v", k, total, err)
		}
		mustClose(t, w)
		durableCheck(t, mem, acked, 2)
		// Removal never loses the tail: positions never restart.
		if len(acked) > 0 && w.Tail() < acked[len(acked)-1] {
			t.Fatalf("crash at op %d: tail %d below acknowledged %d", k, w.Tail(), acked[len(acked)-1])
		}
	}
}

// A failed write (not a full disk) is fail-stop too.
func TestWriteFailureIsFailStop(t *testing.T) {
	mem := vfs.NewStrictMem()
	inj := &vfs.Injector{}
	w := open(t, vfs.Inject(mem, inj), 1)
	acked := []uint64{appendSynced(t, w, 1, 1, payloadFor(1, 1))}
	inj.FailAt(inj.Count(vfs.OpWrite)+1, vfs.OpWrite, syscall.EIO)
	first, _ := w.Append(1, 1, payloadFor(2, 1))
	if err := w.SyncTo(first); !errors.Is(err, syscall.EIO) || !errors.Is(err, ErrFailed) {
		t.Fatalf("SyncTo after a failed write: %v", err)
	}
	if err := w.Close(); !errors.Is(err, ErrFailed) {
		t.Errorf("Close: %v", err)
	}
	durableCheck(t, mem, acked, 2)
}

// waitWritten blocks until the syncer has written pos to a file (without
// anyone asking for a sync), using the WAL's own condition variable.
func waitWritten(w *WAL, pos uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.written < pos && w.err == nil {
		w.progress.Wait()
	}
}

// A record the syncer wrote in the background is not durable until an
// fsync covers it: SyncTo must still sync it.
func TestWrittenIsNotDurable(t *testing.T) {
	mem := vfs.NewStrictMem()
	inj := &vfs.Injector{}
	w := open(t, vfs.Inject(mem, inj), 1)
	defer mustClose(t, w)
	first, err := w.Append(1, 1, payloadFor(1, 1))
	if err != nil {
		t.Fatal(err)
	}
	waitWritten(w, first)
	syncs := inj.Count(vfs.OpSync)
	if err := w.SyncTo(first); err != nil {
		t.Fatal(err)
	}
	if inj.Count(vfs.OpSync) == syncs {
		t.Fatal("SyncTo returned without an fsync of a record only written")
	}
	durableCheck(t, mem, []uint64{first}, 2)
}
