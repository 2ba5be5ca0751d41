package server

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/rollwal/rollwal/errs"
	"github.com/rollwal/rollwal/schema"
)

// An Arrow stream becomes a schema batch a record batch at a time, column
// by column (arrowcols.go): string and binary columns as one copy of their
// bytes, fixed-width columns in one loop, validity bitmaps as the vectors'
// null flags. A record batch that the columnar decode would refuse, and
// every one after it, is read cell by cell instead, each row's values handed
// to Batch.AppendValues once the whole stream is read: the one validation
// of rows (values, nullability, lists' lengths) judges Arrow and NDJSON
// alike and names the row, column and path of what it refuses. Those rows
// are built after the stream is read so that a stream refused for its size
// (errDecodedTooLarge) has made its values only, not a batch of them too.
// The stream's types are checked against the table's schema first
// (arrowtypes.go), so that a column of a type that does not fit is refused
// naming both types, before any value.

// errTooManyRows marks a request with more rows than Options.MaxRows. It is
// checked while decoding, because a compact body (an Arrow column of short
// strings) would otherwise expand into millions of rows in memory before the
// engine's own limit is reached.
var errTooManyRows = errs.New(errs.TooLarge, "too many rows")

// idColumn is the column the id is read as.
var idColumn = &schema.Column{Name: schema.IDColumn, Type: schema.String}

// arrowError locates a stream that cannot be decoded as precisely as
// known; batch and row are -1 and column and path are empty where they do
// not apply. path is inside the column's value (messages[3].role), or
// inside its type (messages[].role).
type arrowError struct {
	batch, row   int
	column, path string
	err          error
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
		where = append(where, fmt.Sprintf("column %q%s", e.column, at(e.path)))
	}
	if len(where) == 0 {
		return e.err.Error()
	}
	return strings.Join(where, ", ") + ": " + e.err.Error()
}

func (e *arrowError) Unwrap() error { return e.err }

// api is the error's answer body.
func (e *arrowError) api() apiError {
	out := apiError{Error: e.Error(), Column: e.column, Path: e.path}
	if e.batch >= 0 {
		out.RecordBatch = &e.batch
	}
	if e.row >= 0 {
		out.Row = &e.row
	}
	return out
}

// arrowRows is a decoded stream: its rows as a batch, or, when a row did
// not validate, that row's error (invalid) and the count of rows; starts[b]
// is the index of record batch b's first row, so that errors can name the
// batch and row.
type arrowRows struct {
	batch   *schema.Batch
	n       int
	invalid error
	starts  []int

	// While the stream is read: the record batches decoded column by
	// column, then, from the first that was read cell by cell (cells), each
	// row's id and values in schema order, the values of one record batch
	// in one slice.
	columnar []*schema.Batch
	cells    bool
	ids      []any
	vals     [][]any
	byColumn int // record batches decoded by column, for tests
}

// build appends the record batches decoded by column and then validates
// the rows read cell by cell and appends them, up to the first that does
// not validate, whose error is invalid.
func (a *arrowRows) build(sc *schema.Schema) {
	if len(a.columnar) == 1 {
		a.batch = a.columnar[0] // one record batch, as most streams are: no copy
	} else {
		a.batch = sc.NewBatch(a.n)
		for _, b := range a.columnar {
			for i := range b.Len() {
				a.batch.AppendRow(b, i)
			}
		}
	}
	for i := range a.ids {
		if a.invalid = a.batch.AppendValues(a.ids[i], a.vals[i]); a.invalid != nil {
			break
		}
	}
	a.columnar, a.ids, a.vals = nil, nil, nil
}

// locate names where row i of the request came from.
func (a *arrowRows) locate(re *schema.RowError) (apiError, bool) {
	if re.Row < 0 || re.Row >= a.n {
		return apiError{}, false
	}
	b := sort.SearchInts(a.starts, re.Row+1) - 1
	e := &arrowError{batch: b, row: re.Row - a.starts[b], column: re.Column, path: innerPath(re), err: errors.New(re.Reason)}
	return e.api(), true
}

// arrowLimits bound the decoding of one stream: body the bytes of one
// message, decoded the uncompressed bytes of all buffers of all record
// batches (checked against what compressed buffers declare before any is
// decompressed), rows the rows. size is the request's Content-Length, 0 or
// less when unknown: a message that fits in it is read into a buffer of
// its size at once. cells reads every record batch cell by cell, as one
// the columnar decode refuses is read: tests hold the two paths to each
// other.
type arrowLimits struct {
	body, decoded int64
	rows          int
	size          int64
	cells         bool
	// bodies allocates record batch bodies; nil for the shared pool.
	bodies memory.Allocator
}

