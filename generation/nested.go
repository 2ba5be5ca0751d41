package generation

import (
	"slices"
	"unsafe"

	"github.com/parquet-go/parquet-go"

	"github.com/rollwal/rollwal/schema"
)

// Lists and structs are shredded into leaf values by hand, like the
// primitive columns (columns.go), and reassembled from the levels by the
// decoder (assemble.go). Definition levels count the optional and repeated
// levels above a value that exist; a list column has repetition level 1 on
// every element after a row's first.
//
// A leaf's definition levels, with c, e and f 1 when the column, the list
// element and the struct field are nullable, 0 otherwise:
//
//	                    struct<f>   list<T>    list<struct<f>>
//	row null                0          0            0
//	list empty              –          c            c
//	element null            –          c+1          c+1
//	field null              c          –            c+1+e
//	value                   c+f        c+1+e        c+1+e+f
//
// A null row of a list holds an empty range, a null struct row zero values
// in its fields, a null list element of structs zero values in the
// element's fields: none of those zeros is written.

// levels holds, for one leaf, the definition level from which each part
// above its value exists: a value at definition level d has the part when
// d >= the part's level. A part that the shape lacks has the level of the
// part above it.
type levels struct {
	list    bool // the column is a list: its leaf repeats
	present byte // the row is not null
	elem    byte // the row's list has an element there
	slot    byte // the struct holding the value (the row, or a list element) is not null
	max     byte // the value is not null
}

func (l levels) maxRep() int {
	if l.list {
		return 1
	}
	return 0
}

// nestedLeaf is one leaf of a list or struct column.
type nestedLeaf struct {
	index int // leaf column index in the file
	field int // struct field (of the column or of its element), or -1
	lv    levels
}

// nestedLeaves returns the leaves of c, numbered from first, or nil for a
// primitive column.
func nestedLeaves(c *schema.Column, first int) []nestedLeaf {
	switch {
	case c.Type == schema.Struct:
		return fieldLeaves(c, c.Fields, first)
	case c.Type == schema.List && c.Element.Type == schema.Struct:
		return fieldLeaves(c, c.Element.Fields, first)
	case c.Type == schema.List:
		return []nestedLeaf{{index: first, field: -1, lv: levelsOf(c, -1)}}
	}
	return nil
}

func fieldLeaves(c *schema.Column, fields []schema.Column, first int) []nestedLeaf {
	leaves := make([]nestedLeaf, len(fields))
	for f := range fields {
		leaves[f] = nestedLeaf{index: first + f, field: f, lv: levelsOf(c, f)}
	}
	return leaves
}

// levelsOf computes the levels of column c's leaf for struct field f
// (-1 for a list of primitives), following the table above.
func levelsOf(c *schema.Column, f int) levels {
	var l levels
	if c.Nullable {
		l.present = 1
	}
	l.elem, l.slot = l.present, l.present
	var own bool // whether the leaf's own value may be null
	switch c.Type {
	case schema.Struct:
		own = c.Fields[f].Nullable
	case schema.List:
		l.list = true
		l.elem = l.present + 1
		l.slot = l.elem
		own = c.Element.Nullable
		if f >= 0 {
			if c.Element.Nullable {
				l.slot++
			}
			own = c.Element.Fields[f].Nullable
		}
	}
	l.max = l.slot
	if own {
		l.max++
	}
	return l
}

// vectors returns, within column vector v, the struct vector whose nulls
// are the list elements' (nil unless v is a list of structs) and the
// vector holding the leaf's values.
func (l *nestedLeaf) vectors(v *schema.Vector) (shell, out *schema.Vector) {
	switch {
	case !l.lv.list:
		return nil, &v.Fields[l.field]
	case l.field < 0:
		return nil, v.Elem
	}
	return v.Elem, &v.Elem.Fields[l.field]
}

