package server

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/rollwal/rollwal/schema"
)

// typedSchema has a column of every primitive type, some not nullable,
// and a nullable list, which the typed decoder takes only when null.
func typedSchema(t testing.TB) *schema.Schema {
	return schemaOf(t, []colSpec{
		{"s", "string", false}, {"i", "int64", true}, {"f", "float64", true}, {"ok", "bool", true},
		{"j", "json", true}, {"n", "int32", false}, {"g", "float32", true}, {"blob", "binary", true},
		{"at", "timestamp", true}, {"tags", "list<string>", true},
	})
}

// typedGood is a row of typedSchema the typed decoder takes.
const typedGood = `{"id":"a","s":"x","i":-9223372036854775808,"f":1.5e300,"ok":true,"j":{"k": [1, "\u00e9"]},"n":-2147483648,` +
	`"g":3.4028235e38,"blob":"aGVsbG8=","at":"2024-05-01T12:00:00.123456+02:00","tags":null}`

// typedLines are lines of typedSchema, with whether the typed decoder
// takes them: the values it converts and the edges where it leaves a line
// to the generic decode.
var typedLines = []struct {
	line  string
	typed bool
}{
	{typedGood, true},
	{`{"id":"b","s":"","n":0}`, true},
	{` {"s":"p\"q\\r\/\u00e9\ud83d\ude00\n","id":"\u0062","n":1,"j":"{\"a\":[1,2]}","f":-0,"g":1e-50,"ok":false} `, true},
	{`{"id":"c","s":"x","n":1,"i":null,"f":null,"ok":null,"j":null,"g":null,"blob":null,"at":null}`, true},
	{`{"id":"d","s":"x","n":1,"blob":"aGVs\nbG8=","j":"\"text\""}`, true},
	{`{"id":"e","s":"x","n":2147483647,"j":[]}`, true},
	{`{"id":"f","s":"x","n":2147483648}`, false},
	{`{"id":"f","s":"x","n":-2147483649}`, false},
	{`{"id":"f","s":"x","n":1,"i":9223372036854775808}`, false},
	{`{"id":"f","s":"x","n":1.0}`, false},
	{`{"id":"f","s":"x","n":1e2}`, false},
	{`{"id":"f","s":"x","n":1,"g":3.4028236e38}`, false},
	{`{"id":"f","s":"x","n":1,"f":1e309}`, false},
	{`{"id":"f","s":"x","n":1,"ok":1}`, false},
	{`{"id":"f","s":null,"n":1}`, false},
	{`{"id":"f","n":1}`, false},
	{`{"id":"f","s":"x","n":null}`, false},
	{`{"id":"f","s":1,"n":1}`, false},
	{`{"id":"f","s":{},"n":1}`, false},
	{`{"id":"f","s":"x","n":1,"j":1.5}`, false},
	{`{"id":"f","s":"x","n":1,"j":true}`, false},
	{`{"id":"f","s":"x","n":1,"j":"{bad"}`, false},
	{`{"id":"f","s":"x","n":1,"blob":"aGVsbG8"}`, false},
	{`{"id":"f","s":"x","n":1,"at":"2024-05-01T12:00:00.123456789Z"}`, false},
	{`{"id":"f","s":"x","n":1,"at":"yesterday"}`, false},
	{`{"id":"f","s":"x","n":1,"tags":[]}`, false},
	{`{"id":"f","s":"x","n":1,"colour":"red"}`, false},
	{`{"s":"x","n":1}`, false},
	{`{"id":"","s":"x","n":1}`, false},
	{`{"id":null,"s":"x","n":1}`, false},
	{`{"id":1,"s":"x","n":1}`, false},
	{`{"id":"` + strings.Repeat("i", schema.MaxIDBytes+1) + `","s":"x","n":1}`, false},
	{`{"id":"f","s":"x","n":1,"s":"y"}`, false},
	{`{"id":"f","s":"x","n":1,"\u0073":"y"}`, false},
	{`{"id":"f","id":"g","s":"x","n":1}`, false},
	{`{"id":"f","s":"x","n":1,"j":{"a":1,"\u0061":2}}`, false},
	{`{"id":"f","s":"x","n":1,"j":[{"a":1,"a":2}]}`, false},
	{`{"id":"f","s":"\ud800","n":1}`, false},
	{`{"id":"f","s":"\udc00\ud800","n":1}`, false},
	{"{\"id\":\"f\",\"s\":\"\xff\",\"n\":1}", false},
	{"{\"id\":\"f\",\"s\":\"x\",\"n\":1,\"j\":{\"\xed\xa0\x80\":1}}", false},
	{`{"id":"f","s":"x","n":1}]`, false},
	{`{"id":"f","s":"x","n":1}{"id":"g"}`, false},
	{`{"id":"f","s":"x","n":1,}`, false},
	{`{"id":"f","s":"x","n":1`, false},
	{`["id"]`, false},
	{`{"id":"f","s":"x","n":1,"j":` + strings.Repeat("[", 9998) + strings.Repeat("]", 9998) + `}`, true},
	{`{"id":"f","s":"x","n":1,"j":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}`, true},
	{`{"id":"f","s":"x","n":1,"j":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`, false},
}

