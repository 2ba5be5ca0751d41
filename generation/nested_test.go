package generation

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rollwal/rollwal/schema"
)

// nestedTypes is a schema with every column type: each primitive required
// and nullable, lists of every primitive with required and nullable
// elements, structs, and lists of structs, nullable and not at each level.
func nestedTypes(t testing.TB) *schema.Schema {
	t.Helper()
	var cols []schema.Column
	for _, typ := range []schema.Type{schema.String, schema.JSON, schema.Int64, schema.Float64, schema.Bool,
		schema.Int32, schema.Float32, schema.Binary, schema.Timestamp} {
		cols = append(cols,
			schema.Column{Name: typ.String(), Type: typ},
			schema.Column{Name: typ.String() + "_null", Type: typ, Nullable: true})
	}
	for _, c := range []struct{ name, typ string }{
		{"tokens", "list<int32>"},
		{"logprobs?", "list<float32?>"},
		{"tags", "list<string>"},
		{"blobs?", "list<binary?>"},
		{"times", "list<timestamp>"},
		{"flags?", "list<bool?>"},
		{"counts", "list<int64?>"},
		{"scores?", "list<float64>"},
		{"docs", "list<json?>"},
		{"msg?", "struct<role: string, content: string?>"},
		{"stats", "struct<n: int32?, mean: float64, at: timestamp?, ok: bool, raw: binary?>"},
		{"messages?", "list<struct<role: string, content: string>>"},
		{"events", "list<struct<at: timestamp, score: float32?, label: json?, blob: binary>?>"},
	} {
		col, err := schema.ParseColumnType(c.typ)
		if err != nil {
			t.Fatal(err)
		}
		col.Name = strings.TrimSuffix(c.name, "?")
		col.Nullable = strings.HasSuffix(c.name, "?")
		cols = append(cols, col)
	}
	s, err := schema.New(cols)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// nestedSeed is the seed of the random rows, printed by every test that
// uses it; ROLLWAL_NESTED_SEED replays one.
func nestedSeed(t testing.TB) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if env := os.Getenv("ROLLWAL_NESTED_SEED"); env != "" {
		var err error
		if seed, err = strconv.ParseUint(env, 10, 64); err != nil {
			t.Fatalf("ROLLWAL_NESTED_SEED: %v", err)
		}
	}
	t.Logf("seed %d (ROLLWAL_NESTED_SEED=%d replays it)", seed, seed)
	return seed
}

// rowGen makes random values for columns, as producers send them.
type rowGen struct {
	rng *rand.Rand
	// huge, when set, is the chance in 1000 of a list of thousands of
	// elements, longer than a chunk of the column writer.
	huge int
}

var (
	sampleInt32s   = []int32{0, 1, -1, math.MaxInt32, math.MinInt32, 1 << 20, -4242}
	sampleFloat32s = []float32{0, 1.5, -2.25, math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, 0.1}
	sampleTimes    = []time.Time{
		time.Unix(0, 0),
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC),
		time.Date(1969, 12, 31, 23, 59, 59, 999999000, time.UTC),
		time.Date(2026, 3, 1, 12, 30, 0, 123456000, time.UTC),
	}
)

func (g *rowGen) binary() []byte {
	switch g.rng.IntN(6) {
	case 0:
		return []byte{}
	case 1:
		return []byte{0xFF, 0xFE, 0x00, 0x80} // not UTF-8
	case 2:
		b := make([]byte, 70+g.rng.IntN(200)) // longer than a statistic
		for i := range b {
			b[i] = byte(g.rng.IntN(256))
		}
		return b
	case 3:
		return []byte(strings.Repeat("\xff", 65+g.rng.IntN(10))) // no short upper bound
	}
	b := make([]byte, g.rng.IntN(16))
	for i := range b {
		b[i] = byte(g.rng.IntN(256))
	}
	return b
}

