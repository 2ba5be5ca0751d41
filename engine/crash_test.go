package engine

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"
	"testing"

	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/vfs"
)

// crashWorkload appends from several producers with flushes between rounds
// and a close and reopen in the middle. It records every acknowledged id
// and returns at the first error (after a crash, every operation fails).
type crashWorkload struct {
	opts  Options
	mu    sync.Mutex
	acked map[string]bool
	epoch uint64 // highest epoch claimed
}

const (
	crashProducers = 3
	crashRounds    = 8
	crashBatch     = 4
	crashPhases    = 3
)

func (w *crashWorkload) run(ctx context.Context) error {
	for phase := 0; phase < crashPhases; phase++ {
		if err := w.phase(ctx, phase); err != nil {
			return err
		}
	}
	return nil
}

// phase opens the shard, runs the rounds and closes (flushing).
func (w *crashWorkload) phase(ctx context.Context, phase int) (err error) {
	h, err := NewHost(w.opts)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, h.Close(ctx)) }()
	s, err := h.Open(ctx, "s0")
	if err != nil {
		return err
	}
	w.epoch = max(w.epoch, s.Epoch())
	for round := 0; round < crashRounds; round++ {
		if err := w.round(ctx, s, phase, round); err != nil {
			return err
		}
		if round%2 == 1 {
			if _, err := s.Flush(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

func (w *crashWorkload) round(ctx context.Context, s *Shard, phase, round int) error {
	errs := make([]error, crashProducers)
	var wg sync.WaitGroup
	for p := range crashProducers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prefix := fmt.Sprintf("ph%d-r%d-p%d", phase, round, p)
			batch := rows(prefix, 0, crashBatch)
			for _, r := range batch {
				r["completion"] = strings.Repeat(prefix+" ", 100) // ~1 KiB rows: WAL segments roll
			}
			if _, err := s.Append(ctx, batch, Source{}); err != nil {
				errs[p] = err
				return
			}
			w.mu.Lock()
			for _, r := range batch {
				w.acked[r["id"].(string)] = true
			}
			w.mu.Unlock()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// TestCrashAtEveryWrite crashes the workload at its k-th mutating
// filesystem operation, for every k until the workload completes. After each
// crash only what was synced survives; etcd keeps what it committed. The
// shard must reopen with a higher epoch, every committed generation's file
// must exist, and every acknowledged row must be in exactly one committed
// generation or in the replayed memtable.
func TestCrashAtEveryWrite(t *testing.T) {
	crashAtEveryPoint(t, false, WALLocal)
}

// TestCrashAtEveryWriteWithStore is TestCrashAtEveryWrite with the
// generations in an object store whose writes count among the crash
// points (the writer dies in the middle of an upload, or after it and
// before the commit) but whose contents the crash does not undo (a bucket
// survives the machine): after every crash, every committed generation is
// in the store, byte for byte its file, and the reopened shard leaves no
// object that no commit names.
func TestCrashAtEveryWriteWithStore(t *testing.T) {
	crashAtEveryPoint(t, true, WALLocal)
}

// TestCrashAtEveryWriteWithObjectWAL is TestCrashAtEveryWriteWithStore
// with the WAL in the store too (WALObject): every create of a WAL object,
// of a generation object and every local write is a crash point, and an
// acknowledged row survives every one of them.
func TestCrashAtEveryWriteWithObjectWAL(t *testing.T) {
	crashAtEveryPoint(t, true, WALObject)
}

// crashAtEveryPoint crashes the workload at its k-th filesystem (or store)
// operation for every k until it completes, checking each crash.
func crashAtEveryPoint(t *testing.T, withStore bool, backend WALBackend) {
	ctx := context.Background()
	points := 0
	for k := int64(1); !crashAtIn(t, ctx, k, withStore, backend); k++ {
		points++
	}
	points++ // the one that completed
	t.Logf("crash points: %d", points)
	if points < 100 {
		t.Fatalf("only %d crash points: the workload is too small to cover the write paths", points)
	}
}

// crashAtIn runs one crash point and reports whether the workload
// completed before reaching it: generations in a store or not, and the
// WAL of the given backend (WALObject needs the store). With the WAL in the store
// the bucket is cut to what its filesystem synced, as the machine is:
// acknowledged rows must survive from the store's own durability.
func crashAtIn(t *testing.T, ctx context.Context, k int64, withStore bool, backend WALBackend) bool {
	mem := vfs.NewStrictMem()
	inj := &vfs.Injector{}
	opts := testOptions(vfs.Inject(mem, inj), tableName(t, fmt.Sprintf("-k%d", k)))
	opts.WALBackend = backend
	bucket := vfs.NewStrictMem()
	if withStore {
		opts.Store = storeOn(t, vfs.Inject(bucket, inj))
	}
	inj.CrashAt(inj.Ops() + k) // the workload's k-th operation
	w := &crashWorkload{opts: opts, acked: map[string]bool{}}
	err := w.run(ctx)
	if err == nil {
		return true
	}
	if !inj.Crashed() {
		t.Fatalf("crash point %d: workload failed without a crash: %v", k, err)
	}
	switch {
	case backend == WALObject:
		opts.Store = storeOn(t, bucket.CrashClone())
	case withStore:
		opts.Store = storeOn(t, bucket)
	}
	verifyAfterCrash(t, ctx, k, mem.CrashClone(), opts, w)
	return false
}

func verifyAfterCrash(t *testing.T, ctx context.Context, k int64, fs vfs.FS, opts Options, w *crashWorkload) {
	opts.FS = fs
	h := openHost(t, opts)
	defer h.Close(ctx)
	s, err := h.Open(ctx, "s0")
	if err != nil {
		t.Fatalf("crash point %d: reopen: %v", k, err)
	}
	if s.Epoch() <= w.epoch {
		t.Fatalf("crash point %d: epoch %d after a crash in epoch %d", k, s.Epoch(), w.epoch)
	}
	// committed reads every file the manifest names: a missing one fails.
	inGen, _ := committed(t, fs, opts, "s0")
	inMem := memtableIDs(s)
	for id, n := range inGen {
		if n > 1 || inMem[id] > 0 {
			t.Fatalf("crash point %d: id %s is in %d committed generations and %d memtable rows", k, id, n, inMem[id])
		}
	}
	for id, n := range inMem {
		if n > 1 {
			t.Fatalf("crash point %d: id %s replayed %d times", k, id, n)
		}
	}
	for id := range w.acked {
		if inGen[id]+inMem[id] != 1 {
			t.Fatalf("crash point %d: acknowledged id %s lost (generations %d, memtable %d)", k, id, inGen[id], inMem[id])
		}
	}
	if opts.Store != nil {
		checkStoreHoldsCommitted(t, ctx, k, fs, opts, s)
	}
}

// checkStoreHoldsCommitted fails unless the store holds exactly the
// generations the shard's manifest names, each byte for byte its file.
func checkStoreHoldsCommitted(t *testing.T, ctx context.Context, k int64, fs vfs.FS, opts Options, s *Shard) {
	t.Helper()
	named := map[string]bool{}
	for _, g := range s.Manifest().Flushed {
		checkObjectIsFile(t, opts.Store, fs, opts, g.File)
		named[g.File] = true
	}
	infos, err := opts.Store.List(ctx, path.Dir(generation.ObjectKey(opts.Table, "s0", "x"))+"/")
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range infos {
		if !named[path.Base(info.Name)] {
			t.Fatalf("crash point %d: object %s is in the store, and no commit names it", k, info.Name)
		}
	}
}
