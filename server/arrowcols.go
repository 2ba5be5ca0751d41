package server

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/rollwal/rollwal/schema"
)

// The columnar decode: a record batch's arrays go straight into the
// vectors of a schema batch, a column at a time. A string or binary
// column's bytes are copied once and its values are slices of that copy;
// fixed-width values are read in one loop over the Arrow values; validity
// bitmaps become the vectors' null flags. Reading cell by cell (a Go value
// per cell, boxed, then Batch.AppendValues) cost as much as the append.
//
// It holds values to the rules Batch.AppendValues holds the cell by cell
// path's rows to (nullability, UTF-8, JSON text, finite floats, int64 exact
// as float64, timestamps in microseconds, list and value lengths) and
// charges the valueReader what that path charges, so that both take and
// refuse the same streams. It says nothing about what it refuses: a record
// batch it would refuse at any value is read again cell by cell (add), and
// that path's errors name the row, column and path. Error messages have
// one source, and the second read falls only on requests that fail.

// columnar decodes record batches, charging v for what they make.
type columnar struct {
	v *valueReader
}

// batch decodes the first n rows of rec, whose columns checkArrowSchema
// let through, into a new batch of sc; false, with nothing charged, when
// the cell by cell path would refuse a value or a buffer.
func (c columnar) batch(rec arrow.RecordBatch, sc *schema.Schema, n int) (*schema.Batch, bool) {
	made := c.v.made
	b, ok := c.fill(rec, sc, n)
	if !ok {
		c.v.made = made
		return nil, false
	}
	return b, true
}

func (c columnar) fill(rec arrow.RecordBatch, sc *schema.Schema, n int) (*schema.Batch, bool) {
	b := sc.NewBatch(n)
	seen := make([]bool, len(sc.Columns))
	for i, arr := range rec.Columns() {
		name := rec.ColumnName(i)
		if arr.Len() < n {
			return nil, false
		}
		if name == schema.IDColumn {
			if !c.ids(b, arr, n) {
				return nil, false
			}
			continue
		}
		k := sc.Index(name)
		seen[k] = true
		if !c.take(&b.Cols[k], arr, &sc.Columns[k], 0, n) {
			return nil, false
		}
	}
	for k := range sc.Columns {
		if !seen[k] && !pushNulls(&b.Cols[k], &sc.Columns[k], n) {
			return nil, false
		}
	}
	// A last check that the vectors are what the engine trusts them to be.
	for k := range sc.Columns {
		if b.Cols[k].Check(sc.Columns[k], n) != nil {
			return nil, false
		}
	}
	return b, len(b.IDs) == n
}

// ids reads the id column as schema.AppendValues checks ids.
func (c columnar) ids(b *schema.Batch, arr arrow.Array, n int) bool {
	v := schema.Vector{Type: schema.String, Str: make([]string, 0, n)}
	if !c.take(&v, arr, idColumn, 0, n) {
		return false
	}
	for _, id := range v.Str {
		if id == "" || len(id) > schema.MaxIDBytes { // UTF-8: take checked
			return false
		}
	}
	b.IDs = v.Str
	return true
}

// take appends values [lo, hi) of arr to vec as col takes them, after the
// checks of arr's buffers that the cell by cell path makes before it reads
// a value (getter).
func (c columnar) take(vec *schema.Vector, arr arrow.Array, col *schema.Column, lo, hi int) bool {
	return buffersFit(arr) && c.values(vec, arr, col, lo, hi)
}

// buffersFit checks an array, and the arrays in it, as the cell by cell
// path's getters do before reading any value: the validity bitmap's length,
// offsets (ValidateFull), a bool's values and struct fields' lengths.
func buffersFit(arr arrow.Array) bool {
	bitmap := arr.NullBitmapBytes()
	if len(bitmap) > 0 && len(bitmap)*8 < arr.Data().Offset()+arr.Len() {
		return false
	}
	switch a := arr.(type) {
	case *array.Dictionary:
		return buffersFit(a.Dictionary())
	case *array.Boolean:
		vals := a.Data().Buffers()[1]
		return a.Len() == 0 || (vals != nil && vals.Len()*8 >= a.Data().Offset()+a.Len())
	case *array.Struct:
		return a.Validate() == nil && fieldsFit(a)
	case array.ListLike:
		return validFull(arr) && buffersFit(a.ListValues())
	}
	return validFull(arr)
}

