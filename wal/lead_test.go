package wal

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rollwal/rollwal/vfs"
)

// A lone writer's SyncTo runs every round itself: the syncer is never
// woken for records below writeBehind, and every acknowledged record
// survives a crash.
func TestLoneWriterRunsItsOwnRounds(t *testing.T) {
	mem := vfs.NewStrictMem()
	w := open(t, mem, 1, segmentSize(64<<10))
	defer mustClose(t, w)
	const rounds = 60
	var acked []uint64
	for range rounds {
		var last uint64
		for range 3 {
			first, err := w.Append(1, 1, payloadFor(w.Tail()+1, 1))
			if err != nil {
				t.Fatal(err)
			}
			acked, last = append(acked, first), first
		}
		if err := w.SyncTo(last); err != nil {
			t.Fatal(err)
		}
	}
	if n := testutil.ToFloat64(w.m.callerRounds); n != rounds {
		t.Errorf("%v rounds run by the caller, want %d", n, rounds)
	}
	if n := testutil.ToFloat64(w.m.syncerRounds); n != 0 {
		t.Errorf("%v rounds run by the syncer for a lone writer, want 0", n)
	}
	durableCheck(t, mem, acked, 2)
}

// Writers whose SyncTo calls run rounds themselves and the syncer's
// rounds for the callers that came meanwhile, all at once, over rolls: a
// crash clone taken while they run (by one of them, every 25 of its
// acknowledgements) holds every record acknowledged before it.
func TestCallerAndSyncerRoundsAtOnce(t *testing.T) {
	mem := vfs.NewStrictMem()
	w := open(t, mem, 1, segmentSize(16<<10))
	const writers, perWriter = 8, 150
	var mu sync.Mutex
	var acked []uint64
	type clone struct {
		fs    *vfs.MemFS
		acked []uint64
	}
	var clones []clone
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := range perWriter {
				first, err := w.Append(1, 1, payloadFor(0, 0))
				if err == nil {
					err = w.SyncTo(first)
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				acked = append(acked, first)
				if g == 0 && i%25 == 0 {
					clones = append(clones, clone{mem.CrashClone(), slices.Clone(acked)})
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	mustClose(t, w)
	for _, c := range clones {
		checkClone(t, c.fs, c.acked)
	}
	if testutil.ToFloat64(w.m.callerRounds) == 0 {
		t.Error("no round run by a caller")
	}
}

// checkClone opens a crash clone and checks that each acknowledged
// position holds a record.
func checkClone(t *testing.T, fs *vfs.MemFS, acked []uint64) {
	t.Helper()
	w := open(t, fs, 2)
	defer mustClose(t, w)
	found := map[uint64]bool{}
	for _, g := range replayAll(t, w, 0, w.Tail()) {
		found[g.FirstPos] = true
	}
	for _, pos := range acked {
		if !found[pos] {
			t.Fatalf("position %d acknowledged before the crash, lost (tail %d)", pos, w.Tail())
		}
	}
}

// Close while writers run their own rounds and wait on the syncer's:
// every SyncTo returns, nil or ErrClosed, and what was acknowledged is
// there after Close.
func TestCloseDuringCallerRounds(t *testing.T) {
	for seed := range 5 {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			mem := vfs.NewStrictMem()
			w := open(t, mem, 1, segmentSize(8<<10))
			var mu sync.Mutex
			var acked []uint64
			started := make(chan struct{})
			var once sync.Once
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Go(func() {
					if g == 0 {
						defer once.Do(func() { close(started) })
					}
					for i := 0; ; i++ {
						if g == 0 && i == 20*(seed+1) {
							once.Do(func() { close(started) })
						}
						first, err := w.Append(1, 1, payloadFor(0, 0))
						if err == nil {
							err = w.SyncTo(first)
						}
						if errors.Is(err, ErrClosed) {
							return
						}
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						acked = append(acked, first)
						mu.Unlock()
					}
				})
			}
			<-started
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			checkClone(t, mem.CrashClone(), acked)
		})
	}
}

// syncGate wraps an FS so that, while armed, the next fsync of a file
// created through it says so on entered and waits for release.
type syncGate struct {
	vfs.FS
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

type gatedFile struct {
	vfs.File
	g *syncGate
}

func (g *syncGate) Create(name string) (vfs.File, error) {
	f, err := g.FS.Create(name)
	if err != nil {
		return nil, err
	}
	return &gatedFile{File: f, g: g}, nil
}

func (f *gatedFile) Sync() error {
	if f.g.armed.CompareAndSwap(true, false) {
		f.g.entered <- struct{}{}
		<-f.g.release
	}
	return f.File.Sync()
}

// Callers that come while a caller's round runs wait for the syncer's
// round, which makes the WAL grouped (until a round one caller alone, or
// none, asked for); a lone writer runs its rounds itself again afterwards.
// Whether the WAL is still grouped when the callers return is not tested:
// a round that only syncs, for a caller counted in the one before, may
// have made it lone.
func TestGroupedThenLoneAgain(t *testing.T) {
	g := &syncGate{FS: vfs.NewStrictMem(), entered: make(chan struct{}), release: make(chan struct{})}
	w := open(t, g, 1, preallocate(-1))
	defer mustClose(t, w)
	appendAndSync := func() error {
		first, err := w.Append(1, 1, payloadFor(0, 0))
		if err == nil {
			err = w.SyncTo(first)
		}
		return err
	}
	g.armed.Store(true)
	errs := make(chan error, 3)
	go func() { errs <- appendAndSync() }()
	<-g.entered // the first caller runs its round, held in its fsync
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { errs <- appendAndSync() })
	}
	waitFor(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.callers == 2
	})
	close(g.release)
	wg.Wait()
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := testutil.ToFloat64(w.m.syncerRounds); n < 1 {
		t.Fatalf("%v rounds run by the syncer after two callers waited for one", n)
	}
	before := testutil.ToFloat64(w.m.callerRounds)
	for range 200 {
		if err := appendAndSync(); err != nil {
			t.Fatal(err)
		}
		if testutil.ToFloat64(w.m.callerRounds) > before {
			return
		}
	}
	t.Fatal("a lone writer ran no round itself in 200 appends after the group")
}
