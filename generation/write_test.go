package generation

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/vfs"
)

func TestRoundTripAllTypes(t *testing.T) {
	s := allTypes(t)
	cases := []struct {
		name string
		rows int
		opts Options
	}{
		{"snappy/one-row", 1, Options{}},
		{"snappy/one-row-group", 500, Options{}},
		{"snappy/many-row-groups-and-pages", 3000, Options{RowGroupRows: 701, PageBufferSize: 4 << 10}},
		{"zstd", 1200, Options{Codec: CodecZstd, RowGroupRows: 512}},
		{"none", 1200, Options{Codec: CodecNone, PageBufferSize: 8 << 10}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs, dir := newMemDir(t)
			tc.opts.FS = fs
			d := allTypesRows(t, s, tc.rows, 1)
			f := mustWrite(t, tc.opts, dir, s, testMeta(), d)
			m, got, err := Read(fs, f.Path, s)
			if err != nil {
				t.Fatal(err)
			}
			if m != f.Meta {
				t.Errorf("Read meta %+v, Write returned %+v", m, f.Meta)
			}
			requireSameData(t, d, got)
			if got.Rows.Schema != s {
				t.Error("the Batch read does not carry the caller's schema")
			}
			if st, err := fs.Stat(f.Path); err != nil || st.Size() != f.Size {
				t.Errorf("File.Size %d, stat says %v (%v)", f.Size, st, err)
			}
			// Every nullable column really stored nulls (not empty values).
			for c, col := range s.Columns {
				if col.Nullable && got.Rows.Cols[c].Nulls == nil && tc.rows > 7 {
					t.Errorf("column %s read back without nulls", col.Name)
				}
			}
		})
	}
}

func TestFooterMetadataRoundTrip(t *testing.T) {
	s := allTypes(t)
	fs, dir := newMemDir(t)
	d := allTypesRows(t, s, 100, 2)
	in := testMeta()
	in.SeqFirst, in.SeqLast = 900, 5000
	in.CreatedUnixNano = time.Date(2026, 3, 1, 12, 0, 0, 7, time.UTC).UnixNano()
	f := mustWrite(t, Options{FS: fs}, dir, s, in, d)

	want := in
	want.FormatVersion, want.Rows, want.SchemaFingerprint = FormatVersion, 100, s.Fingerprint()
	if f.Meta != want {
		t.Fatalf("Write returned meta\n%+v\nwant\n%+v", f.Meta, want)
	}
	got, err := ReadMeta(fs, f.Path)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("ReadMeta\n%+v\nwant\n%+v", got, want)
	}

	// The raw footer: every key present, spelled as documented.
	pf := openRaw(t, fs, f.Path)
	wantKV := map[string]string{
		"rollwal.format_version":     "1",
		"rollwal.table":              "rollouts",
		"rollwal.shard":              "s-07",
		"rollwal.generation":         "42",
		"rollwal.epoch":              "7",
		"rollwal.seq_first":          "900",
		"rollwal.seq_last":           "5000",
		"rollwal.rows":               "100",
		"rollwal.schema_fingerprint": s.Fingerprint(),
		"rollwal.created_unix_nano":  "1772366400000000007",
	}
	for k, v := range wantKV {
		if got, ok := pf.Lookup(k); !ok || got != v {
			t.Errorf("footer %s = %q (present %t), want %q", k, got, ok, v)
		}
	}
	js, _ := pf.Lookup("rollwal.schema")
	var cols []schema.Column
	if err := json.Unmarshal([]byte(js), &cols); err != nil || !reflect.DeepEqual(cols, s.Columns) {
		t.Errorf("rollwal.schema = %s (%v), want the schema's columns", js, err)
	}
	if sum, _ := pf.Lookup("rollwal.checksum"); len(sum) != 8 {
		t.Errorf("rollwal.checksum = %q, want 8 hex digits", sum)
	}
}

func TestWriteFillsMeta(t *testing.T) {
	s := allTypes(t)
	fs, dir := newMemDir(t)
	d := allTypesRows(t, s, 10, 3)
	before := time.Now().UnixNano()
	f := mustWrite(t, Options{FS: fs}, dir, s, testMeta(), d)
	m := f.Meta
	if m.SeqFirst != d.Seq[0] || m.SeqLast != d.Seq[9] || m.Rows != 10 || m.FormatVersion != FormatVersion ||
		m.SchemaFingerprint != s.Fingerprint() || m.CreatedUnixNano < before || m.CreatedUnixNano > time.Now().UnixNano() {
		t.Fatalf("filled meta %+v", m)
	}
	gen, epoch, attempt, err := ParseName(f.Name)
	if err != nil || gen != 42 || epoch != 7 || f.Name != Name(42, 7, attempt) || f.Path != filepath.Join(dir, f.Name) {
		t.Fatalf("file %+v: name parses to %d %d %q %v", f, gen, epoch, attempt, err)
	}
	names, _ := fs.List(dir)
	if !reflect.DeepEqual(names, []string{f.Name}) {
		t.Fatalf("dir holds %v, want only %s", names, f.Name)
	}
}

