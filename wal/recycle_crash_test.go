package wal

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/rollwal/rollwal/vfs"
)

// recycleRun is what recycleWorkload did.
type recycleRun struct {
	acked []uint64 // positions acknowledged and still expected: above the last cursor
	top   uint64   // the highest position acknowledged
	// spares and recycled count the spares made and the segments written
	// over one.
	spares, recycled float64
}

// recycleWorkload appends on fs in segments of 1 KiB, one to three
// records of crashPayload at a time, each batch synced, and every five
// batches removes through the last position but one acknowledged, so that
// drained segments become spares (two at most) and later rolls write over
// them, spares once written over included (cut to their records, so that
// zeros are filled after them again). It stops at the first error.
// Everything but the syncer runs in this goroutine.
func recycleWorkload(fs vfs.FS) (run recycleRun) {
	w, err := Open(testOptions(fs, 1, segmentSize(1<<10)))
	if err != nil {
		return run
	}
	defer func() {
		run.spares, run.recycled = counterValue(w.m.spares), counterValue(w.m.recycled)
		w.Close()
	}()
	for i := range 45 {
		var batch []uint64
		for range 1 + i%3 {
			first, err := w.Append(1, 1, crashPayload(w.Tail()+1))
			if err != nil {
				return run
			}
			batch = append(batch, first)
		}
		if w.SyncTo(w.Tail()) != nil {
			return run
		}
		run.acked, run.top = append(run.acked, batch...), batch[len(batch)-1]
		if i%5 == 4 {
			// Positions at or below the cursor may go from here on.
			cursor := run.acked[len(run.acked)-2]
			run.acked = run.acked[len(run.acked)-1:]
			if w.RemoveThrough(cursor) != nil {
				return run
			}
		}
	}
	return run
}

// A crash at any mutating operation of a workload that keeps spares and
// writes segments over them (renames of spares and segments, the writes
// over a spare's records, the seal that cuts them, zeros filled after a
// cut spare), with nothing unsynced kept, everything kept (a crash of the
// process alone) or a random part of it (torn writes over a spare's
// records), leaves a log that opens, as the epoch itself and as the next,
// and replays every acknowledged record once and nothing else: positions
// dense, each payload the one appended there, the tail never below a
// position acknowledged. The next epoch then removes the whole log but its
// tail, and a crash at any of its operations leaves a log that opens the
// same: no spare's older records ever need a segment another epoch
// removes.
func TestRecycleCrashAtEveryOperation(t *testing.T) {
	counter := &vfs.Injector{}
	run := recycleWorkload(vfs.Inject(vfs.NewStrictMem(), counter))
	if len(run.acked) == 0 || run.top < 60 || run.spares < 10 || run.recycled < 10 {
		t.Fatalf("the workload acknowledged up to %d, made %v spares and recycled %v segments without faults; want many",
			run.top, run.spares, run.recycled)
	}
	total := counter.Ops()
	reordered := 0
	for k := int64(1); k <= total+1; k++ {
		mem := vfs.NewStrictMem()
		inj := &vfs.Injector{}
		inj.CrashAt(k)
		run := recycleWorkload(vfs.Inject(mem, inj))
		what := fmt.Sprintf("crash at op %d of %d", k, total)
		clean := mem.CrashClone()
		checkRecycled(t, what+", nothing unsynced kept", clean, run, false)
		checkRecycled(t, what+", everything kept", mem.CrashCloneWith(vfs.CrashCloneOptions{UnsyncedDataPercent: 100}), run, false)
		for seed := range uint64(8) {
			torn := mem.CrashCloneWith(vfs.CrashCloneOptions{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(uint64(k), seed))})
			reordered += checkRecycled(t, fmt.Sprintf("%s, torn (seed %d)", what, seed), torn, run, true)
		}
		checkRemovedByNextEpoch(t, what, clean, run.top)
	}
	t.Logf("%d opens of torn states refused a whole unacknowledged record after a torn one (see unsyncedReordered)", reordered)
}

// checkRecycled opens what a crash left, as the epoch itself (which cuts
// a torn tail and a spare's rest) and as the next one (which leaves them),
// and checks the replay (replayRecycled), every acknowledged position and
// the tail. With reorder, an Open that refuses what unsyncedReordered
// describes is counted rather than failed.
func checkRecycled(t *testing.T, what string, fs *vfs.MemFS, run recycleRun, reorder bool) (reordered int) {
	t.Helper()
	for _, epoch := range []uint64{1, 2} {
		w, err := Open(testOptions(fs.CrashClone(), epoch, segmentSize(1<<10)))
		if err != nil && reorder && unsyncedReordered(t, fs, err, run.top) {
			reordered++
			continue
		}
		if err != nil {
			t.Fatalf("%s: reopen as epoch %d: %v\n%s", what, epoch, err, fs)
		}
		found, err := replayRecycled(w)
		tail := w.Tail()
		mustClose(t, w)
		if err != nil {
			t.Fatalf("%s: epoch %d: %v\n%s", what, epoch, err, fs)
		}
		for _, pos := range run.acked {
			if !found[pos] {
				t.Fatalf("%s: epoch %d: acknowledged position %d lost (tail %d)\n%s", what, epoch, pos, tail, fs)
			}
		}
		if tail < run.top {
			t.Fatalf("%s: epoch %d: tail %d below position %d acknowledged: positions would restart\n%s", what, epoch, tail, run.top, fs)
		}
	}
	return reordered
}

