package generation

import (
	"unsafe"

	"github.com/parquet-go/parquet-go"

	"github.com/rollwal/rollwal/schema"
)

// maxChunkValues bounds the values handed to a column writer at once. The
// writer cuts a page when its buffer reaches the page size after a chunk, so
// chunks must be small next to a page.
const maxChunkValues = 1024

// columnEncoder feeds a batch's vectors to parquet-go's column writers, one
// column at a time, without building rows: every value goes from its vector
// into a reused []parquet.Value and from there into the page buffer.
type columnEncoder struct {
	chunkBytes int // byte budget of one chunk of byte-array values
	buf        []parquet.Value
}

func newColumnEncoder(pageBufferSize int) *columnEncoder {
	return &columnEncoder{
		chunkBytes: max(pageBufferSize/8, 1<<10),
		buf:        make([]parquet.Value, 0, maxChunkValues),
	}
}

func (e *columnEncoder) writeVector(w *parquet.ColumnWriter, col int, nullable bool, v *schema.Vector, lo, hi int) error {
	switch v.Type {
	case schema.String, schema.JSON, schema.Binary:
		return e.writeStrings(w, col, v.Str, v.Nulls, nullable, lo, hi)
	case schema.Int64, schema.Timestamp:
		return writeFixed(e, w, col, v.I64, v.Nulls, nullable, lo, hi, int64Kind)
	case schema.Float64:
		return writeFixed(e, w, col, v.F64, v.Nulls, nullable, lo, hi, float64Kind)
	case schema.Bool:
		return writeFixed(e, w, col, v.Bool, v.Nulls, nullable, lo, hi, boolKind)
	case schema.Int32:
		return writeFixed(e, w, col, v.I32, v.Nulls, nullable, lo, hi, int32Kind)
	case schema.Float32:
		return writeFixed(e, w, col, v.F32, v.Nulls, nullable, lo, hi, float32Kind)
	}
	return nil // checkData refused other types
}

// level returns v at the definition level of a (possibly) nullable column.
func level(v parquet.Value, col int, nullable, null bool) parquet.Value {
	switch {
	case null:
		return parquet.NullValue().Level(0, 0, col)
	case nullable:
		return v.Level(0, 1, col)
	}
	return v.Level(0, 0, col)
}

func (e *columnEncoder) writeStrings(w *parquet.ColumnWriter, col int, strs []string, nulls []bool, nullable bool, lo, hi int) error {
	buf, size := e.buf[:0], 0
	for i := lo; i < hi; i++ {
		null := nulls != nil && nulls[i]
		// The column writer copies the bytes into its page buffer before
		// WriteRowValues returns, so the string's memory can be lent.
		s := strs[i]
		buf = append(buf, level(parquet.ByteArrayValue(unsafe.Slice(unsafe.StringData(s), len(s))), col, nullable, null))
		size += len(s)
		if len(buf) >= maxChunkValues || size >= e.chunkBytes {
			if _, err := w.WriteRowValues(buf); err != nil {
				return err
			}
			buf, size = buf[:0], 0
		}
	}
	return e.flush(w, buf)
}

func writeFixed[T any](e *columnEncoder, w *parquet.ColumnWriter, col int, vals []T, nulls []bool, nullable bool, lo, hi int, k fixedKind[T]) error {
	def := 0
	if nullable {
		def = 1
	}
	present, null := newLeveler(k, 0, def, col), parquet.NullValue().Level(0, 0, col)
	buf := e.buf[:0]
	for i := lo; i < hi; i++ {
		if nulls != nil && nulls[i] {
			buf = append(buf, null)
		} else {
			buf = append(buf, parquet.Value{})
			present.put(&buf[len(buf)-1], vals[i])
		}
		if len(buf) >= maxChunkValues {
			if _, err := w.WriteRowValues(buf); err != nil {
				return err
			}
			buf = buf[:0]
		}
	}
	return e.flush(w, buf)
}

func (e *columnEncoder) writeUints(w *parquet.ColumnWriter, col int, vals []uint64, lo, hi int) error {
	return writeFixed(e, w, col, vals, nil, false, lo, hi, uint64Kind)
}

func (e *columnEncoder) flush(w *parquet.ColumnWriter, buf []parquet.Value) error {
	if len(buf) == 0 {
		return nil
	}
	_, err := w.WriteRowValues(buf)
	clear(buf[:cap(buf)]) // drop references to the batch's strings
	return err
}