func TestWriteAttemptsNeverCollide(t *testing.T) {
	s := allTypes(t)
	fs, dir := newMemDir(t)
	d := allTypesRows(t, s, 5, 4)
	seen := map[string]bool{}
	for range 20 {
		f := mustWrite(t, Options{FS: fs}, dir, s, testMeta(), d)
		if seen[f.Name] {
			t.Fatalf("attempt name %s reused", f.Name)
		}
		seen[f.Name] = true
	}
	if names, _ := fs.List(dir); len(names) != 20 {
		t.Fatalf("%d files after 20 attempts", len(names))
	}
}

func TestWriteRefusesBadInput(t *testing.T) {
	s := allTypes(t)
	good := func() Data { return allTypesRows(t, s, 10, 5) }
	other, _ := schema.New([]schema.Column{{Name: "x", Type: schema.Int64}})
	cases := []struct {
		name   string
		opts   Options
		schema *schema.Schema
		meta   func(*Meta)
		data   func(*Data)
		want   string
	}{
		{name: "no rows", data: func(d *Data) { *d = Data{Rows: s.NewBatch(0)} }, want: "no rows"},
		{name: "nil batch", data: func(d *Data) { d.Rows = nil }, want: "no rows"},
		{name: "short seq", data: func(d *Data) { d.Seq = d.Seq[:9] }, want: "_seq"},
		{name: "long epoch", data: func(d *Data) { d.Epoch = append(d.Epoch, 1) }, want: "_epoch"},
		{name: "short column", data: func(d *Data) { d.Rows.Cols[4].I64 = d.Rows.Cols[4].I64[:3] }, want: `column "i"`},
		{name: "short nulls", data: func(d *Data) { d.Rows.Cols[1].Nulls = []bool{true} }, want: "null flags"},
		{name: "null in required", data: func(d *Data) { d.Rows.Cols[0].Nulls = make([]bool, 10); d.Rows.Cols[0].Nulls[3] = true }, want: "not nullable"},
		{name: "wrong vector type", data: func(d *Data) { d.Rows.Cols[6].Type = schema.Int64 }, want: "vector of type"},
		{name: "empty id", data: func(d *Data) { d.Rows.IDs[2] = "" }, want: "row 2: id"},
		{name: "other schema", schema: other, want: "schema"},
		{name: "nil schema", schema: nil, want: "no schema"},
		{name: "rows mismatch", meta: func(m *Meta) { m.Rows = 11 }, want: "11 rows"},
		{name: "fingerprint mismatch", meta: func(m *Meta) { m.SchemaFingerprint = "00" }, want: "fingerprint"},
		{name: "future format", meta: func(m *Meta) { m.FormatVersion = 2 }, want: "format version 2"},
		{name: "seq outside range", meta: func(m *Meta) { m.SeqFirst, m.SeqLast = 1001, 2000 }, want: "outside the meta range"},
		{name: "epoch above file", meta: func(m *Meta) { m.Epoch = 6 }, want: "above the file's epoch"},
		{name: "unknown codec", opts: Options{Codec: "lzo"}, want: `unknown codec "lzo"`},
		{name: "tiny pages", opts: Options{PageBufferSize: 100}, want: "page buffer size"},
		{name: "negative row groups", opts: Options{RowGroupRows: -1}, want: "row group rows"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs, dir := newMemDir(t)
			tc.opts.FS = fs
			sc := s
			if tc.name == "other schema" || tc.name == "nil schema" {
				sc = tc.schema
			}
			m, d := testMeta(), good()
			if tc.meta != nil {
				tc.meta(&m)
			}
			if tc.data != nil {
				tc.data(&d)
			}
			_, err := Write(context.Background(), tc.opts, dir, sc, m, d)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Write error %v, want one containing %q", err, tc.want)
			}
			if names, _ := fs.List(dir); len(names) != 0 {
				t.Fatalf("a refused write left %v", names)
			}
		})
	}
}

func TestWriteHonoursContext(t *testing.T) {
	s := allTypes(t)
	fs, dir := newMemDir(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Write(ctx, Options{FS: fs, RowGroupRows: 10}, dir, s, testMeta(), allTypesRows(t, s, 100, 6))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Write with a cancelled context: %v", err)
	}
	if names, _ := fs.List(dir); len(names) != 0 {
		t.Fatalf("a cancelled write left %v", names)
	}
}