// valueFunc returns the function that makes value k of v a parquet.Value,
// with its size in bytes (0 for fixed-size types: their chunks are bounded
// by count). A byte array borrows the string's memory, as in writeStrings.
func valueFunc(v *schema.Vector) func(k int) (parquet.Value, int) {
	switch v.Type {
	case schema.String, schema.JSON, schema.Binary:
		return func(k int) (parquet.Value, int) {
			s := v.Str[k]
			return parquet.ByteArrayValue(unsafe.Slice(unsafe.StringData(s), len(s))), len(s)
		}
	case schema.Int64, schema.Timestamp:
		return func(k int) (parquet.Value, int) { return parquet.Int64Value(v.I64[k]), 0 }
	case schema.Int32:
		return func(k int) (parquet.Value, int) { return parquet.Int32Value(v.I32[k]), 0 }
	case schema.Float64:
		return func(k int) (parquet.Value, int) { return parquet.DoubleValue(v.F64[k]), 0 }
	case schema.Float32:
		return func(k int) (parquet.Value, int) { return parquet.FloatValue(v.F32[k]), 0 }
	case schema.Bool:
		return func(k int) (parquet.Value, int) { return parquet.BooleanValue(v.Bool[k]), 0 }
	}
	return nil // Vector.Check refused other types
}

// runFunc returns the function that appends values [lo, hi) of v, none
// null, as one list row of leaf col at definition level def (see
// appendRun), with their bytes. A row of thousands of tokens is then one
// loop over one type, not a call and two null checks per token.
func runFunc(v *schema.Vector, col, def int) func(buf []parquet.Value, lo, hi int) ([]parquet.Value, int) {
	switch v.Type {
	case schema.String, schema.JSON, schema.Binary:
		return func(buf []parquet.Value, lo, hi int) ([]parquet.Value, int) {
			return appendStringRun(buf, v.Str[lo:hi], col, def)
		}
	case schema.Int64, schema.Timestamp:
		return func(buf []parquet.Value, lo, hi int) ([]parquet.Value, int) {
			return appendRun(buf, int64Kind, v.I64[lo:hi], col, def), 0
		}
	case schema.Int32:
		return func(buf []parquet.Value, lo, hi int) ([]parquet.Value, int) {
			return appendRun(buf, int32Kind, v.I32[lo:hi], col, def), 0
		}
	case schema.Float64:
		return func(buf []parquet.Value, lo, hi int) ([]parquet.Value, int) {
			return appendRun(buf, float64Kind, v.F64[lo:hi], col, def), 0
		}
	case schema.Float32:
		return func(buf []parquet.Value, lo, hi int) ([]parquet.Value, int) {
			return appendRun(buf, float32Kind, v.F32[lo:hi], col, def), 0
		}
	case schema.Bool:
		return func(buf []parquet.Value, lo, hi int) ([]parquet.Value, int) {
			return appendRun(buf, boolKind, v.Bool[lo:hi], col, def), 0
		}
	}
	return nil // Vector.Check refused other types
}

// appendStringRun is appendRun for byte arrays, which borrow the strings'
// memory (see writeStrings).
func appendStringRun(buf []parquet.Value, strs []string, col, def int) ([]parquet.Value, int) {
	size := 0
	for i, s := range strs {
		rep := 1
		if i == 0 {
			rep = 0
		}
		buf = append(buf, parquet.ByteArrayValue(unsafe.Slice(unsafe.StringData(s), len(s))).Level(rep, def, col))
		size += len(s)
	}
	return buf, size
}

// shredder turns the rows of one nested leaf into leveled values.
type shredder struct {
	col        int // leaf index
	lv         levels
	top        *schema.Vector // the column
	shell, out *schema.Vector // see nestedLeaf.vectors
	value      func(k int) (parquet.Value, int)
	run        func(buf []parquet.Value, lo, hi int) ([]parquet.Value, int) // see runFunc
}

func newShredder(l *nestedLeaf, v *schema.Vector) *shredder {
	shell, out := l.vectors(v)
	return &shredder{col: l.index, lv: l.lv, top: v, shell: shell, out: out,
		value: valueFunc(out), run: runFunc(out, l.index, int(l.lv.max))}
}

