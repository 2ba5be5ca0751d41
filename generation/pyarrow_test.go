package generation

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rollwal/rollwal/internal/pyenv"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/vfs"
)

// pyReader reads each generation file named on its command line with
// pyarrow.parquet and with DuckDB and prints, per file, the rows, the
// column types and the key-value metadata each engine sees, as JSON.
const pyReader = `
import json, sys
import duckdb
import pyarrow.parquet as pq

def kv(raw):
    return {k.decode(): v.decode() for k, v in (raw or {}).items()}

out = []
for path, present, absent in zip(sys.argv[1::3], sys.argv[2::3], sys.argv[3::3]):
    table = pq.read_table(path)
    md = pq.read_metadata(path)
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")  # it prints to stdout on slow queries
    rel = con.execute("SELECT * FROM read_parquet(?) ORDER BY _seq", [path])
    names = [d[0] for d in rel.description]
    duck_rows = [dict(zip(names, r)) for r in rel.fetchall()]
    duck_types = dict(con.execute(
        "SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM read_parquet(?))", [path]).fetchall())
    duck_kv = {k.decode(): v.decode() for k, v in con.execute(
        "SELECT key, value FROM parquet_kv_metadata(?)", [path]).fetchall()}
    probe = lambda v: [bool(x) for (x,) in con.execute(
        "SELECT bloom_filter_excludes FROM parquet_bloom_probe(?, 'id', ?) ORDER BY row_group_id", [path, v]).fetchall()]
    out.append({
        "path": path,
        "pyarrow": {
            "rows": table.to_pylist(),
            "types": {f.name: str(f.type) for f in table.schema},
            "metadata": kv(md.metadata),
            "row_groups": md.num_row_groups,
            "codecs": sorted({md.row_group(0).column(i).compression for i in range(md.num_columns)}),
        },
        "duckdb": {
            "rows": duck_rows,
            "types": duck_types,
            "metadata": duck_kv,
            "bloom_present": probe(present),
            "bloom_absent": probe(absent),
        },
    })
json.dump(out, sys.stdout)
`

type pyEngineResult struct {
	Rows         []map[string]any  `json:"rows"`
	Types        map[string]string `json:"types"`
	Metadata     map[string]string `json:"metadata"`
	RowGroups    int               `json:"row_groups"`
	Codecs       []string          `json:"codecs"`
	BloomPresent []bool            `json:"bloom_present"`
	BloomAbsent  []bool            `json:"bloom_absent"`
}

type pyResult struct {
	Path    string         `json:"path"`
	Pyarrow pyEngineResult `json:"pyarrow"`
	DuckDB  pyEngineResult `json:"duckdb"`
}

// rollwalPython returns the interpreter that has pyarrow and duckdb, or
// skips the test (failing it in CI) when ROLLWAL_PYTHON is not set.
func rollwalPython(t *testing.T) string {
	return pyenv.Python(t, "pyarrow/DuckDB interoperability")
}