func TestParquetLayout(t *testing.T) {
	s := allTypes(t)
	fs, dir := newMemDir(t)
	f := mustWrite(t, Options{FS: fs}, dir, s, testMeta(), allTypesRows(t, s, 50, 7))
	pf := openRaw(t, fs, f.Path)
	var names []string
	for _, c := range pf.Schema().Columns() {
		names = append(names, strings.Join(c, "."))
	}
	want := []string{"id", "s", "s_null", "j", "j_null", "i", "i_null", "f", "f_null", "b", "b_null", "_seq", "_epoch"}
	if !slices.Equal(names, want) {
		t.Fatalf("columns %v, want %v", names, want)
	}
	type leaf struct {
		kind     parquet.Kind
		optional bool
		logical  string
	}
	wantLeaf := map[string]leaf{
		"id":     {parquet.ByteArray, false, "STRING"},
		"s":      {parquet.ByteArray, false, "STRING"},
		"s_null": {parquet.ByteArray, true, "STRING"},
		"j":      {parquet.ByteArray, false, "JSON"},
		"j_null": {parquet.ByteArray, true, "JSON"},
		"i":      {parquet.Int64, false, "INT(64,true)"},
		"i_null": {parquet.Int64, true, "INT(64,true)"},
		"f":      {parquet.Double, false, ""},
		"b_null": {parquet.Boolean, true, ""},
		"_seq":   {parquet.Int64, false, "INT(64,false)"},
		"_epoch": {parquet.Int64, false, "INT(64,false)"},
	}
	for name, w := range wantLeaf {
		col, ok := pf.Schema().Lookup(name)
		if !ok {
			t.Fatalf("no column %s", name)
		}
		lt := ""
		if l := col.Node.Type().LogicalType(); l != nil {
			lt = l.String()
		}
		got := leaf{col.Node.Type().Kind(), col.Node.Optional(), lt}
		if got != w {
			t.Errorf("column %s: %+v, want %+v", name, got, w)
		}
	}
	for _, cc := range pf.Metadata().RowGroups[0].Columns {
		if cc.MetaData.Codec != format.Snappy {
			t.Errorf("column %v: codec %v, want SNAPPY", cc.MetaData.PathInSchema, cc.MetaData.Codec)
		}
	}
}

func TestBloomFilterOnID(t *testing.T) {
	s := allTypes(t)
	fs, dir := newMemDir(t)
	d := allTypesRows(t, s, 2000, 8)
	f := mustWrite(t, Options{FS: fs, RowGroupRows: 800}, dir, s, testMeta(), d)
	pf := openRaw(t, fs, f.Path)
	if len(pf.RowGroups()) != 3 {
		t.Fatalf("%d row groups, want 3", len(pf.RowGroups()))
	}
	falsePositives, absent := 0, 0
	for r, rg := range pf.RowGroups() {
		for c, chunk := range rg.ColumnChunks() {
			bf := chunk.(*parquet.FileColumnChunk).BloomFilter()
			if c != 0 {
				if bf != nil {
					t.Errorf("row group %d column %d has a bloom filter; only id should", r, c)
				}
				continue
			}
			if bf == nil {
				t.Fatalf("row group %d: no bloom filter on id", r)
			}
			lo, hi := r*800, min((r+1)*800, len(d.Rows.IDs))
			for i, id := range d.Rows.IDs {
				ok, err := bf.Check(parquet.ByteArrayValue([]byte(id)))
				if err != nil {
					t.Fatal(err)
				}
				switch inGroup := i >= lo && i < hi; {
				case inGroup && !ok:
					t.Fatalf("row group %d: bloom filter misses id %q it holds", r, id)
				case !inGroup:
					absent++
					if ok {
						falsePositives++
					}
				}
			}
		}
	}
	// 10 bits per value: about 1% false positives; 5% means it is broken.
	if rate := float64(falsePositives) / float64(absent); rate > 0.05 {
		t.Fatalf("bloom filter false-positive rate %.3f", rate)
	}
}

// openRaw opens a file with parquet-go directly.
func openRaw(t testing.TB, fs vfs.FS, path string) *parquet.File {
	t.Helper()
	f, err := fs.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	return pf
}

// Concurrent writers into one directory (several shards flushing, or a
// retry racing a slow attempt) each get their own file; run with -race.
func TestConcurrentWrites(t *testing.T) {
	s := allTypes(t)
	fs, dir := newMemDir(t)
	d := allTypesRows(t, s, 400, 13)
	const writers = 4
	files := make([]File, writers)
	errs := make([]error, writers)
	done := make(chan int)
	for w := range writers {
		go func() {
			m := testMeta()
			m.Generation = uint64(100 + w%2) // two attempts at each of two generations
			files[w], errs[w] = Write(context.Background(), Options{FS: fs, RowGroupRows: 150}, dir, s, m, d)
			done <- w
		}()
	}
	for range writers {
		<-done
	}
	for w := range writers {
		if errs[w] != nil {
			t.Fatal(errs[w])
		}
		_, got, err := Read(fs, files[w].Path, s)
		if err != nil {
			t.Fatal(err)
		}
		requireSameData(t, d, got)
	}
	if names, _ := fs.List(dir); len(names) != writers {
		t.Fatalf("%d files for %d writes: %v", len(names), writers, names)
	}
}
