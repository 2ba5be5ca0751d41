package generation

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/vfs"
)

// allTypes is a schema with every column type, each both required and
// nullable.
func allTypes(t testing.TB) *schema.Schema {
	t.Helper()
	s, err := schema.New([]schema.Column{
		{Name: "s", Type: schema.String},
		{Name: "s_null", Type: schema.String, Nullable: true},
		{Name: "j", Type: schema.JSON},
		{Name: "j_null", Type: schema.JSON, Nullable: true},
		{Name: "i", Type: schema.Int64},
		{Name: "i_null", Type: schema.Int64, Nullable: true},
		{Name: "f", Type: schema.Float64},
		{Name: "f_null", Type: schema.Float64, Nullable: true},
		{Name: "b", Type: schema.Bool},
		{Name: "b_null", Type: schema.Bool, Nullable: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var (
	sampleStrings = []string{"", "a", "héllo wörld", "日本語のテキスト", "emoji 🎲🎲", "quote \" and \\ backslash", "nul\x00byte", strings.Repeat("long ", 300)}
	sampleJSON    = []string{`{}`, `[]`, `null`, `0`, `"text"`, `{"a":[1,2,{"b":null}],"c":"ü"}`, `[1.5e300,-2,true,false]`}
	sampleInts    = []int64{0, 1, -1, math.MaxInt64, math.MinInt64, 1 << 40, -12345}
	sampleFloats  = []float64{0, 1.5, -2.25, math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64, 1e-300}
)

// allTypesRows builds n rows of allTypes from a seeded generator: every
// nullable column has nulls (and values), every sample value appears.
func allTypesRows(t testing.TB, s *schema.Schema, n int, seed uint64) Data {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	rows := make([]schema.Row, n)
	pick := func(vals any, i int) any {
		v := reflect.ValueOf(vals)
		return v.Index((i + rng.IntN(3)) % v.Len()).Interface()
	}
	for i := range rows {
		r := schema.Row{
			"id": fmt.Sprintf("row-%06d-%x", i, rng.Uint32()),
			"s":  pick(sampleStrings, i), "j": pick(sampleJSON, i),
			"i": pick(sampleInts, i), "f": pick(sampleFloats, i), "b": i%2 == 0,
		}
		// Nulls on a pattern that differs per column, so that every column
		// has runs of nulls and of values, and the first row is null in some.
		if i%3 != 0 {
			r["s_null"] = pick(sampleStrings, i+1)
		}
		if i%4 != 1 {
			r["j_null"] = pick(sampleJSON, i+1)
		}
		if i%5 > 1 {
			r["i_null"] = pick(sampleInts, i+1)
		}
		if i%2 == 1 {
			r["f_null"] = pick(sampleFloats, i+1)
		}
		if i%7 != 0 {
			r["b_null"] = i%3 == 0
		}
		rows[i] = r
	}
	b, err := s.Build(rows)
	if err != nil {
		t.Fatal(err)
	}
	d := Data{Rows: b, Seq: make([]uint64, n), Epoch: make([]uint64, n)}
	for i := range n {
		d.Seq[i] = 1000 + uint64(i)*3
		d.Epoch[i] = 6 + uint64(i*2/n) // older epoch rows first, as after a replay
	}
	return d
}

func testMeta() Meta {
	return Meta{Table: "rollouts", Shard: "s-07", Generation: 42, Epoch: 7}
}

// newMemDir returns a strict in-memory FS with a durable, empty directory.
func newMemDir(t testing.TB) (*vfs.MemFS, string) {
	t.Helper()
	fs := vfs.NewStrictMem()
	const dir = "/data/gen"
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"/", "/data"} {
		if err := vfs.SyncDir(fs, d); err != nil {
			t.Fatal(err)
		}
	}
	return fs, dir
}

func mustWrite(t testing.TB, opts Options, dir string, s *schema.Schema, m Meta, d Data) File {
	t.Helper()
	f, err := Write(context.Background(), opts, dir, s, m, d)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// requireSameData fails unless got holds exactly want's rows.
func requireSameData(t testing.TB, want, got Data) {
	t.Helper()
	if got.Rows.Len() != want.Rows.Len() {
		t.Fatalf("read %d rows, wrote %d", got.Rows.Len(), want.Rows.Len())
	}
	if !reflect.DeepEqual(got.Rows.IDs, want.Rows.IDs) {
		t.Errorf("ids differ")
	}
	for c, col := range want.Rows.Schema.Columns {
		w, g := want.Rows.Cols[c], got.Rows.Cols[c]
		for i := range want.Rows.Len() {
			if w.IsNull(i) != g.IsNull(i) {
				t.Fatalf("column %s row %d: null=%t, want %t", col.Name, i, g.IsNull(i), w.IsNull(i))
			}
		}
		w.Nulls, g.Nulls = nil, nil
		if !reflect.DeepEqual(w, g) {
			t.Errorf("column %s differs:\n got %s\nwant %s", col.Name, brief(g), brief(w))
		}
	}
	if !reflect.DeepEqual(got.Seq, want.Seq) {
		t.Errorf("_seq differs")
	}
	if !reflect.DeepEqual(got.Epoch, want.Epoch) {
		t.Errorf("_epoch differs")
	}
}

func brief(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 300 {
		b = append(b[:300], "…"...)
	}
	return string(b)
}
