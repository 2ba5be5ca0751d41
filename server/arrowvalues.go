package server

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/rollwal/rollwal/schema"
)

// getter returns row i of an array as the Go value schema validation
// takes, or nil for null. An error inside a list or struct is a
// *valueError naming where.
type getter func(i int) (any, error)

// valueError is a value refused inside a list or struct, at path below
// its column ([3].role).
type valueError struct {
	path string
	err  error
}

func (e *valueError) Error() string { return e.err.Error() }
func (e *valueError) Unwrap() error { return e.err }

// under puts err at prefix, in front of where inside err already is.
func under(prefix string, err error) error {
	var ve *valueError
	if errors.As(err, &ve) {
		return &valueError{prefix + ve.path, ve.err}
	}
	return &valueError{prefix, err}
}

// valueReader makes the getters of one stream's arrays and charges what
// they make against limit, at about the memory it takes in rows: the bytes
// of the strings and binaries they copy out, a list's elements and a
// struct's map. The stream's buffers are bounded on their own
// (guardedReader), but what its values decode to is not: a dictionary, a
// string_view or a list_view repeats the same bytes any number of times,
// and a list of a null-typed child (or of a struct of them) claims any
// number of elements in no bytes at all.
type valueReader struct {
	made, limit int64
}

// Costs of what valueReader makes, as Go allocates it.
const (
	slotCost  = 16  // an element of a []any: an interface value
	mapCost   = 320 // a struct's map: its header and first group of 8 entries
	entryCost = 40  // a field of a struct's map past those 8, at the maps' load factor
)

// decodedPerWAL is how many times the bytes of a WAL record the rows it
// holds may take while decoded: an int32 in a list takes 4 bytes in the
// record and 16 in a []any.
const decodedPerWAL = 4

func newValueReader(decoded int64) *valueReader {
	return &valueReader{limit: decodedPerWAL * decoded}
}

func (v *valueReader) charge(n int64) error {
	if v.made += n; v.made > v.limit {
		return fmt.Errorf("%w: the stream's values decode to more than %d bytes in memory; send fewer or smaller rows", errDecodedTooLarge, v.limit)
	}
	return nil
}

// getter checks the buffers of an array of at least n values for col that
// the IPC reader does not check (validity bitmaps, offsets) and returns
// its getter. checkArrowSchema has checked that the array's type fits col.
func (v *valueReader) getter(arr arrow.Array, col *schema.Column, n int) (getter, error) {
	if arr.Len() < n {
		return nil, fmt.Errorf("array holds %d values for %d", arr.Len(), n)
	}
	bitmap := arr.NullBitmapBytes()
	if len(bitmap) > 0 && len(bitmap)*8 < arr.Data().Offset()+arr.Len() {
		return nil, errors.New("validity bitmap is shorter than the array")
	}
	get, err := v.values(arr, col)
	if err != nil || len(bitmap) == 0 {
		return get, err
	}
	return func(i int) (any, error) {
		if arr.IsNull(i) {
			return nil, nil
		}
		return get(i)
	}, nil
}

// values reads the values of an array as col takes them.
func (v *valueReader) values(arr arrow.Array, col *schema.Column) (getter, error) {
	switch a := arr.(type) {
	case *array.Null:
		return func(int) (any, error) { return nil, nil }, nil
	case *array.Dictionary:
		return v.dictionary(a, col)
	}
	switch col.Type {
	case schema.String:
		return v.text(arr)
	case schema.JSON:
		return v.jsonText(arr)
	case schema.Binary:
		return v.binary(arr)
	case schema.Bool:
		return boolGetter(arr)
	case schema.Int32, schema.Int64, schema.Float32, schema.Float64:
		return numberGetter(arr, col.Type)
	case schema.Timestamp:
		return timestampGetter(arr)
	case schema.List:
		return v.list(arr, col)
	case schema.Struct:
		return v.structure(arr, col)
	}
	return nil, fmt.Errorf("Arrow type %s does not fit type %s", arr.DataType(), col.TypeString())
}

type stringArray interface {
	arrow.Array
	Value(i int) string
	ValidateFull() error
}

// text copies the values out, so that rows never point into the
// allocator's buffers once the stream is released: an offset-based array's
// value bytes at once, each value a slice of that copy (one allocation per
// column rather than per value), a view's value by value (views may repeat
// bytes, and only what a row takes is charged).
func (v *valueReader) text(arr arrow.Array) (getter, error) {
	a, ok := arr.(stringArray)
	if !ok {
		return nil, fmt.Errorf("Arrow type %s is not text", arr.DataType())
	}
	if err := a.ValidateFull(); err != nil {
		return nil, err
	}
	copied := copyValues(arr)
	return func(i int) (any, error) {
		s := a.Value(i)
		if err := v.charge(int64(len(s))); err != nil {
			return nil, err
		}
		if copied != nil {
			return copied(i, len(s)), nil
		}
		return strings.Clone(s), nil
	}, nil
}

// offsetArray is an array whose values lie end to end in one buffer:
// string, large_string, binary, large_binary.
type offsetArray interface {
	ValueBytes() []byte
	ValueOffset64(i int) int64
}

