package schema

import (
	"fmt"
	"slices"
)

// Convert returns the rows of b in schema to, matching columns, list
// elements and struct fields by field id (see fieldid.go; a schema
// without ids is taken with WithFieldIDs' ids). A column or struct field
// that b lacks is all null, and must be nullable; one that to lacks is
// left out; int32 widens to int64 and float32 to float64. Vectors whose
// type is unchanged are shared with b, not copied. When the two schemas
// are the same (ids, names, types and nullability), b itself is returned.
func Convert(b *Batch, to *Schema) (*Batch, error) {
	if Same(b.Schema, to) {
		return b, nil
	}
	from, _ := WithFieldIDs(b.Schema.Columns)
	target, _ := WithFieldIDs(to.Columns)
	if len(b.Cols) != len(from) {
		return nil, fmt.Errorf("schema: convert: %d vectors for %d columns", len(b.Cols), len(from))
	}
	byID := make(map[int]int, len(from))
	for j := range from {
		byID[from[j].ID] = j
	}
	out := &Batch{Schema: to, IDs: slices.Clip(b.IDs), Cols: make([]Vector, len(target))}
	for i := range target {
		col := &target[i]
		j, ok := byID[col.ID]
		var err error
		if ok {
			out.Cols[i], err = convertVector(&b.Cols[j], &from[j], col, b.Len(), col.Name)
		} else {
			out.Cols[i], err = nullVector(col, b.Len(), col.Name)
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// sameColumns reports whether a and b have the same ids, names, types and
// nullability, nested parts included. Docs and aliases do not count.
// Same reports whether rows of a are rows of b as they are: the same
// columns, by field id (WithFieldIDs' ids for a schema without them),
// name, type and nullability, nested parts included. Convert from a to b
// is then the identity, and a file written in a holds what one written in
// b would.
func Same(a, b *Schema) bool {
	if a == b {
		return true
	}
	from, _ := WithFieldIDs(a.Columns)
	to, _ := WithFieldIDs(b.Columns)
	return sameColumns(from, to)
}

func sameColumns(a, b []Column) bool {
	return slices.EqualFunc(a, b, func(x, y Column) bool { return samePart(&x, &y) })
}

func samePart(x, y *Column) bool {
	if x.ID != y.ID || x.Name != y.Name || x.Type != y.Type || x.Nullable != y.Nullable {
		return false
	}
	if x.Element != nil && !samePart(x.Element, y.Element) {
		return false
	}
	return sameColumns(x.Fields, y.Fields)
}

// nullVector is n null rows of col, which must be nullable (even for no
// rows: the two schemas do not fit, whatever the batch holds).
func nullVector(col *Column, n int, path string) (Vector, error) {
	if !col.Nullable {
		return Vector{}, fmt.Errorf("schema: convert: %s is not in the batch's schema and not nullable", path)
	}
	v := newVector(col, n)
	for i := range n {
		v.pushNull(i)
	}
	return v, nil
}

// convertVector converts src, n values of from, into to.
func convertVector(src *Vector, from, to *Column, n int, path string) (Vector, error) {
	if src.Type != from.Type {
		return Vector{}, fmt.Errorf("schema: convert: %s: vector of type %s, the schema says %s", path, src.Type, from.Type)
	}
	if !to.Nullable {
		if i := slices.Index(src.Nulls, true); i >= 0 {
			return Vector{}, fmt.Errorf("schema: convert: %s: row %d is null, but it is not nullable in the target schema", path, i)
		}
	}
	switch {
	case from.Type == to.Type && from.Type.IsPrimitive():
		return share(src), nil
	case from.Type == Int32 && to.Type == Int64:
		v := Vector{Type: Int64, Nulls: slices.Clip(src.Nulls), I64: make([]int64, len(src.I32))}
		for i, x := range src.I32 {
			v.I64[i] = int64(x)
		}
		return v, nil
	case from.Type == Float32 && to.Type == Float64:
		v := Vector{Type: Float64, Nulls: slices.Clip(src.Nulls), F64: make([]float64, len(src.F32))}
		for i, x := range src.F32 {
			v.F64[i] = float64(x)
		}
		return v, nil
	case from.Type == List && to.Type == List:
		return convertList(src, from, to, n, path)
	case from.Type == Struct && to.Type == Struct:
		return convertStruct(src, from, to, n, path)
	}
	return Vector{}, fmt.Errorf("schema: convert: %s: cannot convert %s to %s", path, from.TypeString(), to.TypeString())
}

func convertList(src *Vector, from, to *Column, n int, path string) (Vector, error) {
	if len(src.Offsets) != n+1 || src.Elem == nil {
		return Vector{}, fmt.Errorf("schema: convert: %s: malformed list vector", path)
	}
	e, err := convertVector(src.Elem, from.Element, to.Element, int(src.Offsets[n]), path+"[]")
	if err != nil {
		return Vector{}, err
	}
	return Vector{Type: List, Nulls: slices.Clip(src.Nulls), Offsets: slices.Clip(src.Offsets), Elem: &e}, nil
}

func convertStruct(src *Vector, from, to *Column, n int, path string) (Vector, error) {
	if len(src.Fields) != len(from.Fields) {
		return Vector{}, fmt.Errorf("schema: convert: %s: %d struct fields, the schema says %d", path, len(src.Fields), len(from.Fields))
	}
	v := Vector{Type: Struct, Nulls: slices.Clip(src.Nulls), Fields: make([]Vector, len(to.Fields))}
	for f := range to.Fields {
		tf := &to.Fields[f]
		k := slices.IndexFunc(from.Fields, func(c Column) bool { return c.ID == tf.ID })
		var err error
		if k >= 0 {
			v.Fields[f], err = convertVector(&src.Fields[k], &from.Fields[k], tf, n, path+"."+tf.Name)
		} else {
			v.Fields[f], err = nullVector(tf, n, path+"."+tf.Name)
		}
		if err != nil {
			return Vector{}, err
		}
	}
	return v, nil
}

// share returns src without copying its values. Its slices are clipped,
// so that appending to either vector copies rather than writes over the
// other's values.
func share(src *Vector) Vector {
	v := *src
	v.Nulls, v.Str, v.I64, v.F64 = slices.Clip(v.Nulls), slices.Clip(v.Str), slices.Clip(v.I64), slices.Clip(v.F64)
	v.Bool, v.I32, v.F32, v.Offsets = slices.Clip(v.Bool), slices.Clip(v.I32), slices.Clip(v.F32), slices.Clip(v.Offsets)
	if src.Elem != nil {
		e := share(src.Elem)
		v.Elem = &e
	}
	if src.Fields != nil {
		v.Fields = make([]Vector, len(src.Fields))
		for f := range src.Fields {
			v.Fields[f] = share(&src.Fields[f])
		}
	}
	return v
}