// TestPyarrowReadsGeneration proves that other engines read what Write
// writes: every codec (the default Snappy comes from s2's fast encoder),
// several row groups, every type, nulls, the footer metadata and the id
// bloom filter.
func TestPyarrowReadsGeneration(t *testing.T) {
	py := rollwalPython(t)
	s := allTypes(t)
	dir := t.TempDir()
	d := allTypesRows(t, s, 500, 30)
	files := map[string]File{}
	var args []string
	for _, codec := range []string{CodecSnappy, CodecZstd, CodecNone} {
		f := mustWrite(t, Options{FS: vfs.Default, Codec: codec, RowGroupRows: 200}, dir, s, testMeta(), d)
		files[f.Path] = f
		args = append(args, f.Path, d.Rows.IDs[250], "no-such-id")
	}
	f := writeInSnappyParts(t, dir, s, d)
	files[f.Path] = f
	args = append(args, f.Path, d.Rows.IDs[250], "no-such-id")
	cmd := exec.Command(py, append([]string{"-c", pyReader}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s failed: %v\n%s", py, err, stderr.String())
	}
	var results []pyResult
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&results); err != nil {
		t.Fatalf("decoding the reader's output: %v\n%.2000s", err, out)
	}
	t.Logf("pyarrow types %v", results[0].Pyarrow.Types)
	t.Logf("DuckDB types %v", results[0].DuckDB.Types)
	if len(results) != len(files) {
		t.Fatalf("%d results for %d files", len(results), len(files))
	}
	for _, r := range results {
		f := files[r.Path]
		t.Run(f.Name, func(t *testing.T) {
			for engine, e := range map[string]pyEngineResult{"pyarrow": r.Pyarrow, "duckdb": r.DuckDB} {
				compareRows(t, engine, s, d, e.Rows)
				compareMetadata(t, engine, f, s, e.Metadata)
			}
			checkArrowTypes(t, r.Pyarrow.Types)
			checkDuckTypes(t, r.DuckDB.Types)
			if r.Pyarrow.RowGroups != 3 {
				t.Errorf("pyarrow sees %d row groups, want 3", r.Pyarrow.RowGroups)
			}
			wantCodec := map[string]string{CodecSnappy: "SNAPPY", CodecZstd: "ZSTD", CodecNone: "UNCOMPRESSED"}[codecOf(t, f)]
			if len(r.Pyarrow.Codecs) != 1 || r.Pyarrow.Codecs[0] != wantCodec {
				t.Errorf("pyarrow sees codecs %v, want [%s]", r.Pyarrow.Codecs, wantCodec)
			}
			// Row 250 is in row group 1: DuckDB's probe of the id bloom
			// filter must not exclude that group, and must exclude some
			// group for an id that is nowhere.
			if len(r.DuckDB.BloomPresent) != 3 || r.DuckDB.BloomPresent[1] {
				t.Errorf("DuckDB bloom probe for a present id: excludes %v", r.DuckDB.BloomPresent)
			}
			excluded := 0
			for _, x := range r.DuckDB.BloomAbsent {
				if x {
					excluded++
				}
			}
			if excluded == 0 {
				t.Errorf("DuckDB bloom probe excludes no row group for an absent id: %v", r.DuckDB.BloomAbsent)
			}
		})
	}
}

// writeInSnappyParts writes d in Snappy with every page of more than 256
// bytes compressed in up to four parts.
func writeInSnappyParts(t *testing.T, dir string, s *schema.Schema, d Data) File {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	defer func(b int) { snappyPartBytes = b }(snappyPartBytes)
	snappyPartBytes = 256
	before := snappyParts.Load()
	f := mustWrite(t, Options{FS: vfs.Default, Codec: CodecSnappy, RowGroupRows: 200}, dir, s, testMeta(), d)
	if snappyParts.Load() == before {
		t.Fatal("no page was compressed in parts")
	}
	return f
}

func codecOf(t *testing.T, f File) string {
	pf := openRaw(t, vfs.Default, f.Path)
	switch pf.Metadata().RowGroups[0].Columns[0].MetaData.Codec.String() {
	case "SNAPPY":
		return CodecSnappy
	case "ZSTD":
		return CodecZstd
	}
	return CodecNone
}

// compareRows checks every value of every row as another engine read it.
func compareRows(t *testing.T, engine string, s *schema.Schema, d Data, rows []map[string]any) {
	t.Helper()
	b := d.Rows
	if len(rows) != b.Len() {
		t.Fatalf("%s read %d rows, want %d", engine, len(rows), b.Len())
	}
	for i, row := range rows {
		if len(row) != len(s.Columns)+3 {
			t.Fatalf("%s row %d has %d columns, want %d: %v", engine, i, len(row), len(s.Columns)+3, row)
		}
		check := func(col string, ok bool, want any) {
			if !ok {
				t.Fatalf("%s row %d column %s = %#v, want %#v", engine, i, col, row[col], want)
			}
		}
		id, ok := row["id"].(string)
		check("id", ok && id == b.IDs[i], b.IDs[i])
		check("_seq", numberIs(row["_seq"], d.Seq[i]), d.Seq[i])
		check("_epoch", numberIs(row["_epoch"], d.Epoch[i]), d.Epoch[i])
		for c, col := range s.Columns {
			v := &b.Cols[c]
			got := row[col.Name]
			if v.IsNull(i) {
				check(col.Name, got == nil, nil)
				continue
			}
			switch col.Type {
			case schema.String, schema.JSON:
				str, ok := got.(string)
				check(col.Name, ok && str == v.Str[i], v.Str[i])
			case schema.Int64:
				check(col.Name, numberIs(got, v.I64[i]), v.I64[i])
			case schema.Float64:
				n, ok := got.(json.Number)
				f, err := strconv.ParseFloat(string(n), 64)
				check(col.Name, ok && err == nil && (f == v.F64[i] || math.IsNaN(f) && math.IsNaN(v.F64[i])), v.F64[i])
			case schema.Bool:
				bv, ok := got.(bool)
				check(col.Name, ok && bv == v.Bool[i], v.Bool[i])
			}
		}
	}
}

