package wal

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollwal/rollwal/vfs"
)

// byPosition is Replay's order: ascending first position, the older epoch
// first on a tie.
func byPosition(a, b Header) int {
	if a.FirstPos != b.FirstPos {
		return cmpUint(a.FirstPos, b.FirstPos)
	}
	return cmpUint(a.Epoch, b.Epoch)
}

// epochSegments returns the names of epoch's segment files in dir.
func epochSegments(t testing.TB, fs vfs.FS, dir string, epoch uint64) []string {
	t.Helper()
	var names []string
	for _, name := range segmentFilesIn(t, fs, dir) {
		if e, _, ok := parseSegmentName(name); ok && e == epoch {
			names = append(names, name)
		}
	}
	return names
}

// closeAtEnd closes w when the test ends unless the test closed it.
func closeAtEnd(t *testing.T, w *WAL) {
	t.Cleanup(func() {
		if err := w.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("close: %v", err)
		}
	})
}

// A zombie of epoch 1 keeps appending and syncing, rolling to new
// segments, after epoch 2 opened the same directory, and again while
// epoch 3 opens. No Open cuts what the zombie is writing, so every later
// Open accepts the directory; each Replay returns the zombie's late
// records too, as they are on disk when it runs.
func TestZombieKeepsWriting(t *testing.T) {
	for _, tc := range []struct {
		name string
		fs   func(t *testing.T) (vfs.FS, string)
	}{
		{"os", func(t *testing.T) (vfs.FS, string) { return vfs.Default, filepath.Join(t.TempDir(), "wal") }},
		{"mem", func(t *testing.T) (vfs.FS, string) { return vfs.NewStrictMem(), testDir }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, dir := tc.fs(t)
			opts := func(o *Options) { o.Dir, o.SegmentSize = dir, 4<<10 }
			var mu sync.Mutex
			var want []Header
			// try appends and syncs a record; it may run in any
			// goroutine.
			try := func(w *WAL, count uint32) (uint64, error) {
				first, err := w.Append(1, count, payloadFor(w.Tail()+1, int(w.opts.Epoch)))
				last := first + uint64(count) - 1
				if err == nil {
					err = w.SyncTo(last)
				}
				if err != nil {
					return 0, err
				}
				mu.Lock()
				want = append(want, Header{Epoch: w.opts.Epoch, Generation: 1, FirstPos: first, Count: count})
				mu.Unlock()
				return last, nil
			}
			add := func(w *WAL, count uint32) {
				t.Helper()
				if _, err := try(w, count); err != nil {
					t.Fatal(err)
				}
			}
			sorted := func() []Header {
				mu.Lock()
				defer mu.Unlock()
				return slices.SortedStableFunc(slices.Values(want), byPosition)
			}

			zombie := open(t, fs, 1, opts)
			closeAtEnd(t, zombie)
			for i := range 10 {
				add(zombie, uint32(1+i%3))
			}
			w2 := open(t, fs, 2, opts)
			closeAtEnd(t, w2)
			if w2.Tail() != zombie.Tail() {
				t.Fatalf("epoch 2 opened at tail %d, the zombie's is %d", w2.Tail(), zombie.Tail())
			}
			segsAtOpen := len(epochSegments(t, fs, dir, 1))
			for i := range 30 {
				add(zombie, uint32(1+i%3))
				if i%3 == 0 {
					add(w2, 2)
				}
			}
			if n := len(epochSegments(t, fs, dir, 1)); n <= segsAtOpen {
				t.Fatalf("the zombie did not start a new segment after epoch 2 opened (%d segments)", n)
			}
			// Epoch 2's Replay re-reads epoch 1 from disk: the records
			// it appended since, in the segment epoch 2's Open saw and
			// in the ones it started later.
			checkGot(t, replayAll(t, w2, 0, math.MaxUint64), sorted())

			// Epoch 3 opens while the zombie is appending.
			var acked atomic.Uint64 // the zombie's last acknowledged position
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					last, err := try(zombie, uint32(1+i%3))
					if err != nil {
						t.Error(err)
						return
					}
					acked.Store(last)
				}
			}()
			halt := sync.OnceFunc(func() { close(stop); <-done })
			defer halt()
			// waitAcked waits until the zombie has acknowledged pos.
			waitAcked := func(pos uint64) {
				t.Helper()
				for acked.Load() < pos {
					select {
					case <-done:
						t.Fatal("the zombie stopped")
					case <-time.After(time.Millisecond):
					}
				}
			}
			waitAcked(zombie.Tail() + 1)
			before := acked.Load()
			w3 := open(t, fs, 3, opts)
			closeAtEnd(t, w3)
			waitAcked(acked.Load() + 20)
			halt()
			if w3.Tail() < before {
				t.Fatalf("epoch 3's tail %d is below position %d acknowledged before it opened", w3.Tail(), before)
			}
			gots := replayAll(t, w3, 0, math.MaxUint64)
			checkGot(t, gots, sorted())
			late := 0
			for _, g := range gots {
				if g.Epoch == 1 && g.FirstPos > w3.Tail() {
					late++
				}
			}
			if late == 0 {
				t.Fatal("no record of the zombie's past epoch 3's tail: the test did not race")
			}
			mustClose(t, zombie)
			mustClose(t, w2)
			mustClose(t, w3)

			w4 := open(t, fs, 4, opts)
			defer mustClose(t, w4)
			checkGot(t, replayAll(t, w4, 0, w4.Tail()), sorted())
		})
	}
}

