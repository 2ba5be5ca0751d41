package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/rollwal/rollwal/schema"
)

// fuzzMaxRows keeps the fuzzers' inputs cheap; the row bound itself is
// part of what they exercise.
const fuzzMaxRows = 64

// FuzzNDJSONDecode: any body decodes to rows with their lines or fails with
// an error; rows that decode validate or fail with a RowError inside the
// batch, never a crash.
func FuzzNDJSONDecode(f *testing.F) {
	for _, seed := range []string{
		ndjson("a", "b"), "", "\n\n", `{"id":"x"}`, "[1,2]\n", `{"id":"x"} {"id":"y"}`,
		`{"id":"x","reward":1e400}`, `{"id":"x","prompt":"p","completion":"c","reward":null,"metadata":[1,{"a":null}]}`,
		"{\"id\":\"\xff\"}", `{"id":"x","colour":"red"}`, `{"id":"x","id":"y"}`, strings.Repeat(`{"id":"r"}`+"\n", fuzzMaxRows+1),
		`{"id":"\ud800"}`, `{"id":"\ud83d\ude00"}`, `{"id":"x"}]`, `{"id":"x","metadata":{"a":[{"k":1,"k":2}]}}`,
		`{"id":"x","metadata":{"k":"\\ud800"}}`, "\t{\"id\":\"x\"} \r\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkBatchAgrees(t, schema.Rollout(), body)
		rows, lines, perr := decodeNDJSON(bytes.NewReader(body), schema.Rollout(), fuzzMaxRows, 1<<20)
		if perr != nil {
			if perr.Error() == "" || rows != nil {
				t.Fatalf("failed decode: message %q, %d rows", perr.Error(), len(rows))
			}
			return
		}
		checkLines(t, lines, len(rows), bytes.Count(body, []byte("\n"))+1)
		checkNotRewritten(t, body, rows)
		revalidate(t, schema.Rollout(), rows, lineLocator(lines))
	})
}

// checkNotRewritten: a body that decoded is valid UTF-8 (encoding/json
// would have replaced what is not), and a U+FFFD in a value, at any depth,
// was sent as one (lone surrogates would have become one), and raw JSON
// values are bytes of the body.
func checkNotRewritten(t *testing.T, body []byte, rows []schema.Row) {
	t.Helper()
	if len(rows) > 0 && !utf8.Valid(body) {
		t.Fatalf("%d rows decoded from a body that is not UTF-8: %q", len(rows), body)
	}
	sentFFFD := bytes.Contains(body, []byte("\uFFFD")) || bytes.Contains(bytes.ToLower(body), []byte(`\ufffd`))
	var check func(i int, k string, v any)
	check = func(i int, k string, v any) {
		switch x := v.(type) {
		case string:
			if strings.ContainsRune(k+x, utf8.RuneError) && !sentFFFD {
				t.Fatalf("row %d: %q: %q holds U+FFFD that the body did not send", i, k, x)
			}
		case json.RawMessage:
			if !bytes.Contains(body, x) {
				t.Fatalf("row %d: %q: JSON %s is not the body's bytes", i, k, x)
			}
		case []any:
			for _, e := range x {
				check(i, k, e)
			}
		case map[string]any:
			for fk, e := range x {
				check(i, k+"."+fk, e)
			}
		}
	}
	for i, r := range rows {
		for k, v := range r {
			check(i, k, v)
		}
	}
}

// checkLines holds lines to one strictly increasing line per row, within
// the body's lines.
func checkLines(t *testing.T, lines []int, rows, bodyLines int) {
	t.Helper()
	if len(lines) != rows {
		t.Fatalf("%d lines for %d rows", len(lines), rows)
	}
	for i, l := range lines {
		if l < 1 || l > bodyLines || (i > 0 && l <= lines[i-1]) {
			t.Fatalf("lines %v are not increasing lines of a %d-line body", lines, bodyLines)
		}
	}
}

