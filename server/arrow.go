package server

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/rollwal/rollwal/schema"
)

// An Arrow stream becomes schema rows, not a columnar batch: a Shard does not
// expose its table schema, and going through sh.Append lets the engine's one
// validation (types, nullability, unknown columns) judge Arrow and NDJSON
// alike.

// errTooManyRows marks a request with more rows than Options.MaxRows. It is
// checked while decoding, because a compact body (an Arrow column of short
// strings) would otherwise expand into millions of rows in memory before the
// engine's own limit is reached.
var errTooManyRows = errors.New("too many rows")

// acceptedArrow are the Arrow types a column may have. Schema validation
// decides what each is worth for a column (an int32 becomes an int64, a
// string in a json column must hold JSON text).
var acceptedArrow = map[arrow.Type]bool{
	arrow.STRING: true, arrow.LARGE_STRING: true, arrow.STRING_VIEW: true,
	arrow.INT8: true, arrow.INT16: true, arrow.INT32: true, arrow.INT64: true,
	arrow.UINT8: true, arrow.UINT16: true, arrow.UINT32: true,
	arrow.FLOAT32: true, arrow.FLOAT64: true, arrow.BOOL: true, arrow.NULL: true,
}

const acceptedArrowNames = "utf8, large_utf8, utf8_view, int8–int64, uint8–uint32, float32, float64, bool or null"

// arrowError locates a stream that cannot be decoded as precisely as
// known; batch and row are -1 and column is empty where they do not apply.
type arrowError struct {
	batch, row int
	column     string
	err        error
}

func (e *arrowError) Error() string {
	var where []string
	if e.batch >= 0 {
		where = append(where, fmt.Sprintf("record batch %d", e.batch))
	}
	if e.row >= 0 {
		where = append(where, fmt.Sprintf("row %d", e.row))
	}
	if e.column != "" {
		where = append(where, fmt.Sprintf("column %q", e.column))
	}
	if len(where) == 0 {
		return e.err.Error()
	}
	return strings.Join(where, ", ") + ": " + e.err.Error()
}

func (e *arrowError) Unwrap() error { return e.err }

// api is the error's answer body.
func (e *arrowError) api() apiError {
	out := apiError{Error: e.Error(), Column: e.column}
	if e.batch >= 0 {
		out.RecordBatch = &e.batch
	}
	if e.row >= 0 {
		out.Row = &e.row
	}
	return out
}

// arrowRows is a decoded stream; starts[b] is the index in rows of record
// batch b's first row, so that errors can name the batch and row.
type arrowRows struct {
	rows   []schema.Row
	starts []int
}

// locate names where row i of the request came from.
func (a *arrowRows) locate(re *schema.RowError) (apiError, bool) {
	if re.Row < 0 || re.Row >= len(a.rows) {
		return apiError{}, false
	}
	b := sort.SearchInts(a.starts, re.Row+1) - 1
	e := &arrowError{batch: b, row: re.Row - a.starts[b], column: re.Column, err: errors.New(re.Reason)}
	return e.api(), true
}

// arrowLimits bound the decoding of one stream: body the bytes of one
// message, decoded the uncompressed bytes of all buffers of all record
// batches (checked against what compressed buffers declare before any is
// decompressed), rows the rows. size is the request's Content-Length, 0 or
// less when unknown: a message that fits in it is read into a buffer of
// its size at once.
type arrowLimits struct {
	body, decoded int64
	rows          int
	size          int64
}

// decodeArrow reads an Arrow IPC stream whose columns are "id" and table
// columns, within lim; mem allocates the stream's buffers, and no row
// refers to them afterwards.
func decodeArrow(body io.Reader, mem memory.Allocator, lim arrowLimits) (out *arrowRows, err error) {
	batch := -1
	defer func() {
		// arrow-go builds arrays over untrusted buffers and documents that
		// corrupt ones may panic on access; a request body must not.
		if p := recover(); p != nil {
			cause, ok := p.(error)
			if !ok {
				cause = fmt.Errorf("%v", p)
			}
			out, err = nil, &arrowError{batch: batch, row: -1, err: fmt.Errorf("malformed Arrow data: %w", cause)}
		}
	}()
	// The guarded reader refuses a record batch whose buffers pass
	// lim.decoded before arrow-go decompresses any; the allocator bounds
	// what is live at once as well, at four times the body limit.
	mem = &limitedAllocator{Allocator: mem, limit: 4 * lim.body}
	rd, err := ipc.NewReaderFromMessageReader(newGuardedReader(body, lim.body, lim.decoded, lim.size), ipc.WithAllocator(mem))
	if err != nil {
		return nil, &arrowError{batch: -1, row: -1, err: fmt.Errorf("not an Arrow IPC stream: %w", err)}
	}
	defer rd.Release()
	if err := checkArrowSchema(rd.Schema()); err != nil {
		return nil, err
	}
	out = &arrowRows{}
	for batch = 0; rd.Next(); batch++ {
		if err := out.add(rd.RecordBatch(), batch, lim.rows); err != nil {
			return nil, err
		}
	}
	if err := rd.Err(); err != nil {
		return nil, &arrowError{batch: batch, row: -1, err: err}
	}
	if err := checkEnd(body); err != nil {
		return nil, err
	}
	return out, nil
}

// checkEnd refuses bytes after the end-of-stream marker: a second stream
// concatenated to the first would otherwise be dropped unseen.
func checkEnd(body io.Reader) error {
	var one [1]byte
	if n, _ := io.ReadFull(body, one[:]); n > 0 {
		return &arrowError{batch: -1, row: -1, err: errors.New("data after the end of the Arrow stream (one stream per request)")}
	}
	return nil
}

