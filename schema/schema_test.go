package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

func TestBuildRejectsBadRows(t *testing.T) {
	s := Rollout()
	good := func() Row {
		return Row{"id": "a", "prompt": "p", "completion": "c", "reward": 1.5, "metadata": `{"k":1}`}
	}
	cases := []struct {
		name   string
		edit   func(Row)
		column string
		reason string
	}{
		{"missing id", func(r Row) { delete(r, "id") }, "id", "missing id"},
		{"empty id", func(r Row) { r["id"] = "" }, "id", "empty id"},
		{"numeric id", func(r Row) { r["id"] = 7.0 }, "id", "must be a string"},
		{"oversize id", func(r Row) { r["id"] = strings.Repeat("x", MaxIDBytes+1) }, "id", "more than the limit"},
		{"invalid utf8 id", func(r Row) { r["id"] = "a\xffb" }, "id", "UTF-8"},
		{"unknown column", func(r Row) { r["rewrd"] = 1.0 }, "rewrd", "unknown column"},
		{"missing required", func(r Row) { delete(r, "prompt") }, "prompt", "non-nullable"},
		{"wrong type", func(r Row) { r["reward"] = "high" }, "reward", "want float64, got string"},
		{"nan", func(r Row) { r["reward"] = nanValue() }, "reward", "finite"},
		{"bad json", func(r Row) { r["metadata"] = "{nope" }, "metadata", "not valid JSON"},
		{"string gets number", func(r Row) { r["completion"] = 3.0 }, "completion", "want string, got number"},
		{"oversize string", func(r Row) { r["completion"] = strings.Repeat("x", MaxValueBytes+1) }, "completion", "limit of 33554432 bytes"},
		{"oversize json text", func(r Row) { r["metadata"] = `"` + strings.Repeat("x", MaxValueBytes-1) + `"` }, "metadata", "json text of 33554433 bytes"},
		{"oversize json value", func(r Row) { r["metadata"] = map[string]any{"k": strings.Repeat("x", MaxValueBytes)} }, "metadata", "longer than the limit"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ok := good()
			bad := good()
			bad["id"] = "b"
			tc.edit(bad)
			_, err := s.Build([]Row{ok, bad})
			var re *RowError
			if !errors.As(err, &re) || !errors.Is(err, ErrInvalidRow) {
				t.Fatalf("want *RowError, got %v", err)
			}
			if re.Row != 1 || re.Column != tc.column || !strings.Contains(re.Reason, tc.reason) {
				t.Fatalf("got row %d column %q reason %q; want row 1 column %q reason containing %q",
					re.Row, re.Column, re.Reason, tc.column, tc.reason)
			}
		})
	}
}

// A value of exactly MaxValueBytes is accepted.
func TestBuildAcceptsMaxValue(t *testing.T) {
	s := Rollout()
	big := strings.Repeat("x", MaxValueBytes)
	b, err := s.Build([]Row{{"id": "a", "prompt": big, "completion": "c", "metadata": `"` + big[2:] + `"`}})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(b.Value(0, 0).(string)) + len(b.Value(3, 0).(string)); n != 2*MaxValueBytes {
		t.Fatalf("values of %d bytes, want %d", n, 2*MaxValueBytes)
	}
}

func nanValue() float64 {
	var zero float64
	return zero / zero
}

func TestBuildAcceptsJSONShapes(t *testing.T) {
	s := Rollout()
	rows := []Row{
		{"id": "a", "prompt": "p", "completion": "c", "metadata": map[string]any{"k": []any{1.0, "x"}}},
		{"id": "b", "prompt": "p", "completion": "c", "reward": json.Number("2"), "metadata": nil},
		{"id": "c", "prompt": "p", "completion": "c", "reward": 3, "metadata": []byte(`[1,2]`)},
	}
	b, err := s.Build(rows)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Value(3, 0); got != `{"k":[1,"x"]}` {
		t.Fatalf("metadata = %v", got)
	}
	if b.Value(2, 0) != nil || b.Value(2, 1) != 2.0 || b.Value(2, 2) != 3.0 {
		t.Fatalf("reward column = %v %v %v", b.Value(2, 0), b.Value(2, 1), b.Value(2, 2))
	}
}

