package memtable

import (
	"slices"

	"github.com/rollwal/rollwal/schema"
)

// Column operations on whole vectors: one type switch per column (and per
// nested level), where schema.Batch.AppendRow passes every value through an
// interface and a type switch. Measured (BenchmarkAppendRow), the compiler
// keeps AppendRow free of per-value allocations and both cost about the
// same: growing the columns' slices dominates. Working column by column is
// still what lets Insert copy strings into the arena and carry nulls in one
// pass, and what lets a list's elements go over in one append.

// run is the values [lo, hi) of a vector.
type run struct{ lo, hi int }

// appendRuns appends the values of src in runs, in order, to dst, which has
// src's type and shape: a list's offsets are rebased onto dst's elements
// and the elements they cover appended, a struct's fields appended one by
// one. Strings (binary included), at every level, are copied into a, or
// shared with src when a is nil. The type switch is outside the loops over
// runs, so that gather's many short runs cost little more than Insert's one.
func appendRuns(dst, src *schema.Vector, runs []run, a *arena) {
	appendNulls(dst, dst.Len(), src.Nulls, runs)
	switch dst.Type {
	case schema.String, schema.JSON, schema.Binary:
		dst.Str = appendStrings(dst.Str, src.Str, runs, a)
	case schema.Int64, schema.Timestamp:
		dst.I64 = appendValues(dst.I64, src.I64, runs)
	case schema.Float64:
		dst.F64 = appendValues(dst.F64, src.F64, runs)
	case schema.Bool:
		dst.Bool = appendValues(dst.Bool, src.Bool, runs)
	case schema.Int32:
		dst.I32 = appendValues(dst.I32, src.I32, runs)
	case schema.Float32:
		dst.F32 = appendValues(dst.F32, src.F32, runs)
	case schema.List:
		appendLists(dst, src, runs, a)
	case schema.Struct:
		for f := range dst.Fields {
			appendRuns(&dst.Fields[f], &src.Fields[f], runs, a)
		}
	}
}

func appendValues[T any](dst, src []T, runs []run) []T {
	for _, r := range runs {
		dst = append(dst, src[r.lo:r.hi]...)
	}
	return dst
}

func appendStrings(dst, src []string, runs []run, a *arena) []string {
	for _, r := range runs {
		if a == nil {
			dst = append(dst, src[r.lo:r.hi]...)
			continue
		}
		dst = slices.Grow(dst, r.hi-r.lo)
		for _, s := range src[r.lo:r.hi] {
			dst = append(dst, a.copy(s))
		}
	}
	return dst
}

// appendLists appends the list rows of src in runs. A run of rows [lo, hi)
// covers src's elements [Offsets[lo], Offsets[hi]); its offsets move by
// the distance between where those elements start in src and where they
// land in dst.
func appendLists(dst, src *schema.Vector, runs []run, a *arena) {
	elems := make([]run, len(runs))
	end := dst.Offsets[len(dst.Offsets)-1]
	for i, r := range runs {
		from, to := src.Offsets[r.lo], src.Offsets[r.hi]
		dst.Offsets = slices.Grow(dst.Offsets, r.hi-r.lo)
		for _, off := range src.Offsets[r.lo+1 : r.hi+1] {
			dst.Offsets = append(dst.Offsets, off-from+end)
		}
		end += to - from
		elems[i] = run{int(from), int(to)}
	}
	appendRuns(dst.Elem, src.Elem, elems, a)
}

// appendNulls appends the null flags of src's values in runs to dst, which
// holds have values. It keeps dst.Nulls nil until the first null, as
// schema.Vector documents; a nil src means values that are not null.
func appendNulls(dst *schema.Vector, have int, src []bool, runs []run) {
	if dst.Nulls == nil {
		if !anyNull(src, runs) {
			return
		}
		dst.Nulls = make([]bool, have, have+count(runs))
	}
	for _, r := range runs {
		if src != nil {
			dst.Nulls = append(dst.Nulls, src[r.lo:r.hi]...)
			continue
		}
		l := len(dst.Nulls)
		dst.Nulls = slices.Grow(dst.Nulls, r.hi-r.lo)[:l+r.hi-r.lo]
		clear(dst.Nulls[l:])
	}
}

func anyNull(nulls []bool, runs []run) bool {
	if nulls == nil {
		return false
	}
	for _, r := range runs {
		if slices.Contains(nulls[r.lo:r.hi], true) {
			return true
		}
	}
	return false
}

