package generation

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/rollwal/rollwal/schema"
)

func TestTruncateBounds(t *testing.T) {
	const limit = 8
	cases := []struct{ in, min, max string }{
		{"short", "short", "short"},
		{"exactly8", "exactly8", "exactly8"},
		{"abcdefghij", "abcdefgh", "abcdefgi"},
		{"abcdefgéz", "abcdefg", "abcdefh"},            // é straddles the cut
		{"abcdef\x7fzz", "abcdef\x7fz", "abcdef\x7f{"}, // plain ASCII increment
		{"abcdefg\x7fzz", "abcdefg\x7f", "abcdefh"},    // U+0080 would need a ninth byte
		{"ab\U0010FFFF\U0010FFFFzz", "ab\U0010FFFF", "ac"},
		{"abc\ud7ffxyzw", "abc\ud7ffxy", "abc\ud7ffxz"},
		{"abcde\ud7ffxyz", "abcde\ud7ff", "abcde\ue000"}, // surrogates skipped
		{"ab\ud7ffxyzw", "ab\ud7ffxyz", "ab\ud7ffxy{"},
		{"\U0010FFFF\U0010FFFF\U0010FFFF", "\U0010FFFF\U0010FFFF", "\U0010FFFF\U0010FFFF"[:7] + "\xc0"}, // no UTF-8 bound: bytes
		{"\xff\xff\xff\xff\xff\xff\xff\xfe\x01", "\xff\xff\xff\xff\xff\xff\xff\xfe", "\xff\xff\xff\xff\xff\xff\xff\xff"},
		{"\xff\xff\xff\xff\xff\xff\xff\xff\x01", "\xff\xff\xff\xff\xff\xff\xff\xff", "\xff\xff\xff\xff\xff\xff\xff\xff\x01"}, // no shorter bound
	}
	for _, c := range cases {
		lo, hi := string(truncateMin([]byte(c.in), limit)), string(truncateMax([]byte(c.in), limit))
		if lo != c.min || hi != c.max {
			t.Errorf("%q: min %q max %q, want %q %q", c.in, lo, hi, c.min, c.max)
		}
		if lo > c.in || hi < c.in {
			t.Errorf("%q: [%q, %q] is not a bound", c.in, lo, hi)
		}
		if utf8.ValidString(c.in) && !strings.HasPrefix(c.in, "\U0010FFFF") && (!utf8.ValidString(lo) || !utf8.ValidString(hi)) {
			t.Errorf("%q: bound [%q, %q] is not UTF-8", c.in, lo, hi)
		}
	}
}

// Every min and max a file records for a text column, per page (column
// index) and per chunk (footer statistics), is at most StatisticsPrefixBytes
// and bounds the values it covers. Many pages, values longer and shorter
// than the limit.
func TestTruncatedStatisticsBoundValues(t *testing.T) {
	s := allTypes(t)
	d := hugeRows(t, s, 3000, 5000)
	for i := range d.Rows.IDs {
		if i%7 == 0 {
			d.Rows.IDs[i] = strings.Repeat("é", 40) + d.Rows.IDs[i] // ids longer than the limit
		}
	}
	fs, dir := newMemDir(t)
	f := mustWrite(t, Options{FS: fs, PageBufferSize: 8 << 10, RowGroupRows: 1000}, dir, s, testMeta(), d)
	pf := openRaw(t, fs, f.Path)
	values := func(leaf int) ([]string, []bool) {
		if leaf == 0 {
			return d.Rows.IDs, nil
		}
		v := &d.Rows.Cols[leaf-1]
		return v.Str, v.Nulls
	}
	pages := 0
	for g, rg := range pf.RowGroups() {
		first := int64(g) * 1000
		for leaf, chunk := range rg.ColumnChunks() {
			if leaf > len(s.Columns) || (leaf > 0 && s.Columns[leaf-1].Type != schema.String && s.Columns[leaf-1].Type != schema.JSON) {
				continue
			}
			vals, nulls := values(leaf)
			fc := chunk.(*parquet.FileColumnChunk)
			lo, hi, ok := fc.Bounds()
			if !ok {
				t.Fatalf("row group %d leaf %d has no bounds", g, leaf)
			}
			checkBound(t, lo, hi, vals, nulls, first, first+rg.NumRows())
			ci, err := fc.ColumnIndex()
			if err != nil {
				t.Fatal(err)
			}
			oi, err := fc.OffsetIndex()
			if err != nil {
				t.Fatal(err)
			}
			for p := range ci.NumPages() {
				end := first + rg.NumRows()
				if p+1 < oi.NumPages() {
					end = first + oi.FirstRowIndex(p+1)
				}
				if !ci.NullPage(p) {
					checkBound(t, ci.MinValue(p), ci.MaxValue(p), vals, nulls, first+oi.FirstRowIndex(p), end)
				}
				pages++
			}
		}
	}
	if pages < 100 {
		t.Fatalf("only %d pages: the test needs many", pages)
	}
	// The footer's copy of the chunk statistics is what pyarrow decodes.
	for _, rg := range pf.Metadata().RowGroups {
		for _, cc := range rg.Columns {
			if cc.MetaData.Type != format.ByteArray {
				continue
			}
			st := cc.MetaData.Statistics
			for _, b := range [][]byte{st.Min, st.Max, st.MinValue, st.MaxValue} {
				if len(b) > StatisticsPrefixBytes || !utf8.Valid(b) {
					t.Errorf("%v: statistic %q: longer than %d or not UTF-8", cc.MetaData.PathInSchema, b, StatisticsPrefixBytes)
				}
			}
		}
	}
}

func checkBound(t *testing.T, lo, hi parquet.Value, vals []string, nulls []bool, from, to int64) {
	t.Helper()
	l, h := lo.ByteArray(), hi.ByteArray()
	if len(l) > StatisticsPrefixBytes || len(h) > StatisticsPrefixBytes {
		t.Fatalf("rows [%d, %d): bounds of %d and %d bytes", from, to, len(l), len(h))
	}
	for i := from; i < to; i++ {
		if nulls != nil && nulls[i] {
			continue
		}
		if v := []byte(vals[i]); bytes.Compare(l, v) > 0 || bytes.Compare(h, v) < 0 {
			t.Fatalf("row %d: value %.80q outside the recorded bounds [%q, %q]", i, v, l, h)
		}
	}
}
