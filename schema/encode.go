package schema

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/rollwal/rollwal/errs"
)

// The batch encoding is the payload of a WAL record; it is wire format.
//
//	batch  := uvarint(rows) uvarint(cols) id* column*
//	id     := uvarint(len) bytes
//	column := type:u8 nulls:u8 [bitmap] values
//	values := string/json/binary: (uvarint(len) bytes)*   one per row, "" for null
//	          int64/float64/timestamp: 8 bytes little-endian per row, 0 for null
//	          int32/float32: 4 bytes little-endian per row, 0 for null
//	          bool: bitmap
//	          list: uvarint(elements) uvarint(len)* column   one len per row, the
//	                column holding every row's elements in order
//	          struct: uvarint(fields) column*               one per field, a value per row
//	bitmap := ceil(rows/8) bytes, bit i%8 of byte i/8 set for row i
//
// A decoder checks every length against what remains and the column types
// against the schema, so bytes that passed a CRC but were written for
// another schema are refused rather than misread.

// ErrBadEncoding marks a payload that does not decode as a batch.
var ErrBadEncoding = errs.New(errs.Corruption, "schema: bad batch encoding")

// Encode appends the batch's encoding to dst.
func (b *Batch) Encode(dst []byte) []byte {
	n := b.Len()
	dst = binary.AppendUvarint(dst, uint64(n))
	dst = binary.AppendUvarint(dst, uint64(len(b.Cols)))
	for _, id := range b.IDs {
		dst = appendString(dst, id)
	}
	for i := range b.Cols {
		dst = b.Cols[i].encode(dst, n)
	}
	return dst
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendBitmap(dst []byte, bits []bool, n int) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, (n+7)/8)...)
	for i, set := range bits[:n] {
		if set {
			dst[start+i/8] |= 1 << (i % 8)
		}
	}
	return dst
}

func (v *Vector) encode(dst []byte, n int) []byte {
	dst = append(dst, byte(v.Type))
	if v.Nulls == nil {
		dst = append(dst, 0)
	} else {
		dst = append(dst, 1)
		dst = appendBitmap(dst, v.Nulls, n)
	}
	switch v.Type {
	case String, JSON, Binary:
		for _, s := range v.Str[:n] {
			dst = appendString(dst, s)
		}
	case Int64, Timestamp:
		for _, x := range v.I64[:n] {
			dst = binary.LittleEndian.AppendUint64(dst, uint64(x))
		}
	case Float64:
		for _, x := range v.F64[:n] {
			dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(x))
		}
	case Bool:
		dst = appendBitmap(dst, v.Bool, n)
	case Int32:
		for _, x := range v.I32[:n] {
			dst = binary.LittleEndian.AppendUint32(dst, uint32(x))
		}
	case Float32:
		for _, x := range v.F32[:n] {
			dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(x))
		}
	case List:
		elems := int(v.Offsets[n])
		dst = binary.AppendUvarint(dst, uint64(elems))
		for i := range n {
			dst = binary.AppendUvarint(dst, uint64(v.Offsets[i+1]-v.Offsets[i]))
		}
		dst = v.Elem.encode(dst, elems)
	case Struct:
		dst = binary.AppendUvarint(dst, uint64(len(v.Fields)))
		for f := range v.Fields {
			dst = v.Fields[f].encode(dst, n)
		}
	}
	return dst
}

type decoder struct {
	buf []byte
	err error
	// borrow: strings point into buf (DecodeBorrowed) instead of copies.
	borrow bool
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrBadEncoding, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	x, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.fail("truncated %s", what)
		return 0
	}
	d.buf = d.buf[n:]
	return x
}

func (d *decoder) bytes(n uint64, what string) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.buf)) {
		d.fail("%s of %d bytes overruns the payload (%d left)", what, n, len(d.buf))
		return nil
	}
	b := d.buf[:n]
	d.buf = d.buf[n:]
	return b
}

// strs appends n length-prefixed strings to dst. The strings share one
// allocation, a copy of their run of the payload (their bytes and their
// length prefixes): a batch's values of one column are decoded, kept and
// dropped together, and one allocation per value was most of a replay's
// decode. With borrow they point into the payload itself.
func (d *decoder) strs(dst []string, n int, what string) []string {
	if d.err != nil || n == 0 {
		return dst
	}
	probe := decoder{buf: d.buf}
	for i := 0; i < n && probe.err == nil; i++ {
		probe.bytes(probe.uvarint(what), what)
	}
	if probe.err != nil {
		d.err = probe.err
		return dst
	}
	run := d.buf[:len(d.buf)-len(probe.buf)]
	d.buf = probe.buf
	if !d.borrow {
		run = bytes.Clone(run)
	}
	// run is never written again where a string points.
	r := decoder{buf: run}
	for range n {
		if b := r.bytes(r.uvarint(what), what); len(b) > 0 {
			dst = append(dst, unsafe.String(&b[0], len(b)))
		} else {
			dst = append(dst, "")
		}
	}
	return dst
}

func (d *decoder) bitmap(n int, what string) []bool {
	raw := d.bytes(uint64((n+7)/8), what)
	if raw == nil {
		return nil
	}
	bits := make([]bool, n)
	for i := range bits {
		bits[i] = raw[i/8]&(1<<(i%8)) != 0
	}
	return bits
}

// Decode parses a payload written by Encode for this schema.
func (s *Schema) Decode(data []byte) (*Batch, error) {
	return s.decode(&decoder{buf: data})
}

// DecodeBorrowed is Decode without copying string values: the batch's
// strings (ids, string, JSON and binary values) point into data, so they
// are valid only while data is and data must not change meanwhile. For a
// caller that copies what it keeps before it reuses data — the engine's
// replay, whose memtable copies every string into its own arena.
func (s *Schema) DecodeBorrowed(data []byte) (*Batch, error) {
	return s.decode(&decoder{buf: data, borrow: true})
}