// unsyncedReordered reports whether err is Open's refusal of a torn record
// followed by a whole one that the workload appended after every position
// it had acknowledged: what a disk that writes back the blocks of an
// unsynced write out of order leaves (CrashCloneWith keeps random blocks).
// Open refuses any whole record of the segment's own after damage, since
// on a disk that rots it may be an acknowledged one. That policy predates
// spares, and the zero-filling workload of TestCrashDuringZeroFill meets
// it too with other seeds. The record after the damage is found as Open
// finds it, past the spare's older records: one of those, or anything
// acknowledged, is not this case.
func unsyncedReordered(t *testing.T, fs *vfs.MemFS, err error, top uint64) bool {
	t.Helper()
	var ce *CorruptionError
	if !errors.As(err, &ce) {
		return false
	}
	epoch, _, ok := parseSegmentName(ce.Segment)
	if !ok {
		return false
	}
	data := readFile(t, fs, filepath.Join(testDir, ce.Segment))
	var floor uint64
	if first, err := parseRecord(data, epoch); err == nil && ce.Offset > 0 {
		floor = first.FirstPos
	}
	i := findNewRecord(data[ce.Offset+1:], epoch, floor)
	if i < 0 {
		return false
	}
	at := ce.Offset + 1 + int64(i)
	h := decodeHeader(data[at:])
	return h.FirstPos > top && h.Count == 1 && bytes.Equal(data[at+headerSize:at+h.size()], crashPayload(h.FirstPos))
}

// replayRecycled replays the whole log and checks that the positions run
// dense from the first record to the tail, each once, each with the
// payload appended there: a spare's older record taken for data would
// repeat a position, go back, or stand alone below the tail.
func replayRecycled(w *WAL) (map[uint64]bool, error) {
	found := map[uint64]bool{}
	var prev uint64
	err := w.Replay(0, w.Tail(), func(h Header, p []byte) error {
		if (prev != 0 && h.FirstPos != prev+1) || h.Count != 1 {
			return fmt.Errorf("record at %d+%d after position %d", h.FirstPos, h.Count, prev)
		}
		if !bytes.Equal(p, crashPayload(h.FirstPos)) {
			return fmt.Errorf("position %d holds %d bytes that were never appended there", h.FirstPos, len(p))
		}
		prev, found[h.FirstPos] = h.FirstPos, true
		return nil
	})
	if err == nil && prev != w.Tail() {
		return nil, fmt.Errorf("replay ended at position %d, the tail is %d", prev, w.Tail())
	}
	return found, err
}

// removeByNextEpoch opens fs as epoch 2 and removes every segment it may
// (all but the one holding the tail, its own new segment being empty):
// the segments before another epoch's last one go, whatever that last
// segment was written over.
func removeByNextEpoch(fs vfs.FS) {
	w, err := Open(testOptions(fs, 2, segmentSize(1<<10)))
	if err != nil {
		return
	}
	defer w.Close()
	_ = w.RemoveThrough(w.Tail())
}

// checkRemovedByNextEpoch crashes removeByNextEpoch, run on what a crash
// of the workload left, at each of its operations, and checks that epoch 3
// opens what is left and replays it whole, its tail no lower.
func checkRemovedByNextEpoch(t *testing.T, what string, crashed *vfs.MemFS, top uint64) {
	t.Helper()
	counter := &vfs.Injector{}
	removeByNextEpoch(vfs.Inject(crashed.CrashClone(), counter))
	for k := int64(1); k <= counter.Ops()+1; k++ {
		mem := crashed.CrashClone()
		inj := &vfs.Injector{}
		inj.CrashAt(k)
		removeByNextEpoch(vfs.Inject(mem, inj))
		w, err := Open(testOptions(mem.CrashClone(), 3, segmentSize(1<<10)))
		if err != nil {
			t.Fatalf("%s, then epoch 2 removing crashed at op %d: reopen as epoch 3: %v\n%s", what, k, err, mem)
		}
		_, err = replayRecycled(w)
		tail := w.Tail()
		mustClose(t, w)
		if err != nil || tail < top {
			t.Fatalf("%s, then epoch 2 removing crashed at op %d: tail %d (acknowledged %d), %v\n%s", what, k, tail, top, err, mem)
		}
	}
}
