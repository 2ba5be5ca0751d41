package schema

import (
	"fmt"
	"slices"
)

// newVector returns an empty vector for col with room for n rows.
func newVector(col *Column, n int) Vector {
	v := Vector{Type: col.Type}
	switch col.Type {
	case String, JSON, Binary:
		v.Str = make([]string, 0, n)
	case Int64, Timestamp:
		v.I64 = make([]int64, 0, n)
	case Float64:
		v.F64 = make([]float64, 0, n)
	case Bool:
		v.Bool = make([]bool, 0, n)
	case Int32:
		v.I32 = make([]int32, 0, n)
	case Float32:
		v.F32 = make([]float32, 0, n)
	case List:
		v.Offsets = make([]int64, 1, n+1)
		e := newVector(col.Element, n)
		v.Elem = &e
	case Struct:
		v.Fields = make([]Vector, len(col.Fields))
		for i := range col.Fields {
			v.Fields[i] = newVector(&col.Fields[i], n)
		}
	}
	return v
}

// NewVector returns an empty vector for col.
func NewVector(col Column) Vector { return newVector(&col, 0) }

// Len is the number of values (rows, or elements of a list) the vector
// holds.
func (v *Vector) Len() int {
	switch v.Type {
	case String, JSON, Binary:
		return len(v.Str)
	case Int64, Timestamp:
		return len(v.I64)
	case Float64:
		return len(v.F64)
	case Bool:
		return len(v.Bool)
	case Int32:
		return len(v.I32)
	case Float32:
		return len(v.F32)
	case List:
		return max(len(v.Offsets)-1, 0)
	case Struct:
		if len(v.Fields) > 0 {
			return v.Fields[0].Len()
		}
	}
	return 0
}

// Range returns the elements [lo, hi) of row i of a list.
func (v *Vector) Range(i int) (lo, hi int) { return int(v.Offsets[i]), int(v.Offsets[i+1]) }

// markNull appends row i's null flag, keeping Nulls nil until the first
// null.
func (v *Vector) markNull(i int, null bool) {
	switch {
	case null && v.Nulls == nil:
		v.Nulls = make([]bool, i, max(i+1, 8))
		v.Nulls = append(v.Nulls, true)
	case v.Nulls != nil:
		v.Nulls = append(v.Nulls, null)
	}
}

// pushZero appends a zero value as row i, not null: the value under a null
// list or struct row, or a null struct's fields.
func (v *Vector) pushZero(i int) {
	v.zero()
	v.markNull(i, false)
}

// pushNull appends row i as null.
func (v *Vector) pushNull(i int) {
	v.zero()
	v.markNull(i, true)
}

// The Push methods append one row's value of the vector's own type, for
// decoders that convert values themselves (and check them as Build
// would): no value is boxed in an interface on the way.

// PushNull appends a null row, of any type.
func (v *Vector) PushNull() { v.pushNull(v.Len()) }

// PushString appends to a string, json or binary vector.
func (v *Vector) PushString(s string) {
	v.markNull(len(v.Str), false)
	v.Str = append(v.Str, s)
}

// PushInt64 appends to an int64 or timestamp vector.
func (v *Vector) PushInt64(n int64) {
	v.markNull(len(v.I64), false)
	v.I64 = append(v.I64, n)
}

// PushFloat64 appends to a float64 vector.
func (v *Vector) PushFloat64(f float64) {
	v.markNull(len(v.F64), false)
	v.F64 = append(v.F64, f)
}

// PushBool appends to a bool vector.
func (v *Vector) PushBool(t bool) {
	v.markNull(len(v.Bool), false)
	v.Bool = append(v.Bool, t)
}

// PushInt32 appends to an int32 vector.
func (v *Vector) PushInt32(n int32) {
	v.markNull(len(v.I32), false)
	v.I32 = append(v.I32, n)
}

// PushFloat32 appends to a float32 vector.
func (v *Vector) PushFloat32(f float32) {
	v.markNull(len(v.F32), false)
	v.F32 = append(v.F32, f)
}

func (v *Vector) zero() {
	i := v.Len()
	switch v.Type {
	case String, JSON, Binary:
		v.Str = append(v.Str, "")
	case Int64, Timestamp:
		v.I64 = append(v.I64, 0)
	case Float64:
		v.F64 = append(v.F64, 0)
	case Bool:
		v.Bool = append(v.Bool, false)
	case Int32:
		v.I32 = append(v.I32, 0)
	case Float32:
		v.F32 = append(v.F32, 0)
	case List:
		v.Offsets = append(v.Offsets, v.Offsets[len(v.Offsets)-1])
	case Struct:
		for f := range v.Fields {
			v.Fields[f].pushZero(i)
		}
	}
}

