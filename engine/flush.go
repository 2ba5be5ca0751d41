package engine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/memtable"
	"github.com/rollwal/rollwal/shardmeta"
)

// Flush seals the active memtable and commits it, with every older sealed
// memtable, as generations in order. It returns the number of the last
// committed generation (0 if the shard has committed none).
func (s *Shard) Flush(ctx context.Context) (uint64, error) {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	if err := s.err(); err != nil {
		return 0, err
	}
	if err := s.flushOnce(ctx, true); err != nil {
		return 0, err
	}
	return s.lastCommitted(), nil
}

func (s *Shard) lastCommitted() uint64 {
	if n := len(s.manifest.Flushed); n > 0 {
		return s.manifest.Flushed[n-1].Number
	}
	return 0
}

// flushOnce seals the active memtable if it holds rows (and sealActive
// says so), then commits every sealed memtable oldest first. The caller
// holds flushMu.
func (s *Shard) flushOnce(ctx context.Context, sealActive bool) error {
	s.mu.Lock()
	if a := s.set.Active(); sealActive && (a.Len() > 0 || a.HasMeta()) {
		s.set.Rotate()
	}
	s.mu.Unlock()
	for {
		m := s.set.Oldest()
		if m == nil {
			return nil
		}
		if err := s.commitGeneration(ctx, m); err != nil {
			return err
		}
	}
}

// commitGeneration writes sealed memtable m as a generation file and
// commits it to the manifest. On success the memtable is released.
func (s *Shard) commitGeneration(ctx context.Context, m *memtable.Memtable) error {
	start := time.Now()
	if m.Len() == 0 && !m.HasMeta() {
		return s.set.Release(m.Generation())
	}
	// Never commit rows the WAL has not made durable: a row in a committed
	// generation must be one the WAL could replay. A generation of meta
	// alone has no row positions: sync everything written so far.
	_, last := m.SeqRange()
	syncTo := max(s.maxSeq(m, last), m.MaxPos())
	if m.Len() == 0 {
		syncTo = s.w.Tail()
	}
	if err := s.w.SyncTo(syncTo); err != nil {
		return s.walError(err)
	}
	if err := s.retryPendingDrain(ctx); err != nil {
		s.metrics.flushFailures.WithLabelValues(s.name).Inc()
		return err
	}
	f, next, err := s.prepareCommit(ctx, m)
	if err != nil {
		s.noteFlushFailure(err)
		s.metrics.flushFailures.WithLabelValues(s.name).Inc()
		return fmt.Errorf("engine: shard %s: flush generation %d: %w", s.name, m.Generation(), err)
	}
	if err := s.store.Commit(ctx, s.claim, next); err != nil {
		if isFenced(err) {
			s.stop(fmt.Errorf("engine: shard %s: %w", s.name, err))
		} else {
			// Unknown or not applied: the retry must commit these same
			// bytes, so a first attempt that did apply is recognised.
			s.pending = &pendingCommit{gen: m.Generation(), file: f, next: next}
		}
		s.metrics.flushFailures.WithLabelValues(s.name).Inc()
		return fmt.Errorf("engine: shard %s: commit generation %d: %w", s.name, m.Generation(), err)
	}
	s.pending = nil
	s.noteFlushed()
	prev := s.manifest
	s.setManifest(next)
	s.afterProducerCommit(prev, next)
	s.persistSnapshots(ctx, prev, next)
	s.removeDrained(ctx, s.pendingDrain)
	s.pendingDrain = nil
	if err := s.set.Release(m.Generation()); err != nil {
		return err
	}
	if m.Len() == 0 {
		s.log.Info("committed generation without rows (offsets and producer sequences only)", "generation", m.Generation())
		return nil
	}
	s.afterCommit(f, time.Since(start))
	return nil
}

// afterProducerCommit adopts the producer state the commit named and
// removes the files of the states before it.
func (s *Shard) afterProducerCommit(prev, next *shardmeta.Manifest) {
	if next.ProducerState == nil || prev.ProducerState != nil && *prev.ProducerState == *next.ProducerState {
		return
	}
	s.committedProducers = s.stagedProducers
	s.stagedProducers = nil
	s.mu.Lock()
	s.expireLive()
	s.mu.Unlock()
	s.removeStaleProducerFiles()
	if prev.ProducerState != nil {
		// The state just replaced; failed attempts' objects are the
		// open's sweep to delete (removeStaleProducerObjects).
		s.deleteProducerObject(filepath.Base(prev.ProducerState.File))
	}
}