func count(runs []run) int {
	n := 0
	for _, r := range runs {
		n += r.hi - r.lo
	}
	return n
}

// gather returns a new batch of b's rows at the given indexes, in order.
// Strings are shared with b, not copied. Filter keeps most rows, in order,
// so the rows are taken as runs of consecutive indexes: a list's elements
// over a run go over in one append.
func gather(b *schema.Batch, rows []int) *schema.Batch {
	out := &schema.Batch{Schema: b.Schema, IDs: make([]string, len(rows)), Cols: make([]schema.Vector, len(b.Cols))}
	for j, i := range rows {
		out.IDs[j] = b.IDs[i]
	}
	runs := runsOf(rows)
	for c := range b.Cols {
		out.Cols[c] = emptyLike(&b.Cols[c], runs)
		appendRuns(&out.Cols[c], &b.Cols[c], runs, nil)
	}
	return out
}

// runsOf splits rows into maximal runs of consecutive indexes.
func runsOf(rows []int) []run {
	n := 0
	for k, i := range rows {
		if k == 0 || rows[k-1]+1 != i {
			n++
		}
	}
	runs := make([]run, 0, n)
	for _, i := range rows {
		if k := len(runs) - 1; k >= 0 && runs[k].hi == i {
			runs[k].hi++
			continue
		}
		runs = append(runs, run{i, i + 1})
	}
	return runs
}

// emptyLike returns an empty vector of v's type and shape with room for
// v's values in runs, at every level. It follows the vector rather than a
// schema, so that gather copies whatever it is given; Insert checks the
// result against the Set's schema.
func emptyLike(v *schema.Vector, runs []run) schema.Vector {
	n := count(runs)
	out := schema.Vector{Type: v.Type}
	switch v.Type {
	case schema.String, schema.JSON, schema.Binary:
		out.Str = make([]string, 0, n)
	case schema.Int64, schema.Timestamp:
		out.I64 = make([]int64, 0, n)
	case schema.Float64:
		out.F64 = make([]float64, 0, n)
	case schema.Bool:
		out.Bool = make([]bool, 0, n)
	case schema.Int32:
		out.I32 = make([]int32, 0, n)
	case schema.Float32:
		out.F32 = make([]float32, 0, n)
	case schema.List:
		elems := make([]run, len(runs))
		for i, r := range runs {
			elems[i] = run{int(v.Offsets[r.lo]), int(v.Offsets[r.hi])}
		}
		e := emptyLike(v.Elem, elems)
		out.Offsets, out.Elem = append(make([]int64, 0, n+1), 0), &e
	case schema.Struct:
		out.Fields = make([]schema.Vector, len(v.Fields))
		for f := range v.Fields {
			out.Fields[f] = emptyLike(&v.Fields[f], runs)
		}
	}
	return out
}

// snapshot returns a batch over b's current rows whose slices are clipped to
// their length, so that appends to b never write into what it covers.
func snapshot(b *schema.Batch) *schema.Batch {
	out := &schema.Batch{Schema: b.Schema, IDs: slices.Clip(b.IDs), Cols: make([]schema.Vector, len(b.Cols))}
	for c := range b.Cols {
		out.Cols[c] = clipVector(&b.Cols[c])
	}
	return out
}

// clipVector copies v's header with every slice clipped, at every level. A
// list's Elem and a struct's Fields are copied rather than shared: appends
// to b replace the slice headers they hold, which a reader of the snapshot
// must not see (nor race with).
func clipVector(v *schema.Vector) schema.Vector {
	out := schema.Vector{
		Type:    v.Type,
		Nulls:   slices.Clip(v.Nulls),
		Str:     slices.Clip(v.Str),
		I64:     slices.Clip(v.I64),
		F64:     slices.Clip(v.F64),
		Bool:    slices.Clip(v.Bool),
		I32:     slices.Clip(v.I32),
		F32:     slices.Clip(v.F32),
		Offsets: slices.Clip(v.Offsets),
	}
	if v.Elem != nil {
		e := clipVector(v.Elem)
		out.Elem = &e
	}
	if v.Fields != nil {
		out.Fields = make([]schema.Vector, len(v.Fields))
		for f := range v.Fields {
			out.Fields[f] = clipVector(&v.Fields[f])
		}
	}
	return out
}