func TestSchemaValidation(t *testing.T) {
	for _, cols := range [][]Column{
		nil,
		{{Name: "id", Type: String}},
		{{Name: "_x", Type: String}},
		{{Name: "a", Type: String}, {Name: "a", Type: Int64}},
		{{Name: "a", Type: Type(12)}},
		{{Name: "a", Type: List}},
		{{Name: "a", Type: Struct}},
		{{Name: "a", Type: List, Element: &Column{Type: List, Element: &Column{Type: Int32}}}},
		{{Name: "a", Type: Struct, Fields: []Column{{Name: "b", Type: Struct, Fields: []Column{{Name: "c", Type: Int32}}}}}},
		{{Name: "a", Type: Struct, Fields: []Column{{Name: "b", Type: List, Element: &Column{Type: Int32}}}}},
		{{Name: "a", Type: Struct, Fields: []Column{{Name: "b", Type: Int32}, {Name: "b", Type: Int64}}}},
		{{Name: "a", Type: Int32, Element: &Column{Type: Int32}}},
	} {
		if _, err := New(cols); err == nil {
			t.Errorf("New(%v) accepted an invalid schema", cols)
		}
	}
	if Rollout().Fingerprint() == mustNew(t, []Column{{Name: "prompt", Type: String}}).Fingerprint() {
		t.Fatal("different schemas share a fingerprint")
	}
}

func mustNew(t testing.TB, cols []Column) *Schema {
	s, err := New(cols)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestEncodeRoundTrip encodes random batches of every type and decodes them.
func TestEncodeRoundTrip(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	s := mustNew(t, []Column{
		{Name: "s", Type: String, Nullable: true}, {Name: "i", Type: Int64},
		{Name: "f", Type: Float64, Nullable: true}, {Name: "b", Type: Bool, Nullable: true},
		{Name: "j", Type: JSON},
	})
	for iter := 0; iter < 200; iter++ {
		rows := make([]Row, rng.IntN(20))
		for k := range rows {
			rows[k] = Row{"id": string(rune('a'+k)) + "x", "i": int64(rng.Uint64()), "j": "[1]"}
			if rng.IntN(2) == 0 {
				rows[k]["s"] = strings.Repeat("z", rng.IntN(40))
			}
			if rng.IntN(2) == 0 {
				rows[k]["f"] = rng.Float64()
			}
			if rng.IntN(3) > 0 {
				rows[k]["b"] = rng.IntN(2) == 0
			}
		}
		b, err := s.Build(rows)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.Decode(b.Encode(nil))
		if err != nil {
			t.Fatal(err)
		}
		for c := range s.Columns {
			for i := range rows {
				if !reflect.DeepEqual(got.Value(c, i), b.Value(c, i)) {
					t.Fatalf("row %d col %d: got %v want %v", i, c, got.Value(c, i), b.Value(c, i))
				}
			}
		}
	}
}

func TestDecodeRefusesDamage(t *testing.T) {
	s := Rollout()
	b, err := s.Build([]Row{{"id": "a", "prompt": "p", "completion": "c", "reward": 1.0}})
	if err != nil {
		t.Fatal(err)
	}
	enc := b.Encode(nil)
	for cut := 0; cut < len(enc); cut++ {
		if _, err := s.Decode(enc[:cut]); !errors.Is(err, ErrBadEncoding) {
			t.Fatalf("truncated at %d: got %v", cut, err)
		}
	}
	if _, err := s.Decode(append(enc, 0)); !errors.Is(err, ErrBadEncoding) {
		t.Fatalf("trailing byte accepted: %v", err)
	}
	other := mustNew(t, []Column{{Name: "x", Type: Int64}})
	if _, err := other.Decode(enc); !errors.Is(err, ErrBadEncoding) {
		t.Fatalf("decoded under another schema: %v", err)
	}
}

func FuzzBatchDecode(f *testing.F) {
	s := Rollout()
	b, _ := s.Build([]Row{{"id": "a", "prompt": "p", "completion": "c", "reward": 1.0, "metadata": "{}"}})
	f.Add(b.Encode(nil))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := s.Decode(data)
		if err != nil {
			return
		}
		// Whatever decodes survives a re-encoding unchanged.
		enc := got.Encode(nil)
		again, err := s.Decode(enc)
		if err != nil {
			t.Fatalf("re-encoding does not decode: %v", err)
		}
		if string(again.Encode(nil)) != string(enc) {
			t.Fatalf("re-encoding changed the batch")
		}
	})
}