func numberIs[T int64 | uint64](got any, want T) bool {
	n, ok := got.(json.Number)
	return ok && string(n) == fmt.Sprint(want)
}

func compareMetadata(t *testing.T, engine string, f File, s *schema.Schema, kv map[string]string) {
	t.Helper()
	want, err := keyValues(&f.Meta, s)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range want {
		if got, ok := kv[p[0]]; !ok || got != p[1] {
			t.Errorf("%s: footer %s = %q (present %t), want %q", engine, p[0], got, ok, p[1])
		}
	}
}

func checkArrowTypes(t *testing.T, types map[string]string) {
	t.Helper()
	want := map[string][]string{
		"id": {"string"}, "s": {"string"}, "s_null": {"string"},
		// pyarrow maps the JSON logical type to its JSON extension type on
		// recent versions, to string on older ones.
		"j": {"string", "extension<arrow.json>"}, "j_null": {"string", "extension<arrow.json>"},
		"i": {"int64"}, "i_null": {"int64"}, "f": {"double"}, "f_null": {"double"},
		"b": {"bool"}, "b_null": {"bool"}, "_seq": {"uint64"}, "_epoch": {"uint64"},
	}
	for col, ok := range want {
		if !contains(ok, types[col]) {
			t.Errorf("pyarrow type of %s is %q, want one of %v", col, types[col], ok)
		}
	}
}

