package schema

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// pathError is a refusal inside a list or struct value, at path
// (messages[3].role).
type pathError struct {
	path string
	err  error
}

func (e *pathError) Error() string { return e.err.Error() }

// appendNested converts v (a list or struct value; nil for null) and
// appends it as row i of vec. On an error vec is left part-way: Build
// drops the whole batch.
func appendNested(vec *Vector, col *Column, i int, v any, path string) error {
	if v == nil {
		if !col.Nullable {
			return &pathError{path, errors.New("missing value for a non-nullable column")}
		}
		vec.pushNull(i)
		return nil
	}
	if col.Type == List {
		return appendList(vec, col, i, v, path)
	}
	return appendStruct(vec, col, i, v, path)
}

func appendList(vec *Vector, col *Column, i int, v any, path string) error {
	if n, ok, err := appendTyped(vec.Elem, col.Element, v, path); ok {
		if err != nil {
			return err
		}
		vec.Offsets = append(vec.Offsets, vec.Offsets[len(vec.Offsets)-1]+int64(n))
		vec.markNull(i, false)
		return nil
	}
	elems, err := listElements(v)
	if err != nil {
		return &pathError{path, err}
	}
	if len(elems) > MaxListElements {
		return &pathError{path, fmt.Errorf("list of %d elements is longer than the limit of %d (schema.MaxListElements)", len(elems), MaxListElements)}
	}
	e := vec.Elem
	var bytes int64
	for j, x := range elems {
		at := fmt.Sprintf("%s[%d]", path, j)
		if col.Element.Type == Struct {
			if err := appendNested(e, col.Element, e.Len(), x, at); err != nil {
				return err
			}
			continue
		}
		val, err := convert(*col.Element, x)
		if err != nil {
			return &pathError{at, err}
		}
		e.push(e.Len(), val)
		if bytes += valueBytes(val); bytes > MaxValueBytes {
			return &pathError{path, fmt.Errorf("list of more than %d bytes is longer than the limit (schema.MaxValueBytes)", MaxValueBytes)}
		}
	}
	vec.Offsets = append(vec.Offsets, vec.Offsets[len(vec.Offsets)-1]+int64(len(elems)))
	vec.markNull(i, false)
	return nil
}

// appendTyped appends the elements of a typed Go slice of the element's
// own type (token ids as []int32, log-probabilities as []float32) without
// boxing each into an interface; ok is false for any other value.
func appendTyped(e *Vector, elem *Column, v any, path string) (n int, ok bool, err error) {
	switch x := v.(type) {
	case []int32:
		if elem.Type != Int32 {
			return 0, false, nil
		}
		if err := checkTypedLen(len(x), 4, path); err != nil {
			return 0, true, err
		}
		e.I32 = append(e.I32, x...)
		n = len(x)
	case []float32:
		if elem.Type != Float32 {
			return 0, false, nil
		}
		if err := checkTypedLen(len(x), 4, path); err != nil {
			return 0, true, err
		}
		for j, f := range x {
			if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
				return 0, true, &pathError{fmt.Sprintf("%s[%d]", path, j), fmt.Errorf("want a finite float32, got %v", f)}
			}
		}
		e.F32 = append(e.F32, x...)
		n = len(x)
	default:
		return 0, false, nil
	}
	if e.Nulls != nil {
		e.Nulls = append(e.Nulls, make([]bool, n)...)
	}
	return n, true, nil
}

func checkTypedLen(n, width int, path string) error {
	switch {
	case n > MaxListElements:
		return &pathError{path, fmt.Errorf("list of %d elements is longer than the limit of %d (schema.MaxListElements)", n, MaxListElements)}
	case int64(n)*int64(width) > MaxValueBytes:
		return &pathError{path, fmt.Errorf("list of more than %d bytes is longer than the limit (schema.MaxValueBytes)", MaxValueBytes)}
	}
	return nil
}

// listElements accepts a list value as encoding/json decodes it ([]any)
// or as a typed Go slice.
func listElements(v any) ([]any, error) {
	switch x := v.(type) {
	case []any:
		return x, nil
	case []int32:
		return anys(x), nil
	case []int64:
		return anys(x), nil
	case []float32:
		return anys(x), nil
	case []float64:
		return anys(x), nil
	case []string:
		return anys(x), nil
	case []bool:
		return anys(x), nil
	case [][]byte:
		return anys(x), nil
	case []map[string]any:
		return anys(x), nil
	}
	return nil, fmt.Errorf("want a list, got %s", describe(v))
}

