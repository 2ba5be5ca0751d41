package memtable

import (
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rollwal/rollwal/schema"
)

func TestFilterDropsIDsOfActiveAndSealedMemtables(t *testing.T) {
	s, _ := newTestSet(1, 1<<20)
	defer s.Close()
	insert(t, s, 1, 1, "a", "b")
	s.Rotate() // a, b are in sealed generation 1
	insert(t, s, 3, 1, "c", "d~")

	in := batch(t, "a", "e", "c", "e", "f~", "d~", "a", "g")
	fresh, dups := s.Filter(in)
	if dups != 5 {
		t.Errorf("dups = %d, want 5", dups)
	}
	checkRows(t, fresh, "e", "f~", "g")
	checkRows(t, in, "a", "e", "c", "e", "f~", "d~", "a", "g") // the input is untouched
	if got := EstimateBytes(in) - EstimateBytes(fresh); got != EstimateBytes(batch(t, "a", "c", "e", "d~", "a")) {
		t.Errorf("dropped rows cost %d, not the estimate of the same rows", got)
	}
}

func TestFilterWithinBatch(t *testing.T) {
	s, _ := newTestSet(1, 1<<20)
	defer s.Close()
	fresh, dups := s.Filter(batch(t, "x", "y", "x", "x", "z", "y"))
	if dups != 3 {
		t.Errorf("dups = %d, want 3", dups)
	}
	checkRows(t, fresh, "x", "y", "z")
	// The scratch state of one Filter must not leak into the next.
	fresh, dups = s.Filter(batch(t, "x", "y"))
	if dups != 0 {
		t.Errorf("second filter: dups = %d, want 0 (nothing was inserted)", dups)
	}
	checkRows(t, fresh, "x", "y")
}

func TestFilterWithoutDuplicatesReturnsTheBatch(t *testing.T) {
	s, _ := newTestSet(1, 1<<20)
	defer s.Close()
	insert(t, s, 1, 1, "a")
	in := batch(t, "b", "c")
	if fresh, dups := s.Filter(in); fresh != in || dups != 0 {
		t.Errorf("Filter = %p, %d; want the input batch %p, 0", fresh, dups, in)
	}
	// A batch whose first row is the only one kept.
	fresh, dups := s.Filter(batch(t, "b", "a", "a"))
	if dups != 2 {
		t.Errorf("dups = %d, want 2", dups)
	}
	checkRows(t, fresh, "b")
}

func TestReleaseForgetsIDs(t *testing.T) {
	s, _ := newTestSet(1, 1<<20)
	defer s.Close()
	insert(t, s, 1, 1, "a")
	s.Rotate()
	insert(t, s, 2, 1, "b")
	s.Rotate()
	if err := s.Release(1); err != nil {
		t.Fatal(err)
	}
	fresh, dups := s.Filter(batch(t, "a", "b"))
	if dups != 1 {
		t.Errorf("dups = %d, want 1", dups)
	}
	checkRows(t, fresh, "a") // a left with generation 1; b is still in generation 2
}

// Insert does not deduplicate: an id inserted again without Filter is in two
// generations, and releasing the older one must not forget the newer.
func TestReleaseKeepsIDsHeldByANewerGeneration(t *testing.T) {
	s, budget := newTestSet(1, 1<<20)
	defer s.Close()
	for i, seq := range []uint64{1, 2} {
		if err := budget.Acquire(t.Context(), EstimateBytes(batch(t, "a")), false); err != nil {
			t.Fatal(err)
		}
		s.Insert(batch(t, "a"), seq, 1, "", 0)
		if i == 0 {
			s.Rotate()
		}
	}
	if err := s.Release(1); err != nil {
		t.Fatal(err)
	}
	if _, dups := s.Filter(batch(t, "a")); dups != 1 {
		t.Error("releasing generation 1 forgot the id that generation 2 holds")
	}
}