// TestNDJSONTypedAgrees: the typed decoder takes the lines it should, as
// the strict walk and schema.Build take them, and a body of them decodes
// to the batch (or the refusal) of decodeNDJSON and Build.
func TestNDJSONTypedAgrees(t *testing.T) {
	sc := typedSchema(t)
	var body strings.Builder
	for _, tc := range typedLines {
		line := []byte(strings.TrimSpace(tc.line))
		if _, typed := newTypedDecoder(sc).decode(line, sc.NewBatch(1)); typed != tc.typed {
			t.Errorf("%.100s: the typed decoder took it: %v, want %v", tc.line, typed, tc.typed)
		}
		checkPathsAgree(t, sc, line)
		checkBatchAgrees(t, sc, line)
		if tc.typed {
			body.WriteString(tc.line + "\n")
		}
	}
	checkBatchAgrees(t, sc, []byte(body.String()))
	checkBatchAgrees(t, sc, []byte(typedGood+"\n"+typedLines[6].line+"\n"+typedGood+"\n"))
	checkBatchAgrees(t, sc, []byte(typedGood+"\n"+typedLines[6].line+"\n"+typedGood+"x\n"))
}

// FuzzNDJSONTyped is FuzzNDJSONLine and the agreement of whole bodies for a
// table of every primitive type, which the typed decoder takes.
func FuzzNDJSONTyped(f *testing.F) {
	for _, tc := range typedLines {
		if len(tc.line) < 1000 {
			f.Add([]byte(tc.line))
		}
	}
	f.Add([]byte(typedGood + "\n" + typedLines[6].line + "\n" + typedGood + "\n"))
	sc := typedSchema(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, line := range bytes.Split(body, []byte("\n")) {
			checkPathsAgree(t, sc, line)
		}
		checkBatchAgrees(t, sc, body)
	})
}

// checkTyped: a line the typed decoder takes, the strict walk takes, and
// Build makes the same row of it, whose size is the same; a line it does
// not take leaves the batch as it was.
func checkTyped(t *testing.T, sc *schema.Schema, line []byte, strict schema.Row, lerr *lineError) {
	t.Helper()
	b := sc.NewBatch(1)
	n, ok := newTypedDecoder(sc).decode(line, b)
	if !ok {
		if b.Len() != 0 {
			t.Fatalf("%q: the typed decoder left %d rows in the batch", line, b.Len())
		}
		return
	}
	if lerr != nil {
		t.Fatalf("the typed decoder took %q, which the strict walk refuses: %v", line, lerr)
	}
	want, err := sc.Build([]schema.Row{strict})
	if err != nil {
		t.Fatalf("the typed decoder took %q, which Build refuses: %v", line, err)
	}
	for c := range b.Cols {
		if err := b.Cols[c].Check(sc.Columns[c], b.Len()); err != nil {
			t.Fatalf("%q: the typed decoder made a bad vector: %v", line, err)
		}
	}
	if !bytes.Equal(b.Encode(nil), want.Encode(nil)) {
		t.Fatalf("%q: the typed decoder made another row than Build", line)
	}
	if size := rowSize(strict); n != size {
		t.Fatalf("%q: the typed decoder counted %d bytes, the strict walk %d", line, n, size)
	}
}