// pendingCommit is a generation whose manifest commit ended without a
// definite answer.
type pendingCommit struct {
	gen  uint64
	file generation.File
	next *shardmeta.Manifest
}

// prepareCommit writes m's generation file and the manifest that commits
// it, or reuses both from an attempt whose outcome was unknown.
func (s *Shard) prepareCommit(ctx context.Context, m *memtable.Memtable) (generation.File, *shardmeta.Manifest, error) {
	if p := s.pending; p != nil && p.gen == m.Generation() {
		return p.file, p.next, nil
	}
	var f generation.File
	if m.Len() > 0 {
		var err error
		if f, err = s.writeGeneration(ctx, m); err != nil {
			return generation.File{}, nil, err
		}
		if err := s.upload(ctx, f); err != nil {
			return generation.File{}, nil, err
		}
	}
	next := s.nextManifest(m, f)
	if err := s.stageProducerState(ctx, m, next); err != nil {
		return generation.File{}, nil, err
	}
	gone, kept := drained(next, s.baseWatermark(ctx))
	next.Flushed = append([]shardmeta.Generation(nil), kept...)
	s.pendingDrain = gone
	return f, next, nil
}

// maxSeq is the highest position m holds; replayed rows may be out of
// order, so the range's end is checked against every row.
func (s *Shard) maxSeq(m *memtable.Memtable, last uint64) uint64 {
	for _, q := range m.Seqs() {
		last = max(last, q)
	}
	return last
}

func (s *Shard) writeGeneration(ctx context.Context, m *memtable.Memtable) (generation.File, error) {
	first, last := m.SeqRange()
	meta := generation.Meta{
		FormatVersion: generation.FormatVersion, Table: s.opts.Table, Shard: s.name,
		Generation: m.Generation(), Epoch: s.claim.Epoch, SeqFirst: first, SeqLast: max(s.maxSeq(m, last), m.MaxPos()),
		Rows: int64(m.Len()), SchemaFingerprint: m.Schema().Fingerprint(),
		CreatedUnixNano: s.opts.Now().UnixNano(),
	}
	opts := generation.Options{FS: s.opts.FS, Codec: s.opts.Codec, Logger: s.log}
	return generation.Write(ctx, opts, s.genDir, m.Schema(), meta, generation.Data{Rows: m.Rows(), Seq: m.Seqs(), Epoch: m.Epochs()})
}

// nextManifest is the committed manifest plus generation f.
func (s *Shard) nextManifest(m *memtable.Memtable, f generation.File) *shardmeta.Manifest {
	next := s.manifest.Clone()
	g := m.Generation()
	next.CurrentGeneration = g + 1
	if m.Len() > 0 {
		next.Flushed = append(next.Flushed, shardmeta.Generation{
			Number: g, File: f.Name, Rows: f.Meta.Rows, Bytes: f.Size,
			SeqFirst: f.Meta.SeqFirst, SeqLast: f.Meta.SeqLast, Epoch: s.claim.Epoch,
			SchemaVersion: s.schemaVersionOf(m),
		})
		next.ReplayCursor = f.Meta.SeqLast
	} else {
		// A generation of meta alone covers its records' positions too:
		// every earlier generation is committed, so nothing at or below
		// them is left to replay.
		next.ReplayCursor = max(next.ReplayCursor, m.MaxPos())
	}
	if s.replayEnd != 0 && g == s.replayEnd {
		next.Epochs[len(next.Epochs)-1].ReplayEndGeneration = g
	}
	for src, off := range m.SourceOffsets() {
		if next.SourceOffsets == nil {
			next.SourceOffsets = map[string]int64{}
		}
		next.SourceOffsets[src] = max(next.SourceOffsets[src], off)
	}
	return next
}

// afterCommit trims the WAL below the new cursor and records metrics. A
// failure to trim is logged, not fatal: the segments are removed next time.
func (s *Shard) afterCommit(f generation.File, took time.Duration) {
	s.metrics.generations.WithLabelValues(s.name).Inc()
	s.metrics.genBytes.WithLabelValues(s.name).Add(float64(f.Size))
	s.metrics.flushSeconds.WithLabelValues(s.name).Observe(took.Seconds())
	s.metrics.memtableBytes.WithLabelValues(s.name).Set(float64(s.set.Bytes()))
	s.log.Info("committed generation", "generation", f.Meta.Generation, "file", f.Name,
		"rows", f.Meta.Rows, "bytes", f.Size, "replay_cursor", s.manifest.ReplayCursor, "took", took)
	if err := s.w.RemoveThrough(s.manifest.ReplayCursor); err != nil {
		s.log.Warn("remove WAL segments", "through", s.manifest.ReplayCursor, "err", err)
	}
}

