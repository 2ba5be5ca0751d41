package memtable

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/rollwal/rollwal/schema"
)

// vectorSizes lists, for every vector of v depth first, the length (or
// with capacity, the capacity) of its value slice and of its offsets.
func vectorSizes(v *schema.Vector, out []int, capacity bool) []int {
	size := func(n, c int) int {
		if capacity {
			return c
		}
		return n
	}
	values := size(len(v.Str), cap(v.Str)) + size(len(v.I64), cap(v.I64)) + size(len(v.F64), cap(v.F64)) +
		size(len(v.Bool), cap(v.Bool)) + size(len(v.I32), cap(v.I32)) + size(len(v.F32), cap(v.F32))
	out = append(out, values, size(len(v.Offsets), cap(v.Offsets)))
	if v.Elem != nil {
		out = vectorSizes(v.Elem, out, capacity)
	}
	for f := range v.Fields {
		out = vectorSizes(&v.Fields[f], out, capacity)
	}
	return out
}

// dataPointers are the addresses of the value arrays of m's columns: they
// stay put while appends fit the capacity.
func dataPointers(v *schema.Vector, out []uintptr) []uintptr {
	out = append(out, uintptr(unsafe.Pointer(unsafe.SliceData(v.I32))), uintptr(unsafe.Pointer(unsafe.SliceData(v.Str))),
		uintptr(unsafe.Pointer(unsafe.SliceData(v.Offsets))))
	if v.Elem != nil {
		out = dataPointers(v.Elem, out)
	}
	for f := range v.Fields {
		out = dataPointers(&v.Fields[f], out)
	}
	return out
}

// A memtable after Rotate reserves, at its first insert, what its
// predecessor held: every vector's capacity at least the sealed one's
// length, so that a generation like the last grows no column (no array is
// moved), and its rows are still exactly the inserted ones.
func TestRotateReservesLikeThePredecessor(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	set := NewSet(nestedSchema, 1, NewBudget(1<<40), nil)
	defer set.Close()
	ids := func(prefix string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%s-%d", prefix, i)
		}
		return out
	}
	put := func(b *schema.Batch, seq uint64) {
		if err := set.budget.Acquire(t.Context(), EstimateBytes(b), false); err != nil {
			t.Fatal(err)
		}
		set.Insert(b, seq, 1, "", 0)
	}
	put(nestedBatch(t, rng, ids("a", 400)...), 1)
	old := set.Rotate()
	var want []int
	for c := range old.rows.Cols {
		want = vectorSizes(&old.rows.Cols[c], want, false)
	}
	// The same rows again: the same lengths, so nothing may grow.
	again := nestedBatch(t, rand.New(rand.NewPCG(seed, 1)), ids("b", 400)...)
	put(sliceBatch(t, again, 0, 1), 401)
	m := set.Active()
	var got []int
	var before []uintptr
	for c := range m.rows.Cols {
		got = vectorSizes(&m.rows.Cols[c], got, true)
		before = dataPointers(&m.rows.Cols[c], before)
	}
	for i := range want {
		if got[i] < want[i] {
			t.Fatalf("vector %d: capacity %d after the first insert, below the sealed memtable's %d", i, got[i], want[i])
		}
	}
	put(sliceBatch(t, again, 1, 400), 402)
	var after []uintptr
	for c := range m.rows.Cols {
		after = dataPointers(&m.rows.Cols[c], after)
	}
	for i := range before {
		if before[i] != after[i] {
			t.Errorf("array %d moved while the generation grew to its predecessor's size", i)
		}
	}
	if err := matches(m.Rows(), sources(again)); err != nil {
		t.Fatal(err)
	}
}

// sliceBatch builds rows [lo, hi) of b as a batch of their own.
func sliceBatch(t *testing.T, b *schema.Batch, lo, hi int) *schema.Batch {
	t.Helper()
	rows := make([]schema.Row, 0, hi-lo)
	for i := lo; i < hi; i++ {
		r := schema.Row{"id": b.IDs[i]}
		for c, col := range b.Schema.Columns {
			if v := b.Value(c, i); v != nil {
				r[col.Name] = v
			}
		}
		rows = append(rows, r)
	}
	out, err := b.Schema.Build(rows)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A memtable whose schema changed before its first insert (UseSchema on
// an empty active memtable) reserves nothing of its predecessor's shape,
// which is another schema's: the simulation found an index out of range
// there (internal/sim, seeds 3 and 7).
func TestReserveSkipsAnotherSchema(t *testing.T) {
	set := NewSet(testSchema, 1, NewBudget(1<<40), nil)
	defer set.Close()
	put := func(b *schema.Batch, seq uint64) {
		if err := set.budget.Acquire(t.Context(), EstimateBytes(b), false); err != nil {
			t.Fatal(err)
		}
		set.Insert(b, seq, 1, "", 0)
	}
	put(batch(t, "a", "b", "c"), 1)
	set.Rotate()
	set.UseSchema(nestedSchema)
	want := nestedBatch(t, rand.New(rand.NewPCG(1, 2)), "x", "y")
	put(want, 4)
	if err := matches(set.Active().Rows(), sources(want)); err != nil {
		t.Fatal(err)
	}
}