func fieldsFit(a *array.Struct) bool {
	for k := range a.NumField() {
		if f := a.Field(k); f.Len() < a.Len() || !buffersFit(f) {
			return false
		}
	}
	return true
}

// validFull runs arrow-go's ValidateFull, which itself panics on some
// offsets out of order: the cell by cell path then answers.
func validFull(arr arrow.Array) (ok bool) {
	va, has := arr.(interface{ ValidateFull() error })
	if !has {
		return true
	}
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return va.ValidateFull() == nil
}

// values appends values [lo, hi) of a checked array to vec.
func (c columnar) values(vec *schema.Vector, arr arrow.Array, col *schema.Column, lo, hi int) bool {
	switch a := arr.(type) {
	case *array.Null:
		return pushNulls(vec, col, hi-lo)
	case *array.Dictionary:
		return c.dictionary(vec, a, col, lo, hi)
	}
	nulls := nullFlags(arr, lo, hi)
	if nulls != nil && !col.Nullable {
		return false
	}
	appendFlags(vec, nulls, hi-lo)
	switch col.Type {
	case schema.String, schema.JSON:
		return c.text(vec, arr, col.Type == schema.JSON, lo, hi, nulls)
	case schema.Binary:
		return c.binary(vec, arr, lo, hi, nulls)
	case schema.Bool:
		return bools(vec, arr, lo, hi, nulls)
	case schema.Int32, schema.Int64, schema.Float32, schema.Float64:
		return numbersOf(vec, arr, lo, hi, nulls)
	case schema.Timestamp:
		return timestamps(vec, arr, lo, hi, nulls)
	case schema.List:
		return c.list(vec, arr, col, lo, hi, nulls)
	case schema.Struct:
		return c.structure(vec, arr, col, lo, hi, nulls)
	}
	return false
}

// pushNulls appends n nulls, which col must take.
func pushNulls(vec *schema.Vector, col *schema.Column, n int) bool {
	if n > 0 && !col.Nullable {
		return false
	}
	for range n {
		vec.PushNull()
	}
	return true
}

// nullFlags are the null flags of values [lo, hi), nil when none is null.
// The bitmap decides, not the null count the stream declares.
func nullFlags(arr arrow.Array, lo, hi int) []bool {
	if len(arr.NullBitmapBytes()) == 0 {
		return nil
	}
	var flags []bool
	for i := lo; i < hi; i++ {
		if arr.IsNull(i) {
			if flags == nil {
				flags = make([]bool, hi-lo)
			}
			flags[i-lo] = true
		}
	}
	return flags
}

// appendFlags appends the null flags of n values to vec as Vector.Push*
// would: Nulls stays nil until the first null.
func appendFlags(vec *schema.Vector, nulls []bool, n int) {
	switch {
	case nulls != nil && vec.Nulls == nil:
		vec.Nulls = make([]bool, vec.Len(), vec.Len()+n)
		vec.Nulls = append(vec.Nulls, nulls...)
	case nulls != nil:
		vec.Nulls = append(vec.Nulls, nulls...)
	case vec.Nulls != nil:
		vec.Nulls = append(vec.Nulls, make([]bool, n)...)
	}
}

func null(nulls []bool, i int) bool { return nulls != nil && nulls[i] }

// dictionary appends each value from the dictionary at its index.
func (c columnar) dictionary(vec *schema.Vector, a *array.Dictionary, col *schema.Column, lo, hi int) bool {
	dict := a.Dictionary()
	for i := lo; i < hi; i++ {
		if a.IsNull(i) {
			if !pushNulls(vec, col, 1) {
				return false
			}
			continue
		}
		k := a.GetValueIndex(i)
		if k < 0 || k >= dict.Len() || !c.values(vec, dict, col, k, k+1) {
			return false
		}
	}
	return true
}

