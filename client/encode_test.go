package client

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestEncodeRowMatchesEncodingJSON: encodeRow writes, byte for byte, what a
// json.Encoder without HTML escaping writes, or fails as it fails — for
// edge values and for rows drawn at random (seed printed).
func TestEncodeRowMatchesEncodingJSON(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 7))
	rows := []map[string]any{
		{},
		{"id": "a", "reward": 1.0, "ok": true, "none": nil},
		{"f": 1e-7, "g": 1e21, "h": 123456789.125, "neg0": math.Copysign(0, -1), "small": 1e-6, "big": 9.99e20},
		{"i": 1, "j": int64(-1 << 62), "k": int32(7), "u": uint8(3), "n": json.Number("12.50")},
		{"esc": "a\"b\\c\n\t\x01</>&", "uni": "héllo \u2028 \U0001F600", "bad": "a\xffb", "empty": ""},
		{"nested": map[string]any{"z": 1, "a": []any{"x", 2.5, nil}}, "list": []int32{1, 2}},
		{"\u00e9key": 1, "Key": 2, "key": 3, "k\"ey": 4},
		{"nan": math.NaN()},
		{"inf": math.Inf(1)},
		{"ch": make(chan int)},
	}
	for range 2000 {
		rows = append(rows, randomRow(r))
	}
	for i, row := range rows {
		var want, got bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		wantErr := enc.Encode(row)
		got.WriteString("prefix")
		gotErr := encodeRow(&got, row)
		switch {
		case (wantErr == nil) != (gotErr == nil):
			t.Fatalf("row %d %v: encoding/json %v, encodeRow %v", i, row, wantErr, gotErr)
		case wantErr != nil && wantErr.Error() != gotErr.Error():
			t.Fatalf("row %d: encoding/json fails with %q, encodeRow with %q", i, wantErr, gotErr)
		case wantErr != nil && got.String() != "prefix":
			t.Fatalf("row %d: a failed encodeRow left %q in the buffer", i, got.String())
		case wantErr == nil && got.String() != "prefix"+want.String():
			t.Fatalf("row %d:\nencodeRow     %q\nencoding/json %q", i, strings.TrimPrefix(got.String(), "prefix"), want.String())
		}
	}
}

func randomRow(r *rand.Rand) map[string]any {
	row := map[string]any{}
	for range r.IntN(8) {
		row[randomString(r)] = randomValue(r)
	}
	return row
}

func randomValue(r *rand.Rand) any {
	switch r.IntN(8) {
	case 0:
		return nil
	case 1:
		return r.IntN(2) == 0
	case 2:
		return r.Int64() - r.Int64()
	case 3:
		return math.Float64frombits(r.Uint64()) // every exponent, NaN and infinities among them
	case 4:
		return (r.Float64() - 0.5) * math.Pow(10, float64(r.IntN(50)-25))
	case 5:
		return []any{randomString(r), r.Float64()}
	default:
		return randomString(r)
	}
}

// randomString is mostly printable ASCII, with now and then a byte that
// must be escaped, a multi-byte rune (U+2028 and U+2029 among them) or
// invalid UTF-8.
func randomString(r *rand.Rand) string {
	var b strings.Builder
	for range r.IntN(12) {
		switch r.IntN(24) {
		case 0:
			b.WriteByte(byte(r.IntN(0x20)))
		case 1:
			b.WriteByte(`"\<>&`[r.IntN(5)])
		case 2:
			b.WriteByte(byte(0x80 + r.IntN(0x80)))
		case 3:
			b.WriteRune([]rune{'é', '\u2028', '\u2029', '😀', '\u07ff', '\uffff', 0x7f}[r.IntN(7)])
		default:
			b.WriteByte(byte(0x20 + r.IntN(0x5f)))
		}
	}
	return b.String()
}

func BenchmarkEncodeRow(b *testing.B) {
	row := map[string]any{"id": "rollout-000000001234", "prompt": strings.Repeat("the quick brown fox ", 25),
		"completion": strings.Repeat("jumps over the lazy dog ", 20), "reward": 0.73125, "metadata": `{"model":"m1","step":12}`}
	b.Run("encodeRow", func(b *testing.B) {
		var buf bytes.Buffer
		b.ReportAllocs()
		for b.Loop() {
			buf.Reset()
			if err := encodeRow(&buf, row); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		var buf bytes.Buffer
		b.ReportAllocs()
		for b.Loop() {
			buf.Reset()
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(row); err != nil {
				b.Fatal(err)
			}
		}
	})
}
