package wal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollwal/rollwal/objstore"
	"github.com/rollwal/rollwal/vfs"
)

const objPrefix = "t/shards/s0/wal/"

// memStore is a file:// store on a strict in-memory filesystem.
func memStore(t testing.TB, fs vfs.FS) objstore.Store {
	t.Helper()
	st, err := objstore.Open(context.Background(), "file:///objects", objstore.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func openObj(t testing.TB, st objstore.Store, epoch uint64, mod ...func(*ObjectOptions)) *ObjectWAL {
	t.Helper()
	o := ObjectOptions{Store: st, Prefix: objPrefix, Epoch: epoch, RetryBackoff: 1}
	for _, f := range mod {
		f(&o)
	}
	w, err := OpenObjects(context.Background(), o)
	if err != nil {
		t.Fatalf("open object WAL epoch %d: %v", epoch, err)
	}
	return w
}

type replayed struct {
	h       Header
	payload string
}

func replayObj(t testing.TB, w *ObjectWAL, from, to uint64) []replayed {
	t.Helper()
	var got []replayed
	if err := w.Replay(from, to, func(h Header, p []byte) error {
		got = append(got, replayed{h, string(p)})
		return nil
	}); err != nil {
		t.Fatalf("replay (%d, %d]: %v", from, to, err)
	}
	return got
}

func objectNames(t testing.TB, st objstore.Store) []string {
	t.Helper()
	infos, err := st.List(context.Background(), objPrefix)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, in := range infos {
		names = append(names, strings.TrimPrefix(in.Name, objPrefix))
	}
	return names
}

func TestObjectWALAppendReplayAcrossEpochs(t *testing.T) {
	for _, c := range []Compression{None, S2, Zstd} {
		t.Run(c.String(), func(t *testing.T) {
			fs := vfs.NewStrictMem()
			st := memStore(t, fs)
			w := openObj(t, st, 1, func(o *ObjectOptions) { o.Compression = c })
			rng := rand.New(rand.NewPCG(1, 2))
			var want []string
			for i := range 50 {
				p := textPayload(rng, 10+rng.IntN(3000))
				first, err := w.Append(uint64(i/10+1), uint32(1+i%3), p)
				if err != nil {
					t.Fatal(err)
				}
				if i%7 == 0 {
					if err := w.SyncTo(first); err != nil {
						t.Fatal(err)
					}
				}
				want = append(want, string(p))
			}
			tail := w.Tail()
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			// What a successor on another machine sees: the store alone,
			// after a crash that forgot everything unsynced.
			st = memStore(t, fs.CrashClone())
			got, err := ReadObjectTail(context.Background(), ObjectOptions{Store: st, Prefix: objPrefix})
			if err != nil || got != tail {
				t.Fatalf("ReadObjectTail = %d, %v; want %d", got, err, tail)
			}
			w2 := openObj(t, st, 2, func(o *ObjectOptions) { o.Compression = c })
			defer w2.Close()
			if w2.Tail() != tail {
				t.Fatalf("tail %d, want %d", w2.Tail(), tail)
			}
			recs := replayObj(t, w2, 0, tail)
			if len(recs) != len(want) {
				t.Fatalf("replayed %d records, want %d", len(recs), len(want))
			}
			next := uint64(1)
			for i, r := range recs {
				if r.payload != want[i] || r.h.FirstPos != next || r.h.Epoch != 1 {
					t.Fatalf("record %d: pos %d epoch %d (%d bytes), want pos %d epoch 1 (%d bytes)",
						i, r.h.FirstPos, r.h.Epoch, len(r.payload), next, len(want[i]))
				}
				next += uint64(r.h.Count)
			}
			// A partial range: whole records that reach into it.
			part := replayObj(t, w2, recs[10].h.FirstPos, recs[20].h.FirstPos)
			if part[0].h.FirstPos != recs[10].h.FirstPos || part[len(part)-1].h.FirstPos != recs[20].h.FirstPos {
				t.Fatalf("partial replay from %d to %d: %d..%d", recs[10].h.FirstPos, recs[20].h.FirstPos,
					part[0].h.FirstPos, part[len(part)-1].h.FirstPos)
			}
			first, err := w2.Append(9, 1, []byte("epoch two"))
			if err != nil || first != tail+1 {
				t.Fatalf("append in epoch 2: %d, %v; want %d", first, err, tail+1)
			}
		})
	}
}

func TestObjectWALGroupCommitSplitsAtObjectSize(t *testing.T) {
	st := memStore(t, vfs.NewStrictMem())
	w := openObj(t, st, 1, func(o *ObjectOptions) { o.ObjectSize = 64 << 10 })
	payload := bytes.Repeat([]byte("x"), 10<<10)
	for range 40 {
		if _, err := w.Append(1, 1, payload); err != nil {
			t.Fatal(err)
		}
	}
	big := bytes.Repeat([]byte("y"), 200<<10) // a record above the object size
	last, err := w.Append(1, 1, big)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.SyncTo(last); err != nil {
		t.Fatal(err)
	}
	infos, err := st.List(context.Background(), objPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) < 7 {
		t.Fatalf("%d objects for 400 KiB in 64 KiB objects and a 200 KiB record", len(infos))
	}
	for _, in := range infos {
		if in.Size > 64<<10 && in.Size != headerSize+int64(len(big)) {
			t.Fatalf("object %s of %d bytes, above the 64 KiB bound", in.Name, in.Size)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w2 := openObj(t, st, 2)
	defer w2.Close()
	if n := len(replayObj(t, w2, 0, last)); n != 41 {
		t.Fatalf("replayed %d records, want 41", n)
	}
}

func TestObjectWALConcurrentAppendersShareObjects(t *testing.T) {
	st := &countingStore{Store: memStore(t, vfs.NewStrictMem())}
	w := openObj(t, st, 1)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				first, err := w.Append(1, 1, fmt.Appendf(nil, "g%d-%d", g, i))
				if err == nil {
					err = w.SyncTo(first)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w2 := openObj(t, st, 2)
	defer w2.Close()
	recs := replayObj(t, w2, 0, w2.Tail())
	seen := map[string]bool{}
	for _, r := range recs {
		seen[r.payload] = true
	}
	if len(recs) != 400 || len(seen) != 400 {
		t.Fatalf("replayed %d records (%d distinct), want 400", len(recs), len(seen))
	}
	t.Logf("400 synced appends from 8 goroutines took %d creates", st.creates.Load())
}

// countingStore counts creates and can fail them: fail is consulted
// before each (before: nothing applied) and lose after each (applied,
// answer lost).
type countingStore struct {
	objstore.Store
	creates    atomic.Int64
	mu         sync.Mutex
	fail, lose func(name string) bool
}

func (s *countingStore) Create(ctx context.Context, name string, r io.ReaderAt, size int64) error {
	s.creates.Add(1)
	s.mu.Lock()
	fail, lose := s.fail, s.lose
	s.mu.Unlock()
	if fail != nil && fail(name) {
		return fmt.Errorf("injected: connection refused")
	}
	err := s.Store.Create(ctx, name, r, size)
	if err == nil && lose != nil && lose(name) {
		return fmt.Errorf("%w: injected lost answer", objstore.ErrUnknownOutcome)
	}
	return err
}

func (s *countingStore) set(fail, lose func(string) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail, s.lose = fail, lose
}

func TestObjectWALStoreDownThenBack(t *testing.T) {
	st := &countingStore{Store: memStore(t, vfs.NewStrictMem())}
	w := openObj(t, st, 1)
	defer w.Close()
	first, err := w.Append(1, 1, []byte("before"))
	if err != nil || w.SyncTo(first) != nil {
		t.Fatal(err)
	}
	down := make(chan struct{})
	var once sync.Once
	st.set(func(string) bool { once.Do(func() { close(down) }); return true }, nil)
	pos, err := w.Append(1, 1, []byte("while down"))
	if err != nil {
		t.Fatal(err)
	}
	err = w.SyncTo(pos)
	if !errors.Is(err, ErrStoreDown) || !strings.Contains(err.Error(), "create WAL object") {
		t.Fatalf("SyncTo while down: %v; want ErrStoreDown naming the object", err)
	}
	if _, err := w.Append(1, 1, []byte("refused")); !errors.Is(err, ErrStoreDown) {
		t.Fatalf("Append while down: %v, want ErrStoreDown", err)
	}
	if !errors.Is(w.NoSpace(), ErrStoreDown) {
		t.Fatalf("NoSpace while down: %v", w.NoSpace())
	}
	// Back, but the first create's answer is lost: the WAL retries the
	// same name and recognises its own object.
	var lost atomic.Bool
	st.set(nil, func(string) bool { return lost.CompareAndSwap(false, true) })
	waitFor(t, func() bool { return w.NoSpace() == nil || w.Err() != nil })
	if err := w.SyncTo(pos); err != nil {
		t.Fatalf("SyncTo once the store is back: %v", err)
	}
	if names := objectNames(t, st); len(names) != 2 {
		t.Fatalf("objects %v, want two", names)
	}
}

// waitFor polls cond, bounded: the WAL's retry loop has no signal to wait
// on from outside.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition never held in 30s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestObjectWALCloseWhileStoreDownGivesUp(t *testing.T) {
	st := &countingStore{Store: memStore(t, vfs.NewStrictMem())}
	st.set(func(string) bool { return true }, nil)
	w := openObj(t, st, 1)
	if _, err := w.Append(1, 1, []byte("never durable")); err != nil {
		t.Fatal(err)
	}
	go w.SyncTo(1)
	waitFor(t, func() bool { return w.NoSpace() != nil })
	err := w.Close()
	if !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "never durable") {
		t.Fatalf("Close with the store down: %v", err)
	}
}

func TestObjectWALRefusesNewerEpoch(t *testing.T) {
	st := memStore(t, vfs.NewStrictMem())
	w := openObj(t, st, 3)
	if _, err := w.Append(1, 1, []byte("x")); err != nil || w.SyncTo(1) != nil {
		t.Fatal(err)
	}
	w.Close()
	_, err := OpenObjects(context.Background(), ObjectOptions{Store: st, Prefix: objPrefix, Epoch: 2})
	if !errors.Is(err, ErrNewerEpoch) {
		t.Fatalf("open epoch 2 over epoch 3's objects: %v, want ErrNewerEpoch", err)
	}
}

// A zombie of epoch 1 creates objects after epoch 2 opened: they are
// replayed in position order beside epoch 2's, lower epoch first, for the
// engine's rules to judge; RemoveThrough deletes only what is wholly at
// or below the cursor, of either epoch.
func TestObjectWALZombieObjectsAndRemove(t *testing.T) {
	st := memStore(t, vfs.NewStrictMem())
	zombie := openObj(t, st, 1)
	for i := range 3 {
		p, _ := zombie.Append(1, 1, fmt.Appendf(nil, "z%d", i))
		if err := zombie.SyncTo(p); err != nil {
			t.Fatal(err)
		}
	}
	succ := openObj(t, st, 2)
	defer succ.Close()
	start := succ.Tail() // 3
	for i := range 2 {
		p, _ := zombie.Append(1, 1, fmt.Appendf(nil, "late%d", i))
		if err := zombie.SyncTo(p); err != nil {
			t.Fatal(err)
		}
	}
	zombie.Close()
	for i := range 3 {
		p, _ := succ.Append(2, 1, fmt.Appendf(nil, "s%d", i))
		if err := succ.SyncTo(p); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, r := range replayObj(t, succ, 0, 100) {
		got = append(got, fmt.Sprintf("%d@%d:%s", r.h.FirstPos, r.h.Epoch, r.payload))
	}
	want := "1@1:z0 2@1:z1 3@1:z2 4@1:late0 4@2:s0 5@1:late1 5@2:s1 6@2:s2"
	if strings.Join(got, " ") != want {
		t.Fatalf("replay order\n got %s\nwant %s", strings.Join(got, " "), want)
	}
	if err := succ.RemoveThrough(start + 1); err != nil {
		t.Fatal(err)
	}
	names := objectNames(t, st)
	for _, n := range names {
		_, _, last, _ := parseObjectName(n)
		if last <= start+1 {
			t.Fatalf("object %s left after RemoveThrough(%d)", n, start+1)
		}
	}
	if len(names) != 3 {
		t.Fatalf("objects after RemoveThrough(%d): %v, want late1, s1, s2", start+1, names)
	}
}

func TestObjectWALDamageIsRefused(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, st objstore.Store, names []string)
		want   error
	}{
		{"flipped byte", func(t *testing.T, st objstore.Store, names []string) {
			replaceObject(t, st, objPrefix+names[1], func(b []byte) { b[len(b)-1] ^= 1 })
		}, errChecksum},
		{"missing middle object", func(t *testing.T, st objstore.Store, names []string) {
			if err := st.Delete(context.Background(), objPrefix+names[1]); err != nil {
				t.Fatal(err)
			}
		}, errGap},
		{"name claims more than it holds", func(t *testing.T, st objstore.Store, names []string) {
			data := readAll(t, st, objPrefix+names[1])
			e, f, l, _ := parseObjectName(names[1])
			st.Delete(context.Background(), objPrefix+names[1])
			create(t, st, objPrefix+objectName(e, f, l+1), data)
		}, errInvalid},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := memStore(t, vfs.NewStrictMem())
			w := openObj(t, st, 1)
			for i := range 3 {
				p, _ := w.Append(1, 1, fmt.Appendf(nil, "r%d", i))
				if err := w.SyncTo(p); err != nil {
					t.Fatal(err)
				}
			}
			w.Close()
			c.damage(t, st, objectNames(t, st))
			w2 := openObj(t, st, 2)
			defer w2.Close()
			err := w2.Replay(0, 10, func(Header, []byte) error { return nil })
			if !errors.Is(err, ErrCorruption) || !errors.Is(err, c.want) || !strings.Contains(err.Error(), objPrefix) {
				t.Fatalf("replay of damaged objects: %v; want ErrCorruption (%v) naming the object", err, c.want)
			}
		})
	}
}