func (s *Schema) decode(d *decoder) (*Batch, error) {
	rows := d.uvarint("row count")
	cols := d.uvarint("column count")
	if d.err != nil {
		return nil, d.err
	}
	// Each row needs at least one byte for its id length: a count beyond the
	// payload is corrupt, and refusing it bounds the allocation below.
	if rows > uint64(len(d.buf)) {
		return nil, fmt.Errorf("%w: %d rows cannot fit in %d bytes", ErrBadEncoding, rows, len(d.buf))
	}
	if cols != uint64(len(s.Columns)) {
		return nil, fmt.Errorf("%w: %d columns, the schema has %d", ErrBadEncoding, cols, len(s.Columns))
	}
	n := int(rows)
	b := s.NewBatch(n)
	b.IDs = d.strs(b.IDs, n, "id")
	for c := range s.Columns {
		d.vector(&b.Cols[c], n, s.Columns[c])
	}
	if d.err == nil && len(d.buf) != 0 {
		d.fail("%d trailing bytes", len(d.buf))
	}
	if d.err != nil {
		return nil, d.err
	}
	return b, nil
}

func (d *decoder) vector(v *Vector, n int, col Column) {
	hdr := d.bytes(2, "column header")
	if hdr == nil {
		return
	}
	if Type(hdr[0]) != col.Type {
		d.fail("column %q has type %s, the schema says %s", col.Name, Type(hdr[0]), col.Type)
		return
	}
	switch hdr[1] {
	case 0:
	case 1:
		if !col.Nullable {
			d.fail("column %q has nulls but is not nullable", col.Name)
			return
		}
		v.Nulls = d.bitmap(n, "null bitmap")
	default:
		d.fail("column %q: bad null flag %d", col.Name, hdr[1])
		return
	}
	switch col.Type {
	case String, JSON, Binary:
		v.Str = d.strs(v.Str, n, "string value")
	case Int64, Timestamp:
		raw := d.bytes(uint64(n)*8, "int64 values")
		for i := 0; raw != nil && i < n; i++ {
			v.I64 = append(v.I64, int64(binary.LittleEndian.Uint64(raw[i*8:])))
		}
	case Float64:
		raw := d.bytes(uint64(n)*8, "float64 values")
		for i := 0; raw != nil && i < n; i++ {
			v.F64 = append(v.F64, math.Float64frombits(binary.LittleEndian.Uint64(raw[i*8:])))
		}
	case Bool:
		v.Bool = d.bitmap(n, "bool values")
	case Int32:
		raw := d.bytes(uint64(n)*4, "int32 values")
		for i := 0; raw != nil && i < n; i++ {
			v.I32 = append(v.I32, int32(binary.LittleEndian.Uint32(raw[i*4:])))
		}
	case Float32:
		raw := d.bytes(uint64(n)*4, "float32 values")
		for i := 0; raw != nil && i < n; i++ {
			v.F32 = append(v.F32, math.Float32frombits(binary.LittleEndian.Uint32(raw[i*4:])))
		}
	case List:
		d.list(v, n, col)
	case Struct:
		d.structFields(v, n, col)
	}
}

func (d *decoder) list(v *Vector, n int, col Column) {
	elems := d.uvarint("list element count")
	// An element takes at least one bit (a bool): a count beyond that is
	// corrupt, and refusing it bounds the allocations below.
	if d.err == nil && elems > 8*uint64(len(d.buf))+8 {
		d.fail("column %q: %d list elements cannot fit in %d bytes", col.Name, elems, len(d.buf))
	}
	var sum uint64
	for i := 0; i < n && d.err == nil; i++ {
		l := d.uvarint("list length")
		if sum += l; l > MaxListElements || sum > elems {
			d.fail("column %q: row %d: list of %d elements (%d in all, the header says %d)", col.Name, i, l, sum, elems)
		}
		v.Offsets = append(v.Offsets, int64(sum))
	}
	if d.err == nil && sum != elems {
		d.fail("column %q: lists hold %d elements, the header says %d", col.Name, sum, elems)
	}
	if d.err == nil {
		d.vector(v.Elem, int(elems), *col.Element)
	}
}

func (d *decoder) structFields(v *Vector, n int, col Column) {
	if f := d.uvarint("struct field count"); d.err == nil && f != uint64(len(col.Fields)) {
		d.fail("column %q: %d struct fields, the schema has %d", col.Name, f, len(col.Fields))
	}
	for f := 0; f < len(col.Fields) && d.err == nil; f++ {
		d.vector(&v.Fields[f], n, col.Fields[f])
	}
}

// Value returns row i of column c as a Go value (nil for null): string,
// int64, float64, bool, int32, float32, []byte (binary), time.Time
// (timestamp, UTC), []any (list) or map[string]any (struct). JSON columns
// return their text as a string.
func (b *Batch) Value(c, i int) any {
	return b.Cols[c].value(&b.Schema.Columns[c], i)
}

// AppendRow copies row i of src (same schema) to the end of b.
func (b *Batch) AppendRow(src *Batch, i int) {
	b.IDs = append(b.IDs, src.IDs[i])
	for c := range b.Cols {
		b.Cols[c].appendFrom(&src.Cols[c], i)
	}
}

// Size estimates the bytes the rows occupy in memory, for budgets.
func (b *Batch) Size() int64 {
	var n int64
	for _, id := range b.IDs {
		n += int64(len(id)) + 16
	}
	for c := range b.Cols {
		n += b.Cols[c].size()
	}
	return n
}