// The zombie is in the middle of writing a record when epoch 2 opens: epoch
// 2 leaves the half record alone and replays up to it. The zombie then
// finishes it, at its own file offset, and writes more: epoch 2's Replay
// returns them, and epoch 3 opens a directory that is not corrupt. (Had
// epoch 2 truncated the half record, the zombie's writes would have left
// a hole of zeros.)
func TestZombieFinishesTornRecord(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	inDir := func(o *Options) { o.Dir = dir }
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, segmentName(1, 1))
	zombie, err := os.Create(path) // writes at its own offset, as a writer does
	if err != nil {
		t.Fatal(err)
	}
	defer zombie.Close()
	r := func(epoch, first uint64) rec {
		return rec{epoch: epoch, gen: 1, first: first, count: 1, payload: payloadFor(first, int(epoch))}
	}
	write := func(b []byte) {
		t.Helper()
		if _, err := zombie.Write(b); err != nil {
			t.Fatal(err)
		}
		if err := zombie.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	head, _ := frame(r(1, 1), r(1, 2), r(1, 3), r(1, 4), r(1, 5))
	sixth, _ := frame(r(1, 6))
	rest, _ := frame(r(1, 7), r(1, 8))
	write(head)
	write(sixth[:len(sixth)/2])
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	w2 := open(t, vfs.Default, 2, inDir)
	closeAtEnd(t, w2)
	if after, err := os.ReadFile(path); err != nil || !bytes.Equal(after, before) {
		t.Fatalf("epoch 2's Open changed the zombie's segment (%d bytes, was %d): %v", len(after), len(before), err)
	}
	if w2.Tail() != 5 {
		t.Fatalf("epoch 2 opened at tail %d, want 5", w2.Tail())
	}
	var want []Header
	for p := uint64(1); p <= 5; p++ {
		want = append(want, Header{Epoch: 1, Generation: 1, FirstPos: p, Count: 1})
	}
	checkGot(t, replayAll(t, w2, 0, math.MaxUint64), want)

	write(sixth[len(sixth)/2:])
	write(rest)
	for p := uint64(6); p <= 8; p++ {
		want = append(want, Header{Epoch: 1, Generation: 1, FirstPos: p, Count: 1})
	}
	for range 2 {
		first := appendSynced(t, w2, 1, 1, payloadFor(w2.Tail()+1, 2))
		want = append(want, Header{Epoch: 2, Generation: 1, FirstPos: first, Count: 1})
	}
	slices.SortStableFunc(want, byPosition)
	checkGot(t, replayAll(t, w2, 0, math.MaxUint64), want)
	mustClose(t, w2)

	w3 := open(t, vfs.Default, 3, inDir)
	defer mustClose(t, w3)
	if w3.Tail() != 8 {
		t.Fatalf("epoch 3 opened at tail %d, want 8", w3.Tail())
	}
	checkGot(t, replayAll(t, w3, 0, w3.Tail()), want)
}