// text appends string or JSON values.
func (c columnar) text(vec *schema.Vector, arr arrow.Array, isJSON bool, lo, hi int, nulls []bool) bool {
	if _, ok := arr.(stringArray); !ok {
		return false
	}
	if isJSON && !jsonValues(arr, lo, hi, nulls) {
		return false
	}
	from := len(vec.Str)
	if !c.strs(vec, arr, lo, hi, nulls) {
		return false
	}
	checked := checksUTF8(arr)
	for j, s := range vec.Str[from:] {
		if null(nulls, j) {
			continue
		}
		if len(s) > schema.MaxValueBytes || (!checked && !utf8.ValidString(s)) {
			return false
		}
	}
	return true
}

// checksUTF8 reports whether the array's ValidateFull, which buffersFit
// ran, has checked that every value is UTF-8, as arrow-go's utf8,
// large_utf8 and utf8_view do (TestArrowColumnsDecodeAsCells holds them to
// it): the values are not read twice.
func checksUTF8(arr arrow.Array) bool {
	switch arr.(type) {
	case *array.String, *array.LargeString, *array.StringView:
		return true
	}
	return false
}

// jsonValues checks JSON text in the Arrow buffer, before it is copied,
// as the cell by cell path does: no lone surrogate escape (badText) and
// valid (json.Valid).
func jsonValues(arr arrow.Array, lo, hi int, nulls []bool) bool {
	value := bytesInPlace(arr)
	for i := lo; i < hi; i++ {
		if null(nulls, i-lo) {
			continue
		}
		b := value(i)
		if off, _ := badText(b); off >= 0 || !json.Valid(b) {
			return false
		}
	}
	return true
}

// bytesInPlace reads a checked string array's values as bytes, in place
// where its values lie end to end.
func bytesInPlace(arr arrow.Array) func(int) []byte {
	a, ok := arr.(offsetArray)
	if !ok || arr.Len() == 0 {
		value := inPlace(arr)
		return func(i int) []byte { return []byte(value(i)) }
	}
	all, start := a.ValueBytes(), a.ValueOffset64(0)
	return func(i int) []byte {
		lo := a.ValueOffset64(i) - start
		if i+1 < arr.Len() {
			return all[lo : a.ValueOffset64(i+1)-start]
		}
		return all[lo:]
	}
}

func (c columnar) binary(vec *schema.Vector, arr arrow.Array, lo, hi int, nulls []bool) bool {
	if _, ok := arr.(bytesArray); !ok {
		return false
	}
	from := len(vec.Str)
	if !c.strs(vec, arr, lo, hi, nulls) {
		return false
	}
	for _, s := range vec.Str[from:] {
		if len(s) > schema.MaxValueBytes {
			return false
		}
	}
	return true
}

// strs appends values [lo, hi) of a checked string or binary array to
// vec.Str, "" for a null, charging their bytes. An offset-based array's
// bytes are copied at once, each value a slice of the copy; a view's
// values (which may share bytes) each once into one string of their total.
func (c columnar) strs(vec *schema.Vector, arr arrow.Array, lo, hi int, nulls []bool) bool {
	value := inPlace(arr)
	if value == nil {
		return false
	}
	var total int64
	for i := lo; i < hi; i++ {
		if !null(nulls, i-lo) {
			total += int64(len(value(i)))
		}
	}
	if c.v.charge(total) != nil {
		return false
	}
	// Without nulls, the bytes of an offset-based array's values are
	// exactly total (ValidateFull: offsets in order); with them, the bytes
	// under a null, which nothing charges, are not copied.
	if a, ok := arr.(offsetArray); ok && hi > lo && nulls == nil {
		vec.Str = sliceCopy(vec.Str, a, value, lo, hi)
		return true
	}
	var all strings.Builder
	all.Grow(int(total))
	for i := lo; i < hi; i++ {
		if !null(nulls, i-lo) {
			all.WriteString(value(i))
		}
	}
	base, at := all.String(), 0
	for i := lo; i < hi; i++ {
		s := ""
		if !null(nulls, i-lo) {
			s = base[at : at+len(value(i))]
			at += len(s)
		}
		vec.Str = append(vec.Str, s)
	}
	return true
}