func TestRotateOldestRelease(t *testing.T) {
	s, budget := newTestSet(7, 1<<20)
	defer s.Close()
	if s.Oldest() != nil || len(s.Sealed()) != 0 {
		t.Fatal("a new set has sealed memtables")
	}
	if err := s.Release(7); !errors.Is(err, ErrOutOfOrder) {
		t.Errorf("Release of the active generation: %v, want ErrOutOfOrder", err)
	}
	insert(t, s, 1, 1, "a", "b")
	m7 := s.Rotate()
	if m7.Generation() != 7 || !m7.Sealed() || m7.Len() != 2 {
		t.Fatalf("Rotate returned generation %d, sealed %t, %d rows; want 7, true, 2", m7.Generation(), m7.Sealed(), m7.Len())
	}
	if a := s.Active(); a.Generation() != 8 || a.Sealed() || a.Len() != 0 {
		t.Fatalf("active is generation %d, sealed %t, %d rows; want 8, false, 0", a.Generation(), a.Sealed(), a.Len())
	}
	m8 := s.Rotate() // empty, and still returned
	if m8.Generation() != 8 || m8.Len() != 0 || m8.Bytes() != 0 {
		t.Fatalf("empty rotate: generation %d, %d rows, %d bytes", m8.Generation(), m8.Len(), m8.Bytes())
	}
	insert(t, s, 3, 1, "c")
	m9 := s.Rotate()
	if got := gens(s.Sealed()); !slices.Equal(got, []uint64{7, 8, 9}) || s.Oldest() != m7 {
		t.Fatalf("sealed %v, want [7 8 9] with 7 oldest", got)
	}
	if s.Len() != 3 || s.Bytes() != m7.Bytes()+m9.Bytes() || budget.Used() != s.Bytes() {
		t.Fatalf("set: %d rows, %d bytes, budget %d; want 3 rows, %d bytes", s.Len(), s.Bytes(), budget.Used(), m7.Bytes()+m9.Bytes())
	}

	for _, g := range []uint64{8, 9, 10, 6} {
		err := s.Release(g)
		if !errors.Is(err, ErrOutOfOrder) || !strings.Contains(err.Error(), "oldest sealed generation is 7") {
			t.Errorf("Release(%d) = %v, want ErrOutOfOrder naming 7", g, err)
		}
	}
	held := m7.Bytes()
	if err := s.Release(7); err != nil {
		t.Fatal(err)
	}
	if m7.Bytes() != 0 || budget.Used() != m9.Bytes() || s.Bytes() != m9.Bytes() || s.Len() != 1 {
		t.Fatalf("after Release(7): memtable %d bytes, budget %d, set %d bytes, %d rows; want 0, %d, %d, 1",
			m7.Bytes(), budget.Used(), s.Bytes(), s.Len(), m9.Bytes(), m9.Bytes())
	}
	if held == 0 {
		t.Fatal("generation 7 held no bytes")
	}
	checkRows(t, m7.Rows(), "a", "b") // readable after release by whoever holds it
	if err := s.Release(7); !errors.Is(err, ErrOutOfOrder) {
		t.Errorf("second Release(7) = %v, want ErrOutOfOrder", err)
	}
	for _, g := range []uint64{8, 9} {
		if err := s.Release(g); err != nil {
			t.Fatalf("Release(%d): %v", g, err)
		}
	}
	if s.Oldest() != nil || budget.Used() != 0 || s.Bytes() != 0 || s.Len() != 0 {
		t.Fatalf("all released: oldest %v, budget %d, set %d bytes, %d rows", s.Oldest(), budget.Used(), s.Bytes(), s.Len())
	}
}

func gens(ms []*Memtable) []uint64 {
	out := make([]uint64, len(ms))
	for i, m := range ms {
		out[i] = m.Generation()
	}
	return out
}

func TestSeqAndEpochColumnsLineUp(t *testing.T) {
	s, _ := newTestSet(1, 1<<20)
	defer s.Close()
	if f, l := s.Active().SeqRange(); f != 0 || l != 0 {
		t.Fatalf("empty SeqRange = %d, %d", f, l)
	}
	insert(t, s, 100, 3, "a", "b~", "c")
	insert(t, s, 110, 4, "b~", "d", "e") // b~ is dropped: d, e get 110, 111
	insert(t, s, 200, 4, "f~")
	m := s.Rotate()
	rows, seqs, epochs := m.Rows(), m.Seqs(), m.Epochs()
	checkRows(t, rows, "a", "b~", "c", "d", "e", "f~")
	if want := []uint64{100, 101, 102, 110, 111, 200}; !slices.Equal(seqs, want) {
		t.Errorf("seqs %v, want %v", seqs, want)
	}
	if want := []uint64{3, 3, 3, 4, 4, 4}; !slices.Equal(epochs, want) {
		t.Errorf("epochs %v, want %v", epochs, want)
	}
	if f, l := m.SeqRange(); f != 100 || l != 200 {
		t.Errorf("SeqRange = %d, %d; want 100, 200", f, l)
	}
}

