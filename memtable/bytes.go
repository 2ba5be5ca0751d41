package memtable

import "github.com/rollwal/rollwal/schema"

// What a row costs a memtable beyond its strings' bytes, on 64-bit
// platforms. These constants are the accounting rule, not wire format, but
// TestHeapTracksBytes and TestHeapTracksBytesOfLists check them against the
// Go heap: change them together.
const (
	stringHeaderBytes = 16 // a string value's slot in its column (pointer, length)
	fixedValueBytes   = 8  // an int64, float64 or timestamp value
	narrowValueBytes  = 4  // an int32 or float32 value
	boolValueBytes    = 1
	nullFlagBytes     = 1 // a nullable value's Nulls entry, at any level
	offsetBytes       = 8 // a list row's entry in its Offsets (an int64)
	// indexEntryBytes is an id's entry in the Set's map[string]uint64: a
	// 16-byte key, an 8-byte value and a control byte, at a load factor
	// between 7/16 and 7/8 (the map doubles when it is 7/8 full).
	indexEntryBytes = 48
	// rowBytes is the fixed cost of every row: its id's column slot, _seq,
	// _epoch and the id's index entry.
	rowBytes = stringHeaderBytes + 2*fixedValueBytes + indexEntryBytes
)

// EstimateBytes is what the rows of b cost once inserted into a memtable,
// and so what the caller acquires from the Budget before Insert(b) and what
// Insert charges. It counts every string's bytes (ids included), the
// per-value overheads above and the id index. A list row costs its offset
// and its elements, each as a value of the element's type; a struct costs
// its fields; every nullable level costs a null flag per value. Slack in
// growing column slices and the unused tail of the arena's current slab are
// not counted (each is bounded: about a quarter of a large slice, 1/16 of a
// slab).
//
// The estimate is additive: the estimate of a batch is the sum over its
// rows, so the rows dropped by Filter cost EstimateBytes(b) -
// EstimateBytes(fresh). It is 0 for an empty or nil batch.
func EstimateBytes(b *schema.Batch) int64 {
	if b == nil {
		return 0
	}
	n := b.Len()
	total := int64(n) * rowBytes
	for _, id := range b.IDs {
		total += stringBytes(len(id))
	}
	for c := range b.Cols {
		var col *schema.Column
		if b.Schema != nil && c < len(b.Schema.Columns) {
			col = &b.Schema.Columns[c]
		}
		total += vectorBytes(&b.Cols[c], col, 0, n)
	}
	return total
}

// vectorBytes is what values [lo, hi) of v cost. col is v's column, or nil
// for a batch without a schema. It is a sum over the values, which keeps
// EstimateBytes additive: a list row's elements are the range its offsets
// give, so the rows of a batch split its elements between them.
func vectorBytes(v *schema.Vector, col *schema.Column, lo, hi int) int64 {
	n := int64(hi - lo)
	if n == 0 {
		return 0 // without touching offsets, which a hand-made empty vector may lack
	}
	var total int64
	if nullable(v, col) {
		total += n * nullFlagBytes
	}
	switch v.Type {
	case schema.String, schema.JSON, schema.Binary:
		total += n * stringHeaderBytes
		for _, s := range v.Str[lo:hi] {
			total += stringBytes(len(s))
		}
	case schema.Int64, schema.Float64, schema.Timestamp:
		total += n * fixedValueBytes
	case schema.Int32, schema.Float32:
		total += n * narrowValueBytes
	case schema.Bool:
		total += n * boolValueBytes
	case schema.List:
		var elem *schema.Column
		if col != nil {
			elem = col.Element
		}
		total += n*offsetBytes + vectorBytes(v.Elem, elem, int(v.Offsets[lo]), int(v.Offsets[hi]))
	case schema.Struct:
		for f := range v.Fields {
			var field *schema.Column
			if col != nil && f < len(col.Fields) {
				field = &col.Fields[f]
			}
			total += vectorBytes(&v.Fields[f], field, lo, hi)
		}
	}
	return total
}

// nullable reports whether v's values may be null (and so may need a Nulls
// slice in the memtable, which a later batch can force). Without a column,
// the vector's own flags are all there is to go by.
func nullable(v *schema.Vector, col *schema.Column) bool {
	if col != nil {
		return col.Nullable
	}
	return v.Nulls != nil
}