// sliceCopy appends values [lo, hi), none null, of an offset-based array
// as slices of one copy of their bytes.
func sliceCopy(dst []string, a offsetArray, value func(int) string, lo, hi int) []string {
	first := a.ValueOffset64(lo)
	end := a.ValueOffset64(hi-1) + int64(len(value(hi-1)))
	start := a.ValueOffset64(0)
	base := string(a.ValueBytes()[first-start : end-start])
	for i := lo; i < hi; i++ {
		at := a.ValueOffset64(i) - first
		dst = append(dst, base[at:at+int64(len(value(i)))])
	}
	return dst
}

// inPlace reads a string or binary array's values in place, without a
// copy; nil for another array.
func inPlace(arr arrow.Array) func(int) string {
	switch a := arr.(type) {
	case stringArray:
		return a.Value
	case interface{ ValueString(int) string }:
		if _, ok := arr.(bytesArray); ok {
			return a.ValueString
		}
	}
	return nil
}

func bools(vec *schema.Vector, arr arrow.Array, lo, hi int, nulls []bool) bool {
	a, ok := arr.(*array.Boolean)
	if !ok {
		return false
	}
	for i := lo; i < hi; i++ {
		vec.Bool = append(vec.Bool, !null(nulls, i-lo) && a.Value(i))
	}
	return true
}

// numbersOf appends integers and floats as the vector's type takes them;
// fitArrow has refused every narrowing.
func numbersOf(vec *schema.Vector, arr arrow.Array, lo, hi int, nulls []bool) bool {
	switch a := arr.(type) {
	case *array.Int8:
		return appendNumbers(vec, a.Int8Values()[lo:hi], nulls, false)
	case *array.Int16:
		return appendNumbers(vec, a.Int16Values()[lo:hi], nulls, false)
	case *array.Int32:
		return appendNumbers(vec, a.Int32Values()[lo:hi], nulls, false)
	case *array.Int64:
		return appendNumbers(vec, a.Int64Values()[lo:hi], nulls, true)
	case *array.Uint8:
		return appendNumbers(vec, a.Uint8Values()[lo:hi], nulls, false)
	case *array.Uint16:
		return appendNumbers(vec, a.Uint16Values()[lo:hi], nulls, false)
	case *array.Uint32:
		return appendNumbers(vec, a.Uint32Values()[lo:hi], nulls, false)
	case *array.Float32:
		return appendNumbers(vec, a.Float32Values()[lo:hi], nulls, false)
	case *array.Float64:
		return appendNumbers(vec, a.Float64Values()[lo:hi], nulls, false)
	}
	return false
}