func anys[T any](s []T) []any {
	out := make([]any, len(s))
	for i, x := range s {
		out[i] = x
	}
	return out
}

func valueBytes(v any) int64 {
	switch x := v.(type) {
	case string:
		return int64(len(x))
	case int32, float32:
		return 4
	case bool:
		return 1
	}
	return 8
}

func appendStruct(vec *Vector, col *Column, i int, v any, path string) error {
	obj, ok := v.(map[string]any)
	if !ok {
		return &pathError{path, fmt.Errorf("want an object, got %s", describe(v))}
	}
	for name := range obj {
		if fieldIndex(col, name) < 0 {
			return &pathError{path + "." + name, errors.New("unknown field")}
		}
	}
	var bytes int64
	for f := range col.Fields {
		fc := &col.Fields[f]
		val, err := convert(*fc, obj[fc.Name])
		if err != nil {
			return &pathError{path + "." + fc.Name, err}
		}
		if bytes += valueBytes(val); bytes > MaxValueBytes {
			return &pathError{path, fmt.Errorf("struct of more than %d bytes is longer than the limit (schema.MaxValueBytes)", MaxValueBytes)}
		}
		vec.Fields[f].push(i, val)
	}
	vec.markNull(i, false)
	return nil
}

func fieldIndex(col *Column, name string) int {
	for f := range col.Fields {
		if col.Fields[f].Name == name {
			return f
		}
	}
	return -1
}

func toInt32(v any) (any, error) {
	n, err := toInt64(v)
	if err != nil {
		return nil, fmt.Errorf("want int32, got %s", describe(v))
	}
	if x := n.(int64); x < math.MinInt32 || x > math.MaxInt32 {
		return nil, fmt.Errorf("want int32, got %d (out of range)", x)
	}
	return int32(n.(int64)), nil
}

func toFloat32(v any) (any, error) {
	var f float64
	switch n := v.(type) {
	case float32:
		f = float64(n)
	case json.Number:
		// Parsed at 32 bits, the decimal text rounds once, to the nearest
		// float32; through float64 it would round twice.
		x, err := strconv.ParseFloat(string(n), 32)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return nil, fmt.Errorf("want float32, got %s", n)
		}
		f = x
	default:
		x, err := toFloat64(v)
		if err != nil {
			return nil, fmt.Errorf("want float32, got %s", describe(v))
		}
		f = x.(float64)
	}
	if math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > math.MaxFloat32 {
		return nil, fmt.Errorf("want a finite float32, got %v", f)
	}
	return float32(f), nil
}

// toBinary accepts bytes, or base64 text (standard alphabet, padded) as
// NDJSON carries them.
func toBinary(v any) (any, error) {
	var b []byte
	switch x := v.(type) {
	case []byte:
		b = x
	case string:
		d, err := base64.StdEncoding.Strict().DecodeString(x)
		if err != nil {
			return nil, fmt.Errorf("want base64 (standard alphabet, padded): %v", err)
		}
		b = d
	default:
		return nil, fmt.Errorf("want binary (base64 text), got %s", describe(v))
	}
	if len(b) > MaxValueBytes {
		return nil, tooLong("binary value", len(b))
	}
	return string(b), nil
}

// toTimestamp accepts RFC 3339 text or a time.Time, at most microsecond
// precision: a finer part would be lost, so it is refused.
func toTimestamp(v any) (any, error) {
	var t time.Time
	switch x := v.(type) {
	case time.Time:
		t = x
	case string:
		p, err := time.Parse(time.RFC3339Nano, x)
		if err != nil {
			return nil, fmt.Errorf("want an RFC 3339 timestamp, got %q", truncate(x, 64))
		}
		t = p
	default:
		return nil, fmt.Errorf("want an RFC 3339 timestamp, got %s", describe(v))
	}
	if t.Nanosecond()%1000 != 0 {
		return nil, fmt.Errorf("timestamp %s is finer than a microsecond, which the column stores", t.Format(time.RFC3339Nano))
	}
	return t.UnixMicro(), nil
}

func microsToTime(us int64) time.Time { return time.UnixMicro(us).UTC() }
