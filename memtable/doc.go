// Package memtable buffers a shard's rows in memory, in columns, between the
// WAL and a generation file.
//
// # Generations and their memtables
//
// Every generation of a shard begins life as a memtable. A Set holds one
// shard's memtables: exactly one active memtable, which receives inserts,
// and a queue of sealed memtables waiting to be flushed, oldest first.
//
//	Insert ──▶ active g+3 ──── Rotate: seal g+3, open g+4 ────┐
//	                                                           ▼
//	           sealed, oldest first:  g ─ g+1 ─ g+2 ─ … ─ (g+3)
//	                                  │
//	Release(g) once g is committed ◀──┘  its bytes go back to the Budget,
//	                                     its ids leave the Set's index
//
// The lifecycle of one memtable, generation g:
//
//  1. Active. Set.Insert appends rows with their _seq and _epoch; the Set's
//     id index maps each id to g. A memtable also remembers, per source, the
//     highest producer offset an Insert attached to it (SourceOffsets).
//  2. Sealed. Set.Rotate seals g and opens g+1 as the new active memtable.
//     A sealed memtable never changes again, so the flusher reads Rows, Seqs
//     and Epochs, without holding the engine's lock, while inserts go on
//     into g+1.
//  3. Released. Once generation g is durable and committed, Set.Release(g)
//     drops it: its bytes go back to the Budget and its ids leave the index.
//     Generations leave strictly in order; Release refuses any generation
//     but the oldest sealed one (ErrOutOfOrder), because generation g+1 must
//     never commit before g (package engine, "Lifecycle of a shard": Flush).
//
// # Duplicates
//
// Set.Filter drops rows whose id is in any memtable of the Set, active or
// sealed, and later repeats of an id within the batch itself. The index is
// one map per Set (id → generation), so a lookup does not depend on how many
// memtables are queued. Ids of a released generation leave the index: from
// then on the base table's ID check, not the memtable, catches a repeat.
// Insert itself does not deduplicate; call Filter first.
//
// # Memory
//
// A Budget is shared by all shards of a process. The caller acquires
// EstimateBytes(b) from it before inserting b (Acquire fails at once with
// ErrBackpressure, or waits, first come first served), and Insert charges
// exactly EstimateBytes(b) to the memtable. The bytes return to the budget
// when the memtable is released (or the Set closed). EstimateBytes is the
// one accounting rule; it is additive over rows, so EstimateBytes(b) -
// EstimateBytes(fresh) is what the rows Filter dropped would have cost.
//
// The estimate is honest on purpose: it counts every string's bytes, the
// 16-byte header each string value occupies in its column, fixed-width
// values, the _seq and _epoch columns and the id's index entry; a list row
// counts its 8-byte offset and its elements as values, a struct its fields,
// and every nullable level a null flag per value. Insert copies strings
// (binary values too, in lists and structs as at the top) into the
// memtable's own arena of large slabs, so a memtable never pins the buffers
// its input was decoded from and the garbage collector sees a few slabs
// rather than one object per value. Strings read from Rows point into that
// arena: a caller that keeps one beyond the memtable's life keeps its slab
// alive, so clone what you keep. Measured (TestHeapTracksBytes,
// TestHeapTracksBytesOfLists), the live heap a Set keeps is 1.00 to 1.16
// times its Bytes, from rollout-sized text to tiny rows, from thousands of
// token ids per row to short lists of chat messages; the difference is
// slack in growing column slices. The index is rebuilt when it has shrunk
// to a quarter of its peak, since a Go map keeps its capacity after deletes.
//
// # Concurrency
//
// A Set and a Budget are safe for concurrent use. The engine's pattern:
//
//   - the append path calls Filter and then Insert for one batch under the
//     shard's own lock, so nothing slips into the Set between the two;
//   - the flush goroutine calls Rotate, reads the sealed memtable, and calls
//     Release, concurrently with inserts into the new active memtable;
//   - anyone may read a memtable's Len, Bytes, SeqRange, CreatedAt, Sealed
//     and SourceOffsets at any time (they take the Set's lock).
//
// In code:
//
//	// append path, under the shard's lock
//	fresh, dups := set.Filter(batch)
//	n := memtable.EstimateBytes(fresh)
//	if err := budget.Acquire(ctx, n, wait); err != nil { ... } // ErrBackpressure, ErrTooLarge
//	// write fresh to the WAL; if that fails, budget.Release(n)
//	set.Insert(fresh, firstSeq, epoch, source, offset)
//
//	// flush goroutine
//	m := set.Rotate()
//	// write generation m.Generation() from m.Rows(), m.Seqs(), m.Epochs(),
//	// commit it (retrying until it commits: g+1 waits for g), then
//	err := set.Release(m.Generation())
//
// Rows, Seqs and Epochs return snapshots: slices clipped to the rows present
// at the call, which later inserts never write into. Rows clips at every
// level (offsets, list elements, struct fields) and copies the nested
// vectors that hold those slices, so a reader never shares a header an
// insert rewrites. For a sealed memtable
// they are the final contents. For the active one, take them only under the
// lock that serializes inserts, or accept that three separate calls may see
// different lengths.
//
// Returned batches and slices are read-only. Close releases everything a
// Set holds of the budget; Insert after Close panics, Release after Close
// returns ErrClosed.
package memtable