// copyValues copies the value bytes of an offset-based array (validated)
// once and returns value i, of n bytes, as a slice of the copy; nil for
// another layout.
func copyValues(arr arrow.Array) func(i, n int) string {
	a, ok := arr.(offsetArray)
	if !ok || arr.Len() == 0 {
		return nil
	}
	base, first := string(a.ValueBytes()), a.ValueOffset64(0)
	return func(i, n int) string {
		lo := a.ValueOffset64(i) - first
		return base[lo : lo+int64(n)]
	}
}

// jsonText reads JSON text, refusing what NDJSON refuses to store
// rewritten and json.Valid lets through: invalid UTF-8, and lone surrogate
// escapes, which readers decode to U+FFFD.
func (v *valueReader) jsonText(arr arrow.Array) (getter, error) {
	get, err := v.text(arr)
	if err != nil {
		return nil, err
	}
	return func(i int) (any, error) {
		x, err := get(i)
		if s, ok := x.(string); ok {
			if off, why := badText([]byte(s)); off >= 0 {
				return nil, fmt.Errorf("JSON text at byte %d: %s", off, why)
			}
		}
		return x, err
	}, nil
}

type bytesArray interface {
	arrow.Array
	Value(i int) []byte
	ValidateFull() error
}

func (v *valueReader) binary(arr arrow.Array) (getter, error) {
	a, ok := arr.(bytesArray)
	if !ok {
		return nil, fmt.Errorf("Arrow type %s is not binary", arr.DataType())
	}
	if err := a.ValidateFull(); err != nil {
		return nil, err
	}
	return func(i int) (any, error) {
		b := a.Value(i)
		if err := v.charge(int64(len(b))); err != nil {
			return nil, err
		}
		return bytes.Clone(b), nil
	}, nil
}

func boolGetter(arr arrow.Array) (getter, error) {
	a, ok := arr.(*array.Boolean)
	if !ok {
		return nil, fmt.Errorf("Arrow type %s is not bool", arr.DataType())
	}
	if a.Len() > 0 {
		vals := a.Data().Buffers()[1]
		if vals == nil || vals.Len()*8 < a.Data().Offset()+a.Len() {
			return nil, errors.New("bool values buffer is shorter than the array")
		}
	}
	return func(i int) (any, error) { return a.Value(i), nil }, nil
}

type valueArray[T any] interface{ Value(i int) T }

type number interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~float32 | ~float64
}

// widen reads the values of a as U.
func widen[T, U number](a valueArray[T]) getter {
	return func(i int) (any, error) { return U(a.Value(i)), nil }
}

// numberGetter reads integers and floats as the Go type of column type t:
// int32, int64, float32 or float64. fitArrow has refused every narrowing.
func numberGetter(arr arrow.Array, t schema.Type) (getter, error) {
	switch a := arr.(type) {
	case *array.Int8:
		return numbers(a, t), nil
	case *array.Int16:
		return numbers(a, t), nil
	case *array.Int32:
		return numbers(a, t), nil
	case *array.Uint8:
		return numbers(a, t), nil
	case *array.Uint16:
		return numbers(a, t), nil
	case *array.Uint32:
		return numbers(a, t), nil
	case *array.Int64:
		if t == schema.Float64 {
			return exactFloats(a), nil
		}
		return numbers(a, t), nil
	case *array.Float32:
		return numbers(a, t), nil
	case *array.Float64:
		return numbers(a, t), nil
	}
	return nil, fmt.Errorf("Arrow type %s is not a number", arr.DataType())
}

func numbers[T number](a valueArray[T], t schema.Type) getter {
	switch t {
	case schema.Int32:
		return widen[T, int32](a)
	case schema.Int64:
		return widen[T, int64](a)
	case schema.Float32:
		return widen[T, float32](a)
	}
	return widen[T, float64](a)
}

// exactFloats reads int64 values for a float64 column, refusing one that
// float64 would round.
func exactFloats(a *array.Int64) getter {
	return func(i int) (any, error) {
		x := a.Value(i)
		if x > 1<<53 || x < -(1<<53) {
			return nil, fmt.Errorf("int64 %d is not exact as a float64; send float64", x)
		}
		return float64(x), nil
	}
}

// timestampGetter reads timestamps as time.Time in UTC. One finer than a
// microsecond is left to schema validation, which refuses it; one whose
// microseconds do not fit an int64 is refused here, before time.Time
// would wrap them.
func timestampGetter(arr arrow.Array) (getter, error) {
	a, ok := arr.(*array.Timestamp)
	if !ok {
		return nil, fmt.Errorf("Arrow type %s is not a timestamp", arr.DataType())
	}
	unit := a.DataType().(*arrow.TimestampType).Unit
	perMicro := map[arrow.TimeUnit]int64{arrow.Second: 1e6, arrow.Millisecond: 1e3, arrow.Microsecond: 1, arrow.Nanosecond: 1}[unit]
	return func(i int) (any, error) {
		x := int64(a.Value(i))
		if x > math.MaxInt64/perMicro || x < math.MinInt64/perMicro {
			return nil, fmt.Errorf("timestamp %d %s is out of range (microseconds since 1970 in an int64)", x, unit)
		}
		switch unit {
		case arrow.Second:
			return time.Unix(x, 0).UTC(), nil
		case arrow.Millisecond:
			return time.UnixMilli(x).UTC(), nil
		case arrow.Microsecond:
			return time.UnixMicro(x).UTC(), nil
		}
		return time.Unix(0, x).UTC(), nil
	}, nil
}

