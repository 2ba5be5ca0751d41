package server

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	flatbuffers "github.com/google/flatbuffers/go"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/internal/arrowtest"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/wal"
)

// col is one column of a record batch; a nil value is null.
type col struct {
	name string
	typ  arrow.DataType
	vals []any
}

// arrowStream encodes record batches that share their columns' names and
// types as one IPC stream.
func arrowStream(t testing.TB, batches ...[]col) []byte {
	t.Helper()
	var fields []arrow.Field
	for _, c := range batches[0] {
		fields = append(fields, arrow.Field{Name: c.name, Type: c.typ, Nullable: true})
	}
	sc := arrow.NewSchema(fields, nil)
	var recs []arrow.RecordBatch
	for _, cols := range batches {
		rec := record(t, sc, cols)
		defer rec.Release()
		recs = append(recs, rec)
	}
	return arrowtest.Stream(t, sc, recs)
}

func record(t testing.TB, sc *arrow.Schema, cols []col) arrow.RecordBatch {
	t.Helper()
	var arrs []arrow.Array
	for _, c := range cols {
		b := array.NewBuilder(memory.DefaultAllocator, c.typ)
		for _, v := range c.vals {
			arrowtest.Append(t, b, v)
		}
		arrs = append(arrs, b.NewArray())
		b.Release()
	}
	rec := array.NewRecordBatch(sc, arrs, int64(len(cols[0].vals)))
	for _, a := range arrs {
		a.Release()
	}
	return rec
}

// rollouts are rows of the default schema, prompt as large_utf8 to show
// that both string layouts are taken.
func rollouts(ids ...string) []col {
	cols := []col{
		{name: "id", typ: arrow.BinaryTypes.String},
		{name: "prompt", typ: arrow.BinaryTypes.LargeString},
		{name: "completion", typ: arrow.BinaryTypes.String},
		{name: "reward", typ: arrow.PrimitiveTypes.Float64},
		{name: "metadata", typ: arrow.BinaryTypes.String},
	}
	for i, id := range ids {
		var reward any = float64(i) / 2
		if i == 1 {
			reward = nil // nullable
		}
		for c, v := range []any{id, "p " + id, "c", reward, `{"k":1}`} {
			cols[c].vals = append(cols[c].vals, v)
		}
	}
	return cols
}

// with returns cols with the column of c's name replaced by c in place (so
// that batches keep one schema), or c added last.
func with(cols []col, c col) []col {
	out := append([]col(nil), cols...)
	for i, x := range out {
		if x.name == c.name {
			out[i] = c
			return out
		}
	}
	return append(out, c)
}

func without(cols []col, name string) []col {
	out := []col{}
	for _, x := range cols {
		if x.name != name {
			out = append(out, x)
		}
	}
	return out
}

// limits are the Arrow decoding limits of a body limit and a row limit,
// with the server's default bound on decoded bytes.
func limits(body int64, rows int) arrowLimits {
	return arrowLimits{body: body, decoded: wal.MaxPayloadSize, rows: rows}
}

func (f *fixture) postArrow(t *testing.T, body []byte) (int, []byte) {
	t.Helper()
	code, _, b := f.do(t, http.MethodPost, "/v1/shards/s0/rows", ContentTypeArrow, string(body))
	return code, b
}

func TestArrowIngest(t *testing.T) {
	f := newFixture(t, 0)
	f.srv.SetReady(true)
	body := arrowStream(t, rollouts("a", "b", "c"), rollouts("d", "e"))
	code, b := f.postArrow(t, body)
	if code != http.StatusOK {
		t.Fatalf("POST Arrow rows: %d %s", code, b)
	}
	res := decode[AppendResponse](t, b)
	if res.Acked != 5 || res.Stored != 5 || res.LastSeq-res.FirstSeq != 4 {
		t.Fatalf("Arrow POST answered %+v, want 5 rows stored over 5 positions", res)
	}
	if code, b = f.postArrow(t, body); code != http.StatusOK || decode[AppendResponse](t, b).Duplicates != 5 {
		t.Fatalf("the same stream again answered %d %s, want 5 duplicates", code, b)
	}
	if code, b = f.post(t, "/v1/shards/s0/flush", ""); code != http.StatusOK {
		t.Fatalf("flush: %d %s", code, b)
	}
	st := decode[engine.Status](t, f.get(t, "/v1/shards/s0"))
	if len(st.Flushed) != 1 || st.Flushed[0].Rows != 5 {
		t.Fatalf("status after flush: %+v, want one generation of 5 rows", st)
	}
}