func TestNullsStayAligned(t *testing.T) {
	s, _ := newTestSet(1, 1<<20)
	defer s.Close()
	insert(t, s, 1, 1, "a", "b")
	if s.Active().Rows().Cols[2].Nulls != nil {
		t.Fatal("a column without nulls got a null bitmap")
	}
	insert(t, s, 3, 1, "c~", "d")
	insert(t, s, 5, 1, "e")
	checkRows(t, s.Active().Rows(), "a", "b", "c~", "d", "e")
}

func TestRowsIsASnapshot(t *testing.T) {
	s, _ := newTestSet(1, 1<<20)
	defer s.Close()
	insert(t, s, 1, 1, "a", "b")
	rows, seqs := s.Active().Rows(), s.Active().Seqs()
	insert(t, s, 3, 1, "c~", "d")
	checkRows(t, rows, "a", "b")
	if len(seqs) != 2 || cap(seqs) != 2 {
		t.Errorf("seqs snapshot has len %d, cap %d; want 2, 2", len(seqs), cap(seqs))
	}
	for c := range rows.Cols {
		if v := rows.Cols[c]; v.Nulls != nil || cap(v.Str) > 2 || cap(v.F64) > 2 {
			t.Errorf("column %d of the snapshot changed or can grow in place", c)
		}
	}
}

func TestSourceOffsetsKeepTheMaximum(t *testing.T) {
	s, _ := newTestSet(1, 1<<20)
	defer s.Close()
	seq := uint64(0)
	put := func(source string, offset int64, ids ...string) {
		fresh, _ := s.Filter(batch(t, ids...))
		if err := s.budget.Acquire(t.Context(), EstimateBytes(fresh), false); err != nil {
			t.Fatal(err)
		}
		seq += 10
		s.Insert(fresh, seq, 1, source, offset)
	}
	put("kafka/0", 5, "a")
	put("kafka/0", 3, "b")
	put("kafka/1", 7, "c")
	put("", 99, "d")
	put("kafka/0", 9, "a") // a duplicate: no row, but the offset is covered
	m := s.Active()
	want := map[string]int64{"kafka/0": 9, "kafka/1": 7}
	if got := m.SourceOffsets(); !maps.Equal(got, want) {
		t.Errorf("SourceOffsets = %v, want %v", got, want)
	}
	m.SourceOffsets()["kafka/0"] = 1000 // a copy
	if got := m.SourceOffsets()["kafka/0"]; got != 9 {
		t.Errorf("SourceOffsets is not a copy: kafka/0 = %d", got)
	}
	s.Rotate()
	if got := s.Active().SourceOffsets(); len(got) != 0 || got == nil {
		t.Errorf("new active memtable has SourceOffsets %v, want empty", got)
	}
}

func TestCreatedAt(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	budget := NewBudget(1 << 20)
	s := NewSet(testSchema, 1, budget, clock.now)
	defer s.Close()
	s.Insert(batch(t), 0, 1, "src", 1) // no rows: not created
	if got := s.Active().CreatedAt(); !got.IsZero() {
		t.Fatalf("CreatedAt of an empty memtable = %v", got)
	}
	first := clock.t
	if err := budget.Acquire(t.Context(), EstimateBytes(batch(t, "a")), false); err != nil {
		t.Fatal(err)
	}
	s.Insert(batch(t, "a"), 1, 1, "", 0)
	clock.t = clock.t.Add(time.Minute)
	if err := budget.Acquire(t.Context(), EstimateBytes(batch(t, "b")), false); err != nil {
		t.Fatal(err)
	}
	s.Insert(batch(t, "b"), 2, 1, "", 0)
	if got := s.Active().CreatedAt(); !got.Equal(first) {
		t.Errorf("CreatedAt = %v, want the first row's %v", got, first)
	}
	s.Rotate()
	if got := s.Active().CreatedAt(); !got.IsZero() {
		t.Errorf("CreatedAt of the new active memtable = %v", got)
	}
}

