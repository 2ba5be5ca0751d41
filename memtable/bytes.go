package memtable

import "github.com/rollwal/rollwal/schema"

// What a row costs a memtable beyond its strings' bytes, on 64-bit
// platforms. These constants are the accounting rule, not wire format, but
// TestHeapTracksBytes checks them against the Go heap: change them together.
const (
	stringHeaderBytes = 16 // a string value's slot in its column (pointer, length)
	fixedValueBytes   = 8  // an int64 or float64 value
	boolValueBytes    = 1
	nullFlagBytes     = 1 // a nullable column's Nulls entry
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
// per-value overheads above and the id index; slack in growing column
// slices and the unused tail of the arena's current slab are not counted
// (each is bounded: about a quarter of a large slice, 1/16 of a slab).
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
		v := &b.Cols[c]
		if nullable(b, c) {
			total += int64(n) * nullFlagBytes
		}
		switch v.Type {
		case schema.String, schema.JSON:
			total += int64(n) * stringHeaderBytes
			for _, s := range v.Str[:n] {
				total += stringBytes(len(s))
			}
		case schema.Int64, schema.Float64:
			total += int64(n) * fixedValueBytes
		case schema.Bool:
			total += int64(n) * boolValueBytes
		}
	}
	return total
}

// nullable reports whether column c may hold nulls (and so may need a Nulls
// slice in the memtable, which a later batch can force).
func nullable(b *schema.Batch, c int) bool {
	if b.Schema != nil && c < len(b.Schema.Columns) {
		return b.Schema.Columns[c].Nullable
	}
	return b.Cols[c].Nulls != nil
}
