package shardmeta

// The most bytes each part of a manifest encodes to (Encode), with every
// number at its widest (uint64 20 digits, int64 19, uint32 10) and file
// names as the engine makes them; an entry's size includes the comma after
// it. docs/format/etcd.md states them and TestEtcdValueBounds
// (valuebound_test.go) fails when an encoding passes one.
const (
	// ManifestFixedBytes is everything but the list entries beyond the first
	// epoch record: the field names, version, writer_epoch,
	// current_generation, replay_cursor, the lists' brackets, producer_state
	// with its 78-byte file name, and one epoch record.
	ManifestFixedBytes = 512
	// GenerationEntryBytes is one flushed[] entry with a 60-byte file name.
	GenerationEntryBytes = 251
	// EpochRecordBytes is one further epochs[] record.
	EpochRecordBytes = 154
	// SourceEntryBytes is one source_offsets entry less its name: the
	// quotes, the colon, a 19-digit offset and the comma. The name adds at
	// most two bytes a byte when it is valid UTF-8 without control characters
	// (see Encode), which engine.ValidateSource ensures.
	SourceEntryBytes = 23
)

// MaxEpochRecords returns the most epoch records a manifest with at most
// generations flushed generations holds after a claim (PruneEpochs): the
// newest RecentEpochs, one for the epoch of each flushed generation, and the
// newest record at or below the replay cursor. The records of claims above
// the cursor are kept too; they are among the newest RecentEpochs while
// fewer than that many wait, which the engine ensures by committing a
// replayed WAL tail at open once half as many wait.
func MaxEpochRecords(generations int) int {
	return RecentEpochs + 1 + max(generations, 0)
}

// ManifestBound returns the most bytes a manifest encodes to with at most
// generations flushed generations, MaxEpochRecords(generations) epoch
// records, and sources sources of names of at most nameBytes bytes of valid
// UTF-8 without control characters. Counts beyond 2^31 count as 2^31: the
// result is then far beyond any etcd value either way.
func ManifestBound(generations, sources, nameBytes int) int64 {
	clamp := func(n int) int64 { return int64(min(max(n, 0), 1<<31)) }
	g, s, b := clamp(generations), clamp(sources), clamp(nameBytes)
	return ManifestFixedBytes + g*GenerationEntryBytes + (int64(MaxEpochRecords(int(g)))-1)*EpochRecordBytes +
		s*(SourceEntryBytes+2*b)
}