// revalidate builds decoded rows into a batch of sc: a RowError must name
// a row of the request and locate it, with its path inside a list or
// struct; a batch that builds must survive its WAL encoding unchanged.
func revalidate(t *testing.T, sc *schema.Schema, rows []schema.Row, locate locator) *schema.Batch {
	t.Helper()
	b, err := sc.Build(rows)
	if err != nil {
		var re *schema.RowError
		// The column may be "": a producer can send an empty key.
		if !errors.As(err, &re) || re.Reason == "" {
			t.Fatalf("Build failed without a RowError saying why: %v", err)
		}
		e, ok := locate(re)
		if !ok || e.Column != re.Column || e.Error == "" || e.Path != innerPath(re) || !strings.Contains(e.Error, e.Path) {
			t.Fatalf("row error %v is not located in the request: %+v, %v", err, e, ok)
		}
		return nil
	}
	enc := b.Encode(nil)
	back, err := sc.Decode(enc)
	if err != nil || !bytes.Equal(back.Encode(nil), enc) {
		t.Fatalf("a built batch of %d rows does not survive its encoding: %v", b.Len(), err)
	}
	return b
}

// FuzzArrowDecode: any body decodes to rows or fails with an error that
// locates it; decoded rows have a string id, their record batches account
// for every row, no buffer outlives the decode, and the rows validate or
// fail with a located RowError.
func FuzzArrowDecode(f *testing.F) {
	for _, seed := range arrowSeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		// Bodies come from mem too, so that AssertSize sees each returned.
		lim := limits(1<<20, fuzzMaxRows)
		lim.size, lim.bodies = int64(len(body)), mem
		got, err := decodeArrow(bytes.NewReader(body), schema.Rollout(), mem, lim)
		if err != nil {
			var ae *arrowError
			if !errors.As(err, &ae) || err.Error() == "" {
				t.Fatalf("failed decode without a located error: %v", err)
			}
			return
		}
		mem.AssertSize(t, 0)
		checkStarts(t, got)
		checkDecoded(t, got)
	})
}

// checkDecoded checks a decoded stream as revalidate checks rows: a row
// that did not validate is named by a RowError the request locates; the
// batch of a stream whose rows all did holds every row and survives its WAL
// encoding unchanged. It returns that batch, or nil.
func checkDecoded(t *testing.T, got *arrowRows) *schema.Batch {
	t.Helper()
	if got.invalid != nil {
		var re *schema.RowError
		if !errors.As(got.invalid, &re) || re.Reason == "" {
			t.Fatalf("a row failed without a RowError saying why: %v", got.invalid)
		}
		e, ok := got.locate(re)
		if !ok || e.Column != re.Column || e.Error == "" || e.Path != innerPath(re) || !strings.Contains(e.Error, e.Path) {
			t.Fatalf("row error %v is not located in the request: %+v, %v", got.invalid, e, ok)
		}
		return nil
	}
	b := got.batch
	if b.Len() != got.n {
		t.Fatalf("a batch of %d rows from a stream of %d", b.Len(), got.n)
	}
	enc := b.Encode(nil)
	back, err := b.Schema.Decode(enc)
	if err != nil || !bytes.Equal(back.Encode(nil), enc) {
		t.Fatalf("a decoded batch of %d rows does not survive its encoding: %v", b.Len(), err)
	}
	return b
}

// rowsOf is b's rows as the Arrow decoder reads them: JSON columns as
// their text in a string, binary as bytes (base64 in JSON), timestamps as
// times, nulls absent.
func rowsOf(b *schema.Batch) []schema.Row {
	rows := make([]schema.Row, b.Len())
	for i := range rows {
		r := schema.Row{schema.IDColumn: b.IDs[i]}
		for c, col := range b.Schema.Columns {
			if v := b.Value(c, i); v != nil {
				r[col.Name] = v
			}
		}
		rows[i] = r
	}
	return rows
}

func checkStarts(t *testing.T, got *arrowRows) {
	t.Helper()
	for b, s := range got.starts {
		if s < 0 || s > got.n || (b > 0 && s < got.starts[b-1]) || (b == 0 && s != 0) {
			t.Fatalf("record batch starts %v do not cover %d rows", got.starts, got.n)
		}
	}
	if got.n > 0 && len(got.starts) == 0 {
		t.Fatalf("%d rows from no record batch", got.n)
	}
}