func (s *Shard) requestFlush() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// flusher seals and commits generations when the active memtable is full
// or old enough, or on request. A failed flush is retried with backoff.
func (s *Shard) flusher() {
	defer s.flusherWG.Done()
	tick := time.NewTicker(s.tickEvery())
	defer tick.Stop()
	backoff := time.Duration(0)
	for {
		select {
		case <-s.quit:
			return
		case <-s.kick:
		case <-tick.C:
			s.retryPersists()
			if !s.due() {
				s.backgroundDrain()
				continue
			}
		}
		if backoff > 0 && !s.waitOrQuit(backoff) {
			return
		}
		if err := s.backgroundFlush(); err != nil {
			backoff = min(max(2*backoff, 50*time.Millisecond), 5*time.Second)
			s.requestFlush()
			continue
		}
		backoff = 0
	}
}

func (s *Shard) tickEvery() time.Duration {
	if s.opts.FlushAge > 0 {
		return min(max(s.opts.FlushAge/4, 10*time.Millisecond), time.Second)
	}
	return time.Second
}

// due reports whether a background flush has work: a sealed memtable
// waits, or the active one is due.
func (s *Shard) due() bool { return s.set.Oldest() != nil || s.activeDue() }

// activeDue reports whether the active memtable should be sealed now: it
// reached FlushBytes (appends seal it then themselves) or FlushAge.
func (s *Shard) activeDue() bool {
	a := s.set.Active()
	if a.Len() == 0 {
		// Offsets and producer marks of all-duplicate batches must reach
		// the manifest too: by age.
		since := a.MetaSince()
		return !since.IsZero() && s.opts.FlushAge > 0 && s.opts.Now().Sub(since) >= s.opts.FlushAge
	}
	if a.Bytes() >= s.opts.FlushBytes {
		return true
	}
	return s.opts.FlushAge > 0 && s.opts.Now().Sub(a.CreatedAt()) >= s.opts.FlushAge
}

func (s *Shard) waitOrQuit(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.quit:
		return false
	case <-t.C:
		return true
	}
}

// backgroundDrain drops merged generations from an idle shard's manifest.
func (s *Shard) backgroundDrain() {
	if len(s.Manifest().Flushed) == 0 || s.err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*s.opts.RequestTimeout)
	defer cancel()
	if _, err := s.Drain(ctx); err != nil {
		s.log.Warn("background drain failed; will retry", "err", err)
	}
}

func (s *Shard) backgroundFlush() error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	if s.err() != nil || !s.due() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*s.opts.RequestTimeout)
	defer cancel()
	// The watch follows the schema record; this read makes a change
	// served by the next flush at the latest, should the watch lag.
	if err := s.schemas.refresh(ctx); err != nil {
		s.log.Warn("reading the table's schema record", "err", err)
	}
	err := s.flushOnce(ctx, s.activeDue())
	if err != nil {
		s.log.Warn("background flush failed; will retry", "err", err)
	}
	return err
}

// Close stops intake, flushes (unless NoFlushOnClose), syncs and closes the
// WAL and releases the owner key. It is safe to call more than once.
func (s *Shard) Close(ctx context.Context) error {
	s.closeOnce.Do(func() { s.closeErr = s.close(ctx) })
	return s.closeErr
}

func (s *Shard) close(ctx context.Context) error {
	close(s.quit)
	s.flusherWG.Wait()
	healthy := s.err() == nil
	s.stop(ErrClosed)
	s.mu.Lock() // wait out writers already past the check
	s.mu.Unlock()
	var errs []error
	s.flushMu.Lock()
	if healthy && !s.opts.NoFlushOnClose {
		if err := s.flushOnce(ctx, true); err != nil {
			errs = append(errs, err)
		}
	}
	s.flushMu.Unlock()
	if err := s.w.Close(); err != nil {
		errs = append(errs, err)
	}
	s.set.Close()
	s.releaseOwner()
	return errors.Join(errs...)
}

func isFenced(err error) bool { return errors.Is(err, shardmeta.ErrFenced) }