// checkArrowSchema refuses a stream whose columns could not become rows:
// no string id, a column twice (a row is a map), an unaccepted type.
func checkArrowSchema(sc *arrow.Schema) error {
	seen := map[string]bool{}
	for _, f := range sc.Fields() {
		switch {
		case seen[f.Name]:
			return &arrowError{batch: -1, row: -1, column: f.Name, err: errors.New("column appears twice in the stream's schema")}
		case !acceptedArrow[f.Type.ID()]:
			return &arrowError{batch: -1, row: -1, column: f.Name, err: fmt.Errorf("Arrow type %s is not accepted; send %s", f.Type, acceptedArrowNames)}
		case f.Name == schema.IDColumn && !isArrowString(f.Type.ID()):
			return &arrowError{batch: -1, row: -1, column: f.Name, err: fmt.Errorf("the id column has Arrow type %s; want utf8, large_utf8 or utf8_view", f.Type)}
		}
		seen[f.Name] = true
	}
	if !seen[schema.IDColumn] {
		return &arrowError{batch: -1, row: -1, err: errors.New("the stream has no id column")}
	}
	return nil
}

func isArrowString(t arrow.Type) bool {
	return t == arrow.STRING || t == arrow.LARGE_STRING || t == arrow.STRING_VIEW
}

// add appends the rows of record batch b.
func (a *arrowRows) add(rec arrow.RecordBatch, b, maxRows int) error {
	n := rec.NumRows()
	if int64(len(a.rows))+n > int64(maxRows) {
		return &arrowError{batch: b, row: -1, err: fmt.Errorf("%w: more than %d rows in the request", errTooManyRows, maxRows)}
	}
	gets := make([]getter, rec.NumCols())
	for c, col := range rec.Columns() {
		g, err := getterOf(col, int(n))
		if err != nil {
			return &arrowError{batch: b, row: -1, column: rec.ColumnName(c), err: err}
		}
		gets[c] = g
	}
	a.starts = append(a.starts, len(a.rows))
	fields := rec.Schema().Fields()
	for i := range int(n) {
		row := make(schema.Row, len(gets))
		for c, get := range gets {
			row[fields[c].Name] = get(i)
		}
		if row[schema.IDColumn] == nil {
			return &arrowError{batch: b, row: i, column: schema.IDColumn, err: errors.New("id is null")}
		}
		a.rows = append(a.rows, row)
	}
	return nil
}

// getter returns row i of a column as the Go value schema validation
// expects, or nil for null.
type getter func(i int) any

// getterOf checks the buffers of an array of at least n values that the
// IPC reader does not check (validity bitmaps, string offsets) and returns
// its getter.
func getterOf(arr arrow.Array, n int) (getter, error) {
	if arr.Len() < n {
		return nil, fmt.Errorf("column holds %d values for %d rows", arr.Len(), n)
	}
	bitmap := arr.NullBitmapBytes()
	if len(bitmap) > 0 && len(bitmap)*8 < arr.Data().Offset()+arr.Len() {
		return nil, errors.New("validity bitmap is shorter than the column")
	}
	get, err := valueGetter(arr)
	if err != nil || len(bitmap) == 0 {
		return get, err
	}
	return func(i int) any {
		if arr.IsNull(i) {
			return nil
		}
		return get(i)
	}, nil
}

// valueGetter reads the values of an array, widening integers and floats
// to the int64 and float64 that schema validation takes.
func valueGetter(arr arrow.Array) (getter, error) {
	switch a := arr.(type) {
	case *array.String:
		return stringGetter(a)
	case *array.LargeString:
		return stringGetter(a)
	case *array.StringView:
		return stringGetter(a)
	case *array.Int64:
		return func(i int) any { return a.Value(i) }, nil
	case *array.Int32:
		return func(i int) any { return int64(a.Value(i)) }, nil
	case *array.Int16:
		return func(i int) any { return int64(a.Value(i)) }, nil
	case *array.Int8:
		return func(i int) any { return int64(a.Value(i)) }, nil
	case *array.Uint32:
		return func(i int) any { return int64(a.Value(i)) }, nil
	case *array.Uint16:
		return func(i int) any { return int64(a.Value(i)) }, nil
	case *array.Uint8:
		return func(i int) any { return int64(a.Value(i)) }, nil
	case *array.Float64:
		return func(i int) any { return a.Value(i) }, nil
	case *array.Float32:
		return func(i int) any { return float64(a.Value(i)) }, nil
	case *array.Boolean:
		return boolGetter(a)
	case *array.Null:
		return func(int) any { return nil }, nil
	}
	return nil, fmt.Errorf("Arrow type %s is not accepted; send %s", arr.DataType(), acceptedArrowNames)
}

type stringArray interface {
	arrow.Array
	Value(i int) string
	ValidateFull() error
}

// stringGetter copies each value out, so that rows never point into the
// allocator's buffers once the stream is released.
func stringGetter(a stringArray) (getter, error) {
	if err := a.ValidateFull(); err != nil {
		return nil, err
	}
	return func(i int) any { return strings.Clone(a.Value(i)) }, nil
}

func boolGetter(a *array.Boolean) (getter, error) {
	if a.Len() > 0 {
		vals := a.Data().Buffers()[1]
		if vals == nil || vals.Len()*8 < a.Data().Offset()+a.Len() {
			return nil, errors.New("bool values buffer is shorter than the column")
		}
	}
	return func(i int) any { return a.Value(i) }, nil
}
