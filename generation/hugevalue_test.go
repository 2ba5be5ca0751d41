package generation

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/vfs"
)

// pyHashReader reads each file named on its command line with pyarrow and
// with DuckDB and prints every row with each text value (id included)
// replaced by valueDigest of it, so that a value of tens of MiB is compared
// byte for byte without printing it. It also prints the size of the footer
// and the longest min/max statistic pyarrow sees.
const pyHashReader = `
import hashlib, json, sys
import duckdb
import pyarrow.parquet as pq

def digest(v):
    if isinstance(v, str):
        b = v.encode("utf-8")
        return "%d:%s" % (len(b), hashlib.sha256(b).hexdigest())
    return v

def rows(pylist):
    return [{k: digest(v) for k, v in r.items()} for r in pylist]

out = []
for path in sys.argv[1:]:
    table = pq.read_table(path)
    md = pq.read_metadata(path)
    longest = 0
    for g in range(md.num_row_groups):
        for c in range(md.num_columns):
            st = md.row_group(g).column(c).statistics
            if st is not None and st.has_min_max:
                st.min, st.max  # decodes STRING statistics: must be valid UTF-8
                for raw in (st.min_raw, st.max_raw):
                    if isinstance(raw, (bytes, str)):
                        longest = max(longest, len(raw))
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")  # it prints to stdout on slow queries
    rel = con.execute("SELECT * FROM read_parquet(?) ORDER BY _seq", [path])
    names = [d[0] for d in rel.description]
    duck = [dict(zip(names, r)) for r in rel.fetchall()]
    out.append({
        "path": path,
        "footer_bytes": md.serialized_size,
        "longest_statistic": longest,
        "pyarrow": {"rows": rows(table.to_pylist())},
        "duckdb": {"rows": rows(duck)},
    })
json.dump(out, sys.stdout)
`

// valueDigest is what pyHashReader prints for a text value.
func valueDigest(s string) string {
	h := sha256.Sum256([]byte(s))
	return fmt.Sprintf("%d:%s", len(s), hex.EncodeToString(h[:]))
}

// hugeText returns n bytes of valid UTF-8, seeded: ASCII letters mixed with
// 2-, 3- and 4-byte runes, so that any cut may land inside a rune.
func hugeText(n int, seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, 2))
	runes := []rune{'é', 'ß', '日', '語', '🎲', '\U0010FFFF', 'ÿ'}
	var b strings.Builder
	b.Grow(n)
	for b.Len()+utf8.UTFMax <= n {
		if rng.IntN(3) == 0 {
			b.WriteRune(runes[rng.IntN(len(runes))])
		} else {
			b.WriteByte(byte('a' + rng.IntN(26)))
		}
	}
	for b.Len() < n {
		b.WriteByte('z')
	}
	return b.String()
}

// hugeRows is allTypesRows with values of the largest size a row may hold:
// a string, a JSON value (in a nullable column) and an id of the longest
// length.
func hugeRows(t testing.TB, s *schema.Schema, n, valueBytes int) Data {
	t.Helper()
	d := allTypesRows(t, s, n, 99)
	str, js := &d.Rows.Cols[s.Index("s")], &d.Rows.Cols[s.Index("j_null")]
	str.Str[n/2] = hugeText(valueBytes, 1)
	js.Str[n*3/4] = `{"blob":"` + hugeText(valueBytes-len(`{"blob":""}`), 2) + `"}`
	if js.Nulls != nil {
		js.Nulls[n*3/4] = false
	}
	d.Rows.IDs[n/4] = hugeText(schema.MaxIDBytes, 3)
	return d
}

// digested returns d with every text value and id replaced by its digest.
func digested(s *schema.Schema, d Data) Data {
	b := s.NewBatch(d.Rows.Len())
	for i := range d.Rows.Len() {
		b.AppendRow(d.Rows, i)
	}
	for i, id := range b.IDs {
		b.IDs[i] = valueDigest(id)
	}
	for c := range b.Cols {
		v := &b.Cols[c]
		if v.Type == schema.String || v.Type == schema.JSON {
			v.Str = append([]string(nil), v.Str...)
			for i, x := range v.Str {
				if !v.IsNull(i) {
					v.Str[i] = valueDigest(x)
				}
			}
		}
	}
	return Data{Rows: b, Seq: d.Seq, Epoch: d.Epoch}
}

// TestHugeValueReadsInPyarrow writes values of the maximum size a row may
// hold (schema.MaxValueBytes) among ordinary rows and reads the file back
// with pyarrow and DuckDB: every row, every byte (by SHA-256). A base file
// is written by the same generation.Write (publish/stage.go), so this covers
// base files too. Before statistics were truncated, a page header held the
// whole value several times and pyarrow refused the file ("Couldn't
// deserialize thrift").
func TestHugeValueReadsInPyarrow(t *testing.T) {
	py := rollwalPython(t)
	s := allTypes(t)
	d := hugeRows(t, s, 400, schema.MaxValueBytes)
	dir := t.TempDir()
	var files []File
	for _, codec := range []string{CodecSnappy, CodecNone} {
		files = append(files, mustWrite(t, Options{FS: vfs.Default, Codec: codec, RowGroupRows: 300}, dir, s, testMeta(), d))
	}
	// Without compression the file is the values plus bounded overhead;
	// an untruncated statistic repeats each huge value in a page header.
	var valueBytes int64
	for _, id := range d.Rows.IDs {
		valueBytes += int64(len(id))
	}
	for _, v := range d.Rows.Cols {
		for _, x := range v.Str {
			valueBytes += int64(len(x))
		}
	}
	if over := files[1].Size - valueBytes; over > 1<<20 {
		t.Errorf("uncompressed file of %d bytes holds %d bytes of text: %d bytes of overhead, want under 1 MiB",
			files[1].Size, valueBytes, over)
	}
	args := []string{"-c", pyHashReader}
	for _, f := range files {
		args = append(args, f.Path)
	}
	cmd := exec.Command(py, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s failed: %v\n%s", py, err, lastLines(stderr.String(), 20))
	}
	var results []struct {
		Path             string         `json:"path"`
		FooterBytes      int64          `json:"footer_bytes"`
		LongestStatistic int            `json:"longest_statistic"`
		Pyarrow          pyEngineResult `json:"pyarrow"`
		DuckDB           pyEngineResult `json:"duckdb"`
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&results); err != nil {
		t.Fatalf("decoding the reader's output: %v\n%.2000s", err, out)
	}
	want := digested(s, d)
	for i, r := range results {
		t.Run(files[i].Name, func(t *testing.T) {
			t.Logf("footer %d bytes, longest column statistic %d bytes", r.FooterBytes, r.LongestStatistic)
			compareRows(t, "pyarrow", s, want, r.Pyarrow.Rows)
			compareRows(t, "duckdb", s, want, r.DuckDB.Rows)
			if r.LongestStatistic > StatisticsPrefixBytes {
				t.Errorf("pyarrow sees a column statistic of %d bytes, want at most %d",
					r.LongestStatistic, StatisticsPrefixBytes)
			}
		})
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
