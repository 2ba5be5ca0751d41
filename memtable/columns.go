package memtable

import (
	"slices"

	"github.com/rollwal/rollwal/schema"
)

// Column operations on whole vectors: one type switch per column, where
// schema.Batch.AppendRow passes every value through an interface and a type
// switch. Measured (BenchmarkAppendRow), the compiler keeps AppendRow free
// of per-value allocations and both cost about the same: growing the
// columns' slices dominates. Working column by column is still what lets
// Insert copy strings into the arena and carry nulls in one pass.

// appendVector appends the first n values of src to dst, which holds have
// rows; strings are copied into a.
func appendVector(dst, src *schema.Vector, have, n int, a *arena) {
	appendNulls(dst, src.Nulls, have, n)
	switch dst.Type {
	case schema.String, schema.JSON:
		dst.Str = slices.Grow(dst.Str, n)
		for _, s := range src.Str[:n] {
			dst.Str = append(dst.Str, a.copy(s))
		}
	case schema.Int64:
		dst.I64 = append(dst.I64, src.I64[:n]...)
	case schema.Float64:
		dst.F64 = append(dst.F64, src.F64[:n]...)
	case schema.Bool:
		dst.Bool = append(dst.Bool, src.Bool[:n]...)
	}
}

// appendNulls keeps dst.Nulls nil until the column's first null, as
// schema.Vector documents.
func appendNulls(dst *schema.Vector, src []bool, have, n int) {
	if src != nil {
		src = src[:n]
	}
	if dst.Nulls == nil {
		if !slices.Contains(src, true) {
			return
		}
		dst.Nulls = make([]bool, have, have+n)
	}
	if src != nil {
		dst.Nulls = append(dst.Nulls, src...)
		return
	}
	l := len(dst.Nulls)
	dst.Nulls = slices.Grow(dst.Nulls, n)[:l+n]
	clear(dst.Nulls[l:])
}

// gather returns a new batch of b's rows at the given indexes, in order.
// Strings are shared with b, not copied.
func gather(b *schema.Batch, rows []int) *schema.Batch {
	out := &schema.Batch{Schema: b.Schema, IDs: make([]string, len(rows)), Cols: make([]schema.Vector, len(b.Cols))}
	for j, i := range rows {
		out.IDs[j] = b.IDs[i]
	}
	for c := range b.Cols {
		src, dst := &b.Cols[c], &out.Cols[c]
		dst.Type = src.Type
		dst.Nulls = gatherNulls(src.Nulls, rows)
		switch src.Type {
		case schema.String, schema.JSON:
			dst.Str = gatherSlice(src.Str, rows)
		case schema.Int64:
			dst.I64 = gatherSlice(src.I64, rows)
		case schema.Float64:
			dst.F64 = gatherSlice(src.F64, rows)
		case schema.Bool:
			dst.Bool = gatherSlice(src.Bool, rows)
		}
	}
	return out
}

func gatherSlice[T any](src []T, rows []int) []T {
	out := make([]T, len(rows))
	for j, i := range rows {
		out[j] = src[i]
	}
	return out
}

// gatherNulls returns nil when none of the gathered rows is null.
func gatherNulls(src []bool, rows []int) []bool {
	if !slices.ContainsFunc(rows, func(i int) bool { return src != nil && src[i] }) {
		return nil
	}
	return gatherSlice(src, rows)
}

// snapshot returns a batch over b's current rows whose slices are clipped to
// their length, so that appends to b never write into what it covers.
func snapshot(b *schema.Batch) *schema.Batch {
	out := &schema.Batch{Schema: b.Schema, IDs: slices.Clip(b.IDs), Cols: make([]schema.Vector, len(b.Cols))}
	for c := range b.Cols {
		v := &b.Cols[c]
		out.Cols[c] = schema.Vector{
			Type:  v.Type,
			Nulls: slices.Clip(v.Nulls),
			Str:   slices.Clip(v.Str),
			I64:   slices.Clip(v.I64),
			F64:   slices.Clip(v.F64),
			Bool:  slices.Clip(v.Bool),
		}
	}
	return out
}