// checkBatchAgrees: decodeNDJSONBatch answers a body as decodeNDJSON and
// schema.Build do: the same refusal, the same row error or the same batch.
func checkBatchAgrees(t *testing.T, sc *schema.Schema, body []byte) {
	t.Helper()
	got, perr := decodeNDJSONBatch(bytes.NewReader(body), sc, fuzzMaxRows, 1<<20)
	rows, lines, want := decodeNDJSON(bytes.NewReader(body), sc, fuzzMaxRows, 1<<20)
	if (perr == nil) != (want == nil) || (perr != nil && !reflect.DeepEqual(perr.api(), want.api())) {
		t.Fatalf("%.200q: decoded to a batch, refused with %v; to rows, with %v", body, perr, want)
	}
	if perr != nil {
		return
	}
	if !slices.Equal(got.lines, lines) {
		t.Fatalf("%.200q: lines %v in a batch, %v as rows", body, got.lines, lines)
	}
	b, err := sc.Build(rows)
	if err != nil || got.invalid != nil {
		if !sameRowError(got.invalid, err) {
			t.Fatalf("%.200q: decoded to a batch, refused with %v; as rows built, with %v", body, got.invalid, err)
		}
		return
	}
	if !bytes.Equal(got.batch.Encode(nil), b.Encode(nil)) {
		t.Fatalf("%.200q: decoded to another batch than the rows build", body)
	}
}

// sameRowError compares row errors; of a row with several unknown
// columns, Build names any one.
func sameRowError(a, b error) bool {
	var ra, rb *schema.RowError
	if !errors.As(a, &ra) || !errors.As(b, &rb) {
		return false
	}
	if ra.Reason == "unknown column" && rb.Reason == "unknown column" {
		return ra.Row == rb.Row && ra.ID == rb.ID
	}
	return *ra == *rb
}

// FuzzUnescape holds appendUnescaped to jsontext.AppendUnquote for the
// strings jsontext reads.
func FuzzUnescape(f *testing.F) {
	for _, seed := range []string{`""`, `"abc"`, `"a\"b\\c\/d\b\f\n\r\t"`, `"\u00e9\u0000\uD83D\uDE00x"`, `"\ud800"`, `"é\u2028"`, "\"\xff\""} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, s []byte) {
		// As ReadValue returns it: without the spaces around.
		if v := jsontext.Value(s); !v.IsValid() || s[0] != '"' || s[len(s)-1] != '"' {
			return
		}
		want, err := jsontext.AppendUnquote(nil, s)
		if got := appendUnescaped(nil, s); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%q: unescaped %q, jsontext %q (%v)", s, got, want, err)
		}
	})
}

// TestNDJSONRefusalOrder: a row that does not build is answered after
// what refuses the whole body, as when the engine built the rows: a later
// line that is not JSON, a seq the rows overflow, more rows than the
// engine's MaxBatchRows; and then by its line and column.
func TestNDJSONRefusalOrder(t *testing.T) {
	f := newFixture(t, 0)
	f.srv.SetReady(true)
	bad := `{"id":"bad","prompt":"p","completion":"c","reward":"x"}` + "\n"
	many := make([]string, 1000) // with bad, one more than MaxBatchRows
	for i := range many {
		many[i] = fmt.Sprint("r", i)
	}
	for _, tc := range []struct {
		name, path, body string
		code             int
		want             string
	}{
		{"a later line that is not JSON", "/v1/shards/s0/rows", ndjson("a") + bad + "{\"id\":\n", http.StatusBadRequest, "line 3: "},
		{"a seq the rows overflow", rowsPath(session("p", math.MaxUint64-1)), ndjson("a") + bad + ndjson("b"), http.StatusBadRequest, "overflow"},
		{"more rows than MaxBatchRows", "/v1/shards/s0/rows", bad + ndjson(many...), http.StatusRequestEntityTooLarge, "1001 rows, the limit is 1000"},
		{"the row itself", "/v1/shards/s0/rows", ndjson("a") + bad + ndjson("b"), http.StatusBadRequest, `line 2, column "reward": want float64, got string`},
	} {
		code, b := f.post(t, tc.path, tc.body)
		if code != tc.code || !strings.Contains(decode[apiError](t, b).Error, tc.want) {
			t.Errorf("%s: answered %d %s, want %d naming %q", tc.name, code, b, tc.code, tc.want)
		}
	}
	if rows, _ := f.held(t); rows != 0 {
		t.Errorf("the shard holds %d rows, want none", rows)
	}
}