// RemoveThrough judges another epoch's last segment by what it holds on
// disk, not by what Open found: a zombie's segment that grew past the
// cursor stays until a cursor covers it.
func TestRemoveThroughKeepsGrownSegment(t *testing.T) {
	fs := vfs.NewStrictMem()
	zombie := open(t, fs, 1)
	defer mustClose(t, zombie)
	appendN(t, zombie, 1, 3) // 1..6
	w := open(t, fs, 2)
	defer mustClose(t, w)
	appendN(t, w, 1, 3)      // 7..12
	appendN(t, zombie, 1, 3) // 7..12, after epoch 2's Open
	if zombie.Tail() != 12 || w.Tail() != 12 {
		t.Fatalf("tails %d and %d, want 12", zombie.Tail(), w.Tail())
	}
	if err := w.RemoveThrough(8); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Stat(segPath(1, 1)); err != nil {
		t.Fatalf("the zombie's segment holding positions up to 12 went with cursor 8: %v", err)
	}
	var zombies []Header
	for _, g := range replayAll(t, w, 8, 12) {
		if g.Epoch == 1 {
			zombies = append(zombies, g.Header)
		}
	}
	if len(zombies) != 2 || zombies[0].FirstPos != 8 || zombies[1].FirstPos != 10 {
		t.Fatalf("replay (8, 12] after RemoveThrough(8) returned the zombie's %v, want its records at 8 and 10", zombies)
	}
	if err := w.RemoveThrough(12); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Stat(segPath(1, 1)); err == nil {
		t.Fatal("the zombie's segment survived a cursor covering all it holds")
	}
}

// What another epoch wrote after Open is read as far as it is whole and
// continues that epoch's positions; what follows ends that epoch's records
// without failing the replay, and without moving Tail.
func TestReplayReadsOtherEpochsGrowth(t *testing.T) {
	r := func(first uint64) rec {
		return rec{epoch: 1, gen: 1, first: first, count: 1, payload: payloadFor(first, 1)}
	}
	head, _ := frame(r(1), r(2), r(3))
	six, _ := frame(r(4), r(5), r(6))
	for _, tc := range []struct {
		name  string
		grow  map[uint64][]byte // epoch 1's segments by index: bytes appended after epoch 2's Open
		until uint64            // the last position Replay returns
	}{
		{"nothing", nil, 3},
		{"whole records", map[uint64][]byte{1: six}, 6},
		{"a record in progress", map[uint64][]byte{1: six[:len(six)-7]}, 5},
		{"then garbage", map[uint64][]byte{1: append(bytes.Clone(six), "garbage"...)}, 6},
		{"then a gap", map[uint64][]byte{1: append(frameOf(r(4)), frameOf(r(6))...)}, 4},
		{"then a hole", map[uint64][]byte{1: append(append(frameOf(r(4)), make([]byte, 100)...), frameOf(r(5))...)}, 4},
		{"a new segment", map[uint64][]byte{2: six}, 6},
		{"a new segment and more", map[uint64][]byte{1: frameOf(r(4)), 2: frameOf(r(5)), 3: frameOf(r(6))}, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewStrictMem()
			writeFile(t, fs, segPath(1, 1), head)
			w := open(t, fs, 2)
			defer mustClose(t, w)
			for index, b := range tc.grow {
				path := segPath(1, index)
				if index == 1 {
					b = append(readFile(t, fs, path), b...)
				}
				writeFile(t, fs, path, b)
			}
			var want []Header
			for p := uint64(1); p <= tc.until; p++ {
				want = append(want, Header{Epoch: 1, Generation: 1, FirstPos: p, Count: 1})
			}
			checkGot(t, replayAll(t, w, 0, math.MaxUint64), want)
			if w.Tail() != 3 {
				t.Fatalf("tail moved to %d", w.Tail())
			}
			// A range past what Open found reads only the growth.
			checkGot(t, replayAll(t, w, 3, 100), want[3:])
		})
	}
}

func frameOf(r rec) []byte {
	b, _ := frame(r)
	return b
}