// dense reports whether list elements [lo, hi) and their values are all
// present, so that the row is one run.
func (s *shredder) dense(lo, hi int) bool {
	return (s.shell == nil || s.shell.Nulls == nil || !slices.Contains(s.shell.Nulls[lo:hi], true)) &&
		(s.out.Nulls == nil || !slices.Contains(s.out.Nulls[lo:hi], true))
}

func (s *shredder) null(rep int, def byte) parquet.Value {
	return parquet.NullValue().Level(rep, int(def), s.col)
}

// row appends the values of row i to buf and returns it with their bytes.
func (s *shredder) row(buf []parquet.Value, i int) ([]parquet.Value, int) {
	switch {
	case s.top.IsNull(i):
		return append(buf, s.null(0, 0)), 0
	case !s.lv.list:
		return s.slot(buf, i, 0)
	}
	lo, hi := s.top.Range(i)
	if lo == hi {
		return append(buf, s.null(0, s.lv.present)), 0
	}
	if s.dense(lo, hi) {
		return s.run(buf, lo, hi)
	}
	size := 0
	for k := lo; k < hi; k++ {
		rep := 1
		if k == lo {
			rep = 0
		}
		var n int
		buf, n = s.slot(buf, k, rep)
		size += n
	}
	return buf, size
}

// slot appends value k of the leaf: a struct row's field, or a list
// element (or its field).
func (s *shredder) slot(buf []parquet.Value, k, rep int) ([]parquet.Value, int) {
	switch {
	case s.shell != nil && s.shell.IsNull(k):
		return append(buf, s.null(rep, s.lv.elem)), 0
	case s.out.IsNull(k):
		return append(buf, s.null(rep, s.lv.slot)), 0
	}
	v, n := s.value(k)
	return append(buf, v.Level(rep, int(s.lv.max), s.col)), n
}

// writeNested writes rows [lo, hi) of one leaf of a list or struct column.
// Chunks end on row boundaries: the column writer may cut a page after any
// chunk, and a data page (v2) must not split a row. A row longer than a
// chunk goes whole into one.
//
// This is the one way parquet-go's exported API takes a repeated leaf:
// Values, which its repeated column buffer splits into rows, copies and
// strips of their levels one value at a time. That costs about 7 ns a
// value, the bulk of what separates Write from a GenericWriter of a Go
// struct on long lists (BenchmarkFlushRL): the generic writer hands whole
// slices and their levels to the column buffers through unexported
// methods, and needs the row type at compile time.
func (e *columnEncoder) writeNested(w *parquet.ColumnWriter, l *nestedLeaf, v *schema.Vector, lo, hi int) error {
	s := newShredder(l, v)
	buf, size := e.buf[:0], 0
	for i := lo; i < hi; i++ {
		var n int
		buf, n = s.row(buf, i)
		size += n
		if len(buf) >= maxChunkValues || size >= e.chunkBytes {
			if _, err := w.WriteRowValues(buf); err != nil {
				return err
			}
			buf, size = e.reuse(buf, pointsIntoBatch(s.out.Type)), 0
		}
	}
	err := e.flush(w, buf)
	e.reuse(buf, false) // flush cleared it
	return err
}

// pointsIntoBatch reports whether values of type t borrow the batch's
// memory.
func pointsIntoBatch(t schema.Type) bool {
	return t == schema.String || t == schema.JSON || t == schema.Binary
}

// maxKeptValues bounds the buffer the encoder keeps between chunks: long
// rows (thousands of tokens) grow it, and growing it afresh for every such
// row cost more than the rest of the write (BenchmarkFlushRL). A row
// longer than this gets a buffer of its own, let go after its chunk.
const maxKeptValues = 64 << 10

// reuse returns buf emptied, and keeps it for the next chunks when it is
// not too large. Byte arrays point into the batch: refs drops the
// references. Other values point nowhere, and clearing them would be one
// more pass over every token.
func (e *columnEncoder) reuse(buf []parquet.Value, refs bool) []parquet.Value {
	if refs {
		clear(buf)
	}
	if cap(buf) > maxKeptValues {
		return e.buf[:0]
	}
	if cap(buf) > cap(e.buf) {
		e.buf = buf[:0]
	}
	return buf[:0]
}
