package shardmeta

import (
	"path"
	"strings"
)

// Validate checks m's invariants and fails closed: the first violation is
// returned as an ErrInvalidManifest error naming the field and the values.
//
//   - version is ManifestVersion; current_generation ≥ 1.
//   - flushed: numbers ≥ 1, strictly ascending and below
//     current_generation; seq ranges non-empty (1 ≤ seq_first ≤ seq_last)
//     and strictly increasing across generations; epochs ≥ 1, not above
//     writer_epoch and never decreasing; rows and bytes ≥ 0; files are
//     distinct, clean relative paths (no "..", no absolute paths).
//   - replay_cursor equals the last flushed seq_last when any generation is
//     flushed (and so is at or above every flushed seq_last).
//   - epochs: empty exactly when writer_epoch is 0; epochs strictly
//     increasing and the last one is writer_epoch; start_generation in
//     [1, current_generation] and never decreasing; start_position never
//     decreasing; replay_end_generation 0 (not yet committed) or in
//     [start_generation, current_generation) and below the next record's
//     start_generation.
//   - source_offsets: names non-empty, offsets ≥ 0.
func (m *Manifest) Validate() error {
	if m == nil {
		return invalidf("manifest is nil")
	}
	if m.Version != ManifestVersion {
		return invalidf("version %d is not supported (this build reads version %d)", m.Version, ManifestVersion)
	}
	if m.CurrentGeneration < 1 {
		return invalidf("current_generation is 0, want ≥ 1")
	}
	if err := m.validateFlushed(); err != nil {
		return err
	}
	if err := m.validateEpochs(); err != nil {
		return err
	}
	if err := m.validateProducerState(); err != nil {
		return err
	}
	return m.validateOffsets()
}

func (m *Manifest) validateFlushed() error {
	files := make(map[string]int, len(m.Flushed))
	for i := range m.Flushed {
		g := &m.Flushed[i]
		if err := m.validateGeneration(i, g); err != nil {
			return err
		}
		if i > 0 {
			if err := validateGenerationOrder(i, &m.Flushed[i-1], g); err != nil {
				return err
			}
		}
		if j, dup := files[g.File]; dup {
			return invalidf("flushed[%d].file %q is also flushed[%d].file", i, g.File, j)
		}
		files[g.File] = i
	}
	// Above the last flushed generation's seq_last only by records of meta
	// alone (no rows), which a generation of meta alone covers.
	if n := len(m.Flushed); n > 0 && m.ReplayCursor < m.Flushed[n-1].SeqLast {
		return invalidf("replay_cursor %d < seq_last %d of the last flushed generation %d",
			m.ReplayCursor, m.Flushed[n-1].SeqLast, m.Flushed[n-1].Number)
	}
	return nil
}

func (m *Manifest) validateGeneration(i int, g *Generation) error {
	switch {
	case g.Number == 0:
		return invalidf("flushed[%d].number is 0, want ≥ 1", i)
	case g.Number >= m.CurrentGeneration:
		return invalidf("flushed[%d].number %d is not below current_generation %d", i, g.Number, m.CurrentGeneration)
	case g.Rows < 0:
		return invalidf("flushed[%d] (generation %d): rows %d < 0", i, g.Number, g.Rows)
	case g.Bytes < 0:
		return invalidf("flushed[%d] (generation %d): bytes %d < 0", i, g.Number, g.Bytes)
	case g.SeqFirst == 0:
		return invalidf("flushed[%d] (generation %d): seq_first is 0; WAL positions start at 1", i, g.Number)
	case g.SeqFirst > g.SeqLast:
		return invalidf("flushed[%d] (generation %d): seq range %d..%d is inverted", i, g.Number, g.SeqFirst, g.SeqLast)
	case g.Epoch == 0:
		return invalidf("flushed[%d] (generation %d): epoch is 0, want ≥ 1", i, g.Number)
	case g.Epoch > m.WriterEpoch:
		return invalidf("flushed[%d] (generation %d): epoch %d > writer_epoch %d", i, g.Number, g.Epoch, m.WriterEpoch)
	case g.SchemaVersion < 0 || g.SchemaVersion > MaxSchemaVersions:
		return invalidf("flushed[%d] (generation %d): schema version %d out of range", i, g.Number, g.SchemaVersion)
	}
	if err := checkFile(g.File); err != nil {
		return invalidf("flushed[%d] (generation %d): file %q %v", i, g.Number, g.File, err)
	}
	return nil
}