func TestInsertChargesTheEstimate(t *testing.T) {
	s, budget := newTestSet(1, 1<<20)
	b1, b2 := batch(t, "a", "b~"), batch(t, "c", strings.Repeat("x", 1000))
	want := EstimateBytes(b1) + EstimateBytes(b2)
	if err := budget.Acquire(t.Context(), want, false); err != nil {
		t.Fatal(err)
	}
	s.Insert(b1, 1, 1, "", 0)
	s.Insert(b2, 3, 1, "", 0)
	if got := s.Active().Bytes(); got != want {
		t.Errorf("memtable Bytes = %d, want %d", got, want)
	}
	if s.Bytes() != want || budget.Used() != want {
		t.Errorf("set %d bytes, budget %d used; want %d", s.Bytes(), budget.Used(), want)
	}
	s.Rotate()
	s.Close()
	if budget.Used() != 0 || s.Bytes() != 0 {
		t.Errorf("after Close: budget %d used, set %d bytes", budget.Used(), s.Bytes())
	}
	s.Close() // idempotent
	if err := s.Release(1); !errors.Is(err, ErrClosed) {
		t.Errorf("Release after Close = %v, want ErrClosed", err)
	}
	mustPanic(t, "closed", func() { s.Insert(batch(t, "z"), 10, 1, "", 0) })
}

func TestEstimateBytes(t *testing.T) {
	big := func(id string, n int) *schema.Batch {
		r := row(id)
		r["prompt"] = strings.Repeat("p", n)
		b, err := testSchema.Build([]schema.Row{r})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	whole := batch(t, "a", "bb~", "ccc")
	whole.AppendRow(big("d", 2*ownAllocBytes), 0)
	a, b := batch(t, "a", "bb~"), batch(t, "ccc")
	if got, want := EstimateBytes(whole), EstimateBytes(a)+EstimateBytes(b)+EstimateBytes(big("d", 2*ownAllocBytes)); got != want {
		t.Errorf("not additive: %d for the whole, %d for the parts", got, want)
	}
	if EstimateBytes(nil) != 0 || EstimateBytes(batch(t)) != 0 {
		t.Error("an empty batch costs something")
	}
	// id "a": its byte, rowBytes, "p-a" and "c-a" with headers, a float,
	// `{"id":"a"}` with its header, and two null flags.
	if got, want := EstimateBytes(batch(t, "a")), int64(1+rowBytes+3+16+3+16+8+10+16+2); got != want {
		t.Errorf("EstimateBytes of one row = %d, want %d", got, want)
	}
	// A string with an allocation of its own is rounded up to pages.
	small, large := EstimateBytes(big("e", 10)), EstimateBytes(big("e", ownAllocBytes+1))
	if got, want := large-small, int64(ownAllocBytes+pageBytes-10); got != want {
		t.Errorf("a prompt of %d bytes costs %d more than one of 10, want %d", ownAllocBytes+1, got, want)
	}
}

func TestInsertRefusesProgrammingErrors(t *testing.T) {
	s, _ := newTestSet(1, 1<<20)
	defer s.Close()
	insert(t, s, 10, 1, "a")
	mustPanic(t, "_seq 10 is not above the last inserted _seq 10", func() { s.Insert(batch(t, "b"), 10, 1, "", 0) })
	s.Rotate()
	mustPanic(t, "_seq 5 is not above", func() { s.Insert(batch(t, "b"), 5, 1, "", 0) })

	ragged := batch(t, "c", "d")
	ragged.Cols[0].Str = ragged.Cols[0].Str[:1]
	mustPanic(t, `memtable: column "prompt": prompt: 1 values for 2 rows`, func() { s.Insert(ragged, 20, 1, "", 0) })

	other := batch(t, "e")
	other.Schema = nil
	mustPanic(t, "another schema", func() { s.Insert(other, 30, 1, "", 0) })
	if s.Len() != 1 {
		t.Errorf("a refused insert changed the set: %d rows", s.Len())
	}
}

func TestIndexShrinksAfterABurst(t *testing.T) {
	s, _ := newTestSet(1, 1<<30)
	defer s.Close()
	ids := make([]string, 4*indexShrinkMin)
	for i := range ids {
		ids[i] = "id-" + strconv.Itoa(i)
	}
	insert(t, s, 1, 1, ids...)
	s.Rotate()
	insert(t, s, uint64(len(ids)+1), 1, "small")
	s.mu.Lock()
	peak := s.indexPeak
	s.mu.Unlock()
	if err := s.Release(1); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if peak != len(ids)+1 || s.indexPeak != 1 || len(s.index) != 1 || s.index["small"] != 2 {
		t.Errorf("peak %d before release; after: peak %d, index %v", peak, s.indexPeak, s.index)
	}
}
