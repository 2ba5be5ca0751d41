package schema

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// everyType is a schema with every type and nesting, nullable and not.
func everyType(t testing.TB) *Schema {
	t.Helper()
	cols := []Column{
		{Name: "i32", Type: Int32}, {Name: "f32", Type: Float32, Nullable: true},
		{Name: "bin", Type: Binary, Nullable: true}, {Name: "ts", Type: Timestamp},
		{Name: "s", Type: String, Nullable: true}, {Name: "j", Type: JSON, Nullable: true},
	}
	for _, typ := range []string{
		"list<int32>", "list<float32?>", "list<string>", "list<binary>", "list<timestamp>", "list<bool?>",
		"struct<role: string, content: string?>",
		"list<struct<role: string, content: string, score: float64?>>",
	} {
		c, err := ParseColumnType(typ)
		if err != nil {
			t.Fatal(err)
		}
		c.Name = strings.NewReplacer("<", "_", ">", "", "?", "n", ",", "", " ", "", ":", "").Replace(typ)
		c.Name = c.Name[:min(len(c.Name), 40)]
		c.Nullable = len(cols)%2 == 0
		cols = append(cols, c)
	}
	return mustNew(t, cols)
}

// randomValue returns a value for col as a producer would send it in
// NDJSON (nil for null, where allowed).
func randomValue(rng *rand.Rand, col *Column) any {
	if col.Nullable && rng.IntN(4) == 0 {
		return nil
	}
	switch col.Type {
	case Int32:
		return json.Number(strings.TrimSpace(strings.Repeat(" ", 1) + itoa(int64(int32(rng.Uint32())))))
	case Float32:
		return float32(rng.NormFloat64())
	case Binary:
		b := make([]byte, rng.IntN(8))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	case Timestamp:
		return time.UnixMicro(rng.Int64N(1 << 50)).UTC().Format(time.RFC3339Nano)
	case String:
		return strings.Repeat("é", rng.IntN(5))
	case JSON:
		return `{"k":[1,2]}`
	case Float64:
		return rng.Float64()
	case Bool:
		return rng.IntN(2) == 0
	case Int64:
		return int64(rng.Uint64())
	case List:
		out := make([]any, rng.IntN(6))
		for i := range out {
			out[i] = randomValue(rng, col.Element)
		}
		return out
	case Struct:
		out := map[string]any{}
		for f := range col.Fields {
			if v := randomValue(rng, &col.Fields[f]); v != nil || rng.IntN(2) == 0 {
				out[col.Fields[f].Name] = v
			}
		}
		return out
	}
	panic(col.Type)
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

func randomRows(rng *rand.Rand, s *Schema, n int) []Row {
	rows := make([]Row, n)
	for k := range rows {
		rows[k] = Row{"id": "r" + itoa(int64(k))}
		for c := range s.Columns {
			if v := randomValue(rng, &s.Columns[c]); v != nil {
				rows[k][s.Columns[c].Name] = v
			}
		}
	}
	return rows
}

// TestNestedEncodeRoundTrip: random batches of every type survive the WAL
// encoding, AppendRow, and Check.
func TestNestedEncodeRoundTrip(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	s := everyType(t)
	for range 200 {
		rows := randomRows(rng, s, rng.IntN(12))
		b, err := s.Build(rows)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.Decode(b.Encode(nil))
		if err != nil {
			t.Fatal(err)
		}
		copied := s.NewBatch(0)
		for i := range rows {
			copied.AppendRow(b, i)
		}
		for c, col := range s.Columns {
			for _, bb := range []*Batch{b, got, copied} {
				if err := bb.Cols[c].Check(col, len(rows)); err != nil {
					t.Fatal(err)
				}
			}
			for i := range rows {
				want := b.Value(c, i)
				if !reflect.DeepEqual(got.Value(c, i), want) || !reflect.DeepEqual(copied.Value(c, i), want) {
					t.Fatalf("row %d column %s: decoded %#v, copied %#v, built %#v", i, col.Name, got.Value(c, i), copied.Value(c, i), want)
				}
			}
		}
		enc := b.Encode(nil)
		for _, cut := range []int{len(enc) - 1, len(enc) / 2} {
			if cut >= 0 && cut < len(enc) {
				if _, err := s.Decode(enc[:cut]); !errors.Is(err, ErrBadEncoding) {
					t.Fatalf("truncated at %d of %d: %v", cut, len(enc), err)
				}
			}
		}
	}
}

// TestNestedValues: what Build stores is what was sent, in the column's
// type.
func TestNestedValues(t *testing.T) {
	s := mustNew(t, []Column{
		mustColumn(t, "tokens", "list<int32>", false),
		mustColumn(t, "logprobs", "list<float32?>", true),
		mustColumn(t, "messages", "list<struct<role: string, content: string?>>", false),
		mustColumn(t, "judge", "struct<name: string, score: float64?>", true),
		{Name: "image", Type: Binary, Nullable: true},
		{Name: "at", Type: Timestamp},
	})
	b, err := s.Build([]Row{{
		"id": "a", "tokens": []any{json.Number("1"), json.Number("-2147483648")},
		"logprobs": []any{json.Number("-0.5"), nil},
		"messages": []any{map[string]any{"role": "user", "content": "hi"}, map[string]any{"role": "assistant"}},
		"image":    "aGVsbG8=", "at": "2026-12-01T17:00:00.123456+01:00",
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := []any{
		[]any{int32(1), int32(-2147483648)},
		[]any{float32(-0.5), nil},
		[]any{map[string]any{"role": "user", "content": "hi"}, map[string]any{"role": "assistant", "content": nil}},
		nil,
		[]byte("hello"),
		time.Date(2026, 12, 1, 16, 0, 0, 123456000, time.UTC),
	}
	for c := range s.Columns {
		if got := b.Value(c, 0); !reflect.DeepEqual(got, want[c]) {
			t.Errorf("column %s: got %#v, want %#v", s.Columns[c].Name, got, want[c])
		}
	}
}

func mustColumn(t *testing.T, name, typ string, nullable bool) Column {
	t.Helper()
	c, err := ParseColumnType(typ)
	if err != nil {
		t.Fatal(err)
	}
	c.Name, c.Nullable = name, nullable
	return c
}

// TestNestedRefusals: every bad value is refused naming its row, column
// and path.
func TestNestedRefusals(t *testing.T) {
	s := mustNew(t, []Column{
		mustColumn(t, "tokens", "list<int32>", false),
		mustColumn(t, "messages", "list<struct<role: string, content: string?>>", true),
		mustColumn(t, "judge", "struct<score: float32>", true),
		{Name: "image", Type: Binary, Nullable: true},
		{Name: "at", Type: Timestamp, Nullable: true},
	})
	msg := func(role any) []any {
		return []any{map[string]any{"role": "u"}, map[string]any{"role": "u"}, map[string]any{"role": "u"}, map[string]any{"role": role}}
	}
	cases := []struct {
		name, column, path, reason string
		row                        Row
	}{
		{"deep wrong type", "messages", "messages[3].role", "want string, got number", Row{"messages": msg(json.Number("7"))}},
		{"null in required field", "messages", "messages[3].role", "non-nullable", Row{"messages": msg(nil)}},
		{"unknown field", "messages", "messages[0].rol", "unknown field", Row{"messages": []any{map[string]any{"role": "u", "rol": "x"}}}},
		{"element not an object", "messages", "messages[0]", "want an object, got string", Row{"messages": []any{"x"}}},
		{"not a list", "tokens", "tokens", "want a list, got object", Row{"tokens": map[string]any{}}},
		{"null element", "tokens", "tokens[1]", "non-nullable", Row{"tokens": []any{json.Number("1"), nil}}},
		{"int32 out of range", "tokens", "tokens[0]", "out of range", Row{"tokens": []any{json.Number("2147483648")}}},
		{"fraction in int32", "tokens", "tokens[0]", "want int32", Row{"tokens": []any{json.Number("1.5")}}},
		{"overlong list", "tokens", "tokens", "longer than the limit", Row{"tokens": make([]int32, MaxListElements+1)}},
		{"float32 overflow", "judge", "judge.score", "finite float32", Row{"judge": map[string]any{"score": json.Number("1e39")}}},
		{"bad base64", "image", "", "base64", Row{"image": "not base64!"}},
		{"timestamp with nanoseconds", "at", "", "finer than a microsecond", Row{"at": "2026-01-01T00:00:00.000000001Z"}},
		{"timestamp without zone", "at", "", "RFC 3339", Row{"at": "2026-01-01T00:00:00"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			good := Row{"id": "a", "tokens": []any{}}
			bad := Row{"id": "b", "tokens": []any{}}
			for k, v := range tc.row {
				bad[k] = v
			}
			_, err := s.Build([]Row{good, bad})
			var re *RowError
			if !errors.As(err, &re) {
				t.Fatalf("want a *RowError, got %v", err)
			}
			if re.Row != 1 || re.Column != tc.column || re.Path != tc.path || !strings.Contains(re.Reason, tc.reason) {
				t.Fatalf("got row %d column %q path %q reason %q; want row 1 column %q path %q reason with %q",
					re.Row, re.Column, re.Path, re.Reason, tc.column, tc.path, tc.reason)
			}
			if tc.path != "" && !strings.Contains(err.Error(), tc.path) {
				t.Fatalf("message %q does not name %s", err, tc.path)
			}
		})
	}
}

// TestColumnForms: the short and the long form of a type read the same,
// print back as written, and bad ones are refused naming what is wrong.
func TestColumnForms(t *testing.T) {
	short := `
- {name: tokens, type: "list<int32>", doc: prompt token ids}
- {name: messages, type: "list<struct<role: string, content: string?>>", nullable: true}
- {name: at, type: timestamp}
`
	long := `
- {name: tokens, type: list, element: {type: int32}, doc: prompt token ids}
- name: messages
  type: list
  nullable: true
  element:
    type: struct
    fields: [{name: role, type: string}, {name: content, type: string, nullable: true}]
- {name: at, type: timestamp}
`
	var a, b []Column
	if err := yaml.Unmarshal([]byte(short), &a); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(long), &b); err != nil {
		t.Fatal(err)
	}
	sa, sb := mustNew(t, a), mustNew(t, b)
	if sa.Fingerprint() != sb.Fingerprint() {
		t.Fatalf("forms differ: %+v vs %+v", a, b)
	}
	if got := a[1].TypeString(); got != "list<struct<role: string, content: string?>>" {
		t.Fatalf("TypeString = %q", got)
	}
	out, err := yaml.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	var again []Column
	if err := yaml.Unmarshal(out, &again); err != nil || mustNew(t, again).Fingerprint() != sa.Fingerprint() {
		t.Fatalf("printed form %s does not read back: %v", out, err)
	}
	js, _ := json.Marshal(a)
	var fromJSON []Column
	if err := json.Unmarshal(js, &fromJSON); err != nil || !reflect.DeepEqual(fromJSON, a) {
		t.Fatalf("JSON form %s does not read back: %v %+v", js, err, fromJSON)
	}
	for typ, want := range map[string]string{
		"list<":                       "want a type name",
		"list<int32":                  `want '>'`,
		"lst<int32>":                  "unknown type",
		"list<list<int32>>":           "not supported",
		"struct<a: struct<b: int32>>": "not supported",
		"struct<>":                    "want a field name",
		"list<int32> x":               "unexpected",
		"struct<a int32>":             `want ':'`,
	} {
		var cols []Column
		err := yaml.Unmarshal([]byte(`[{name: c, type: "`+typ+`"}]`), &cols)
		if err == nil {
			_, err = New(cols)
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("type %q: got %v, want an error with %q", typ, err, want)
		}
	}
}

// TestFingerprintsKept: the fingerprints of schemas of the first five
// types are what files written before nesting carry.
func TestFingerprintsKept(t *testing.T) {
	if got := Rollout().Fingerprint(); got != "70a2f7b3b50819a7" {
		t.Fatalf("Rollout fingerprint %s changed", got)
	}
}

// FuzzNestedDecode: a payload decodes under the every-type schema into a
// batch that passes Check and re-encodes to itself, or is refused.
func FuzzNestedDecode(f *testing.F) {
	s := everyType(f)
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 4 {
		b, err := s.Build(randomRows(rng, s, n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b.Encode(nil))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := s.Decode(data)
		if err != nil {
			if !errors.Is(err, ErrBadEncoding) {
				t.Fatalf("refused without ErrBadEncoding: %v", err)
			}
			return
		}
		for c, col := range s.Columns {
			if err := got.Cols[c].Check(col, got.Len()); err != nil {
				t.Fatalf("decoded a batch that fails Check: %v", err)
			}
		}
		if enc := got.Encode(nil); string(enc) != string(data) {
			again, err := s.Decode(enc)
			if err != nil || string(again.Encode(nil)) != string(enc) {
				t.Fatalf("re-encoding is not stable: %v", err)
			}
		}
	})
}