func checkDuckTypes(t *testing.T, types map[string]string) {
	t.Helper()
	want := map[string]string{
		"id": "VARCHAR", "s": "VARCHAR", "s_null": "VARCHAR", "j": "JSON", "j_null": "JSON",
		"i": "BIGINT", "i_null": "BIGINT", "f": "DOUBLE", "f_null": "DOUBLE",
		"b": "BOOLEAN", "b_null": "BOOLEAN", "_seq": "UBIGINT", "_epoch": "UBIGINT",
	}
	for col, w := range want {
		if types[col] != w {
			t.Errorf("DuckDB type of %s is %q, want %s", col, types[col], w)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// pyNestedReader reads each generation file named on its command line with
// pyarrow and with DuckDB and prints, per file, the Arrow type and
// nullability of every field as pyarrow reads it, DuckDB's column types,
// and the rows each engine reads in one plain form: timestamps as
// microseconds since the epoch (an Arrow cast to int64, at every depth, so
// no datetime conversion stands between the file and the comparison),
// binary as base64. DuckDB's rows come through its Arrow export: its own
// Python conversion of a timestamp with a time zone needs pytz, which the
// pinned environment does not have.
const pyNestedReader = `
import base64, json, sys
import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

def micros(t):
    if pa.types.is_timestamp(t):
        return pa.int64()
    if pa.types.is_list(t):
        f = t.value_field
        return pa.list_(pa.field(f.name, micros(f.type), f.nullable))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, micros(f.type), f.nullable) for f in t])
    return t

def plain(v):
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    if isinstance(v, list):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    return v

def rows(table):
    table = table.cast(pa.schema([pa.field(f.name, micros(f.type), f.nullable) for f in table.schema]))
    return plain(table.to_pylist())

out = []
for path in sys.argv[1:]:
    table = pq.read_table(path)
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")  # it prints to stdout on slow queries
    duck = con.execute("SELECT * FROM read_parquet(?) ORDER BY _seq", [path]).fetch_arrow_table()
    duck_types = dict(con.execute(
        "SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM read_parquet(?))", [path]).fetchall())
    out.append({
        "path": path,
        "arrow_types": {f.name: str(f.type) for f in table.schema},
        "arrow_nullable": {f.name: f.nullable for f in table.schema},
        "duckdb_types": duck_types,
        "pyarrow": rows(table),
        "duckdb": rows(duck),
    })
json.dump(out, sys.stdout)
`

// TestNestedReadsInPyarrowAndDuckDB proves that pyarrow and DuckDB read
// every column type of a generation with its exact Arrow (and DuckDB)
// type, and read back exactly the values written: nulls and empty lists
// at every level, lists longer than a page, several row groups, every
// codec.
func TestNestedReadsInPyarrowAndDuckDB(t *testing.T) {
	py := rollwalPython(t)
	s := nestedTypes(t)
	d := nestedRows(t, s, 600, nestedSeed(t), 5)
	dir := t.TempDir()
	var args []string
	for _, codec := range []string{CodecSnappy, CodecZstd, CodecNone} {
		f := mustWrite(t, Options{FS: vfs.Default, Codec: codec, RowGroupRows: 250, PageBufferSize: 16 << 10}, dir, s, testMeta(), d)
		args = append(args, f.Path)
	}
	cmd := exec.Command(py, append([]string{"-c", pyNestedReader}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s failed: %v\n%s", py, err, lastLines(stderr.String(), 20))
	}
	var results []struct {
		Path          string            `json:"path"`
		ArrowTypes    map[string]string `json:"arrow_types"`
		ArrowNullable map[string]bool   `json:"arrow_nullable"`
		DuckTypes     map[string]string `json:"duckdb_types"`
		Pyarrow       []any             `json:"pyarrow"`
		DuckDB        []any             `json:"duckdb"`
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&results); err != nil {
		t.Fatalf("decoding the reader's output: %v\n%.2000s", err, out)
	}
	if len(results) != len(args) {
		t.Fatalf("%d results for %d files", len(results), len(args))
	}
	want := plainRows(t, d)
	for _, r := range results {
		t.Run(filepath.Base(r.Path), func(t *testing.T) {
			checkNestedArrowTypes(t, s, r.ArrowTypes, r.ArrowNullable)
			checkNestedDuckTypes(t, r.DuckTypes)
			for engine, got := range map[string][]any{"pyarrow": r.Pyarrow, "duckdb": r.DuckDB} {
				if len(got) != len(want) {
					t.Fatalf("%s read %d rows, want %d", engine, len(got), len(want))
				}
				for i := range want {
					if at, ok := sameJSON(want[i], got[i], ""); !ok {
						t.Fatalf("%s row %d differs at %s:\n got %s\nwant %s", engine, i, at, brief(got[i]), brief(want[i]))
					}
				}
			}
		})
	}
}

// plainRows returns d's rows in the form pyNestedReader prints them,
// through JSON (numbers as json.Number).
func plainRows(t *testing.T, d Data) []any {
	t.Helper()
	b := d.Rows
	rows := make([]map[string]any, b.Len())
	for i := range rows {
		r := map[string]any{"id": b.IDs[i], "_seq": d.Seq[i], "_epoch": d.Epoch[i]}
		for c, col := range b.Schema.Columns {
			r[col.Name] = plainValue(b.Value(c, i))
		}
		rows[i] = r
	}
	text, err := json.Marshal(rows)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	var out []any
	if err := dec.Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

func plainValue(v any) any {
	switch x := v.(type) {
	case []byte:
		return base64.StdEncoding.EncodeToString(x)
	case time.Time:
		return x.UnixMicro()
	case float32:
		return float64(x) // the value Arrow widens it to, printed in full
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = plainValue(x[i])
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k := range x {
			out[k] = plainValue(x[k])
		}
		return out
	}
	return v
}

// sameJSON compares decoded JSON values; numbers are equal when they are
// the same integer or the same float64 (Python and Go spell some floats
// differently). It returns where they differ.
func sameJSON(want, got any, at string) (string, bool) {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok || len(g) != len(w) {
			return at, false
		}
		for k := range w {
			if p, ok := sameJSON(w[k], g[k], at+"."+k); !ok {
				return p, false
			}
		}
		return at, true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return at, false
		}
		for i := range w {
			if p, ok := sameJSON(w[i], g[i], fmt.Sprintf("%s[%d]", at, i)); !ok {
				return p, false
			}
		}
		return at, true
	case json.Number:
		g, ok := got.(json.Number)
		return at, ok && sameNumber(w, g)
	}
	return at, reflect.DeepEqual(want, got)
}

func sameNumber(a, b json.Number) bool {
	if a == b {
		return true
	}
	x, err1 := a.Int64()
	y, err2 := b.Int64()
	if err1 == nil && err2 == nil {
		return x == y
	}
	return sameFloat(a, b)
}

func sameFloat(a, b json.Number) bool {
	x, err1 := a.Float64()
	y, err2 := b.Float64()
	return err1 == nil && err2 == nil && x == y
}

func checkNestedArrowTypes(t *testing.T, s *schema.Schema, types map[string]string, nullable map[string]bool) {
	t.Helper()
	const js = "extension<arrow.json>"
	want := map[string]string{
		"id": "string", "_seq": "uint64", "_epoch": "uint64",
		"string": "string", "json": js, "int64": "int64", "float64": "double", "bool": "bool",
		"int32": "int32", "float32": "float", "binary": "binary", "timestamp": "timestamp[us, tz=UTC]",
		"tokens":   "list<element: int32 not null>",
		"logprobs": "list<element: float>",
		"tags":     "list<element: string not null>",
		"blobs":    "list<element: binary>",
		"times":    "list<element: timestamp[us, tz=UTC] not null>",
		"flags":    "list<element: bool>",
		"counts":   "list<element: int64>",
		"scores":   "list<element: double not null>",
		"docs":     "list<element: " + js + ">",
		"msg":      "struct<role: string not null, content: string>",
		"stats":    "struct<n: int32, mean: double not null, at: timestamp[us, tz=UTC], ok: bool not null, raw: binary>",
		"messages": "list<element: struct<role: string not null, content: string not null> not null>",
		"events":   "list<element: struct<at: timestamp[us, tz=UTC] not null, score: float, label: " + js + ", blob: binary not null>>",
	}
	for name, typ := range want {
		if strings.HasSuffix(name, "_null") {
			continue
		}
		if _, ok := want[name+"_null"]; !ok && s.Index(name+"_null") >= 0 {
			want[name+"_null"] = typ
		}
	}
	if len(types) != len(want) {
		t.Errorf("pyarrow sees %d columns, want %d: %v", len(types), len(want), types)
	}
	for name, w := range want {
		// pyarrow maps the JSON logical type to its JSON extension type on
		// recent versions, to string on older ones.
		if got := types[name]; got != w && got != strings.ReplaceAll(w, js, "string") {
			t.Errorf("pyarrow type of %s is %q, want %q", name, got, w)
		}
		if i := s.Index(name); i >= 0 && nullable[name] != s.Columns[i].Nullable {
			t.Errorf("pyarrow field %s nullable=%t, want %t", name, nullable[name], s.Columns[i].Nullable)
		}
	}
}

func checkNestedDuckTypes(t *testing.T, types map[string]string) {
	t.Helper()
	want := map[string]string{
		"int32": "INTEGER", "int32_null": "INTEGER", "float32": "FLOAT", "float32_null": "FLOAT",
		"binary": "BLOB", "binary_null": "BLOB",
		"timestamp": "TIMESTAMP WITH TIME ZONE", "timestamp_null": "TIMESTAMP WITH TIME ZONE",
		"tokens": "INTEGER[]", "logprobs": "FLOAT[]", "tags": "VARCHAR[]", "blobs": "BLOB[]",
		"times": "TIMESTAMP WITH TIME ZONE[]", "flags": "BOOLEAN[]", "counts": "BIGINT[]",
		"scores": "DOUBLE[]", "docs": "JSON[]",
		"msg":      `STRUCT("role" VARCHAR, "content" VARCHAR)`,
		"stats":    `STRUCT(n INTEGER, mean DOUBLE, "at" TIMESTAMP WITH TIME ZONE, ok BOOLEAN, raw BLOB)`,
		"messages": `STRUCT("role" VARCHAR, "content" VARCHAR)[]`,
		"events":   `STRUCT("at" TIMESTAMP WITH TIME ZONE, score FLOAT, "label" JSON, blob BLOB)[]`,
	}
	for name, w := range want {
		if types[name] != w {
			t.Errorf("DuckDB type of %s is %q, want %s", name, types[name], w)
		}
	}
}
