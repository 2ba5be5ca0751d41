package engine

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/rollwal/rollwal/memtable"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/wal"
)

// Replay: what an open does with the WAL tail above the replay cursor —
// which records it skips (skipOnReplay), how it inserts the rest into the
// memtables within their memory bound, and when it commits them before
// serving appends.

// replayFlushClaims is how many of the manifest's claims may start above
// the replay cursor before an open commits what it replayed ahead of
// serving appends. Each such claim inherited a WAL tail no commit has
// covered, and its epoch record stays until one does
// (shardmeta.PruneEpochs): a writer that kept dying before its first flush
// would otherwise add a record to the manifest at every restart.
const replayFlushClaims = shardmeta.RecentEpochs / 2

// commitReplayIfBehind commits the replayed WAL tail at once when
// replayFlushClaims claims started above the replay cursor. A tail of
// source offsets alone replays no rows but still has to be committed:
// only a commit moves the cursor past it.
func (s *Shard) commitReplayIfBehind(ctx context.Context) error {
	n := s.manifest.UncoveredEpochs()
	a := s.set.Active()
	if n < replayFlushClaims || (a.Len() == 0 && !a.HasMeta()) {
		return nil
	}
	s.log.Info("committing the replayed WAL tail before serving appends", "claims_above_replay_cursor", n, "rows", a.Len())
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	if err := s.flushOnce(ctx, true); err != nil {
		return fmt.Errorf("engine: shard %s: commit the replayed WAL tail (%d claims started above the replay cursor): %w", s.name, n, err)
	}
	return nil
}

// replay inserts the records of (from, to] into the active memtable,
// skipping what source-side exclusion proves is already committed: records
// an epoch tagged with a generation that the same epoch committed, and
// records of an older epoch written after a newer epoch's claim (a zombie's
// unacknowledged tail): see skipOnReplay.
func (s *Shard) replay(ctx context.Context, from, to uint64) (int, error) {
	m := s.manifest
	var rows int
	var last uint64 // highest position replayed, to refuse overlaps
	progress := newReplayProgress(s, from, to)
	err := s.w.Replay(from, to, func(h wal.Header, payload []byte) error {
		progress.at(h.FirstPos, rows)
		if h.Epoch > s.claim.Epoch {
			return fmt.Errorf("%w: record at position %d has epoch %d above the claimed epoch %d", ErrReplay, h.FirstPos, h.Epoch, s.claim.Epoch)
		}
		if s.skipOnReplay(m, h) {
			return nil
		}
		if h.FirstPos <= last {
			return fmt.Errorf("%w: record at position %d (epoch %d) overlaps position %d already replayed", ErrReplay, h.FirstPos, h.Epoch, last)
		}
		last = h.FirstPos + uint64(h.Count) - 1
		// Borrowed: the memtable copies every string it keeps before the
		// WAL reuses payload for the next record.
		meta, b, err := decodeRecord(s.schemaLookup(ctx), h.Kind, payload, true)
		if err == nil {
			b, err = s.inSetSchema(b)
		}
		if err != nil {
			return fmt.Errorf("record at position %d: %w", h.FirstPos, err)
		}
		n, err := s.replayBatch(ctx, b, h, meta)
		rows += n
		return err
	})
	return rows, err
}

// replayProgress logs a long replay's progress: a line each time another
// tenth of the tail's positions is behind it, and at most one every few
// seconds otherwise, so an operator watching a slow start sees it move.
type replayProgress struct {
	s        *Shard
	from, to uint64
	next     uint64 // position of the next tenth
	last     time.Time
}

func newReplayProgress(s *Shard, from, to uint64) *replayProgress {
	p := &replayProgress{s: s, from: from, to: to, last: time.Now()}
	p.next = from + max((to-from)/10, 1)
	return p
}

func (p *replayProgress) at(pos uint64, rows int) {
	if pos < p.next && time.Since(p.last) < 5*time.Second {
		return
	}
	for p.next <= pos {
		p.next += max((p.to-p.from)/10, 1)
	}
	p.last = time.Now()
	done := float64(pos-p.from) / float64(max(p.to-p.from, 1))
	p.s.log.Info("replaying WAL tail", "position", pos, "of", p.to, "done", fmt.Sprintf("%.0f%%", 100*done), "rows", rows)
}

func (s *Shard) skipOnReplay(m *shardmeta.Manifest, h wal.Header) bool {
	return skipOnReplay(m, h, !s.opts.DisableSourceExclusion)
}