// decodeArrow reads an Arrow IPC stream whose columns are "id" and columns
// of sc, within lim; mem allocates the stream's buffers, and no row refers
// to them afterwards.
func decodeArrow(body io.Reader, sc *schema.Schema, mem memory.Allocator, lim arrowLimits) (out *arrowRows, err error) {
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
	g := newGuardedReader(body, lim.body, lim.decoded, lim.size)
	if lim.bodies != nil {
		g.bodies = lim.bodies
	}
	rd, err := ipc.NewReaderFromMessageReader(g, ipc.WithAllocator(mem))
	if err != nil {
		return nil, &arrowError{batch: -1, row: -1, err: fmt.Errorf("not an Arrow IPC stream: %w", err)}
	}
	defer rd.Release()
	if err := checkArrowSchema(rd.Schema(), sc); err != nil {
		return nil, err
	}
	out = &arrowRows{cells: lim.cells}
	vr := newValueReader(lim.decoded)
	for batch = 0; rd.Next(); batch++ {
		if err := out.add(rd.RecordBatch(), sc, vr, batch, lim.rows); err != nil {
			return nil, err
		}
	}
	if err := rd.Err(); err != nil {
		return nil, &arrowError{batch: batch, row: -1, err: err}
	}
	if err := checkEnd(body); err != nil {
		return nil, err
	}
	out.build(sc)
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

// checkArrowSchema refuses a stream whose columns could not become rows of
// sc: no string id, a column twice (a row is a map), a column sc does not
// have or whose type does not fit it.
func checkArrowSchema(as *arrow.Schema, sc *schema.Schema) error {
	seen := map[string]bool{}
	for _, f := range as.Fields() {
		if err := checkArrowField(f, sc, seen); err != nil {
			return err
		}
		seen[f.Name] = true
	}
	if !seen[schema.IDColumn] {
		return &arrowError{batch: -1, row: -1, err: errors.New("the stream has no id column")}
	}
	return nil
}

func checkArrowField(f arrow.Field, sc *schema.Schema, seen map[string]bool) error {
	fail := func(err error) error { return &arrowError{batch: -1, row: -1, column: f.Name, err: err} }
	if seen[f.Name] {
		return fail(errors.New("column appears twice in the stream's schema"))
	}
	if f.Name == schema.IDColumn {
		if !isArrowString(f.Type.ID()) {
			return fail(fmt.Errorf("the id column has Arrow type %s; want utf8, large_utf8 or utf8_view", f.Type))
		}
		return nil
	}
	c := sc.Index(f.Name)
	if c < 0 {
		return fail(errors.New("unknown column: the table's schema has no column of this name"))
	}
	err := fitArrow(f.Type, &sc.Columns[c], f.Name)
	var te *typeError
	if !errors.As(err, &te) {
		return err
	}
	e := &arrowError{batch: -1, row: -1, column: f.Name, path: te.path, err: te.err}
	if e.path == f.Name {
		e.path = "" // the column's own type
	}
	return e
}

func isArrowString(t arrow.Type) bool {
	return t == arrow.STRING || t == arrow.LARGE_STRING || t == arrow.STRING_VIEW
}

// add reads the rows of record batch b, whose columns are sc's: by
// column, unless a record batch before was read cell by cell or this one's
// columnar decode refuses a value.
func (a *arrowRows) add(rec arrow.RecordBatch, sc *schema.Schema, vr *valueReader, b, maxRows int) error {
	n := rec.NumRows()
	if int64(a.n)+n > int64(maxRows) {
		return &arrowError{batch: b, row: -1, err: fmt.Errorf("%w: more than %d rows in the request", errTooManyRows, maxRows)}
	}
	if !a.cells {
		if cb, ok := (columnar{vr}).batch(rec, sc, int(n)); ok {
			a.columnar = append(a.columnar, cb)
			a.byColumn++
			a.starts = append(a.starts, a.n)
			a.n += int(n)
			return nil
		}
		a.cells = true
	}
	return a.addCells(rec, sc, vr, b)
}

// addCells reads the rows of record batch b a cell at a time, each value
// as the Go value schema validation takes.
func (a *arrowRows) addCells(rec arrow.RecordBatch, sc *schema.Schema, vr *valueReader, b int) error {
	n := rec.NumRows()
	names := make([]string, rec.NumCols())
	gets := make([]getter, rec.NumCols())
	cols := make([]int, rec.NumCols()) // schema index; -1 for the id
	for c, arr := range rec.Columns() {
		names[c] = rec.ColumnName(c)
		g, err := vr.getter(arr, columnOf(sc, names[c]), int(n))
		if err != nil {
			return located(err, b, -1, names[c])
		}
		gets[c], cols[c] = g, sc.Index(names[c])
	}
	a.starts = append(a.starts, a.n)
	width := len(sc.Columns)
	all := make([]any, int(n)*width)
	for i := range int(n) {
		var id any
		vals := all[i*width : (i+1)*width : (i+1)*width]
		for c, get := range gets {
			v, err := get(i)
			if err != nil {
				return located(err, b, i, names[c])
			}
			if cols[c] < 0 {
				id = v
			} else {
				vals[cols[c]] = v
			}
		}
		if id == nil {
			return &arrowError{batch: b, row: i, column: schema.IDColumn, err: errors.New("id is null")}
		}
		a.ids, a.vals = append(a.ids, id), append(a.vals, vals)
		a.n++
	}
	return nil
}

// columnOf is the column of sc, or the id column, that checkArrowSchema
// let name through.
func columnOf(sc *schema.Schema, name string) *schema.Column {
	if name == schema.IDColumn {
		return idColumn
	}
	return &sc.Columns[sc.Index(name)]
}

// located is err of column at row i of record batch b (-1: no row), at
// the path inside the column's value that a valueError names.
func located(err error, b, i int, column string) error {
	e := &arrowError{batch: b, row: i, column: column, err: err}
	var ve *valueError
	if errors.As(err, &ve) {
		e.err = ve.err
		if ve.path != "" {
			e.path = column + ve.path
		}
	}
	return e
}