// arrowSeeds are streams that reach every branch of the decoder: good
// rows, widened and null columns, bad types, a missing id, several batches.
func arrowSeeds(tb testing.TB) [][]byte {
	good := rollouts("a", "b")
	return [][]byte{
		arrowStream(tb, good),
		arrowStream(tb, good, rollouts("c")),
		arrowStream(tb, rollouts()),
		arrowStream(tb, with(good, col{name: "reward", typ: arrow.PrimitiveTypes.Int32, vals: []any{int32(1), nil}})),
		arrowStream(tb, with(good, col{name: "metadata", typ: arrow.Null, vals: []any{nil, nil}})),
		arrowStream(tb, with(good, col{name: "reward", typ: arrow.BinaryTypes.String, vals: []any{"1", "x"}})),
		arrowStream(tb, with(good, col{name: "id", typ: arrow.BinaryTypes.String, vals: []any{"a", nil}})),
		arrowStream(tb, with(good, col{name: "flag", typ: arrow.FixedWidthTypes.Boolean, vals: []any{true, nil}})),
		arrowStream(tb, without(good, "id")),
		truncated(arrowStream(tb, good)),
		[]byte("not arrow"),
	}
}

// FuzzNDJSONLine holds decodeLineFast to decodeLineStrict, which defines
// what a line may be: a line the fast path takes, the strict walk takes,
// as the same row.
func FuzzNDJSONLine(f *testing.F) {
	for _, seed := range []string{
		`{"id":"x","prompt":"a\"b:c","completion":"\u00e9","reward":1.50,"metadata":{"k":[1,{"a":"\\"}]}}`,
		`{"id":"x","id":"y"}`, `{"id":"x","m":{"a":1,"a":1}}`, `{"id":"x","m":[{"a":1},{"a":2}]}`,
		`{"id":"\ud800"}`, "{\"id\":\"\xff\"}", `{"id":"x"}]`, `{"a:b":":","c":{"d:":"\":"}}`, `null`, `{}`,
	} {
		f.Add([]byte(seed))
	}
	sc := schema.Rollout()
	f.Fuzz(func(t *testing.T, line []byte) { checkPathsAgree(t, sc, line) })
}

// checkPathsAgree: a line the fast path or the typed decoder takes, the
// strict walk takes, as the same row.
func checkPathsAgree(t *testing.T, sc *schema.Schema, line []byte) {
	t.Helper()
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return
	}
	fast, ok := decodeLineFast(line, shapeOf(line), sc)
	strict, lerr := decodeLineStrict(line, sc)
	checkTyped(t, sc, line, strict, lerr)
	if !ok {
		return
	}
	if lerr != nil {
		t.Fatalf("the fast path took %q, which the strict walk refuses: %v", line, lerr)
	}
	if !reflect.DeepEqual(fast, strict) {
		t.Fatalf("%q: the fast path decoded %#v, the strict walk %#v", line, fast, strict)
	}
}

// FuzzNDJSONNested is FuzzNDJSONDecode and FuzzNDJSONLine for a table of
// every type: lists and structs decode to values, at any depth nothing is
// rewritten, the two paths agree line by line, and a refused value is
// located by line, column and path.
func FuzzNDJSONNested(f *testing.F) {
	for _, seed := range []string{
		nestedNDJSON("a", "b"), nestedLine("x", "messages", `[{"role":"a","role":"b","content":"c"}]`),
		nestedLine("x", "tokens", `[1,2147483648]`), nestedLine("x", "logprobs", `[1e39]`), nestedLine("x", "meta", `{"step":1,"colour":"red"}`),
		nestedLine("x", "blob", `"aGVsbG8"`), nestedLine("x", "at", `"2024-05-01T12:00:00.123456789Z"`),
		nestedLine("x", "messages", `[{"role":5,"content":"b"}]`), nestedLine("x", "messages", `[{"role":"a","content":null}]`),
		nestedLine("x", "meta", `{"step":1,"note":"\ud800"}`), nestedLine("x", "tokens", `[[1],{"a":[{"b":1,"b":2}]}]`),
		nestedLine("x", "metadata", `{"k":[{"a":1,"a":2}]}`), `{"id":"x","tokens":[],"messages":[{}]}`,
	} {
		f.Add([]byte(seed))
	}
	sc := nestedSchema(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, line := range bytes.Split(body, []byte("\n")) {
			checkPathsAgree(t, sc, line)
		}
		checkBatchAgrees(t, sc, body)
		rows, lines, perr := decodeNDJSON(bytes.NewReader(body), sc, fuzzMaxRows, 1<<20)
		if perr != nil {
			if perr.Error() == "" || rows != nil {
				t.Fatalf("failed decode: message %q, %d rows", perr.Error(), len(rows))
			}
			return
		}
		checkLines(t, lines, len(rows), bytes.Count(body, []byte("\n"))+1)
		checkNotRewritten(t, body, rows)
		revalidate(t, sc, rows, lineLocator(lines))
	})
}

