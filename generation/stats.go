package generation

import (
	"unicode/utf8"

	"github.com/parquet-go/parquet-go"
)

// StatisticsPrefixBytes bounds the min and max of a byte-array leaf (id,
// string, json and binary, at any depth: list elements and struct fields
// too) wherever the file records them: the statistics of each page header,
// the column index, and the column chunk statistics in the footer. A value
// up to this length is recorded exactly; a longer one by a
// prefix, following Parquet's convention for truncated bounds (parquet-java's
// BinaryTruncator):
//
//   - a truncated min is a prefix of the min, cut at a UTF-8 boundary, so it
//     sorts at or before every value of the page;
//   - a truncated max is that prefix with its last code point incremented
//     (skipping surrogates; a last U+10FFFF is dropped and the one before it
//     incremented), so it sorts after every value of the page.
//
// Truncated bounds stay valid UTF-8 for UTF-8 values. Bytes that are not
// UTF-8 (binary columns) fall back to a byte prefix with its last byte
// below 0xFF incremented. A max whose first StatisticsPrefixBytes bytes are
// all 0xFF has no shorter bound and is kept whole: it cannot be text, and a
// binary leaf's pages carry no statistics in their headers (see
// binaryLeaves), so such a value lands only in the column index (once per
// page) and the footer (once per row group), never in a page header
// (TestHugeBinaryReadsInPyarrow).
//
// Without this bound parquet-go writes the whole value up to four times (min,
// max and their deprecated copies) into the
// page header, and readers cap a page header (Arrow: 16 MiB), so a long value
// made the file unreadable to pyarrow. 64 bytes keep ids of the usual
// shapes (UUIDs, hashes) exact; parquet-java's column index default is the
// same.
const StatisticsPrefixBytes = 64

// truncateMin returns a lower bound of v of at most limit bytes.
func truncateMin(v []byte, limit int) []byte {
	if len(v) <= limit {
		return v
	}
	if cut := runeCut(v, limit); cut > 0 {
		return v[:cut]
	}
	return v[:limit]
}

// truncateMax returns an upper bound of v of at most limit bytes, or v when
// no shorter one exists.
func truncateMax(v []byte, limit int) []byte {
	if len(v) <= limit {
		return v
	}
	if cut := runeCut(v, limit); cut > 0 && utf8.Valid(v[:cut]) {
		if up, ok := incrementRunes(v[:cut], limit); ok {
			return up
		}
	}
	if up, ok := incrementBytes(v[:limit]); ok {
		return up
	}
	return v
}

// runeCut returns the largest n ≤ limit at which v[:n] ends on a rune
// boundary of UTF-8 text, or 0 when v does not look like UTF-8 there.
func runeCut(v []byte, limit int) int {
	for n := limit; n > 0 && n > limit-utf8.UTFMax; n-- {
		if utf8.RuneStart(v[n]) {
			return n
		}
	}
	return 0
}

// incrementRunes returns UTF-8 text of at most limit bytes that sorts after
// every string beginning with p (valid UTF-8): p with its last code point
// replaced by the next one. UTF-8 byte order is code point order, so that is
// a bound; so is a shorter prefix with its last code point incremented, used
// when the next code point is none (U+10FFFF) or needs a byte more than
// limit leaves.
func incrementRunes(p []byte, limit int) ([]byte, bool) {
	for len(p) > 0 {
		r, size := utf8.DecodeLastRune(p)
		p = p[:len(p)-size]
		next := r + 1
		if next >= 0xD800 && next <= 0xDFFF {
			next = 0xE000
		}
		if next <= utf8.MaxRune && len(p)+utf8.RuneLen(next) <= limit {
			return utf8.AppendRune(append([]byte(nil), p...), next), true
		}
	}
	return nil, false
}

// incrementBytes returns p with its last byte below 0xFF incremented and the
// bytes after it dropped: it sorts after every byte string beginning with p.
func incrementBytes(p []byte) ([]byte, bool) {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] != 0xFF {
			up := append([]byte(nil), p[:i+1]...)
			up[i]++
			return up, true
		}
	}
	return nil, false
}

// parquet-go records a page's bounds (Page.Bounds) in the page header, the
// column index and the chunk statistics, and offers no limit for the first
// and last (ColumnIndexSizeLimit covers only the column index, by bytes, not
// UTF-8 aware). So the byte-array leaves of a generation's schema carry a
// Type whose pages report truncated bounds: each of the three places then
// holds a bound of at most StatisticsPrefixBytes bytes, and the chunk
// statistics, the min and max of the pages' bounds, stay bounds.

// truncatedStats wraps the byte-array leaves of root (a group), at every
// depth, so that their pages report truncated bounds.
func truncatedStats(root parquet.Node) parquet.Node {
	return &boundedGroup{Node: root, fields: boundedFields(root.Fields())}
}

func boundedFields(fields []parquet.Field) []parquet.Field {
	out := make([]parquet.Field, len(fields))
	for i, f := range fields {
		switch {
		case !f.Leaf():
			f = &boundedGroupField{Field: f, fields: boundedFields(f.Fields())}
		case f.Type().Kind() == parquet.ByteArray:
			f = &boundedField{Field: f, typ: boundedType{Type: f.Type()}}
		}
		out[i] = f
	}
	return out
}

type boundedGroup struct {
	parquet.Node
	fields []parquet.Field
}

func (g *boundedGroup) Fields() []parquet.Field { return g.fields }

// boundedGroupField is a struct or list inside the schema.
type boundedGroupField struct {
	parquet.Field
	fields []parquet.Field
}

func (g *boundedGroupField) Fields() []parquet.Field { return g.fields }

type boundedField struct {
	parquet.Field
	typ boundedType
}

func (f *boundedField) Type() parquet.Type { return f.typ }

type boundedType struct{ parquet.Type }

func (t boundedType) NewColumnBuffer(columnIndex, numValues int) parquet.ColumnBuffer {
	return boundedBuffer{ColumnBuffer: t.Type.NewColumnBuffer(columnIndex, numValues)}
}

type boundedBuffer struct{ parquet.ColumnBuffer }

func (b boundedBuffer) Page() parquet.Page { return boundedPage{Page: b.ColumnBuffer.Page()} }

type boundedPage struct{ parquet.Page }

func (p boundedPage) Bounds() (min, max parquet.Value, ok bool) {
	min, max, ok = p.Page.Bounds()
	if !ok {
		return min, max, ok
	}
	return truncatedValue(min, truncateMin), truncatedValue(max, truncateMax), true
}

func truncatedValue(v parquet.Value, truncate func([]byte, int) []byte) parquet.Value {
	b := v.ByteArray()
	if len(b) <= StatisticsPrefixBytes {
		return v
	}
	return parquet.ByteArrayValue(truncate(b, StatisticsPrefixBytes)).
		Level(v.RepetitionLevel(), v.DefinitionLevel(), v.Column())
}

// binaryLeaves returns the paths of the binary leaves, at every depth. Their
// pages carry no statistics in their headers: the bounds of a page are in
// the column index, and a binary max may have no short bound (see
// StatisticsPrefixBytes) that would otherwise be repeated in a page header,
// which pyarrow caps at 16 MiB.
func (lay *layout) binaryLeaves() [][]string {
	var paths [][]string
	for _, path := range lay.schema.Columns() {
		lc, _ := lay.schema.Lookup(path...)
		if t := lc.Node.Type(); t.Kind() == parquet.ByteArray && t.LogicalType() == nil {
			paths = append(paths, path)
		}
	}
	return paths
}
