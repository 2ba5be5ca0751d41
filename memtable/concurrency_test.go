package memtable

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rollwal/rollwal/schema"
)

// accepted is what the append path recorded for one stored row.
type accepted struct {
	id       string
	epoch    uint64
	released int64 // releases started before the Filter that let the row in
}

// flushedRow is what the flusher read for one row of a sealed memtable.
type flushedRow struct {
	id    string
	epoch uint64
	gen   uint64
}

// TestConcurrentAppendAndFlush runs the engine's pattern under -race:
// producers Filter and Insert under one shard lock, waiting on a small
// Budget, while a flusher Rotates, reads sealed memtables without locks and
// Releases them, and readers poll the active memtable. Afterwards every
// stored row was flushed exactly once with its _seq and _epoch, and an id
// was stored again only after the generation holding it had been released.
func TestConcurrentAppendAndFlush(t *testing.T) {
	const producers, batches, universe = 8, 150, 400
	budget := NewBudget(24 << 10)
	set := NewSet(testSchema, 1, budget, nil)
	defer set.Close()

	var (
		shardMu             sync.Mutex   // the engine's per-shard lock
		nextSeq             uint64       = 1
		stored                           = map[uint64]accepted{} // by _seq, under shardMu
		releases            atomic.Int64                         // Release calls started
		sent, kept, dropped atomic.Int64
		waited              atomic.Int64 // Acquires that met backpressure and waited
	)
	flushReq := make(chan struct{}, 1)
	requestFlush := func() {
		select {
		case flushReq <- struct{}{}:
		default:
		}
	}
	stop := make(chan struct{})
	fl := &flusher{set: set, releases: &releases, rows: map[uint64]flushedRow{}, releasedAt: map[uint64]int64{}}
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		fl.run(t, flushReq, stop)
	}()
	readersDone := startReaders(t, set, 2, stop)

	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(p), 42))
			for i := range batches {
				ids := make([]string, 1+rng.IntN(16))
				for j := range ids {
					ids[j] = fmt.Sprintf("id-%d", rng.IntN(universe))
				}
				rows := make([]schema.Row, len(ids))
				for j, id := range ids {
					rows[j] = row(id)
				}
				b, err := testSchema.Build(rows)
				if err != nil {
					t.Error(err)
					return
				}
				sent.Add(int64(b.Len()))

				shardMu.Lock()
				fresh, dups := set.Filter(b)
				seen := releases.Load()
				cost := EstimateBytes(fresh)
				err = budget.Acquire(t.Context(), cost, false)
				if errors.Is(err, ErrBackpressure) {
					requestFlush()
					waited.Add(1)
					ctx, cancel := context.WithTimeout(t.Context(), patience)
					err = budget.Acquire(ctx, cost, true)
					cancel()
				}
				if err != nil {
					shardMu.Unlock()
					t.Error(err)
					return
				}
				first, epoch := nextSeq, uint64(p+1)
				nextSeq += uint64(fresh.Len())
				for j, id := range fresh.IDs {
					stored[first+uint64(j)] = accepted{id: id, epoch: epoch, released: seen}
				}
				set.Insert(fresh, first, epoch, fmt.Sprintf("producer-%d", p), int64(i))
				shardMu.Unlock()

				kept.Add(int64(fresh.Len()))
				dropped.Add(int64(dups))
				if i%10 == 9 {
					requestFlush()
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	<-flushed
	<-readersDone
	if t.Failed() {
		return
	}

	if kept.Load()+dropped.Load() != sent.Load() || dropped.Load() == 0 || waited.Load() == 0 {
		t.Errorf("sent %d rows, kept %d, dropped %d, waited %d times: the test did not test", sent.Load(), kept.Load(), dropped.Load(), waited.Load())
	}
	if set.Len() != 0 || set.Bytes() != 0 || budget.Used() != 0 {
		t.Errorf("after the last flush: %d rows, %d bytes, budget %d used", set.Len(), set.Bytes(), budget.Used())
	}
	checkFlushedAgainstStored(t, stored, fl)
	t.Logf("%d rows sent, %d stored, %d dropped as duplicates, %d waits for budget, %d generations",
		sent.Load(), kept.Load(), dropped.Load(), waited.Load(), len(fl.releasedAt))
}

// flusher is the flush goroutine: on request, and once more at stop, it
// seals the active memtable and flushes and releases every sealed one.
type flusher struct {
	set        *Set
	releases   *atomic.Int64
	rows       map[uint64]flushedRow // by _seq
	releasedAt map[uint64]int64      // generation → value of releases when its Release started
	lastSeq    uint64
}

func (f *flusher) run(t *testing.T, req <-chan struct{}, stop <-chan struct{}) {
	for {
		select {
		case <-req:
			f.flushAll(t)
		case <-stop:
			f.flushAll(t)
			return
		}
	}
}

func (f *flusher) flushAll(t *testing.T) {
	f.set.Rotate()
	for m := f.set.Oldest(); m != nil; m = f.set.Oldest() {
		f.flushOne(t, m)
		f.releasedAt[m.Generation()] = f.releases.Add(1)
		if err := f.set.Release(m.Generation()); err != nil {
			t.Error(err)
			return
		}
	}
}

// flushOne reads a sealed memtable without any lock, as the generation
// writer does, and records its rows.
func (f *flusher) flushOne(t *testing.T, m *Memtable) {
	rows, seqs, epochs := m.Rows(), m.Seqs(), m.Epochs()
	if err := rowsMismatch(rows, rows.IDs...); err != nil || len(seqs) != rows.Len() || len(epochs) != rows.Len() {
		t.Errorf("generation %d: %d ids, %d seqs, %d epochs; %v", m.Generation(), rows.Len(), len(seqs), len(epochs), err)
		return
	}
	for i, seq := range seqs {
		if seq <= f.lastSeq {
			t.Errorf("generation %d: _seq %d after %d", m.Generation(), seq, f.lastSeq)
		}
		f.lastSeq = seq
		f.rows[seq] = flushedRow{id: rows.IDs[i], epoch: epochs[i], gen: m.Generation()}
	}
}

// startReaders polls the active memtable and the set until stop, checking
// that every snapshot is whole.
func startReaders(t *testing.T, set *Set, n int, stop <-chan struct{}) <-chan struct{} {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				m := set.Active()
				if rows := m.Rows(); rowsMismatch(rows, rows.IDs...) != nil {
					t.Error(rowsMismatch(rows, rows.IDs...))
					return
				}
				if first, last := m.SeqRange(); first > last {
					t.Errorf("SeqRange %d > %d", first, last)
				}
				_, _, _ = m.Bytes(), m.CreatedAt(), m.SourceOffsets()
				_, _, _ = set.Len(), set.Bytes(), set.Oldest()
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return done
}

func checkFlushedAgainstStored(t *testing.T, stored map[uint64]accepted, f *flusher) {
	if len(stored) != len(f.rows) {
		t.Errorf("%d rows stored, %d flushed", len(stored), len(f.rows))
	}
	last := map[string]uint64{} // id → generation of its latest occurrence
	for _, seq := range slices.Sorted(maps.Keys(stored)) {
		a, r := stored[seq], f.rows[seq]
		if r.id != a.id || r.epoch != a.epoch {
			t.Fatalf("_seq %d: stored %q epoch %d, flushed %q epoch %d", seq, a.id, a.epoch, r.id, r.epoch)
		}
		if g, ok := last[a.id]; ok && a.released < f.releasedAt[g] {
			t.Fatalf("_seq %d: %q stored again while generation %d still held it", seq, a.id, g)
		}
		last[a.id] = r.gen
	}
}

// TestConcurrentNestedInsertAndSnapshot is the engine's pattern with nested
// rows, under -race: producers Filter and Insert under one shard lock while
// readers snapshot the active memtable and a flusher rotates, reads the
// sealed memtables and releases them. A row's values are a function of its
// id, so every snapshot can be checked without the lock; a snapshot that
// shared a nested vector with the memtable, or covered memory an insert
// writes, would race or read wrong values.
func TestConcurrentNestedInsertAndSnapshot(t *testing.T) {
	const producers, batches, universe = 4, 60, 150
	ids := make([]string, universe)
	for k := range ids {
		ids[k] = fmt.Sprintf("id-%d", k)
	}
	want := nestedRowsOf(t, ids...) // row k holds id k's values
	index := make(map[string]int, universe)
	for k, id := range ids {
		index[id] = k
	}
	checkRows := func(rows *schema.Batch) error {
		srcs := make([]source, rows.Len())
		for i, id := range rows.IDs {
			k, ok := index[id]
			if !ok {
				return fmt.Errorf("row %d has id %q, which no producer sent", i, id)
			}
			srcs[i] = source{want, k}
		}
		return matches(rows, srcs)
	}

	set := NewSet(nestedSchema, 1, NewBudget(1<<40), nil)
	defer set.Close()
	var (
		shardMu          sync.Mutex
		nextSeq          uint64 = 1
		kept, dropped    atomic.Int64
		flushed, flushes atomic.Int64
		reads            atomic.Int64 // snapshots the readers checked
	)
	flushReq := make(chan struct{}, 1)
	stop := make(chan struct{})
	var others sync.WaitGroup
	others.Go(func() { // the flusher
		for {
			var last bool
			select {
			case <-flushReq:
			case <-stop:
				last = true
			}
			set.Rotate()
			for m := set.Oldest(); m != nil; m = set.Oldest() {
				if err := checkRows(m.Rows()); err != nil {
					t.Errorf("generation %d: %v", m.Generation(), err)
				}
				flushed.Add(int64(m.Len()))
				if err := set.Release(m.Generation()); err != nil {
					t.Error(err)
				}
			}
			flushes.Add(1)
			if last {
				return
			}
		}
	})
	for range 2 { // readers of the active memtable
		others.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := checkRows(set.Active().Rows()); err != nil {
					t.Errorf("active memtable: %v", err)
					return
				}
				reads.Add(1)
			}
		})
	}

	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(p), 43))
			for i := range batches {
				pick := make([]string, 1+rng.IntN(8))
				for j := range pick {
					pick[j] = ids[rng.IntN(universe)]
				}
				b := nestedRowsOf(t, pick...)
				shardMu.Lock()
				fresh, dups := set.Filter(b)
				if err := set.budget.Acquire(t.Context(), EstimateBytes(fresh), false); err != nil {
					shardMu.Unlock()
					t.Error(err)
					return
				}
				set.Insert(fresh, nextSeq, 1, "", 0)
				nextSeq += uint64(fresh.Len())
				shardMu.Unlock()
				kept.Add(int64(fresh.Len()))
				dropped.Add(int64(dups))
				if i%5 == 4 {
					select {
					case flushReq <- struct{}{}:
					default:
					}
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	others.Wait()
	if t.Failed() {
		return
	}
	if flushed.Load() != kept.Load() || dropped.Load() == 0 || flushes.Load() < 2 || reads.Load() == 0 {
		t.Errorf("%d rows kept, %d flushed, %d dropped, %d flushes, %d snapshots read: the test did not test",
			kept.Load(), flushed.Load(), dropped.Load(), flushes.Load(), reads.Load())
	}
	t.Logf("%d rows kept, %d dropped as duplicates, %d flushes, %d snapshots read", kept.Load(), dropped.Load(), flushes.Load(), reads.Load())
}

// nestedRowsOf builds a batch of nestedSchema rows whose values are a
// function of their ids alone.
func nestedRowsOf(t testing.TB, ids ...string) *schema.Batch {
	t.Helper()
	rows := make([]schema.Row, len(ids))
	for i, id := range ids {
		h := fnv.New64a()
		h.Write([]byte(id))
		rows[i] = nestedRow(rand.New(rand.NewPCG(h.Sum64(), 0)), id)
	}
	b, err := nestedSchema.Build(rows)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
