package server

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/internal/arrowtest"
	"github.com/rollwal/rollwal/schema"
)

// colSpec is a column as tests spell it: name, type text, nullable.
type colSpec struct {
	name, typ string
	nullable  bool
}

// schemaOf is the schema of the columns specs.
func schemaOf(t testing.TB, specs []colSpec) *schema.Schema {
	t.Helper()
	var cols []schema.Column
	for _, c := range specs {
		col, err := schema.ParseColumnType(c.typ)
		if err != nil {
			t.Fatal(err)
		}
		col.Name, col.Nullable = c.name, c.nullable
		cols = append(cols, col)
	}
	sc, err := schema.New(cols)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// nestedSchema has a column of every type that the first five lack.
func nestedSchema(t testing.TB) *schema.Schema {
	return schemaOf(t, []colSpec{
		{"tokens", "list<int32>", false},
		{"logprobs", "list<float32>", true},
		{"messages", "list<struct<role: string, content: string>>", false},
		{"meta", "struct<step: int32, at: timestamp?, note: string?>", true},
		{"n", "int32", true},
		{"score", "float32", true},
		{"reward", "float64", true},
		{"blob", "binary", true},
		{"at", "timestamp", true},
		{"metadata", "json", true},
	})
}

// newNestedFixture serves a table of nestedSchema.
func newNestedFixture(t *testing.T) *fixture {
	t.Helper()
	sc := nestedSchema(t)
	f := newServerFixture(t, func(o *engine.Options) { o.Schema = sc }, func(o *Options) { o.Schema = sc })
	f.srv.SetReady(true)
	return f
}

// nestedFields are a good row of nestedSchema as NDJSON keys and values,
// in order.
var nestedFields = [][2]string{
	{"tokens", `[1,-2,2147483647]`},
	{"logprobs", `[-0.5,0.25]`},
	{"messages", `[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}]`},
	{"meta", `{"step":3,"at":"2024-05-01T12:00:00.123456Z"}`},
	{"n", `-2147483648`},
	{"score", `0.5`},
	{"reward", `2`},
	{"blob", `"aGVsbG8="`},
	{"at", `"2024-05-01T12:00:00Z"`},
	{"metadata", `{"k":[1, 2]}`},
}

// nestedLine is a good NDJSON row of id with the values of set (key, JSON
// text pairs) in place of its own.
func nestedLine(id string, set ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"id":%q`, id)
	for _, kv := range nestedFields {
		v := kv[1]
		for i := 0; i < len(set); i += 2 {
			if set[i] == kv[0] {
				v = set[i+1]
			}
		}
		fmt.Fprintf(&b, `,%q:%s`, kv[0], v)
	}
	return b.String() + "}\n"
}

// nestedNDJSON is a good row and one with every nullable column absent.
func nestedNDJSON(a, b string) string {
	return nestedLine(a) + fmt.Sprintf(`{"id":%q,"tokens":[],"messages":[]}`+"\n", b)
}

var (
	nestedAt     = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	nestedMetaAt = time.Date(2024, 5, 1, 12, 0, 0, 123456000, time.UTC)
)

func dict(index arrow.DataType, values arrow.DataType) arrow.DataType {
	return &arrow.DictionaryType{IndexType: index, ValueType: values}
}

func structOf(fields ...arrow.Field) *arrow.StructType { return arrow.StructOf(fields...) }

func field(name string, typ arrow.DataType) arrow.Field {
	return arrow.Field{Name: name, Type: typ, Nullable: true}
}

// nestedArrow are the rows of nestedNDJSON(a, b) as Arrow columns, in one
// of two sets of Arrow types (variant 0 or 1) that schema validation makes
// the same batch of.
func nestedArrow(variant int, a, b string) []col {
	msgs := []any{map[string]any{"role": "user", "content": "hi"}, map[string]any{"role": "assistant", "content": "yo"}}
	cols := []col{
		{name: "id", typ: arrow.BinaryTypes.String, vals: []any{a, b}},
		{name: "tokens", typ: arrow.ListOf(arrow.PrimitiveTypes.Int32), vals: []any{[]any{int32(1), int32(-2), int32(math.MaxInt32)}, []any{}}},
		{name: "logprobs", typ: arrow.LargeListOf(arrow.PrimitiveTypes.Float32), vals: []any{[]any{float32(-0.5), float32(0.25)}, nil}},
		{name: "messages", typ: arrow.ListViewOf(structOf(field("role", dict(arrow.PrimitiveTypes.Int8, arrow.BinaryTypes.String)),
			field("content", arrow.BinaryTypes.LargeString))), vals: []any{msgs, []any{}}},
		{name: "meta", typ: structOf(field("at", &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "UTC"}), field("step", arrow.PrimitiveTypes.Int16)),
			vals: []any{map[string]any{"step": int16(3), "at": nestedMetaAt.UnixNano()}, nil}},
		{name: "n", typ: arrow.PrimitiveTypes.Int32, vals: []any{int32(math.MinInt32), nil}},
		{name: "score", typ: arrow.PrimitiveTypes.Float32, vals: []any{float32(0.5), nil}},
		{name: "reward", typ: arrow.PrimitiveTypes.Int64, vals: []any{int64(2), nil}},
		{name: "blob", typ: arrow.BinaryTypes.LargeBinary, vals: []any{[]byte("hello"), nil}},
		{name: "at", typ: &arrow.TimestampType{Unit: arrow.Millisecond}, vals: []any{nestedAt.UnixMilli(), nil}},
		{name: "metadata", typ: arrow.BinaryTypes.String, vals: []any{`{"k":[1, 2]}`, nil}},
	}
	if variant == 0 {
		return cols
	}
	for _, c := range []col{
		{name: "tokens", typ: arrow.LargeListViewOf(arrow.PrimitiveTypes.Int32), vals: cols[1].vals},
		// A null row of a fixed-size list pads its child with nulls.
		{name: "logprobs", typ: arrow.FixedSizeListOf(2, arrow.PrimitiveTypes.Float32), vals: cols[2].vals},
		{name: "messages", typ: arrow.ListOf(structOf(field("content", arrow.BinaryTypes.String), field("role", arrow.BinaryTypes.StringView))), vals: cols[3].vals},
		{name: "meta", typ: structOf(field("step", arrow.PrimitiveTypes.Int32), field("at", &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "+00:00"}), field("note", arrow.Null)),
			vals: []any{map[string]any{"step": int32(3), "at": nestedMetaAt.UnixMicro()}, nil}},
		{name: "reward", typ: arrow.PrimitiveTypes.Float32, vals: []any{float32(2), nil}},
		{name: "blob", typ: arrow.BinaryTypes.BinaryView, vals: cols[8].vals},
		{name: "at", typ: &arrow.TimestampType{Unit: arrow.Second, TimeZone: "UTC"}, vals: []any{nestedAt.Unix(), nil}},
		{name: "metadata", typ: dict(arrow.PrimitiveTypes.Int16, arrow.BinaryTypes.String), vals: cols[10].vals},
	} {
		cols = with(cols, c)
	}
	return cols
}

// TestNestedTypesDecodeAlike: the rows of nestedNDJSON and their two Arrow
// forms build the same batch, whose values are the ones sent.
func TestNestedTypesDecodeAlike(t *testing.T) {
	sc := nestedSchema(t)
	rows, _, perr := decodeNDJSON(strings.NewReader(nestedNDJSON("a", "b")), sc, 10, 1<<20)
	if perr != nil {
		t.Fatal(perr)
	}
	if _, ok := rows[0]["tokens"].([]any)[2].(interface{ Int64() (int64, error) }); !ok {
		t.Errorf("tokens decoded as %#v, want []any of json.Number", rows[0]["tokens"])
	}
	if got := fmt.Sprintf("%s", rows[0]["metadata"]); got != `{"k":[1, 2]}` {
		t.Errorf("the json column decoded to %s, want its text as sent", got)
	}
	want, err := sc.Build(rows)
	if err != nil {
		t.Fatal(err)
	}
	checkNestedBatch(t, want)
	for variant := range 2 {
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		got, err := decodeArrow(bytes.NewReader(arrowStream(t, nestedArrow(variant, "a", "b"))), sc, mem, limits(1<<20, 10))
		if err != nil {
			t.Fatalf("variant %d: %v", variant, err)
		}
		mem.AssertSize(t, 0)
		if got.invalid != nil {
			t.Fatalf("variant %d: %v", variant, got.invalid)
		}
		if !bytes.Equal(got.batch.Encode(nil), want.Encode(nil)) {
			t.Errorf("variant %d: the Arrow rows %v build another batch than the NDJSON rows %v", variant, rowsOf(got.batch), rows)
		}
	}
}

func checkNestedBatch(t *testing.T, b *schema.Batch) {
	t.Helper()
	sc := b.Schema
	colOf := func(name string) *schema.Vector { return &b.Cols[sc.Index(name)] }
	if got := colOf("tokens").Elem.I32; !reflect.DeepEqual(got, []int32{1, -2, math.MaxInt32}) {
		t.Errorf("tokens %v", got)
	}
	if got := colOf("logprobs").Elem.F32; !reflect.DeepEqual(got, []float32{-0.5, 0.25}) || !colOf("logprobs").IsNull(1) {
		t.Errorf("logprobs %v, nulls %v", got, colOf("logprobs").Nulls)
	}
	if got := colOf("messages").Elem.Fields[1].Str; !reflect.DeepEqual(got, []string{"hi", "yo"}) {
		t.Errorf("message contents %v", got)
	}
	meta := colOf("meta")
	if got := meta.Fields[1].I64[0]; got != nestedMetaAt.UnixMicro() || !meta.Fields[2].IsNull(0) || !meta.IsNull(1) {
		t.Errorf("meta.at %d, want %d; meta %+v", got, nestedMetaAt.UnixMicro(), meta)
	}
	if colOf("n").I32[0] != math.MinInt32 || colOf("score").F32[0] != 0.5 || colOf("blob").Str[0] != "hello" || colOf("at").I64[0] != nestedAt.UnixMicro() {
		t.Errorf("n %v, score %v, blob %q, at %v", colOf("n").I32, colOf("score").F32, colOf("blob").Str, colOf("at").I64)
	}
}

// TestNestedTypesIngest appends rows of every type through the engine, as
// NDJSON and as both Arrow forms, and flushes them.
func TestNestedTypesIngest(t *testing.T) {
	f := newNestedFixture(t)
	if code, b := f.post(t, "/v1/shards/s0/rows", nestedNDJSON("a", "b")); code != http.StatusOK || decode[AppendResponse](t, b).Stored != 2 {
		t.Fatalf("NDJSON rows of every type answered %d %s, want 2 stored", code, b)
	}
	for variant, ids := range [][2]string{{"c", "d"}, {"e", "f"}} {
		code, b := f.postArrow(t, arrowStream(t, nestedArrow(variant, ids[0], ids[1])))
		if code != http.StatusOK || decode[AppendResponse](t, b).Stored != 2 {
			t.Fatalf("Arrow rows of every type, variant %d, answered %d %s, want 2 stored", variant, code, b)
		}
	}
	if rows, _ := f.held(t); rows != 6 {
		t.Fatalf("the shard holds %d rows, want 6", rows)
	}
	f.flush(t)
	if st := decode[engine.Status](t, f.get(t, "/v1/shards/s0")); len(st.Flushed) != 1 || st.Flushed[0].Rows != 6 {
		t.Fatalf("status after flush: %+v, want one generation of 6 rows", st)
	}
}

// nestedAnswer is the part of an error answer the nested tests read.
type nestedAnswer struct {
	Error       string `json:"error"`
	Line        int    `json:"line"`
	RecordBatch *int   `json:"record_batch"`
	Row         *int   `json:"row"`
	Column      string `json:"column"`
	Path        string `json:"path"`
	ByteOffset  *int   `json:"byte_offset"`
}

// TestNDJSONNestedRefusals: a bad value inside a list or struct, or one
// of a new type, is a 400 naming its line, column and path, and nothing
// of the request is written.
func TestNDJSONNestedRefusals(t *testing.T) {
	f := newNestedFixture(t)
	four := `[{"role":"a","content":"b"},{"role":"a","content":"b"},{"role":"a","content":"b"},{"role":5,"content":"b"}]`
	for _, tc := range []struct {
		name         string
		set          []string
		column, path string
		want         string
		at           string // what the byte offset points at, "" for none
	}{
		{"wrong type deep in a list", []string{"messages", four}, "messages", "messages[3].role", "want string, got number", ""},
		{"null in a non-nullable struct field", []string{"messages", `[{"role":"a","content":"b"},{"role":"a","content":null}]`}, "messages", "messages[1].content", "missing value", ""},
		{"struct field missing", []string{"messages", `[{"role":"a"}]`}, "messages", "messages[0].content", "missing value", ""},
		{"bad base64", []string{"blob", `"aGVsbG8"`}, "blob", "", "base64", ""},
		{"base64 of another alphabet", []string{"blob", `"-_8="`}, "blob", "", "base64", ""},
		{"timestamp with nanoseconds", []string{"at", `"2024-05-01T12:00:00.123456789Z"`}, "at", "", "finer than a microsecond", ""},
		{"nested timestamp with nanoseconds", []string{"meta", `{"step":1,"at":"2024-05-01T12:00:00.000000001Z"}`}, "meta", "meta.at", "finer than a microsecond", ""},
		{"timestamp not RFC 3339", []string{"at", `"2024-05-01 12:00"`}, "at", "", "RFC 3339", ""},
		{"int32 out of range", []string{"n", `2147483648`}, "n", "", "out of range", ""},
		{"int32 out of range in a list", []string{"tokens", `[1,-2147483649]`}, "tokens", "tokens[1]", "out of range", ""},
		{"int32 not whole", []string{"tokens", `[1.5]`}, "tokens", "tokens[0]", "want int32", ""},
		{"float32 out of range", []string{"logprobs", `[0,1e39]`}, "logprobs", "logprobs[1]", "float32", ""},
		{"unknown struct field", []string{"meta", `{"step":1,"colour":"red"}`}, "meta", "meta.colour", "unknown field", ""},
		{"a list of lists", []string{"tokens", `[[1]]`}, "tokens", "tokens[0]", "want int32, got array", ""},
		{"an object for a list", []string{"tokens", `{"a":1}`}, "tokens", "", "want a list, got object", ""},
		{"duplicate key inside a nested object", []string{"messages", `[{"role":"a","content":"b"},{"role":"a","role":"b","content":"c"}]`}, "messages", "messages[1].role", "appears twice", `"role":"b"`},
		{"duplicate key in a struct", []string{"meta", `{"step":1,"step":2}`}, "meta", "meta.step", "appears twice", `"step":2`},
		{"invalid UTF-8 deep in a list", []string{"messages", `[{"role":"a","content":"` + "\xff" + `"}]`}, "messages", "", "not valid UTF-8", "\xff"},
		{"lone surrogate in a struct", []string{"meta", `{"step":1,"note":"\udc00"}`}, "meta", "", "surrogate", `\udc00`},
	} {
		bad := nestedLine("bad", tc.set...)
		rows, tail := f.held(t)
		code, b := f.post(t, "/v1/shards/s0/rows", nestedLine("ok")+bad)
		if code != http.StatusBadRequest {
			t.Errorf("%s: answered %d %s, want 400", tc.name, code, b)
			continue
		}
		e := decode[nestedAnswer](t, b)
		if e.Line != 2 || e.Column != tc.column || e.Path != tc.path || !strings.Contains(e.Error, tc.want) {
			t.Errorf("%s: answered %s, want line 2, column %q, path %q and %q", tc.name, b, tc.column, tc.path, tc.want)
		}
		if !strings.Contains(e.Error, "line 2") || !strings.Contains(e.Error, tc.path) {
			t.Errorf("%s: message %q does not name line 2 and path %q", tc.name, e.Error, tc.path)
		}
		if tc.at != "" && (e.ByteOffset == nil || *e.ByteOffset != strings.Index(bad, tc.at)) {
			t.Errorf("%s: answered %s, want byte_offset %d", tc.name, b, strings.Index(bad, tc.at))
		}
		if r, w := f.held(t); r != rows || w != tail {
			t.Errorf("%s: the shard went from %d rows at WAL tail %d to %d at %d; want nothing written", tc.name, rows, tail, r, w)
		}
	}
}

// TestNDJSONOverlongList: a list of more than schema.MaxListElements is
// refused naming its line and column.
func TestNDJSONOverlongList(t *testing.T) {
	sc := nestedSchema(t)
	zeros := func(n int) string { return "[" + strings.Repeat("0,", n-1) + "0]" }
	long := nestedLine("long", "tokens", zeros(schema.MaxListElements+1))
	rows, lines, perr := decodeNDJSON(strings.NewReader(long), sc, 10, 1<<30)
	if perr != nil {
		t.Fatal(perr)
	}
	_, err := sc.Build(rows)
	var re *schema.RowError
	if !errors.As(err, &re) {
		t.Fatalf("a list of %d elements built: %v", schema.MaxListElements+1, err)
	}
	if e, ok := lineLocator(lines)(re); !ok || e.Line != 1 || e.Column != "tokens" || !strings.Contains(e.Error, "MaxListElements") {
		t.Fatalf("a list of %d elements answered %+v, want line 1, column tokens and the limit named", schema.MaxListElements+1, e)
	}
}

// claimArrays builds a column whose arrays no builder makes: elements
// that take no bytes, offsets that alias.
type claimArrays struct {
	name string
	arr  arrow.Array
}

// nullStructLists is a fixed-size list column of rows lists of size
// structs of a null-typed field: rows × size elements in no buffer.
func nullStructLists(rows int, size int32) claimArrays {
	st := structOf(field("role", arrow.Null))
	n := rows * int(size)
	child := array.NewStructData(array.NewData(st, n, []*memory.Buffer{nil}, []arrow.ArrayData{array.NewNull(n).Data()}, 0, 0))
	typ := arrow.FixedSizeListOf(size, st)
	return claimArrays{"messages", array.NewFixedSizeListData(array.NewData(typ, rows, []*memory.Buffer{nil}, []arrow.ArrayData{child.Data()}, 0, 0))}
}

// aliasedTokens is a list_view column of rows lists that all view the
// same n int32 elements.
func aliasedTokens(rows, n int) claimArrays {
	b := array.NewInt32Builder(memory.DefaultAllocator)
	for range n {
		b.Append(7)
	}
	child := b.NewArray()
	offsets, sizes := make([]int32, rows), make([]int32, rows)
	for i := range sizes {
		sizes[i] = int32(n)
	}
	typ := arrow.ListViewOf(arrow.PrimitiveTypes.Int32)
	data := array.NewData(typ, rows, []*memory.Buffer{nil, memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(offsets)),
		memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(sizes))}, []arrow.ArrayData{child.Data()}, 0, 0)
	return claimArrays{"tokens", array.MakeFromData(data)}
}

// claimStream is a stream of one record batch of rows rows: ids, the
// claimed column, and empty lists for the other non-nullable columns.
func claimStream(t testing.TB, rows int, c claimArrays) []byte {
	t.Helper()
	cols := []col{{name: "id", typ: arrow.BinaryTypes.String}, {name: "tokens", typ: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
		{name: "messages", typ: arrow.ListOf(structOf(field("role", arrow.BinaryTypes.String), field("content", arrow.BinaryTypes.String)))}}
	for i := range rows {
		cols[0].vals = append(cols[0].vals, fmt.Sprint("r", i))
		cols[1].vals = append(cols[1].vals, []any{})
		cols[2].vals = append(cols[2].vals, []any{})
	}
	var fields []arrow.Field
	var arrs []arrow.Array
	for _, cl := range cols {
		if cl.name == c.name {
			fields, arrs = append(fields, field(c.name, c.arr.DataType())), append(arrs, c.arr)
			continue
		}
		fields = append(fields, field(cl.name, cl.typ))
		b := array.NewBuilder(memory.DefaultAllocator, cl.typ)
		for _, v := range cl.vals {
			arrowtest.Append(t, b, v)
		}
		arrs = append(arrs, b.NewArray())
	}
	sc := arrow.NewSchema(fields, nil)
	rec := array.NewRecordBatch(sc, arrs, int64(rows))
	defer rec.Release()
	return arrowtest.Stream(t, sc, []arrow.RecordBatch{rec})
}

// TestArrowNestedRefusals: an Arrow type that does not fit its column is a
// 400 naming the column, the path inside its type and both types before
// any row; a bad value inside a list or struct one naming the record
// batch, row, column and path. Nothing of the request is written.
func TestArrowNestedRefusals(t *testing.T) {
	f := newNestedFixture(t)
	good := nestedArrow(0, "a", "b")
	messages := func(content any) col {
		m := func(c any) map[string]any { return map[string]any{"role": "r", "content": c} }
		return col{name: "messages", typ: arrow.ListOf(structOf(field("role", arrow.BinaryTypes.String), field("content", arrow.BinaryTypes.String))),
			vals: []any{[]any{m("x")}, []any{m("x"), m("x"), m("x"), m(content)}}}
	}
	ts := func(unit arrow.TimeUnit, tz string) arrow.DataType {
		return &arrow.TimestampType{Unit: unit, TimeZone: tz}
	}
	for _, tc := range []struct {
		name         string
		body         []byte
		batch, row   int // -1: the answer names none
		column, path string
		want         string
	}{
		{"wrong element type deep in a list", arrowStream(t, with(good, col{name: "messages",
			typ: arrow.ListOf(structOf(field("role", arrow.PrimitiveTypes.Int64), field("content", arrow.BinaryTypes.String))), vals: []any{[]any{}, []any{}}})),
			-1, -1, "messages", "messages[].role", "Arrow type int64 does not fit type string"},
		{"null in a non-nullable struct field", arrowStream(t, with(good, messages("ok")), with(nestedArrow(0, "c", "d"), messages(nil))),
			1, 1, "messages", "messages[3].content", "missing value"},
		{"overlong list", claimStream(t, 1, nullStructLists(1, schema.MaxListElements+1)), 0, 0, "messages", "", "MaxListElements"},
		{"utf8 for a binary column", arrowStream(t, with(good, col{name: "blob", typ: arrow.BinaryTypes.String, vals: []any{"aGVsbG8=", nil}})),
			-1, -1, "blob", "", "Arrow type utf8 does not fit type binary"},
		{"timestamp with nanoseconds", arrowStream(t, with(good, col{name: "at", typ: ts(arrow.Nanosecond, ""), vals: []any{nil, int64(1)}})),
			0, 1, "at", "", "finer than a microsecond"},
		{"nested timestamp with nanoseconds", arrowStream(t, with(good, col{name: "meta", typ: structOf(field("at", ts(arrow.Nanosecond, "UTC")), field("step", arrow.PrimitiveTypes.Int8)),
			vals: []any{map[string]any{"at": int64(1), "step": int8(1)}, nil}})), 0, 0, "meta", "meta.at", "finer than a microsecond"},
		{"struct field missing", arrowStream(t, with(good, col{name: "meta", typ: structOf(field("at", ts(arrow.Nanosecond, "UTC"))),
			vals: []any{nil, map[string]any{"at": int64(1000)}}})), 0, 1, "meta", "meta.step", "missing value"},
		{"timestamp out of range", arrowStream(t, with(good, col{name: "at", typ: ts(arrow.Second, ""), vals: []any{int64(math.MaxInt64 / 1000), nil}})),
			0, 0, "at", "", "out of range"},
		{"timestamp in another zone", arrowStream(t, with(good, col{name: "at", typ: ts(arrow.Microsecond, "Europe/Paris"), vals: []any{nil, nil}})),
			-1, -1, "at", "", `time zone "Europe/Paris"`},
		{"int64 for an int32 column", arrowStream(t, with(good, col{name: "n", typ: arrow.PrimitiveTypes.Int64, vals: []any{int64(1), nil}})),
			-1, -1, "n", "", "Arrow type int64 does not fit type int32"},
		{"int64 elements for list<int32>", arrowStream(t, with(good, col{name: "tokens", typ: arrow.ListOf(arrow.PrimitiveTypes.Int64), vals: []any{[]any{}, []any{}}})),
			-1, -1, "tokens", "tokens[]", "does not fit type int32"},
		{"float64 for a float32 column", arrowStream(t, with(good, col{name: "score", typ: arrow.PrimitiveTypes.Float64, vals: []any{nil, nil}})),
			-1, -1, "score", "", "Arrow type float64 does not fit type float32"},
		{"int64 float64 would round", arrowStream(t, with(good, col{name: "reward", typ: arrow.PrimitiveTypes.Int64, vals: []any{nil, int64(1<<53 + 1)}})),
			0, 1, "reward", "", "not exact as a float64"},
		{"unknown struct field", arrowStream(t, with(good, col{name: "meta", typ: structOf(field("step", arrow.PrimitiveTypes.Int32), field("colour", arrow.BinaryTypes.String)),
			vals: []any{nil, nil}})), -1, -1, "meta", "meta.colour", "unknown field"},
		{"duplicate struct field", arrowStream(t, with(good, col{name: "meta", typ: structOf(field("step", arrow.PrimitiveTypes.Int32), field("step", arrow.PrimitiveTypes.Int32)),
			vals: []any{nil, nil}})), -1, -1, "meta", "meta.step", "twice"},
		{"a list for a struct", arrowStream(t, with(good, col{name: "meta", typ: arrow.ListOf(arrow.PrimitiveTypes.Int32), vals: []any{nil, nil}})),
			-1, -1, "meta", "", "does not fit type struct<step: int32, at: timestamp?, note: string?>"},
		{"lone surrogate in JSON text", arrowStream(t, with(good, col{name: "metadata", typ: arrow.BinaryTypes.String, vals: []any{`{"k":"\ud800"}`, nil}})),
			0, 0, "metadata", "", "surrogate"},
		// arrow-go's validation of a string array refuses it whole.
		{"invalid UTF-8 in JSON text", arrowStream(t, with(good, col{name: "metadata", typ: arrow.BinaryTypes.LargeString, vals: []any{nil, "\"\xff\""}})),
			0, -1, "metadata", "", "not valid utf8"},
		{"NaN in a list", arrowStream(t, with(good, col{name: "logprobs", typ: arrow.ListOf(arrow.PrimitiveTypes.Float32), vals: []any{nil, []any{float32(0), float32(math.NaN())}}})),
			0, 1, "logprobs", "logprobs[1]", "finite float32"},
	} {
		rows, tail := f.held(t)
		code, b := f.postArrow(t, tc.body)
		if code != http.StatusBadRequest {
			t.Errorf("%s: answered %d %s, want 400", tc.name, code, b)
			continue
		}
		e := decode[nestedAnswer](t, b)
		if e.Column != tc.column || e.Path != tc.path || !sameIndex(e.RecordBatch, tc.batch) || !sameIndex(e.Row, tc.row) || !strings.Contains(e.Error, tc.want) {
			t.Errorf("%s: answered %s, want record batch %d, row %d, column %q, path %q and %q", tc.name, b, tc.batch, tc.row, tc.column, tc.path, tc.want)
		}
		if tc.row >= 0 && !strings.Contains(e.Error, fmt.Sprintf("record batch %d, row %d", tc.batch, tc.row)) || !strings.Contains(e.Error, tc.path) {
			t.Errorf("%s: message %q does not name record batch %d, row %d and path %q", tc.name, e.Error, tc.batch, tc.row, tc.path)
		}
		if r, w := f.held(t); r != rows || w != tail {
			t.Errorf("%s: the shard went from %d rows at WAL tail %d to %d at %d; want nothing written", tc.name, rows, tail, r, w)
		}
	}
}

// TestArrowNestedBudget: what nested columns decode to is bounded before
// it is made, whether the stream holds it (a huge list child: its buffers
// count against the decode budget) or only claims it (lists of elements in
// no buffer, list_views that all alias one child).
func TestArrowNestedBudget(t *testing.T) {
	sc := nestedSchema(t)
	const decoded = 1 << 20
	huge := make([]any, 300_000) // 1.2 MB of int32
	for i := range huge {
		huge[i] = int32(i)
	}
	bigChild := arrowStream(t, with(nestedArrow(0, "a", "b"), col{name: "tokens", typ: arrow.ListOf(arrow.PrimitiveTypes.Int32), vals: []any{huge, []any{}}}))
	for _, tc := range []struct {
		name string
		body []byte
		want string
	}{
		{"a list child over the budget", bigChild, "buffers decode to more than"},
		{"lists of elements in no buffer", claimStream(t, 64, nullStructLists(64, 1<<20)), "values decode to more than"},
		{"list_views of one child", claimStream(t, 64, aliasedTokens(64, 100_000)), "values decode to more than"},
	} {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := decodeArrow(bytes.NewReader(tc.body), sc, memory.DefaultAllocator, arrowLimits{body: 8 << 20, decoded: decoded, rows: 100})
		runtime.ReadMemStats(&after)
		if !errors.Is(err, errDecodedTooLarge) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s (%d bytes): %v, want errDecodedTooLarge: %s", tc.name, len(tc.body), err, tc.want)
		}
		// The body, arrow-go's copy of it and the values up to the
		// budget, decodedPerWAL times decoded.
		if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(3*len(tc.body)+2*decodedPerWAL*decoded+1<<20); got > limit {
			t.Errorf("%s: decoding allocated %d bytes, want at most %d", tc.name, got, limit)
		}
	}
	// Through the server, a stream that claims too much is 413.
	nested := nestedSchema(t)
	f := newServerFixture(t, func(o *engine.Options) { o.Schema = nested }, func(o *Options) { o.Schema, o.MaxDecodedBytes = nested, decoded })
	f.srv.SetReady(true)
	if code, b := f.postArrow(t, claimStream(t, 64, nullStructLists(64, 1<<20))); code != http.StatusRequestEntityTooLarge {
		t.Errorf("64 lists of 2^20 elements in no buffer answered %d %s, want 413", code, b)
	}
}

// TestNDJSONValueBombIs413: a line of millions of tiny values ("{}" or
// "0" three bytes each) decodes, generically, to tens of bytes of heap a
// value; it is refused with 413 before it is decoded, and what decoding it
// allocates stays bounded by the request's decode budget.
func TestNDJSONValueBombIs413(t *testing.T) {
	sc := nestedSchema(t)
	const maxBytes = 1 << 20
	for _, tc := range []struct{ name, col, elem string }{
		{"empty objects in a list of structs", "messages", "{}"},
		{"zeros in a list of int32", "tokens", "0"},
		{"empty arrays in a json column", "metadata", "[]"},
	} {
		n := (4 << 20) / (len(tc.elem) + 1) // a 4 MiB line
		line := `{"id":"a","tokens":[],"messages":[]}`
		line = strings.Replace(line, `"`+tc.col+`":[]`, `"`+tc.col+`":[`+strings.TrimSuffix(strings.Repeat(tc.elem+",", n), ",")+`]`, 1)
		if tc.col == "metadata" {
			line = strings.TrimSuffix(line, "}") + `,"metadata":[` + strings.TrimSuffix(strings.Repeat(tc.elem+",", n), ",") + "]}"
		}
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, _, perr := decodeNDJSON(strings.NewReader(line+"\n"), sc, 100, maxBytes)
		runtime.ReadMemStats(&after)
		if perr == nil || !errors.Is(perr.err, errDecodedTooLarge) {
			t.Errorf("%s: %v, want errDecodedTooLarge", tc.name, perr)
		}
		// Reading a line longer than the reader's buffer copies it as it
		// grows (about 4 times its size); decoding adds at most the budget.
		if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(5*len(line)+decodedPerWAL*maxBytes+1<<20); got > limit {
			t.Errorf("%s: decoding a %d-byte line allocated %d bytes, want at most %d", tc.name, len(line), got, limit)
		}
	}
}
