package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	"github.com/rollwal/rollwal/errs"
)

// Row is one row as a producer sends it: "id" and the table's columns by
// name. Values are Go values as encoding/json produces them (string,
// float64, json.Number, bool, nil, maps and slices for json columns) or
// their typed equivalents (int, int64, float32, []byte for json text).
type Row map[string]any

// ErrInvalidRow marks every validation error of a row.
var ErrInvalidRow = errs.New(errs.InvalidInput, "schema: invalid row")

// RowError names the row (its index in the batch) and column that failed
// and, inside a list or struct value, the path to the part that did
// (messages[3].role).
type RowError struct {
	Row    int
	ID     string
	Column string
	Path   string
	Reason string
}

func (e *RowError) Error() string {
	id := ""
	if e.ID != "" {
		id = fmt.Sprintf(" (id %q)", truncate(e.ID, 64))
	}
	at := ""
	if e.Path != "" && e.Path != e.Column {
		at = fmt.Sprintf(" at %s", truncate(e.Path, 256))
	}
	return fmt.Sprintf("row %d%s, column %q%s: %s", e.Row, id, e.Column, at, e.Reason)
}

// Unwrap lets errors.Is(err, ErrInvalidRow) hold.
func (e *RowError) Unwrap() error { return ErrInvalidRow }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Vector is one column of a batch. Exactly one value slice is used, chosen
// by Type; Nulls is nil when the column has no null in the batch. A null
// row holds a zero value (an empty list, a struct of zero fields).
type Vector struct {
	Type  Type
	Nulls []bool   // Nulls[i] reports that row i is null
	Str   []string // string, json, binary
	I64   []int64  // int64, timestamp (microseconds since the Unix epoch, UTC)
	F64   []float64
	Bool  []bool
	I32   []int32
	F32   []float32
	// Offsets is a list's: row i's elements are Elem's values
	// [Offsets[i], Offsets[i+1]); Offsets[0] is 0.
	Offsets []int64
	Elem    *Vector
	// Fields are a struct's, one per field, each with a value per row.
	Fields []Vector
}

// Batch is a validated set of rows in columnar form.
type Batch struct {
	Schema *Schema
	IDs    []string
	Cols   []Vector // one per schema column, in schema order
}

// NewBatch returns an empty batch with room for n rows.
func (s *Schema) NewBatch(n int) *Batch {
	b := &Batch{Schema: s, IDs: make([]string, 0, n), Cols: make([]Vector, len(s.Columns))}
	for i := range s.Columns {
		b.Cols[i] = newVector(&s.Columns[i], n)
	}
	return b
}

// Len is the number of rows.
func (b *Batch) Len() int { return len(b.IDs) }

// IsNull reports whether column c of row i is null.
func (v *Vector) IsNull(i int) bool { return v.Nulls != nil && v.Nulls[i] }