func (g *rowGen) primitive(t schema.Type) any {
	r := g.rng
	switch t {
	case schema.String:
		return sampleStrings[r.IntN(len(sampleStrings))]
	case schema.JSON:
		if r.IntN(20) == 0 {
			return `{"blob":"` + strings.Repeat("ü", 40) + `"}` // longer than a statistic
		}
		return sampleJSON[r.IntN(len(sampleJSON))]
	case schema.Int64:
		if r.IntN(2) == 0 {
			return int64(r.Uint64())
		}
		return sampleInts[r.IntN(len(sampleInts))]
	case schema.Float64:
		return sampleFloats[r.IntN(len(sampleFloats))]
	case schema.Bool:
		return r.IntN(2) == 0
	case schema.Int32:
		if r.IntN(2) == 0 {
			return int32(r.Uint32())
		}
		return sampleInt32s[r.IntN(len(sampleInt32s))]
	case schema.Float32:
		if r.IntN(2) == 0 {
			return float32(r.NormFloat64())
		}
		return sampleFloat32s[r.IntN(len(sampleFloat32s))]
	case schema.Binary:
		return g.binary()
	case schema.Timestamp:
		if r.IntN(2) == 0 {
			lo, hi := sampleTimes[1].UnixMicro(), sampleTimes[2].UnixMicro()
			return time.UnixMicro(lo + r.Int64N(hi-lo)).UTC()
		}
		return sampleTimes[r.IntN(len(sampleTimes))]
	}
	panic(fmt.Sprintf("no generator for %v", t))
}

// value returns a value of c: null one time in four where c allows it.
func (g *rowGen) value(c *schema.Column) any {
	if c.Nullable && g.rng.IntN(4) == 0 {
		return nil
	}
	switch c.Type {
	case schema.List:
		elems := make([]any, g.listLen())
		for j := range elems {
			elems[j] = g.value(c.Element)
		}
		return elems
	case schema.Struct:
		m := map[string]any{}
		for f := range c.Fields {
			if v := g.value(&c.Fields[f]); v != nil || g.rng.IntN(2) == 0 {
				m[c.Fields[f].Name] = v // a null field is absent or nil
			}
		}
		return m
	}
	return g.primitive(c.Type)
}

func (g *rowGen) listLen() int {
	switch r := g.rng.IntN(1000); {
	case r < g.huge:
		return 1500 + g.rng.IntN(1500)
	case r < 250:
		return 0
	case r < 900:
		return 1 + g.rng.IntN(4)
	}
	return 5 + g.rng.IntN(40)
}

// edgeValue returns a value of c for the handmade rows that put a null or
// an empty part at each level: kind 0 nulls the column, 1 makes lists
// empty, 2 fills lists with null elements, 3 with elements whose fields
// are null; every struct has its nullable fields null.
func edgeValue(g *rowGen, c *schema.Column, kind int, top bool) any {
	switch {
	case c.Nullable && (top && kind == 0 || !top && kind == 2):
		return nil
	case c.Type == schema.List && kind <= 1:
		return []any{}
	case c.Type == schema.List:
		elems := make([]any, 3)
		for j := range elems {
			elems[j] = edgeValue(g, c.Element, kind, false)
		}
		return elems
	case c.Type == schema.Struct:
		m := map[string]any{}
		for f := range c.Fields {
			if fc := &c.Fields[f]; !fc.Nullable {
				m[fc.Name] = g.primitive(fc.Type)
			}
		}
		return m
	}
	return g.primitive(c.Type)
}

// nestedRows builds n rows of s: four handmade rows with nulls and empty
// lists at every level, then random ones.
func nestedRows(t testing.TB, s *schema.Schema, n int, seed uint64, huge int) Data {
	t.Helper()
	g := &rowGen{rng: rand.New(rand.NewPCG(seed, 3)), huge: huge}
	rows := make([]schema.Row, n)
	for i := range rows {
		r := schema.Row{"id": fmt.Sprintf("row-%06d", i)}
		for c := range s.Columns {
			col := &s.Columns[c]
			var v any
			if i < 4 {
				v = edgeValue(g, col, i, true)
			} else {
				v = g.value(col)
			}
			if v != nil || g.rng.IntN(2) == 0 {
				r[col.Name] = v
			}
		}
		rows[i] = r
	}
	b, err := s.Build(rows)
	if err != nil {
		t.Fatal(err)
	}
	d := Data{Rows: b, Seq: make([]uint64, n), Epoch: make([]uint64, n)}
	for i := range n {
		d.Seq[i], d.Epoch[i] = 1000+uint64(i), 7
	}
	return d
}

