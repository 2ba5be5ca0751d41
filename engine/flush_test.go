package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollwal/rollwal/memtable"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/vfs"
)

// waitFor polls cond until it holds or a generous bound passes; the bound
// only turns a hang into a failure, it never decides the outcome.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestFlushBySize(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(vfs.NewStrictMem(), tableName(t, ""))
	opts.FlushBytes, opts.Schema = 64<<10, schema.Rollout()
	h := openHost(t, opts)
	defer h.Close(ctx)
	s := mustOpen(t, h, "s0")
	var appended int64
	for i := 0; appended < 2*opts.FlushBytes; i++ {
		b := rows("z", i*50, 50)
		if _, err := s.Append(ctx, b, Source{}); err != nil {
			t.Fatal(err)
		}
		built, _ := opts.Schema.Build(b)
		appended += memtable.EstimateBytes(built)
	}
	waitFor(t, "a size-triggered generation", func() bool { return len(s.Manifest().Flushed) > 0 })
}

// TestMemtableSealedWhileFlushBusy: while the flusher is busy (here: held
// off), appends keep going, but the active memtable is sealed once it holds
// twice FlushBytes, so no generation — and no flush's memory — grows
// without bound; the sealed memtables are then committed in order.
func TestMemtableSealedWhileFlushBusy(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(vfs.NewStrictMem(), tableName(t, ""))
	opts.FlushBytes, opts.FlushAge, opts.Schema = 32<<10, -1, schema.Rollout()
	h := openHost(t, opts)
	defer h.Close(ctx)
	s := mustOpen(t, h, "s0")
	s.flushMu.Lock() // the flusher is busy
	var largest int64
	for i := range 100 {
		b := rows("z", i*20, 20)
		if _, err := s.Append(ctx, b, Source{}); err != nil {
			s.flushMu.Unlock()
			t.Fatal(err)
		}
		built, _ := opts.Schema.Build(b)
		largest = max(largest, memtable.EstimateBytes(built))
	}
	sealed := s.set.Sealed()
	active := s.set.Active().Bytes()
	s.flushMu.Unlock()
	if len(sealed) < 2 {
		t.Fatalf("%d memtables sealed while the flusher was busy, want several", len(sealed))
	}
	for _, m := range append(sealed, s.set.Active()) {
		if m.Bytes() >= 2*opts.FlushBytes+largest {
			t.Fatalf("memtable of generation %d holds %d bytes, over 2×FlushBytes + one batch (%d)", m.Generation(), m.Bytes(), 2*opts.FlushBytes+largest)
		}
	}
	if active >= 2*opts.FlushBytes {
		t.Fatalf("active memtable holds %d bytes, want < %d", active, 2*opts.FlushBytes)
	}
	last := sealed[len(sealed)-1].Generation()
	waitFor(t, "the sealed memtables committed", func() bool {
		f := s.Manifest().Flushed
		return len(f) > 0 && f[len(f)-1].Number >= last
	})
}

// fakeClock is a clock the test moves by hand.
type fakeClock struct{ now atomic.Int64 }

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.now.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.now.Add(int64(d)) }

func TestFlushByAge(t *testing.T) {
	ctx := context.Background()
	clock := &fakeClock{}
	clock.now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	opts := testOptions(vfs.NewStrictMem(), tableName(t, ""))
	opts.FlushAge, opts.Now = time.Minute, clock.Now
	h := openHost(t, opts)
	defer h.Close(ctx)
	s := mustOpen(t, h, "s0")
	if _, err := s.Append(ctx, rows("age", 0, 5), Source{}); err != nil {
		t.Fatal(err)
	}
	// The flusher's tick runs in real time, but only the fake clock decides
	// whether the memtable is old enough: before the advance nothing is due.
	if s.due() {
		t.Fatal("a fresh memtable is due for flush")
	}
	clock.Advance(2 * time.Minute)
	waitFor(t, "an age-triggered generation", func() bool { return len(s.Manifest().Flushed) == 1 })
}

// TestBackpressure: when flushes cannot free memory, appends fail with
// ErrBackpressure instead of growing without bound, and nothing of the
// refused batch is written.
func TestBackpressure(t *testing.T) {
	ctx := context.Background()
	inj := &vfs.Injector{}
	opts := testOptions(vfs.Inject(vfs.NewStrictMem(), inj), tableName(t, ""))
	opts.FlushBytes, opts.MemoryBudget = 256<<10, 256<<10
	opts.WALSegmentSize = 64 << 20 // no segment roll: every create below is a generation file
	h := openHost(t, opts)
	defer h.Close(ctx)
	s := mustOpen(t, h, "s0")
	// Every generation file create fails: the memtables cannot drain.
	for n := inj.Count(vfs.OpCreate) + 1; n < inj.Count(vfs.OpCreate)+10000; n++ {
		inj.FailAt(n, vfs.OpCreate, errors.New("no generation files today"))
	}
	var err error
	for i := 0; err == nil && i < 10000; i++ {
		_, err = s.Append(ctx, rows("bp", i*20, 20), Source{})
	}
	if !errors.Is(err, ErrBackpressure) {
		t.Fatalf("append over an exhausted budget: %v; want ErrBackpressure", err)
	}
	before := s.Status().WALTail
	if _, err := s.Append(ctx, rows("bp-late", 0, 20), Source{}); !errors.Is(err, ErrBackpressure) {
		t.Fatalf("second append: %v", err)
	}
	if after := s.Status().WALTail; after != before {
		t.Fatalf("a refused append moved the WAL tail %d→%d", before, after)
	}
	if used := h.budget.Used(); used > opts.MemoryBudget {
		t.Fatalf("budget overrun: %d > %d", used, opts.MemoryBudget)
	}
}

// TestManyShards: one host serves several shards concurrently; each gets
// its own epoch, WAL and generations.
func TestManyShards(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewStrictMem()
	opts := testOptions(fs, tableName(t, ""))
	h := openHost(t, opts)
	var wg sync.WaitGroup
	errs := make(chan error, 4*4)
	for i := range 4 {
		s := mustOpen(t, h, fmt.Sprintf("s%d", i))
		for p := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for b := range 10 {
					if _, err := s.Append(ctx, rows(fmt.Sprintf("%s-p%d-b%d", s.Name(), p, b), 0, 25), Source{}); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		ids, m := committed(t, fs, opts, fmt.Sprintf("s%d", i))
		if len(ids) != 1000 || m.WriterEpoch != 1 {
			t.Fatalf("shard s%d: %d ids at epoch %d; want 1000 at epoch 1", i, len(ids), m.WriterEpoch)
		}
	}
}