// Build validates rows against the schema and returns them as one batch.
// The first bad row fails the whole batch with a *RowError.
func (s *Schema) Build(rows []Row) (*Batch, error) {
	b := s.NewBatch(len(rows))
	for _, r := range rows {
		if err := b.Append(r); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// Append validates r as Build does and appends it as the next row. After
// a *RowError the batch may hold part of r: drop it.
func (b *Batch) Append(r Row) error { return b.appendRow(b.Len(), r) }

func (b *Batch) appendRow(i int, r Row) error {
	s := b.Schema
	id, err := checkID(r[IDColumn])
	if err != nil {
		return &RowError{Row: i, Column: IDColumn, Reason: err.Error()}
	}
	for name := range r {
		if name != IDColumn && s.Index(name) < 0 {
			return &RowError{Row: i, ID: id, Column: name, Reason: "unknown column"}
		}
	}
	vals := make([]any, len(s.Columns))
	for c := range s.Columns {
		vals[c] = r[s.Columns[c].Name]
	}
	return b.appendValues(i, id, vals)
}

// AppendValues validates and appends the row of id and vals, one value per
// schema column in schema order (nil for null or absent), exactly as
// Append does the Row that maps the columns' names to them, without
// building that map. vals is used as scratch: its contents are replaced.
// After a *RowError the batch may hold part of the row: drop it.
func (b *Batch) AppendValues(id any, vals []any) error {
	i := b.Len()
	if len(vals) != len(b.Schema.Columns) {
		return fmt.Errorf("schema: append values: %d values for %d columns", len(vals), len(b.Schema.Columns))
	}
	sid, err := checkID(id)
	if err != nil {
		return &RowError{Row: i, Column: IDColumn, Reason: err.Error()}
	}
	return b.appendValues(i, sid, vals)
}

// appendValues appends the row of a checked id and vals, in schema order,
// converting them in place.
func (b *Batch) appendValues(i int, id string, vals []any) error {
	s := b.Schema
	// Convert every primitive column before appending any; lists and
	// structs are converted as they are appended, and a failure there
	// leaves the batch part-way, which Build then drops.
	for c, col := range s.Columns {
		if !col.Type.IsPrimitive() {
			continue
		}
		v, err := convert(col, vals[c])
		if err != nil {
			return &RowError{Row: i, ID: id, Column: col.Name, Reason: err.Error()}
		}
		vals[c] = v
	}
	row := b.Len()
	b.IDs = append(b.IDs, id)
	for c := range s.Columns {
		col := &s.Columns[c]
		if col.Type.IsPrimitive() {
			b.Cols[c].push(row, vals[c])
			continue
		}
		if err := appendNested(&b.Cols[c], col, row, vals[c], col.Name); err != nil {
			pe := err.(*pathError)
			return &RowError{Row: i, ID: id, Column: col.Name, Path: pe.path, Reason: pe.err.Error()}
		}
	}
	return nil
}

func checkID(v any) (string, error) {
	id, ok := v.(string)
	switch {
	case v == nil:
		return "", errors.New("missing id")
	case !ok:
		return "", fmt.Errorf("id must be a string, got %T", v)
	case id == "":
		return "", errors.New("empty id")
	case len(id) > MaxIDBytes:
		return "", fmt.Errorf("id is %d bytes, more than the limit of %d", len(id), MaxIDBytes)
	case !utf8.ValidString(id):
		return "", errors.New("id is not valid UTF-8")
	}
	return id, nil
}

// push appends v (already converted; nil for null) as row i.
func (v *Vector) push(i int, val any) {
	if val == nil {
		if v.Nulls == nil {
			v.Nulls = make([]bool, i, max(i+1, 8))
		}
		v.Nulls = append(v.Nulls, true)
	} else if v.Nulls != nil {
		v.Nulls = append(v.Nulls, false)
	}
	switch v.Type {
	case String, JSON, Binary:
		s, _ := val.(string)
		v.Str = append(v.Str, s)
	case Int64, Timestamp:
		n, _ := val.(int64)
		v.I64 = append(v.I64, n)
	case Int32:
		n, _ := val.(int32)
		v.I32 = append(v.I32, n)
	case Float32:
		f, _ := val.(float32)
		v.F32 = append(v.F32, f)
	case Float64:
		f, _ := val.(float64)
		v.F64 = append(v.F64, f)
	case Bool:
		t, _ := val.(bool)
		v.Bool = append(v.Bool, t)
	}
}

// convert checks one value against its column and returns it in the
// column's Go type, or nil for null.
func convert(col Column, v any) (any, error) {
	if v == nil {
		if !col.Nullable {
			return nil, errors.New("missing value for a non-nullable column")
		}
		return nil, nil
	}
	switch col.Type {
	case String:
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("want string, got %s", describe(v))
		}
		if len(s) > MaxValueBytes {
			return nil, tooLong("string", len(s))
		}
		if !utf8.ValidString(s) {
			return nil, errors.New("string is not valid UTF-8")
		}
		return s, nil
	case Int64:
		return toInt64(v)
	case Float64:
		return toFloat64(v)
	case Bool:
		t, ok := v.(bool)
		if !ok {
			return nil, fmt.Errorf("want bool, got %s", describe(v))
		}
		return t, nil
	case JSON:
		text, err := toJSON(v)
		if err == nil && len(text) > MaxValueBytes {
			return nil, tooLong("json text", len(text))
		}
		return text, err
	case Int32:
		return toInt32(v)
	case Float32:
		return toFloat32(v)
	case Binary:
		return toBinary(v)
	case Timestamp:
		return toTimestamp(v)
	}
	return nil, fmt.Errorf("unknown column type %d", col.Type)
}

func tooLong(what string, n int) error {
	return fmt.Errorf("%s of %d bytes is longer than the limit of %d bytes (schema.MaxValueBytes)", what, n, MaxValueBytes)
}

func describe(v any) string {
	switch x := v.(type) {
	case string:
		return "string"
	case float64, float32, json.Number, int, int64, int32, uint64, uint32:
		return "number"
	case bool:
		return "bool"
	case map[string]any:
		return "object"
	case []byte:
		return "bytes"
	case time.Time:
		return "timestamp"
	case []any:
		return "array"
	case json.RawMessage:
		return describeRaw(x)
	}
	return fmt.Sprintf("%T", v)
}

// describeRaw names the kind of a JSON text value.
func describeRaw(text json.RawMessage) string {
	switch {
	case len(text) == 0:
		return "empty JSON text"
	case text[0] == '{':
		return "object"
	case text[0] == '[':
		return "array"
	case text[0] == '"':
		return "string"
	}
	return "JSON text"
}

func toInt64(v any) (any, error) {
	switch n := v.(type) {
	case int64:
		return n, nil
	case int:
		return int64(n), nil
	case int32:
		return int64(n), nil
	case json.Number:
		i, err := n.Int64()
		if err != nil {
			return nil, fmt.Errorf("want int64, got %s", n)
		}
		return i, nil
	case float64:
		if n != math.Trunc(n) || n < -(1<<63) || n >= 1<<63 {
			return nil, fmt.Errorf("want int64, got %v", n)
		}
		return int64(n), nil
	}
	return nil, fmt.Errorf("want int64, got %s", describe(v))
}

func toFloat64(v any) (any, error) {
	var f float64
	switch n := v.(type) {
	case float64:
		f = n
	case float32:
		f = float64(n)
	case int64:
		f = float64(n)
	case int:
		f = float64(n)
	case json.Number:
		x, err := n.Float64()
		if err != nil {
			return nil, fmt.Errorf("want float64, got %s", n)
		}
		f = x
	default:
		return nil, fmt.Errorf("want float64, got %s", describe(v))
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("want a finite float64, got %v", f)
	}
	return f, nil
}

// toJSON accepts JSON text as a string or []byte (which must be valid
// JSON), or any other value, which is marshalled.
func toJSON(v any) (string, error) {
	var text []byte
	switch x := v.(type) {
	case string:
		text = []byte(x)
	case []byte:
		text = x
	case json.RawMessage:
		text = x
	default:
		b, err := json.Marshal(x)
		if err != nil {
			return "", fmt.Errorf("cannot encode as JSON: %v", err)
		}
		return string(b), nil
	}
	if !json.Valid(text) {
		return "", errors.New("not valid JSON text")
	}
	return string(text), nil
}
