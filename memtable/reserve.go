package memtable

import (
	"slices"

	"github.com/rollwal/rollwal/schema"
)

// A memtable's columns are reserved, at its first insert, at the lengths
// its predecessor's reached when it was sealed. Generations of a shard
// under steady load are alike in size, and a column grown by append from
// nothing is copied whole at every growth (Go grows large slices by a
// quarter at a time), each copy into fresh memory: for long token lists
// that was most of the time an insert took (BenchmarkIngestRL's profile).
// The reservation is what the sealed memtable held, so it adds nothing to
// the peak a shard already reached.

// shape is the lengths of a batch's vectors, and the schema they are of.
type shape struct {
	schema *schema.Schema
	rows   int
	cols   []vectorShape
}

type vectorShape struct {
	values, offsets int
	elem            *vectorShape
	fields          []vectorShape
}

// shapeOf returns the lengths of b's vectors.
func shapeOf(b *schema.Batch) *shape {
	sh := &shape{schema: b.Schema, rows: len(b.IDs), cols: make([]vectorShape, len(b.Cols))}
	for i := range b.Cols {
		sh.cols[i] = vectorShapeOf(&b.Cols[i])
	}
	return sh
}

func vectorShapeOf(v *schema.Vector) vectorShape {
	vs := vectorShape{values: v.Len(), offsets: len(v.Offsets)}
	if v.Elem != nil {
		e := vectorShapeOf(v.Elem)
		vs.elem = &e
	}
	for f := range v.Fields {
		vs.fields = append(vs.fields, vectorShapeOf(&v.Fields[f]))
	}
	return vs
}

// reserve gives m's columns (empty) the capacity of sh, when they are of
// its schema: a memtable whose schema changed before its first insert
// (Set.UseSchema) reserves nothing.
func (sh *shape) reserve(m *Memtable) {
	if m.rows.Schema != sh.schema || len(m.rows.Cols) != len(sh.cols) {
		return
	}
	m.rows.IDs = slices.Grow(m.rows.IDs, sh.rows)
	m.seqs = slices.Grow(m.seqs, sh.rows)
	m.epochs = slices.Grow(m.epochs, sh.rows)
	for i := range m.rows.Cols {
		sh.cols[i].reserve(&m.rows.Cols[i])
	}
}

func (vs *vectorShape) reserve(v *schema.Vector) {
	n := vs.values
	switch v.Type {
	case schema.String, schema.JSON, schema.Binary:
		v.Str = slices.Grow(v.Str, n)
	case schema.Int64, schema.Timestamp:
		v.I64 = slices.Grow(v.I64, n)
	case schema.Float64:
		v.F64 = slices.Grow(v.F64, n)
	case schema.Bool:
		v.Bool = slices.Grow(v.Bool, n)
	case schema.Int32:
		v.I32 = slices.Grow(v.I32, n)
	case schema.Float32:
		v.F32 = slices.Grow(v.F32, n)
	case schema.List:
		v.Offsets = slices.Grow(v.Offsets, vs.offsets)
		if v.Elem != nil && vs.elem != nil {
			vs.elem.reserve(v.Elem)
		}
	case schema.Struct:
		for f := range min(len(v.Fields), len(vs.fields)) {
			vs.fields[f].reserve(&v.Fields[f])
		}
	}
}