func validateGenerationOrder(i int, prev, g *Generation) error {
	switch {
	case g.Number <= prev.Number:
		return invalidf("flushed[%d].number %d is not above flushed[%d].number %d", i, g.Number, i-1, prev.Number)
	case g.SeqFirst <= prev.SeqLast:
		return invalidf("flushed[%d] (generation %d): seq_first %d is not above seq_last %d of generation %d",
			i, g.Number, g.SeqFirst, prev.SeqLast, prev.Number)
	case g.Epoch < prev.Epoch:
		return invalidf("flushed[%d] (generation %d): epoch %d is below epoch %d of generation %d",
			i, g.Number, g.Epoch, prev.Epoch, prev.Number)
	}
	return nil
}

// errString is a constant error detail.
type errString string

func (e errString) Error() string { return string(e) }

// checkFile accepts clean relative slash paths that stay inside the shard
// directory: the drain deletes what a manifest names.
func checkFile(f string) error {
	switch {
	case f == "":
		return errString("is empty")
	case strings.ContainsAny(f, "\x00\\"):
		return errString("contains NUL or a backslash")
	case path.IsAbs(f) || path.Clean(f) != f || f == "." || f == ".." || strings.HasPrefix(f, "../"):
		return errString("is not a clean relative path inside the shard directory")
	}
	return nil
}

func (m *Manifest) validateEpochs() error {
	if m.WriterEpoch == 0 {
		if len(m.Epochs) > 0 {
			return invalidf("epochs has %d records but writer_epoch is 0", len(m.Epochs))
		}
		return nil
	}
	if len(m.Epochs) == 0 {
		return invalidf("writer_epoch is %d but epochs is empty", m.WriterEpoch)
	}
	for i := range m.Epochs {
		if err := m.validateEpochRecord(i); err != nil {
			return err
		}
	}
	if last := m.Epochs[len(m.Epochs)-1]; last.Epoch != m.WriterEpoch {
		return invalidf("epochs[%d].epoch %d (the last) != writer_epoch %d", len(m.Epochs)-1, last.Epoch, m.WriterEpoch)
	}
	return nil
}

func (m *Manifest) validateEpochRecord(i int) error {
	r := &m.Epochs[i]
	switch {
	case r.Epoch == 0:
		return invalidf("epochs[%d].epoch is 0, want ≥ 1", i)
	case r.StartGeneration == 0 || r.StartGeneration > m.CurrentGeneration:
		return invalidf("epochs[%d] (epoch %d): start_generation %d outside [1, current_generation %d]",
			i, r.Epoch, r.StartGeneration, m.CurrentGeneration)
	case r.ReplayEndGeneration != 0 &&
		(r.ReplayEndGeneration < r.StartGeneration || r.ReplayEndGeneration >= m.CurrentGeneration):
		return invalidf("epochs[%d] (epoch %d): replay_end_generation %d outside [start_generation %d, current_generation %d)",
			i, r.Epoch, r.ReplayEndGeneration, r.StartGeneration, m.CurrentGeneration)
	}
	if i == 0 {
		return nil
	}
	return validateEpochOrder(i, &m.Epochs[i-1], r)
}

func validateEpochOrder(i int, prev, r *EpochRecord) error {
	switch {
	case r.Epoch <= prev.Epoch:
		return invalidf("epochs[%d].epoch %d is not above epochs[%d].epoch %d", i, r.Epoch, i-1, prev.Epoch)
	case r.StartGeneration < prev.StartGeneration:
		return invalidf("epochs[%d] (epoch %d): start_generation %d is below %d of epoch %d",
			i, r.Epoch, r.StartGeneration, prev.StartGeneration, prev.Epoch)
	case r.StartPosition < prev.StartPosition:
		return invalidf("epochs[%d] (epoch %d): start_position %d is below %d of epoch %d",
			i, r.Epoch, r.StartPosition, prev.StartPosition, prev.Epoch)
	case prev.ReplayEndGeneration != 0 && prev.ReplayEndGeneration >= r.StartGeneration:
		return invalidf("epochs[%d] (epoch %d): replay_end_generation %d is not below start_generation %d of epoch %d",
			i-1, prev.Epoch, prev.ReplayEndGeneration, r.StartGeneration, r.Epoch)
	}
	return nil
}

func (m *Manifest) validateProducerState() error {
	ps := m.ProducerState
	if ps == nil {
		return nil
	}
	if err := checkFile(ps.File); err != nil {
		return invalidf("producer_state.file %q %v", ps.File, err)
	}
	if ps.Size < 0 || ps.Producers < 0 {
		return invalidf("producer_state: size %d and producers %d must not be negative", ps.Size, ps.Producers)
	}
	return nil
}

func (m *Manifest) validateOffsets() error {
	for src, off := range m.SourceOffsets {
		if src == "" {
			return invalidf("source_offsets has an empty source name")
		}
		if off < 0 {
			return invalidf("source_offsets[%q] is %d < 0", src, off)
		}
	}
	return nil
}