// requireSameValues fails unless every row and column of got is the
// value of want, as Batch.Value returns them.
func requireSameValues(t testing.TB, want, got Data) {
	t.Helper()
	if got.Rows.Len() != want.Rows.Len() {
		t.Fatalf("read %d rows, wrote %d", got.Rows.Len(), want.Rows.Len())
	}
	for c, col := range want.Rows.Schema.Columns {
		for i := range want.Rows.Len() {
			if w, g := want.Rows.Value(c, i), got.Rows.Value(c, i); !reflect.DeepEqual(w, g) {
				t.Fatalf("column %s (%s) row %d:\n got %s\nwant %s", col.Name, col.TypeString(), i, brief(g), brief(w))
			}
		}
	}
}

func TestNestedRoundTrip(t *testing.T) {
	s := nestedTypes(t)
	seed := nestedSeed(t)
	cases := []struct {
		name string
		rows int
		huge int
		opts Options
	}{
		{"one-row", 1, 0, Options{}},
		{"edge-rows", 4, 0, Options{RowGroupRows: 3}},
		{"one-row-group", 600, 5, Options{}},
		{"many-row-groups-and-pages", 2000, 3, Options{RowGroupRows: 333, PageBufferSize: 4 << 10}},
		{"zstd", 800, 0, Options{Codec: CodecZstd, RowGroupRows: 256}},
		{"none", 800, 0, Options{Codec: CodecNone, PageBufferSize: 8 << 10}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs, dir := newMemDir(t)
			tc.opts.FS = fs
			d := nestedRows(t, s, tc.rows, seed, tc.huge)
			f := mustWrite(t, tc.opts, dir, s, testMeta(), d)
			m, got, err := Read(fs, f.Path, s)
			if err != nil {
				t.Fatal(err)
			}
			if m != f.Meta {
				t.Errorf("Read meta %+v, Write returned %+v", m, f.Meta)
			}
			requireSameValues(t, d, got)
			requireSameData(t, d, got)
		})
	}
}

