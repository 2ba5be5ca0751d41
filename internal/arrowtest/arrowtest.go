// Package arrowtest builds Arrow IPC request bodies for tests: values
// appended to builders from plain Go values, and record batches encoded
// as one stream.
package arrowtest

import (
	"bytes"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
)

// Stream encodes record batches of sc as one IPC stream, with opts (a
// compression) beside the schema.
func Stream(tb testing.TB, sc *arrow.Schema, recs []arrow.RecordBatch, opts ...ipc.Option) []byte {
	tb.Helper()
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, append([]ipc.Option{ipc.WithSchema(sc)}, opts...)...)
	for _, rec := range recs {
		if err := w.Write(rec); err != nil {
			tb.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// Append appends v to b: nil as a null, a Go value of the builder's type
// (a string, an int32, a []byte, a time.Time or an int64 in the type's
// unit for a timestamp…), a list as []any, a struct as map[string]any
// (a field it lacks is null).
func Append(tb testing.TB, b array.Builder, v any) {
	tb.Helper()
	if v == nil {
		b.AppendNull()
		return
	}
	switch b := b.(type) {
	case *array.StringBuilder:
		b.Append(v.(string))
	case *array.LargeStringBuilder:
		b.Append(v.(string))
	case *array.StringViewBuilder:
		b.Append(v.(string))
	case *array.Int64Builder:
		b.Append(v.(int64))
	case *array.Int32Builder:
		b.Append(v.(int32))
	case *array.Int16Builder:
		b.Append(v.(int16))
	case *array.Int8Builder:
		b.Append(v.(int8))
	case *array.Uint16Builder:
		b.Append(v.(uint16))
	case *array.Float64Builder:
		b.Append(v.(float64))
	case *array.Float32Builder:
		b.Append(v.(float32))
	case *array.BooleanBuilder:
		b.Append(v.(bool))
	case *array.BinaryBuilder:
		b.Append(v.([]byte))
	case *array.BinaryViewBuilder:
		b.Append(v.([]byte))
	case *array.BinaryDictionaryBuilder:
		if err := b.AppendString(v.(string)); err != nil {
			tb.Fatal(err)
		}
	case *array.TimestampBuilder:
		appendTimestamp(tb, b, v)
	default:
		appendNested(tb, b, v)
	}
}

func appendTimestamp(tb testing.TB, b *array.TimestampBuilder, v any) {
	if t, ok := v.(time.Time); ok {
		ts, err := arrow.TimestampFromTime(t, b.Type().(*arrow.TimestampType).Unit)
		if err != nil {
			tb.Fatal(err)
		}
		b.Append(ts)
		return
	}
	b.Append(arrow.Timestamp(v.(int64))) // in the type's unit
}

func appendNested(tb testing.TB, b array.Builder, v any) {
	tb.Helper()
	switch b := b.(type) {
	case *array.StructBuilder:
		b.Append(true)
		st := b.Type().(*arrow.StructType)
		for k, f := range st.Fields() {
			Append(tb, b.FieldBuilder(k), v.(map[string]any)[f.Name])
		}
	case *array.FixedSizeListBuilder: // before VarLenListLikeBuilder, which it also is
		b.Append(true)
		for _, e := range v.([]any) {
			Append(tb, b.ValueBuilder(), e)
		}
	case array.VarLenListLikeBuilder:
		b.AppendWithSize(true, len(v.([]any)))
		for _, e := range v.([]any) {
			Append(tb, b.ValueBuilder(), e)
		}
	default:
		tb.Fatalf("arrowtest cannot build %T", b)
	}
}
