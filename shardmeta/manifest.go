package shardmeta

import (
	"maps"
	"slices"
)

// ManifestVersion is the only manifest version this package reads and
// writes. It is wire format: bump it for any change of meaning, never
// reuse a number.
const ManifestVersion = 1

// Generation is one committed (flushed, not yet drained) generation file.
type Generation struct {
	// Number is the generation number, ≥ 1.
	Number uint64 `json:"number"`
	// File is the generation file's path relative to the shard's data
	// directory: clean, relative, without "..".
	File string `json:"file"`
	// Rows and Bytes describe the file; informational.
	Rows  int64 `json:"rows"`
	Bytes int64 `json:"bytes"`
	// SeqFirst..SeqLast is the inclusive range of WAL positions (_seq) the
	// generation covers; 1 ≤ SeqFirst ≤ SeqLast.
	SeqFirst uint64 `json:"seq_first"`
	SeqLast  uint64 `json:"seq_last"`
	// Epoch is the writer epoch that flushed and committed the generation.
	Epoch uint64 `json:"epoch"`
	// SchemaVersion is the version of the table's schema the file was
	// written with; 0 for version 1 (and files written before versions).
	SchemaVersion int `json:"schema_version,omitempty"`
}

// EpochRecord is the provenance of one claimed writer epoch.
type EpochRecord struct {
	Epoch uint64 `json:"epoch"`
	// StartGeneration is current_generation at the claim: the generation the
	// epoch's replay fills.
	StartGeneration uint64 `json:"start_generation"`
	// StartPosition is the WAL tail the epoch inherited at its claim.
	// Entries of older epochs beyond it are a zombie's and are skipped on
	// every later replay.
	StartPosition uint64 `json:"start_position"`
	// ReplayEndGeneration is the last generation holding the epoch's replayed
	// rows; 0 until that generation commits.
	ReplayEndGeneration uint64 `json:"replay_end_generation"`
}

// Manifest is a shard's committed state: which generations are flushed and
// which WAL positions they cover, and the epochs that wrote them. It has
// exactly one writer, the shard's owner; see the package documentation.
type Manifest struct {
	Version int `json:"version"`
	// WriterEpoch is the epoch of the latest claim.
	WriterEpoch uint64 `json:"writer_epoch"`
	// CurrentGeneration is the number of the active (uncommitted) generation;
	// every generation below it has committed.
	CurrentGeneration uint64 `json:"current_generation"`
	// ReplayCursor is the highest WAL position covered by committed
	// generations: the seq_last of the last flushed generation, or beyond
	// it the last position of a committed generation of meta alone (records
	// without rows); kept when drained generations leave Flushed empty.
	ReplayCursor uint64 `json:"replay_cursor"`
	// Flushed lists committed generations not yet drained, ascending.
	Flushed []Generation `json:"flushed"`
	// Epochs lists the records of the claimed epochs that something still
	// needs (see PruneEpochs), ascending; the last is WriterEpoch's.
	Epochs []EpochRecord `json:"epochs"`
	// SourceOffsets is the highest producer offset per source covered by
	// committed generations.
	SourceOffsets map[string]int64 `json:"source_offsets"`
	// ProducerState names the producer-state file that holds every
	// producer session's next expected sequence as of the committed
	// generations; absent before the first producer appeared.
	ProducerState *ProducerStateRef `json:"producer_state,omitempty"`
}

// ProducerStateRef names one producer-state file (relative to the shard's
// data directory, like Generation.File) and what it must hold, so that a
// reader refuses a damaged or substituted file.
type ProducerStateRef struct {
	File      string `json:"file"`
	Size      int64  `json:"size"`
	CRC32C    uint32 `json:"crc32c"`
	Producers int    `json:"producers"`
}

// NewManifest returns the manifest of a shard that was never claimed:
// version 1, generation 1 active, nothing flushed.
func NewManifest() *Manifest {
	return &Manifest{
		Version:           ManifestVersion,
		CurrentGeneration: 1,
		Flushed:           []Generation{},
		Epochs:            []EpochRecord{},
		SourceOffsets:     map[string]int64{},
	}
}

// Clone returns a deep copy. Nil collections become empty ones, as Decode
// would produce them.
func (m *Manifest) Clone() *Manifest {
	c := *m
	c.Flushed = append([]Generation{}, m.Flushed...)
	c.Epochs = append([]EpochRecord{}, m.Epochs...)
	c.SourceOffsets = maps.Clone(m.SourceOffsets)
	if m.ProducerState != nil {
		ps := *m.ProducerState
		c.ProducerState = &ps
	}
	if c.SourceOffsets == nil {
		c.SourceOffsets = map[string]int64{}
	}
	return &c
}

// Equal reports whether two manifests hold the same state (nil and empty
// collections are equal).
func (m *Manifest) Equal(o *Manifest) bool {
	return m.Version == o.Version && m.WriterEpoch == o.WriterEpoch &&
		m.CurrentGeneration == o.CurrentGeneration && m.ReplayCursor == o.ReplayCursor &&
		slices.Equal(m.Flushed, o.Flushed) && slices.Equal(m.Epochs, o.Epochs) &&
		maps.Equal(m.SourceOffsets, o.SourceOffsets)
}

// LastEpoch returns the record of the latest claim, if any.
func (m *Manifest) LastEpoch() (EpochRecord, bool) {
	if len(m.Epochs) == 0 {
		return EpochRecord{}, false
	}
	return m.Epochs[len(m.Epochs)-1], true
}