// list reads a list-like array (list, large_list, list_view,
// large_list_view, fixed_size_list) as []any of its elements.
func (v *valueReader) list(arr arrow.Array, col *schema.Column) (getter, error) {
	a, ok := arr.(array.ListLike)
	if !ok {
		return nil, fmt.Errorf("Arrow type %s is not a list", arr.DataType())
	}
	if va, ok := arr.(interface{ ValidateFull() error }); ok {
		if err := va.ValidateFull(); err != nil {
			return nil, err
		}
	}
	child := a.ListValues()
	if typed := v.typedList(a, child, col.Element); typed != nil {
		return typed, nil
	}
	elem, err := v.getter(child, col.Element, 0)
	if err != nil {
		return nil, under("[]", err)
	}
	return func(i int) (any, error) {
		lo, hi := a.ValueOffsets(i)
		if err := v.elements(lo, hi, child.Len(), slotCost); err != nil {
			return nil, err
		}
		out := make([]any, hi-lo)
		for j := range out {
			x, err := elem(int(lo) + j)
			if err != nil {
				return nil, under(fmt.Sprintf("[%d]", j), err)
			}
			out[j] = x
		}
		return out, nil
	}, nil
}

// typedList reads a list of int32 or float32 without nulls as []int32 or
// []float32, as token ids and log-probabilities come: schema validation
// takes those slices whole, without an interface value per element. It is
// nil for any other list.
func (v *valueReader) typedList(a array.ListLike, child arrow.Array, elem *schema.Column) getter {
	if child.NullN() > 0 {
		return nil
	}
	switch c := child.(type) {
	case *array.Int32:
		if elem.Type == schema.Int32 {
			return typedElements(v, a, c.Int32Values())
		}
	case *array.Float32:
		if elem.Type == schema.Float32 {
			return typedElements(v, a, c.Float32Values())
		}
	}
	return nil
}

func typedElements[T int32 | float32](v *valueReader, a array.ListLike, vals []T) getter {
	return func(i int) (any, error) {
		lo, hi := a.ValueOffsets(i)
		if err := v.elements(lo, hi, len(vals), 4); err != nil {
			return nil, err
		}
		return slices.Clone(vals[lo:hi]), nil
	}
}

// elements checks a list's elements [lo, hi) of a child of n values and
// charges them at cost each, before any is made.
func (v *valueReader) elements(lo, hi int64, n int, cost int64) error {
	switch {
	case lo < 0 || hi < lo || hi > int64(n):
		return fmt.Errorf("list elements %d to %d lie outside the %d values of its child array", lo, hi, n)
	case hi-lo > schema.MaxListElements:
		return fmt.Errorf("list of %d elements is longer than the limit of %d (schema.MaxListElements)", hi-lo, schema.MaxListElements)
	}
	return v.charge((hi - lo) * cost)
}

// structure reads a struct as map[string]any of the fields the Arrow type
// has: one the column has and the type lacks stays absent, which schema
// validation takes as null.
func (v *valueReader) structure(arr arrow.Array, col *schema.Column) (getter, error) {
	a, ok := arr.(*array.Struct)
	if !ok {
		return nil, fmt.Errorf("Arrow type %s is not a struct", arr.DataType())
	}
	if err := a.Validate(); err != nil {
		return nil, err
	}
	fields := a.DataType().(*arrow.StructType).Fields()
	gets := make([]getter, len(fields))
	for k, f := range fields {
		g, err := v.getter(a.Field(k), structField(col, f.Name), a.Len())
		if err != nil {
			return nil, under("."+f.Name, err)
		}
		gets[k] = g
	}
	return func(i int) (any, error) {
		if err := v.charge(mapCost + entryCost*int64(max(len(gets)-8, 0))); err != nil {
			return nil, err
		}
		out := make(map[string]any, len(gets))
		for k, get := range gets {
			x, err := get(i)
			if err != nil {
				return nil, under("."+fields[k].Name, err)
			}
			out[fields[k].Name] = x
		}
		return out, nil
	}, nil
}

// dictionary reads each value from the dictionary at its index.
func (v *valueReader) dictionary(a *array.Dictionary, col *schema.Column) (getter, error) {
	dict := a.Dictionary()
	get, err := v.getter(dict, col, 0)
	if err != nil {
		return nil, err
	}
	return func(i int) (any, error) {
		k := a.GetValueIndex(i)
		if k < 0 || k >= dict.Len() {
			return nil, fmt.Errorf("dictionary index %d lies outside the dictionary of %d values", k, dict.Len())
		}
		return get(k)
	}, nil
}