// TestArrowWidensAndNulls sends an int32 into the float64 reward column and
// a null into a nullable one: both stored.
func TestArrowWidensAndNulls(t *testing.T) {
	f := newFixture(t, 0)
	f.srv.SetReady(true)
	cols := with(rollouts("a", "b"), col{name: "reward", typ: arrow.PrimitiveTypes.Int32, vals: []any{int32(3), nil}})
	cols = with(cols, col{name: "metadata", typ: arrow.Null, vals: []any{nil, nil}})
	if code, b := f.postArrow(t, arrowStream(t, cols)); code != http.StatusOK || decode[AppendResponse](t, b).Stored != 2 {
		t.Fatalf("int32 reward and null metadata answered %d %s, want 2 rows stored", code, b)
	}
}

func TestArrowBadInputNamesTheProblem(t *testing.T) {
	f := newFixture(t, 0)
	f.srv.SetReady(true)
	before := f.walTail(t)
	good := rollouts("a", "b")
	badReward := with(rollouts("c", "d"), col{name: "reward", typ: arrow.BinaryTypes.String, vals: []any{"1", "high"}})
	nullID := with(good, col{name: "id", typ: arrow.BinaryTypes.String, vals: []any{"x", nil}})
	for _, tc := range []struct {
		name, want string
		body       []byte
		batch, row int // -1: the answer names none
		column     string
	}{
		{"wrong type", `Arrow type utf8 does not fit type float64`, arrowStream(t, badReward), -1, -1, "reward"},
		{"missing id column", "no id column", arrowStream(t, without(good, "id")), -1, -1, ""},
		{"unknown column", "unknown column", arrowStream(t, with(good, col{name: "colour", typ: arrow.BinaryTypes.String, vals: []any{"red", "blue"}})), -1, -1, "colour"},
		{"null id", "id is null", arrowStream(t, good, nullID), 1, 1, "id"},
		{"null in a non-nullable column", "non-nullable", arrowStream(t, with(good, col{name: "prompt", typ: arrow.BinaryTypes.String, vals: []any{"p", nil}})), 0, 1, "prompt"},
		{"id of another type", "the id column has Arrow type int64", arrowStream(t, with(good, col{name: "id", typ: arrow.PrimitiveTypes.Int64, vals: []any{int64(1), int64(2)}})), -1, -1, "id"},
		{"type not accepted", "Arrow type binary does not fit type string", arrowStream(t, with(good, col{name: "completion", typ: arrow.BinaryTypes.Binary, vals: []any{[]byte("c"), []byte("d")}})), -1, -1, "completion"},
		{"bad value", "want a finite float64, got NaN", arrowStream(t, with(good, col{name: "reward", typ: arrow.PrimitiveTypes.Float64, vals: []any{1.0, math.NaN()}})), 0, 1, "reward"},
		{"bad JSON text", "not valid JSON", arrowStream(t, good, with(rollouts("c", "d"), col{name: "metadata", typ: arrow.BinaryTypes.String, vals: []any{"{}", "{"}})), 1, 1, "metadata"},
		{"garbage bytes", "not an Arrow IPC stream", []byte("this is not arrow at all\n"), -1, -1, ""},
		{"truncated stream", "record batch 0", truncated(arrowStream(t, good)), 0, -1, ""},
		{"two streams", "data after the end of the Arrow stream", append(arrowStream(t, good), arrowStream(t, good)...), -1, -1, ""},
		{"no rows", "no rows", arrowStream(t, rollouts()), -1, -1, ""},
	} {
		code, b := f.postArrow(t, tc.body)
		if code != http.StatusBadRequest {
			t.Errorf("%s: answered %d %s, want 400", tc.name, code, b)
			continue
		}
		e := decode[apiError](t, b)
		if !strings.Contains(e.Error, tc.want) || e.Column != tc.column || !sameIndex(e.RecordBatch, tc.batch) || !sameIndex(e.Row, tc.row) {
			t.Errorf("%s: answered %s, want %q at record batch %d, row %d, column %q", tc.name, b, tc.want, tc.batch, tc.row, tc.column)
		}
		if tc.row >= 0 && !strings.Contains(e.Error, fmt.Sprintf("record batch %d, row %d", tc.batch, tc.row)) {
			t.Errorf("%s: message %q does not name record batch %d, row %d", tc.name, e.Error, tc.batch, tc.row)
		}
	}
	if after := f.walTail(t); after != before {
		t.Fatalf("WAL tail moved from %d to %d after rejected streams", before, after)
	}
}