// appendNumbers appends vals, 0 for a null, refusing what schema's conversion
// refuses: a float that is not finite and, into a float64 vector, an int64
// (wide) beyond ±2^53, where float64 is not exact.
func appendNumbers[T number](vec *schema.Vector, vals []T, nulls []bool, wide bool) bool {
	for i, x := range vals {
		if null(nulls, i) {
			x = 0
		}
		switch vec.Type {
		case schema.Int32:
			vec.I32 = append(vec.I32, int32(x))
		case schema.Int64:
			vec.I64 = append(vec.I64, int64(x))
		case schema.Float32:
			if !finite(float64(x)) {
				return false
			}
			vec.F32 = append(vec.F32, float32(x))
		case schema.Float64:
			if !finite(float64(x)) || (wide && (int64(x) > 1<<53 || int64(x) < -(1<<53))) {
				return false
			}
			vec.F64 = append(vec.F64, float64(x))
		}
	}
	return true
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// timestamps appends timestamps as microseconds, refusing one finer than a
// microsecond or whose microseconds do not fit an int64.
func timestamps(vec *schema.Vector, arr arrow.Array, lo, hi int, nulls []bool) bool {
	a, ok := arr.(*array.Timestamp)
	if !ok {
		return false
	}
	unit := a.DataType().(*arrow.TimestampType).Unit
	for i, x := range a.TimestampValues()[lo:hi] {
		us, ok := micros(int64(x), unit)
		if null(nulls, i) {
			us, ok = 0, true
		}
		if !ok {
			return false
		}
		vec.I64 = append(vec.I64, us)
	}
	return true
}

func micros(x int64, unit arrow.TimeUnit) (int64, bool) {
	switch unit {
	case arrow.Second:
		return x * 1_000_000, x <= math.MaxInt64/1_000_000 && x >= math.MinInt64/1_000_000
	case arrow.Millisecond:
		return x * 1000, x <= math.MaxInt64/1000 && x >= math.MinInt64/1000
	case arrow.Microsecond:
		return x, true
	}
	return x / 1000, x%1000 == 0
}

// list appends lists. The elements of consecutive rows that lie end to end
// in the child array (as every list and large_list's do) are read as one
// run.
func (c columnar) list(vec *schema.Vector, arr arrow.Array, col *schema.Column, lo, hi int, nulls []bool) bool {
	a, ok := arr.(array.ListLike)
	if !ok || !c.chargeLists(a, col.Element, lo, hi, nulls, vec.Elem) {
		return false
	}
	child, rows := a.ListValues(), len(vec.Offsets)-1
	var runLo, runHi int64 // elements not yet read
	for i := lo; i < hi; i++ {
		var s, e int64
		if !null(nulls, i-lo) {
			s, e = a.ValueOffsets(i)
		}
		if s < e && s != runHi {
			if !c.values(vec.Elem, child, col.Element, int(runLo), int(runHi)) {
				return false
			}
			runLo = s
		}
		if s < e {
			runHi = e
		}
		vec.Offsets = append(vec.Offsets, vec.Offsets[len(vec.Offsets)-1]+e-s)
	}
	return c.values(vec.Elem, child, col.Element, int(runLo), int(runHi)) && listsFit(vec, col.Element, rows)
}

// chargeLists checks and charges every row's elements before any is read,
// and grows elem once for them all (16 bytes an element at most, what
// each is charged; 4 for the typed ones): a stream refused for its size
// has not made its values first.
func (c columnar) chargeLists(a array.ListLike, elemCol *schema.Column, lo, hi int, nulls []bool, elem *schema.Vector) bool {
	child := a.ListValues()
	cost := int64(slotCost)
	if typedChild(child, elemCol) {
		cost = 4
	}
	total := int64(0)
	for i := lo; i < hi; i++ {
		if !null(nulls, i-lo) {
			s, e := a.ValueOffsets(i)
			if c.v.elements(s, e, child.Len(), cost) != nil {
				return false
			}
			total += e - s
		}
	}
	grow(elem, int(total))
	return true
}

// grow makes room for n more values in a vector of primitives. A struct's
// fields grow as its runs are read, each run charged first: growing them
// all here would make a slot per field per element before the structs'
// cost is charged.
func grow(v *schema.Vector, n int) {
	v.Str, v.I64, v.F64 = growIf(v.Str, n), growIf(v.I64, n), growIf(v.F64, n)
	v.Bool, v.I32, v.F32 = growIf(v.Bool, n), growIf(v.I32, n), growIf(v.F32, n)
}

// growIf grows a vector's slice of its own type: the others are nil.
func growIf[T any](s []T, n int) []T {
	if s == nil {
		return nil
	}
	return slices.Grow(s, n)
}

// typedChild reports whether the cell by cell path reads a list of child
// as a typed Go slice, which it charges 4 bytes an element (typedList).
func typedChild(child arrow.Array, elem *schema.Column) bool {
	if child.NullN() > 0 {
		return false
	}
	switch child.(type) {
	case *array.Int32:
		return elem.Type == schema.Int32
	case *array.Float32:
		return elem.Type == schema.Float32
	}
	return false
}

// listsFit holds the lists from row from on to schema.MaxValueBytes, the
// bytes of their elements as schema counts them (a struct element's are
// held to it on their own).
func listsFit(vec *schema.Vector, elem *schema.Column, from int) bool {
	if elem.Type == schema.Struct {
		return true
	}
	for r := from; r < len(vec.Offsets)-1; r++ {
		var n int64
		for j := vec.Offsets[r]; j < vec.Offsets[r+1] && n <= schema.MaxValueBytes; j++ {
			n += valueBytes(vec.Elem, int(j))
		}
		if n > schema.MaxValueBytes {
			return false
		}
	}
	return true
}

// valueBytes is what value i of v counts towards schema.MaxValueBytes in
// a list or struct: a string's bytes, 4 for an int32 or float32, 1 for a
// bool, 8 for a null or any other.
func valueBytes(v *schema.Vector, i int) int64 {
	if v.IsNull(i) {
		return 8
	}
	switch v.Type {
	case schema.String, schema.JSON, schema.Binary:
		return int64(len(v.Str[i]))
	case schema.Int32, schema.Float32:
		return 4
	case schema.Bool:
		return 1
	}
	return 8
}

// structure appends structs: each field of col from the Arrow field of
// its name, null where the Arrow struct has none, and a zero value in
// every field under a null struct.
func (c columnar) structure(vec *schema.Vector, arr arrow.Array, col *schema.Column, lo, hi int, nulls []bool) bool {
	a, ok := arr.(*array.Struct)
	if !ok {
		return false
	}
	st := a.DataType().(*arrow.StructType)
	for i := lo; i < hi; {
		j := i + 1
		for j < hi && null(nulls, j-lo) == null(nulls, i-lo) {
			j++
		}
		if null(nulls, i-lo) {
			zeros(vec, j-i)
		} else if !c.structRun(vec, a, st, col, i, j) {
			return false
		}
		i = j
	}
	return true
}

// structRun appends the non-null structs [lo, hi).
func (c columnar) structRun(vec *schema.Vector, a *array.Struct, st *arrow.StructType, col *schema.Column, lo, hi int) bool {
	if c.v.charge(int64(hi-lo)*(mapCost+entryCost*int64(max(st.NumFields()-8, 0)))) != nil {
		return false
	}
	from := vec.Fields[0].Len()
	for f := range col.Fields {
		fc, fv := &col.Fields[f], &vec.Fields[f]
		k, ok := st.FieldIdx(fc.Name)
		switch {
		case !ok && !pushNulls(fv, fc, hi-lo):
			return false
		case ok && !c.values(fv, a.Field(k), fc, lo, hi):
			return false
		}
	}
	for r := from; r < from+hi-lo; r++ {
		var n int64
		for f := range vec.Fields {
			n += valueBytes(&vec.Fields[f], r)
		}
		if n > schema.MaxValueBytes {
			return false
		}
	}
	return true
}

// zeros appends n zero values, not null, to each field of a struct
// vector: what a null struct holds.
func zeros(vec *schema.Vector, n int) {
	for f := range vec.Fields {
		fv := &vec.Fields[f]
		appendFlags(fv, nil, n)
		for range n {
			switch fv.Type {
			case schema.String, schema.JSON, schema.Binary:
				fv.Str = append(fv.Str, "")
			case schema.Int64, schema.Timestamp:
				fv.I64 = append(fv.I64, 0)
			case schema.Float64:
				fv.F64 = append(fv.F64, 0)
			case schema.Bool:
				fv.Bool = append(fv.Bool, false)
			case schema.Int32:
				fv.I32 = append(fv.I32, 0)
			case schema.Float32:
				fv.F32 = append(fv.F32, 0)
			}
		}
	}
}