// The Parquet schema of every shape, spelled as parquet-go prints the
// footer's schema, and the levels of the nested leaves.
func TestNestedParquetLayout(t *testing.T) {
	cols := []schema.Column{
		{Name: "i32", Type: schema.Int32},
		{Name: "f32", Type: schema.Float32, Nullable: true},
		{Name: "bin", Type: schema.Binary},
		{Name: "ts", Type: schema.Timestamp, Nullable: true},
	}
	for _, c := range []struct{ name, typ string }{
		{"tokens", "list<int32>"},
		{"logprobs?", "list<float32?>"},
		{"msg?", "struct<role: string, content: string?>"},
		{"messages?", "list<struct<role: string, content: string>>"},
		{"events", "list<struct<at: timestamp, blob: binary?>?>"},
	} {
		col, err := schema.ParseColumnType(c.typ)
		if err != nil {
			t.Fatal(err)
		}
		col.Name, col.Nullable = strings.TrimSuffix(c.name, "?"), strings.HasSuffix(c.name, "?")
		cols = append(cols, col)
	}
	s, err := schema.New(cols)
	if err != nil {
		t.Fatal(err)
	}
	fs, dir := newMemDir(t)
	f := mustWrite(t, Options{FS: fs}, dir, s, testMeta(), nestedRows(t, s, 20, 1, 0))
	pf := openRaw(t, fs, f.Path)
	want := `message rollwal {
	required binary id (STRING);
	required int32 i32 (INT(32,true));
	optional float f32;
	required binary bin;
	optional int64 ts (TIMESTAMP(isAdjustedToUTC=true,unit=MICROS));
	required group tokens (LIST) {
		repeated group list {
			required int32 element (INT(32,true));
		}
	}
	optional group logprobs (LIST) {
		repeated group list {
			optional float element;
		}
	}
	optional group msg {
		required binary role (STRING);
		optional binary content (STRING);
	}
	optional group messages (LIST) {
		repeated group list {
			required group element {
				required binary role (STRING);
				required binary content (STRING);
			}
		}
	}
	required group events (LIST) {
		repeated group list {
			optional group element {
				required int64 at (TIMESTAMP(isAdjustedToUTC=true,unit=MICROS));
				optional binary blob;
			}
		}
	}
	required int64 _seq (INT(64,false));
	required int64 _epoch (INT(64,false));
}`
	if got := pf.Schema().String(); got != want {
		t.Fatalf("parquet schema:\n%s\nwant\n%s", got, want)
	}
	// The levels of the table in nested.go, as the file's schema has them.
	wantLevels := map[string][2]int{
		"tokens.list.element":           {1, 1},
		"logprobs.list.element":         {1, 3},
		"msg.role":                      {0, 1},
		"msg.content":                   {0, 2},
		"messages.list.element.role":    {1, 2},
		"messages.list.element.content": {1, 2},
		"events.list.element.at":        {1, 2},
		"events.list.element.blob":      {1, 3},
	}
	for path, w := range wantLevels {
		lc, ok := pf.Schema().Lookup(strings.Split(path, ".")...)
		if !ok || lc.MaxRepetitionLevel != w[0] || lc.MaxDefinitionLevel != w[1] {
			t.Errorf("%s: levels (rep %d, def %d), want %v", path, lc.MaxRepetitionLevel, lc.MaxDefinitionLevel, w)
		}
	}
	// The footer's schema JSON carries the nested parts and reads back as
	// the same schema.
	js, _ := pf.Lookup(keySchema)
	stored, err := parseSchema(pf.Lookup)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(stored.Columns, s.Columns) || stored.Fingerprint() != s.Fingerprint() {
		t.Fatalf("rollwal.schema = %s reads back as %+v", js, stored.Columns)
	}
	if !strings.Contains(js, `"element":{`) || !strings.Contains(js, `"fields":[`) {
		t.Fatalf("rollwal.schema = %s: no element or fields", js)
	}
}

func TestWriteRefusesBadNestedVectors(t *testing.T) {
	s := nestedTypes(t)
	col := func(name string) int { return s.Index(name) }
	cases := []struct {
		name string
		edit func(b *schema.Batch)
		want string
	}{
		{"offsets past the elements", func(b *schema.Batch) {
			v := &b.Cols[col("tokens")]
			v.Offsets[len(v.Offsets)-1] += 5
		}, `column "tokens"`},
		{"offsets going back", func(b *schema.Batch) {
			v := &b.Cols[col("tags")]
			v.Offsets[1], v.Offsets[2] = 2, 1
		}, `column "tags"`},
		{"null element of required elements", func(b *schema.Batch) {
			e := b.Cols[col("tokens")].Elem
			e.Nulls = make([]bool, e.Len())
			e.Nulls[0] = true
		}, "not nullable"},
		{"short struct field", func(b *schema.Batch) {
			f := &b.Cols[col("msg")].Fields[0]
			f.Str = f.Str[:len(f.Str)-1]
		}, `column "msg"`},
		{"missing struct field", func(b *schema.Batch) {
			v := &b.Cols[col("stats")]
			v.Fields = v.Fields[:2]
		}, "struct fields"},
		{"no element vector", func(b *schema.Batch) { b.Cols[col("times")].Elem = nil }, "malformed list"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs, dir := newMemDir(t)
			d := nestedRows(t, s, 10, 1, 0)
			tc.edit(d.Rows)
			_, err := Write(t.Context(), Options{FS: fs}, dir, s, testMeta(), d)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Write error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