// skipOnReplay reports whether the replay over (m.ReplayCursor, tail]
// skips record h, which reaches past the cursor. h is judged by the record
// of the first later epoch, next (the records' start positions and
// generations never decrease, so it has the lowest of the later epochs):
//
//   - next starts at or below the cursor: everything h's epoch wrote before
//     next's claim ends at or below next's start position (the WAL tail that
//     claim read), hence at or below the cursor, so h was written after that
//     claim, by a zombie, and never acknowledged;
//   - h begins above next's start position: a zombie's, as above;
//   - with source exclusion, h's generation is below next's start
//     generation: h's epoch committed that generation itself.
//
// A record of the latest epoch (none later) is replayed. The first rule is
// what lets a claim drop the records before one that starts at or below the
// cursor (shardmeta.PruneEpochs): every record they judged is skipped by it.
func skipOnReplay(m *shardmeta.Manifest, h wal.Header, sourceExclusion bool) bool {
	return skipReason(m, h, sourceExclusion) != ""
}

// skipReason is why skipOnReplay skips h, or "" if it is replayed.
func skipReason(m *shardmeta.Manifest, h wal.Header, sourceExclusion bool) string {
	i := slices.IndexFunc(m.Epochs, func(r shardmeta.EpochRecord) bool { return r.Epoch > h.Epoch })
	if i < 0 {
		return ""
	}
	next := m.Epochs[i]
	switch {
	case next.StartPosition <= m.ReplayCursor:
		return fmt.Sprintf("epoch %d started at %d, at or below the cursor %d: written after that claim", next.Epoch, next.StartPosition, m.ReplayCursor)
	case next.StartPosition < h.FirstPos:
		return fmt.Sprintf("begins above %d, where epoch %d started: written after that claim", next.StartPosition, next.Epoch)
	case sourceExclusion && h.Generation < next.StartGeneration:
		return fmt.Sprintf("generation %d, below %d where epoch %d started: committed by its own epoch", h.Generation, next.StartGeneration, next.Epoch)
	}
	return ""
}

// replayBatch inserts one replayed record. Replay is bounded in memory:
// when the active memtable is full it is flushed before the record goes in,
// so the last replayed row always lands in the active memtable, whose
// generation is the one recorded as the end of the replay.
func (s *Shard) replayBatch(ctx context.Context, b *schema.Batch, h wal.Header, meta RecordMeta) (int, error) {
	fresh, _ := s.set.Filter(b)
	if fresh.Len() > 0 && s.set.Active().Bytes() >= s.opts.FlushBytes {
		if err := s.flushOnce(ctx, true); err != nil {
			return 0, err
		}
	}
	if err := s.budget.Acquire(ctx, memtable.EstimateBytes(fresh), true); err != nil {
		return 0, err
	}
	defer s.replayMeta(meta)
	s.set.NotePosition(h.FirstPos + uint64(h.Count) - 1)
	switch {
	case fresh.Len() == 0:
		s.set.Insert(fresh, 0, h.Epoch, meta.Source.Name, meta.Source.Offset)
		return 0, nil
	case fresh.Len() != b.Len():
		// Positions stay those of the WAL; only whole records keep them
		// dense, so a partially duplicate record keeps each row's own.
		return fresh.Len(), s.insertSparse(b, fresh, h, meta.Source)
	}
	s.set.Insert(fresh, h.FirstPos, h.Epoch, meta.Source.Name, meta.Source.Offset)
	return fresh.Len(), nil
}

// replayMeta restores what a replayed record carries besides rows.
func (s *Shard) replayMeta(meta RecordMeta) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noteProducer(meta)
	if meta.Source.Name != "" {
		s.sources[meta.Source.Name] = true
	}
}

// insertSparse inserts the rows of b that survived deduplication, one at a
// time, each with the position it had in the WAL.
func (s *Shard) insertSparse(b, fresh *schema.Batch, h wal.Header, src Source) error {
	keep := make(map[string]bool, fresh.Len())
	for _, id := range fresh.IDs {
		keep[id] = true
	}
	for i, id := range b.IDs {
		if !keep[id] {
			continue
		}
		delete(keep, id) // a repeat within the record is a duplicate
		one := b.Schema.NewBatch(1)
		one.AppendRow(b, i)
		s.set.Insert(one, h.FirstPos+uint64(i), h.Epoch, src.Name, src.Offset)
	}
	return nil
}
