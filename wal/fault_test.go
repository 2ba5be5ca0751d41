package wal

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rollwal/rollwal/vfs"
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

// A failed fsync is fail-stop even when it says the disk is full: the
// pages it should have written may be gone, so it is never ErrNoSpace.
func TestFsyncNoSpaceIsFailStop(t *testing.T) {
	mem := vfs.NewStrictMem()
	inj := &vfs.Injector{}
	w := open(t, vfs.Inject(mem, inj), 1)
	acked := []uint64{appendSynced(t, w, 1, 1, payloadFor(1, 1))}
	inj.FailAt(inj.Count(vfs.OpSync)+1, vfs.OpSync, syscall.ENOSPC)
	first, err := w.Append(1, 1, payloadFor(2, 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.SyncTo(first); !errors.Is(err, ErrFailed) || errors.Is(err, ErrNoSpace) {
		t.Fatalf("SyncTo over an fsync that failed with ENOSPC: %v, want ErrFailed, not ErrNoSpace", err)
	}
	if err := w.Close(); !errors.Is(err, ErrFailed) {
		t.Errorf("Close: %v", err)
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

// The ways a segment meets a full disk: at the create of the next segment
// (reserved whole), at a reservation of the next step within one (zero
// filled ahead or on need, or fallocated), and at a write (no reservation
// at all).
var spaceModes = []spaceMode{
	{"whole-segment", 4 << 10, ZeroFill},
	{"step-1KiB", 1 << 10, ZeroFill},
	{"whole-segment-fallocate", 4 << 10, Fallocate},
	{"step-1KiB-fallocate", 1 << 10, Fallocate},
	{"none", -1, ZeroFill},
}

type spaceMode struct {
	name        string
	preallocate int64
	mode        Preallocation
}

func (m spaceMode) options(o *Options) { o.Preallocate, o.PreallocateMode = m.preallocate, m.mode }

// fillDisk appends until the WAL runs out of space, which must be
// ErrNoSpace (wrapping ENOSPC), not a failure. It returns the positions
// acknowledged and the one whose SyncTo met the full disk (0 if none).
func fillDisk(t *testing.T, w *WAL) (acked []uint64, queued uint64) {
	t.Helper()
	var err error
	for i := 0; i < 1000 && err == nil; i++ {
		var first uint64
		first, err = w.Append(1, 1, payloadFor(w.Tail()+1, 1))
		if err == nil {
			if err = w.SyncTo(first); err != nil {
				queued = first
			} else {
				acked = append(acked, first)
			}
		}
	}
	if !errors.Is(err, ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) || errors.Is(err, ErrFailed) {
		t.Fatalf("after %d records: %v, want ErrNoSpace and ENOSPC, not ErrFailed", len(acked), err)
	}
	return acked, queued
}

// Running out of space stops appends with ErrNoSpace, not a failure, and
// Close, which must give up then, loses nothing reported durable.
func TestNoSpace(t *testing.T) {
	for _, mode := range spaceModes {
		for _, budget := range []int64{0, 100, 5000, 20000} {
			t.Run(fmt.Sprint(mode.name, "/", budget), func(t *testing.T) {
				mem := vfs.NewStrictMem()
				inj := &vfs.Injector{}
				w := open(t, vfs.Inject(mem, inj), 1, segmentSize(4<<10), mode.options)
				inj.NoSpaceAfter(budget)
				acked, _ := fillDisk(t, w)
				if err := w.Err(); err != nil {
					t.Errorf("Err() = %v on a full disk; want nil: a full disk is not a failure", err)
				}
				if len(acked) > 0 {
					if err := w.SyncTo(acked[len(acked)-1]); err != nil {
						t.Errorf("SyncTo of a durable position on a full disk: %v", err)
					}
				}
				if err := w.Close(); !errors.Is(err, syscall.ENOSPC) {
					t.Errorf("Close: %v", err)
				}
				durableCheck(t, mem, acked, 2)
			})
		}
	}
}

// waitSpace waits, up to d, for the WAL to stop waiting for space, on the
// WAL's own condition variable.
func waitSpace(t *testing.T, w *WAL, d time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.mu.Lock()
		defer w.mu.Unlock()
		for w.held != nil && w.err == nil && !w.closed {
			w.progress.Wait()
		}
	}()
	select {
	case <-done:
	case <-time.After(d):
		w.mu.Lock()
		w.progress.Broadcast() // the waiter sees the deadline no more; let Close end it
		w.mu.Unlock()
		t.Fatalf("the WAL still waits for space %v after space was freed: %v", d, w.NoSpace())
	}
}

// Once space is back the WAL writes what it queued and takes appends
// again by itself: the record whose SyncTo met the full disk becomes
// durable at the position it was given, positions stay dense, and nothing
// acknowledged is lost.
func TestNoSpaceRecovers(t *testing.T) {
	for _, mode := range spaceModes {
		t.Run(mode.name, func(t *testing.T) {
			mem := vfs.NewStrictMem()
			inj := &vfs.Injector{}
			w := open(t, vfs.Inject(mem, inj), 1, segmentSize(4<<10), mode.options)
			inj.NoSpaceAfter(3000)
			acked, queued := fillDisk(t, w)
			if w.NoSpace() == nil {
				t.Fatal("NoSpace() = nil while appends are refused for space")
			}
			if _, err := w.Append(1, 1, []byte("refused")); !errors.Is(err, ErrNoSpace) {
				t.Fatalf("Append while out of space: %v, want ErrNoSpace", err)
			}
			inj.NoSpaceAfter(1 << 30)
			waitSpace(t, w, 10*time.Second)
			if queued != 0 {
				if err := w.SyncTo(queued); err != nil {
					t.Fatalf("SyncTo of the record queued on the full disk, once space is back: %v", err)
				}
				acked = append(acked, queued)
			}
			for range 20 { // across a roll or two
				acked = append(acked, appendSynced(t, w, 1, 1, payloadFor(w.Tail()+1, 1)))
			}
			for i := 1; i < len(acked); i++ {
				if acked[i] != acked[i-1]+1 {
					t.Fatalf("positions %d then %d: not dense across the full disk", acked[i-1], acked[i])
				}
			}
			mustClose(t, w)
			durableCheck(t, mem, acked, 2)
		})
	}
}

// Preallocation reserves the segment in steps ahead of the write position:
// a new segment reserves one step, not the whole segment.
func TestPreallocateInSteps(t *testing.T) {
	for _, c := range []struct {
		step, segment, want int64
	}{
		{0, 64 << 20, DefaultPreallocate},
		{1 << 20, 64 << 20, 1 << 20},
		{64 << 20, 8 << 20, 8 << 20},
		{-1, 64 << 20, 0},
	} {
		inj := &vfs.Injector{}
		fs := vfs.Inject(vfs.NewStrictMem(), inj)
		inj.NoSpaceAfter(1 << 40)
		w := open(t, fs, 1, segmentSize(c.segment), preallocate(c.step))
		if used := int64(1<<40) - inj.SpaceLeft(); used != c.want {
			t.Errorf("step %d, segment %d: a new segment reserved %d bytes, want %d", c.step, c.segment, used, c.want)
		}
		mustClose(t, w)
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
// fsync covers it: SyncTo must still sync it. The record is as large as
// the bytes that make the syncer write behind.
func TestWrittenIsNotDurable(t *testing.T) {
	mem := vfs.NewStrictMem()
	inj := &vfs.Injector{}
	w := open(t, vfs.Inject(mem, inj), 1)
	defer mustClose(t, w)
	payload := bytes.Repeat([]byte("w"), writeBehind)
	first, err := w.Append(1, 1, payload)
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
	crashed := open(t, mem.CrashClone(), 2)
	defer mustClose(t, crashed)
	if got := replayAll(t, crashed, first-1, first); len(got) != 1 || !bytes.Equal(got[0].payload, payload) {
		t.Fatalf("the synced record is not read back after a crash: %d records", len(got))
	}
}