// appendFrom appends row i of src (same column type) to v.
func (v *Vector) appendFrom(src *Vector, i int) {
	at := v.Len()
	null := src.IsNull(i)
	switch v.Type {
	case String, JSON, Binary:
		v.Str = append(v.Str, src.Str[i])
	case Int64, Timestamp:
		v.I64 = append(v.I64, src.I64[i])
	case Float64:
		v.F64 = append(v.F64, src.F64[i])
	case Bool:
		v.Bool = append(v.Bool, src.Bool[i])
	case Int32:
		v.I32 = append(v.I32, src.I32[i])
	case Float32:
		v.F32 = append(v.F32, src.F32[i])
	case List:
		lo, hi := src.Range(i)
		for j := lo; j < hi; j++ {
			v.Elem.appendFrom(src.Elem, j)
		}
		v.Offsets = append(v.Offsets, v.Offsets[len(v.Offsets)-1]+int64(hi-lo))
	case Struct:
		for f := range v.Fields {
			v.Fields[f].appendFrom(&src.Fields[f], i)
		}
	}
	v.markNull(at, null)
}

// Check holds the vector to col for n rows: types, value counts, offsets
// and nulls only where col allows them. Decoders and writers run it before
// they trust a vector.
func (v *Vector) Check(col Column, n int) error {
	return v.check(&col, n, col.Name)
}

func (v *Vector) check(col *Column, n int, path string) error {
	switch {
	case v.Type != col.Type:
		return fmt.Errorf("%s: vector of type %s, the schema says %s", path, v.Type, col.Type)
	case v.Len() != n:
		return fmt.Errorf("%s: %d values for %d rows", path, v.Len(), n)
	case v.Nulls != nil && len(v.Nulls) != n:
		return fmt.Errorf("%s: %d null flags for %d rows", path, len(v.Nulls), n)
	case !col.Nullable && slices.Contains(v.Nulls, true):
		return fmt.Errorf("%s: row %d is null, but it is not nullable", path, slices.Index(v.Nulls, true))
	}
	switch v.Type {
	case List:
		if v.Elem == nil || len(v.Offsets) == 0 || v.Offsets[0] != 0 {
			return fmt.Errorf("%s: malformed list vector", path)
		}
		for i := range n {
			if lo, hi := v.Range(i); hi < lo || hi-lo > MaxListElements {
				return fmt.Errorf("%s: row %d has a list of %d elements", path, i, hi-lo)
			}
		}
		return v.Elem.check(col.Element, int(v.Offsets[n]), path+"[]")
	case Struct:
		if len(v.Fields) != len(col.Fields) {
			return fmt.Errorf("%s: %d struct fields, the schema says %d", path, len(v.Fields), len(col.Fields))
		}
		for f := range v.Fields {
			if err := v.Fields[f].check(&col.Fields[f], n, path+"."+col.Fields[f].Name); err != nil {
				return err
			}
		}
	}
	return nil
}

// size estimates the bytes of the vector's n values in memory.
func (v *Vector) size() int64 {
	n := int64(len(v.Nulls))
	for _, s := range v.Str {
		n += int64(len(s)) + 16
	}
	n += int64(len(v.I64)*8 + len(v.F64)*8 + len(v.Bool) + len(v.I32)*4 + len(v.F32)*4 + len(v.Offsets)*8)
	if v.Elem != nil {
		n += v.Elem.size()
	}
	for f := range v.Fields {
		n += v.Fields[f].size()
	}
	return n
}

// value returns row i as a Go value (nil for null): string, int64,
// float64, bool, int32, float32, []byte (binary), time.Time (timestamp),
// []any (list) or map[string]any (struct).
func (v *Vector) value(col *Column, i int) any {
	if v.IsNull(i) {
		return nil
	}
	switch v.Type {
	case String, JSON:
		return v.Str[i]
	case Binary:
		return []byte(v.Str[i])
	case Int64:
		return v.I64[i]
	case Timestamp:
		return microsToTime(v.I64[i])
	case Float64:
		return v.F64[i]
	case Bool:
		return v.Bool[i]
	case Int32:
		return v.I32[i]
	case Float32:
		return v.F32[i]
	case List:
		lo, hi := v.Range(i)
		out := make([]any, 0, hi-lo)
		for j := lo; j < hi; j++ {
			out = append(out, v.Elem.value(col.Element, j))
		}
		return out
	case Struct:
		out := make(map[string]any, len(v.Fields))
		for f := range v.Fields {
			out[col.Fields[f].Name] = v.Fields[f].value(&col.Fields[f], i)
		}
		return out
	}
	return nil
}