// TestDecodeCopiesDecodeBorrowedDoesNot: Decode's strings are its own (the
// payload may be overwritten after, as the WAL reuses its read buffer);
// DecodeBorrowed's point into the payload and change with it. Both decode
// the same values.
func TestDecodeCopiesDecodeBorrowedDoesNot(t *testing.T) {
	s := mustNew(t, []Column{{Name: "s", Type: String, Nullable: true}, {Name: "j", Type: JSON}, {Name: "n", Type: Int64}})
	rows := []Row{{"id": "r1", "s": "alpha", "j": `{"k":1}`, "n": int64(1)}, {"id": "r2", "j": "[]", "n": int64(2)},
		{"id": "r3", "s": "", "j": `"x"`, "n": int64(3)}}
	b, err := s.Build(rows)
	if err != nil {
		t.Fatal(err)
	}
	payload := b.Encode(nil)
	owned, err := s.Decode(payload)
	if err != nil {
		t.Fatal(err)
	}
	borrowed, err := s.DecodeBorrowed(payload)
	if err != nil {
		t.Fatal(err)
	}
	for c := range s.Columns {
		for i := range rows {
			if want := b.Value(c, i); !reflect.DeepEqual(owned.Value(c, i), want) || !reflect.DeepEqual(borrowed.Value(c, i), want) {
				t.Fatalf("row %d col %d: Decode %v, DecodeBorrowed %v, want %v", i, c, owned.Value(c, i), borrowed.Value(c, i), want)
			}
		}
	}
	for i := range payload {
		payload[i] = '#'
	}
	if owned.IDs[0] != "r1" || owned.Value(0, 0) != "alpha" || owned.Value(1, 0) != `{"k":1}` {
		t.Fatalf("Decode's values changed with the payload: %q %v %v", owned.IDs[0], owned.Value(0, 0), owned.Value(1, 0))
	}
	if borrowed.IDs[0] != "##" || borrowed.Value(0, 0) != "#####" {
		t.Fatalf("DecodeBorrowed's values do not point into the payload: %q %v", borrowed.IDs[0], borrowed.Value(0, 0))
	}
}

// AppendValues takes a row's values in schema order and judges them as
// Append judges the Row of the same values: the same batch for good rows,
// the same RowError for bad ones (the unknown column aside: values in
// schema order cannot name one), and a refusal of the wrong count.
func TestAppendValuesIsAppend(t *testing.T) {
	s := Rollout()
	rows := []Row{
		{"id": "a", "prompt": "p", "completion": "c", "reward": 1.5, "metadata": `{"k":1}`},
		{"id": "b", "prompt": "q", "completion": "d"},
		{"id": "c", "prompt": "r", "completion": 3.0},
		{"id": "", "prompt": "r", "completion": "e"},
		{"id": "d", "prompt": "r", "completion": "e", "metadata": "{nope"},
		{"prompt": "r", "completion": "e"},
	}
	values := func(r Row) []any {
		vals := make([]any, len(s.Columns))
		for c, col := range s.Columns {
			vals[c] = r[col.Name]
		}
		return vals
	}
	byRow, byValues := s.NewBatch(0), s.NewBatch(0)
	for i, r := range rows {
		want := s.NewBatch(0).Append(r)
		got := s.NewBatch(0).AppendValues(r["id"], values(r))
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("row %d: AppendValues says %v, Append %v", i, got, want)
		}
		if want == nil {
			if err := byRow.Append(r); err != nil {
				t.Fatal(err)
			}
			if err := byValues.AppendValues(r["id"], values(r)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if byValues.Len() != 2 || !bytes.Equal(byRow.Encode(nil), byValues.Encode(nil)) {
		t.Fatalf("AppendValues built %d rows, another batch than Append", byValues.Len())
	}
	if err := byValues.AppendValues("e", make([]any, len(s.Columns)-1)); err == nil || errors.Is(err, ErrInvalidRow) {
		t.Fatalf("one value short: %v, want a refusal that is not a row's", err)
	}
}
