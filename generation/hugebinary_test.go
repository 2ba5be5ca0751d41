package generation

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/vfs"
)

// pyBinaryDigests reads a generation with pyarrow and DuckDB (through its
// Arrow export) and prints every row with each bytes value, at any depth,
// replaced by "length:sha256".
const pyBinaryDigests = `
import hashlib, json, sys
import duckdb
import pyarrow.parquet as pq

def digest(v):
    if isinstance(v, bytes):
        return "%d:%s" % (len(v), hashlib.sha256(v).hexdigest())
    if isinstance(v, list):
        return [digest(x) for x in v]
    if isinstance(v, dict):
        return {k: digest(x) for k, x in v.items()}
    return v

path = sys.argv[1]
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")
duck = con.execute("SELECT * FROM read_parquet(?) ORDER BY _seq", [path]).fetch_arrow_table()
json.dump({
    "footer_bytes": pq.read_metadata(path).serialized_size,
    "pyarrow": digest(pq.read_table(path).to_pylist()),
    "duckdb": digest(duck.to_pylist()),
}, sys.stdout)
`

// TestHugeBinaryReadsInPyarrow writes binary values of 0xFF bytes only, of
// many MiB, at the top level, in a list and in a list of structs. Such a
// max has no shorter bound (see StatisticsPrefixBytes): in a page header
// it made pyarrow refuse the file ("Deserializing page header failed");
// binary pages carry no header statistics, so pyarrow and DuckDB read
// every byte back. The value is still kept whole in the column index and
// the footer.
func TestHugeBinaryReadsInPyarrow(t *testing.T) {
	py := rollwalPython(t)
	s, err := schema.New([]schema.Column{
		{Name: "bin", Type: schema.Binary},
		{Name: "blobs", Type: schema.List, Element: &schema.Column{Type: schema.Binary}},
		{Name: "parts", Type: schema.List, Nullable: true, Element: &schema.Column{Type: schema.Struct, Fields: []schema.Column{
			{Name: "kind", Type: schema.String},
			{Name: "data", Type: schema.Binary, Nullable: true},
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	// 12 MiB: a page header would hold it twice (min_value, max_value and
	// their deprecated copies), past Arrow's 16 MiB cap on a page header.
	huge := []byte(strings.Repeat("\xff", 12<<20))
	rows := make([]schema.Row, 40)
	for i := range rows {
		small := []byte(fmt.Sprintf("\xff\xfe-%d", i))
		r := schema.Row{"id": fmt.Sprintf("row-%02d", i), "bin": small, "blobs": []any{small},
			"parts": []any{map[string]any{"kind": "text", "data": small}}}
		switch i {
		case 10:
			r["bin"] = huge
		case 20:
			r["blobs"] = []any{small, huge}
		case 30:
			r["parts"] = []any{map[string]any{"kind": "image", "data": huge}, map[string]any{"kind": "none"}}
		}
		rows[i] = r
	}
	b, err := s.Build(rows)
	if err != nil {
		t.Fatal(err)
	}
	d := Data{Rows: b, Seq: make([]uint64, len(rows)), Epoch: make([]uint64, len(rows))}
	for i := range rows {
		d.Seq[i], d.Epoch[i] = uint64(i+1), 7
	}
	f := mustWrite(t, Options{FS: vfs.Default}, t.TempDir(), s, testMeta(), d)

	cmd := exec.Command(py, "-c", pyBinaryDigests, f.Path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s failed: %v\n%s", py, err, lastLines(stderr.String(), 20))
	}
	var res struct {
		FooterBytes int64 `json:"footer_bytes"`
		Pyarrow     []any `json:"pyarrow"`
		DuckDB      []any `json:"duckdb"`
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("decoding the reader's output: %v\n%.2000s", err, out)
	}
	t.Logf("file %d bytes, footer %d bytes", f.Size, res.FooterBytes)
	want := digestRows(t, d)
	for engine, got := range map[string][]any{"pyarrow": res.Pyarrow, "duckdb": res.DuckDB} {
		if len(got) != len(want) {
			t.Fatalf("%s read %d rows, want %d", engine, len(got), len(want))
		}
		for i := range want {
			if at, ok := sameJSON(want[i], got[i], ""); !ok {
				t.Fatalf("%s row %d differs at %s:\n got %s\nwant %s", engine, i, at, brief(got[i]), brief(want[i]))
			}
		}
	}
}

// digestRows is plainRows with every bytes value replaced by its digest.
func digestRows(t *testing.T, d Data) []any {
	t.Helper()
	b := d.Rows
	var rows []any
	for i := range b.Len() {
		r := map[string]any{"id": b.IDs[i], "_seq": d.Seq[i], "_epoch": d.Epoch[i]}
		for c, col := range b.Schema.Columns {
			r[col.Name] = digestBytes(b.Value(c, i))
		}
		rows = append(rows, r)
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

func digestBytes(v any) any {
	switch x := v.(type) {
	case []byte:
		h := sha256.Sum256(x)
		return fmt.Sprintf("%d:%s", len(x), hex.EncodeToString(h[:]))
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = digestBytes(x[i])
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k := range x {
			out[k] = digestBytes(x[k])
		}
		return out
	}
	return v
}
