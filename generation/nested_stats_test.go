package generation

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"
)

// Every byte-array leaf, at every depth, records bounds of at most
// StatisticsPrefixBytes that hold its values: per page (column index,
// checked against the page's own values), per chunk (footer) and in the
// page headers, where binary leaves record none. The one longer bound is a
// binary max made of 0xFF bytes only, which has no shorter bound.
func TestNestedStatisticsAreBounded(t *testing.T) {
	s := nestedTypes(t)
	d := nestedRows(t, s, 1500, nestedSeed(t), 2)
	fs, dir := newMemDir(t)
	f := mustWrite(t, Options{FS: fs, PageBufferSize: 4 << 10, RowGroupRows: 500}, dir, s, testMeta(), d)
	file := fileBytes(t, fs, f.Path)
	pf := openRaw(t, fs, f.Path)
	paths := pf.Schema().Columns()
	pages, long := 0, 0
	for g, rg := range pf.RowGroups() {
		for leaf, chunk := range rg.ColumnChunks() {
			typ := chunk.Type()
			if typ.Kind() != parquet.ByteArray {
				continue
			}
			path := strings.Join(paths[leaf], ".")
			binary := typ.LogicalType() == nil
			fc := chunk.(*parquet.FileColumnChunk)
			ci, err := fc.ColumnIndex()
			if err != nil {
				t.Fatal(err)
			}
			values := pageValues(t, chunk)
			if len(values) != ci.NumPages() {
				t.Fatalf("%s: %d pages read, %d in the column index", path, len(values), ci.NumPages())
			}
			for p, vals := range values {
				pages++
				if ci.NullPage(p) {
					continue
				}
				lo, hi := ci.MinValue(p).ByteArray(), ci.MaxValue(p).ByteArray()
				long += checkBounds(t, path, binary, lo, hi, vals)
			}
			cc := pf.Metadata().RowGroups[g].Columns[leaf].MetaData
			st := cc.Statistics
			checkBounds(t, path+" (footer)", binary, st.MinValue, st.MaxValue, nil)
			if len(st.Min) > StatisticsPrefixBytes || len(st.Max) > StatisticsPrefixBytes {
				t.Errorf("%s: deprecated footer statistics of %d and %d bytes", path, len(st.Min), len(st.Max))
			}
			for _, h := range pageHeaders(t, file, cc) {
				st := pageStatistics(h)
				switch {
				case binary && st != nil && (st.MinValue != nil || st.MaxValue != nil || st.Min != nil || st.Max != nil):
					t.Errorf("%s: a binary page header records bounds", path)
				case !binary && st != nil:
					for _, b := range [][]byte{st.Min, st.Max, st.MinValue, st.MaxValue} {
						if len(b) > StatisticsPrefixBytes || !utf8.Valid(b) {
							t.Errorf("%s: page header statistic %.80q: longer than %d or not UTF-8", path, b, StatisticsPrefixBytes)
						}
					}
				}
			}
		}
	}
	t.Logf("%d byte-array pages, %d bounds of 0xFF bytes kept whole", pages, long)
	if pages < 200 || long == 0 {
		t.Fatalf("%d pages, %d whole 0xFF bounds: the test needs many pages and such a max", pages, long)
	}
}

// checkBounds checks a min and max of a leaf against its values (none for
// the footer) and returns 1 if the max is a 0xFF value kept whole.
func checkBounds(t *testing.T, what string, binary bool, lo, hi []byte, vals [][]byte) int {
	t.Helper()
	long := 0
	if len(lo) > StatisticsPrefixBytes {
		t.Errorf("%s: min of %d bytes", what, len(lo))
	}
	if len(hi) > StatisticsPrefixBytes {
		if !binary || strings.Trim(string(hi), "\xff") != "" {
			t.Errorf("%s: max of %d bytes: %.80q", what, len(hi), hi)
		}
		long = 1
	}
	if !binary && (!utf8.Valid(lo) || !utf8.Valid(hi)) {
		t.Errorf("%s: bounds [%q, %q] are not UTF-8", what, lo, hi)
	}
	for _, v := range vals {
		if bytes.Compare(lo, v) > 0 || bytes.Compare(hi, v) < 0 {
			t.Fatalf("%s: value %.80q outside the bounds [%q, %q]", what, v, lo, hi)
		}
	}
	return long
}

// pageValues returns the non-null values of each page of a chunk.
func pageValues(t *testing.T, chunk parquet.ColumnChunk) [][][]byte {
	t.Helper()
	pages := chunk.Pages()
	defer pages.Close()
	var out [][][]byte
	buf := make([]parquet.Value, 256)
	for {
		page, err := pages.ReadPage()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		var vals [][]byte
		r := page.Values()
		for {
			n, err := r.ReadValues(buf)
			for _, v := range buf[:n] {
				if !v.IsNull() {
					vals = append(vals, bytes.Clone(v.ByteArray()))
				}
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		out = append(out, vals)
	}
}

// pageHeaders decodes the page headers of a column chunk from the file.
func pageHeaders(t *testing.T, file []byte, cc format.ColumnMetaData) []format.PageHeader {
	t.Helper()
	r := bytes.NewReader(file[cc.DataPageOffset : cc.DataPageOffset+cc.TotalCompressedSize])
	dec := thrift.NewDecoder(new(thrift.CompactProtocol).NewReader(r))
	var headers []format.PageHeader
	for r.Len() > 0 {
		var h format.PageHeader
		if err := dec.Decode(&h); err != nil {
			t.Fatalf("page header %d of %v: %v", len(headers), cc.PathInSchema, err)
		}
		if _, err := r.Seek(int64(h.CompressedPageSize), io.SeekCurrent); err != nil {
			t.Fatal(err)
		}
		headers = append(headers, h)
	}
	return headers
}

func pageStatistics(h format.PageHeader) *format.Statistics {
	switch {
	case h.DataPageHeaderV2.Valid:
		return &h.DataPageHeaderV2.V.Statistics
	case h.DataPageHeader.Valid:
		return &h.DataPageHeader.V.Statistics
	}
	return nil
}