// truncated cuts into the last record batch's body, past the EOS marker.
func truncated(stream []byte) []byte { return stream[:len(stream)-20] }

func sameIndex(got *int, want int) bool {
	if want < 0 {
		return got == nil
	}
	return got != nil && *got == want
}

func TestArrowTooLarge(t *testing.T) {
	f := newFixture(t, 4096)
	f.srv.SetReady(true)
	before := f.walTail(t)
	ids := make([]string, 200)
	for i := range ids {
		ids[i] = fmt.Sprint("id-", i)
	}
	if code, b := f.postArrow(t, arrowStream(t, rollouts(ids...))); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a stream over MaxBodyBytes answered %d %s, want 413", code, b)
	}
	// More rows than the engine's MaxBatchRows (1000), in a small body.
	big := newFixture(t, 0)
	big.srv.SetReady(true)
	ids = make([]string, 1001)
	for i := range ids {
		ids[i] = fmt.Sprint(i)
	}
	if code, b := big.postArrow(t, arrowStream(t, rollouts(ids...))); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("1001 rows answered %d %s, want 413", code, b)
	}
	if after := f.walTail(t); after != before {
		t.Fatalf("WAL tail moved from %d to %d after rejected streams", before, after)
	}
}

// TestMaxRowsIs413 bounds rows while decoding, for both content types.
func TestMaxRowsIs413(t *testing.T) {
	f := newFixture(t, 0)
	before := f.walTail(t)
	srv := New(Options{Host: f.host, Shards: []string{"s0"}, MaxRows: 3})
	srv.SetReady(true)
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	for _, tc := range []struct {
		contentType string
		body        []byte
	}{
		{ContentTypeNDJSON, []byte(ndjson("a", "b", "c", "d"))},
		{ContentTypeArrow, arrowStream(t, rollouts("a", "b"), rollouts("c", "d"))},
	} {
		resp, err := ts.Client().Post(ts.URL+"/v1/shards/s0/rows", tc.contentType, bytes.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		buf.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(buf.String(), "more than 3 rows") {
			t.Errorf("%s: 4 rows with MaxRows 3 answered %d %s, want 413 naming the limit", tc.contentType, resp.StatusCode, buf.String())
		}
	}
	if after := f.walTail(t); after != before {
		t.Fatalf("WAL tail moved from %d to %d after rejected requests", before, after)
	}
}

// TestArrowDecodeReleasesMemory checks that decoding returns every buffer to
// the allocator and that rows do not alias them.
func TestArrowDecodeReleasesMemory(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	body := arrowStream(t, rollouts("a", "b"), rollouts("c"))
	got, err := decodeArrow(bytes.NewReader(body), schema.Rollout(), mem, limits(1<<20, 100))
	if err != nil {
		t.Fatal(err)
	}
	mem.AssertSize(t, 0)
	reward := schema.Rollout().Index("reward")
	if got.invalid != nil || got.n != 3 || got.batch.Len() != 3 || got.batch.IDs[2] != "c" ||
		got.batch.Value(reward, 1) != nil || got.batch.Value(reward, 0) != 0.0 {
		t.Fatalf("decoded %d rows %v (%v), want a, b, c with b's reward null", got.n, rowsOf(got.batch), got.invalid)
	}
	if fmt.Sprint(got.starts) != "[0 2]" {
		t.Fatalf("record batch starts %v, want [0 2]", got.starts)
	}
}

// TestArrowLyingLengths patches a good stream's metadata to claim huge
// sizes: the decoder must refuse them before allocating anything of that
// size (arrow-go alone makes the claimed slices and runs out of memory).
func TestArrowLyingLengths(t *testing.T) {
	good := arrowStream(t, rollouts("a", "b"))
	meta := good[8 : 8+binary.LittleEndian.Uint32(good[4:8])] // the schema message
	msg := flatbuffers.Table{Bytes: meta, Pos: flatbuffers.GetUOffsetT(meta)}
	var sc flatbuffers.Table
	msg.Union(&sc, flatbuffers.UOffsetT(msg.Offset(slotMessageHeader)))
	fieldsLen := 8 + sc.Vector(flatbuffers.UOffsetT(sc.Offset(slotSchemaFields))) - 4

	manyFields := bytes.Clone(good)
	binary.LittleEndian.PutUint32(manyFields[fieldsLen:], 1<<31-1)
	if _, err := decodeArrow(bytes.NewReader(manyFields), schema.Rollout(), memory.DefaultAllocator, limits(1<<20, 100)); err == nil || !strings.Contains(err.Error(), "claims a vector of 2147483647 entries") {
		t.Fatalf("a schema claiming 2^31 fields: %v, want it refused for its claim", err)
	}
	hugeMeta := bytes.Clone(good)
	binary.LittleEndian.PutUint32(hugeMeta[4:], 1<<31-1)
	if _, err := decodeArrow(bytes.NewReader(hugeMeta), schema.Rollout(), memory.DefaultAllocator, limits(1<<20, 100)); !errors.Is(err, errMessageTooLarge) {
		t.Fatalf("metadata claiming 2 GiB: %v, want errMessageTooLarge", err)
	}
}

// TestArrowCompressedStreams reads body-compressed streams, and refuses
// one whose decompressed buffers pass four times the body limit (a small
// body can claim any decompressed size).
func TestArrowCompressedStreams(t *testing.T) {
	cols := rollouts("a", "b")
	fields := []arrow.Field{}
	for _, c := range cols {
		fields = append(fields, arrow.Field{Name: c.name, Type: c.typ, Nullable: true})
	}
	sc := arrow.NewSchema(fields, nil)
	encode := func(cols []col) []byte {
		rec := record(t, sc, cols)
		defer rec.Release()
		return arrowtest.Stream(t, sc, []arrow.RecordBatch{rec}, ipc.WithZstd())
	}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	got, err := decodeArrow(bytes.NewReader(encode(cols)), schema.Rollout(), mem, limits(64<<10, 100))
	if err != nil || got.invalid != nil || got.n != 2 || got.batch.Value(schema.Rollout().Index("prompt"), 1) != "p b" {
		t.Fatalf("a zstd stream decoded to %v, %v; want rows a and b", got, err)
	}
	mem.AssertSize(t, 0) // decompressed buffers go back: the limit counts live bytes
	long := strings.Repeat("a", 300<<10)
	bomb := encode(with(cols, col{name: "prompt", typ: arrow.BinaryTypes.LargeString, vals: []any{long, long}}))
	if len(bomb) > 64<<10 {
		t.Fatalf("the compressed stream is %d bytes, want it under the 64 KiB body limit", len(bomb))
	}
	if _, err := decodeArrow(bytes.NewReader(bomb), schema.Rollout(), memory.DefaultAllocator, limits(64<<10, 100)); !errors.Is(err, errMessageTooLarge) {
		t.Fatalf("600 KiB decompressed from a %d-byte body with a 64 KiB limit: %v, want errMessageTooLarge", len(bomb), err)
	}
}

// TestArrowLyingViewCounts patches the variadic buffer counts of a
// stream's utf8_view columns: arrow-go makes a slice of each count, and
// reads counts past the vector's end, before it reads a buffer; the
// decoder must refuse both lies rather than crash.
func TestArrowLyingViewCounts(t *testing.T) {
	long := strings.Repeat("x", 40) // past the 12 bytes a view holds inline
	good := arrowStream(t, with(with(rollouts("a"), col{name: "prompt", typ: arrow.BinaryTypes.StringView, vals: []any{long}}),
		col{name: "completion", typ: arrow.BinaryTypes.StringView, vals: []any{long}}))
	if _, err := decodeArrow(bytes.NewReader(good), schema.Rollout(), memory.DefaultAllocator, limits(1<<20, 100)); err != nil {
		t.Fatalf("a stream of two utf8_view columns: %v", err)
	}
	// The record batch follows the schema message, which has no body.
	at := 8 + int(binary.LittleEndian.Uint32(good[4:8]))
	meta := good[at+8 : at+8+int(binary.LittleEndian.Uint32(good[at+4:]))]
	msg := flatbuffers.Table{Bytes: meta, Pos: flatbuffers.GetUOffsetT(meta)}
	var rb flatbuffers.Table
	msg.Union(&rb, flatbuffers.UOffsetT(msg.Offset(slotMessageHeader)))
	counts := rb.Vector(flatbuffers.UOffsetT(rb.Offset(slotRecordVariadic)))
	if n := rb.VectorLen(flatbuffers.UOffsetT(rb.Offset(slotRecordVariadic))); n != 2 {
		t.Fatalf("the record batch has %d variadic counts, want 2", n)
	}
	huge := bytes.Clone(good)
	binary.LittleEndian.PutUint64(huge[at+8+int(counts):], 1<<40)
	short := bytes.Clone(good)
	binary.LittleEndian.PutUint32(short[at+8+int(counts)-4:], 1)
	for name, body := range map[string][]byte{"a count of 2^40": huge, "one count for two views": short} {
		_, err := decodeArrow(bytes.NewReader(body), schema.Rollout(), memory.DefaultAllocator, limits(1<<20, 100))
		if err == nil || !strings.Contains(err.Error(), "variadic") {
			t.Errorf("%s: %v, want it refused naming the variadic counts", name, err)
		}
	}
}

// The text getter copies a column's value bytes once and slices each value
// out of the copy: values read back right from a sliced array and from
// each string layout, and none changes when the stream's buffers are
// overwritten afterwards.
func TestArrowTextValuesAreCopied(t *testing.T) {
	want := []string{"alpha", "", "gamma", "δέλτα", "epsilon"}
	builders := map[string]func() array.Builder{
		"utf8":       func() array.Builder { return array.NewStringBuilder(memory.DefaultAllocator) },
		"large_utf8": func() array.Builder { return array.NewLargeStringBuilder(memory.DefaultAllocator) },
		"utf8_view":  func() array.Builder { return array.NewStringViewBuilder(memory.DefaultAllocator) },
	}
	for name, newBuilder := range builders {
		t.Run(name, func(t *testing.T) {
			bld := newBuilder()
			defer bld.Release()
			for _, s := range append([]string{"skipped", "too"}, want...) {
				bld.(interface{ Append(string) }).Append(s)
			}
			whole := bld.NewArray()
			defer whole.Release()
			arr := array.NewSlice(whole, 2, int64(whole.Len())) // a non-zero data offset
			defer arr.Release()
			get, err := newValueReader(1 << 20).text(arr)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for i := range want {
				v, err := get(i)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, v.(string))
			}
			for _, buf := range whole.Data().Buffers() {
				if buf != nil {
					for k := range buf.Bytes() {
						buf.Bytes()[k] = 'x'
					}
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("values %q, want %q (after the stream's buffers were overwritten)", got, want)
			}
		})
	}
}