func readAll(t *testing.T, st objstore.Store, name string) []byte {
	t.Helper()
	b, err := readObject(context.Background(), st, name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func create(t *testing.T, st objstore.Store, name string, b []byte) {
	t.Helper()
	if err := st.Create(context.Background(), name, bytes.NewReader(b), int64(len(b))); err != nil {
		t.Fatal(err)
	}
}

func replaceObject(t *testing.T, st objstore.Store, name string, mod func([]byte)) {
	t.Helper()
	b := readAll(t, st, name)
	mod(b)
	if err := st.Delete(context.Background(), name); err != nil {
		t.Fatal(err)
	}
	create(t, st, name, b)
}

// RemoveThrough with the cursor at the tail keeps the tail's object, so
// that the next epoch continues positions after it instead of reusing
// committed ones.
func TestObjectWALRemoveKeepsTheTail(t *testing.T) {
	st := memStore(t, vfs.NewStrictMem())
	w := openObj(t, st, 1)
	for i := range 3 {
		p, _ := w.Append(1, 2, fmt.Appendf(nil, "r%d", i))
		if err := w.SyncTo(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.RemoveThrough(w.Tail()); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if names := objectNames(t, st); len(names) != 1 || !strings.HasSuffix(names[0], objectName(1, 5, 6)) {
		t.Fatalf("objects after RemoveThrough(tail): %v; want the tail's alone", names)
	}
	w2 := openObj(t, st, 2)
	defer w2.Close()
	if first, err := w2.Append(1, 1, []byte("next")); err != nil || first != 7 {
		t.Fatalf("first append of epoch 2 at %d (%v); want 7", first, err)
	}
}