// FuzzArrowNested is FuzzArrowDecode for a table of every type; and rows
// that build, sent again as NDJSON, build the same batch: the two content
// types agree on what a value is.
func FuzzArrowNested(f *testing.F) {
	for _, seed := range nestedArrowSeeds(f) {
		f.Add(seed)
	}
	sc := nestedSchema(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		// A small decode budget keeps each run cheap: under coverage
		// instrumentation a stream that claims 64 MiB of values takes
		// seconds, and the fuzzer stalls minimizing it.
		lim := limits(1<<20, fuzzMaxRows)
		lim.decoded = 1 << 20
		lim.size, lim.bodies = int64(len(body)), mem // bodies from mem; the cells' decode reads them unpooled
		got, err := decodeArrow(bytes.NewReader(body), sc, mem, lim)
		if err != nil {
			checkAsCells(t, body, sc, lim, nil, err)
			var ae *arrowError
			if !errors.As(err, &ae) || err.Error() == "" {
				t.Fatalf("failed decode without a located error: %v", err)
			}
			return
		}
		mem.AssertSize(t, 0)
		checkStarts(t, got)
		checkAsCells(t, body, sc, lim, got, nil)
		b := checkDecoded(t, got)
		if b == nil {
			return
		}
		text, ok := asNDJSON(rowsOf(b))
		if !ok {
			return
		}
		rows, _, perr := decodeNDJSON(bytes.NewReader(text), sc, fuzzMaxRows, 1<<30)
		if perr != nil {
			t.Fatalf("the rows of a good stream, as NDJSON, do not decode: %v\n%s", perr, text)
		}
		again, err := sc.Build(rows)
		if err != nil || !bytes.Equal(again.Encode(nil), b.Encode(nil)) {
			t.Fatalf("the rows of a good stream, as NDJSON, build another batch (%v):\n%s", err, text)
		}
	})
}

// checkAsCells decodes body again cell by cell and fails unless that
// answers as the columnar decode did (got, err).
func checkAsCells(t *testing.T, body []byte, sc *schema.Schema, lim arrowLimits, got *arrowRows, err error) {
	t.Helper()
	lim.cells, lim.size, lim.bodies = true, 0, nil
	byCell, errCell := decodeArrow(bytes.NewReader(body), sc, memory.DefaultAllocator, lim)
	sameRows(t, "fuzzed stream", got, byCell, err, errCell)
}

// asNDJSON writes rows as NDJSON lines; false for one that JSON cannot
// say (a timestamp beyond year 9999).
func asNDJSON(rows []schema.Row) ([]byte, bool) {
	var buf bytes.Buffer
	for _, r := range rows {
		line, err := json.Marshal(r)
		if err != nil {
			return nil, false
		}
		buf.Write(line)
		buf.WriteByte('\n')
	}
	return buf.Bytes(), true
}

// nestedArrowSeeds are streams of nestedSchema's columns, good and bad.
func nestedArrowSeeds(tb testing.TB) [][]byte {
	good := nestedArrow(0, "a", "b")
	return [][]byte{
		arrowStream(tb, good),
		arrowStream(tb, nestedArrow(1, "a", "b"), nestedArrow(1, "c", "d")),
		arrowStream(tb, with(good, col{name: "tokens", typ: arrow.ListOf(arrow.PrimitiveTypes.Int16), vals: []any{[]any{int16(1), nil}, nil}})),
		arrowStream(tb, with(good, col{name: "meta", typ: structOf(field("colour", arrow.BinaryTypes.String)), vals: []any{nil, nil}})),
		arrowStream(tb, with(good, col{name: "at", typ: &arrow.TimestampType{Unit: arrow.Nanosecond}, vals: []any{int64(1), nil}})),
		arrowStream(tb, with(good, col{name: "n", typ: arrow.PrimitiveTypes.Int64, vals: []any{int64(1), nil}})),
		claimStream(tb, 2, nullStructLists(2, 3)),
		claimStream(tb, 3, aliasedTokens(3, 5)),
		truncated(arrowStream(tb, good)),
	}
}
