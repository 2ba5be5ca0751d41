package engine

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/vfs"
)

// Draining is the shard owner's half of a merge: once the base table's
// watermark for this shard covers a committed generation, the owner drops
// it from its manifest (with its next commit) and only then deletes its
// file. The merge coordinator never writes shard manifests.

// baseWatermark reads the highest generation of this shard merged into the
// base table (0 when none, or when the base state cannot be read: draining
// is never urgent, so a failure only postpones it).
func (s *Shard) baseWatermark(ctx context.Context) uint64 {
	b, _, err := s.store.LoadBaseState(ctx)
	if err != nil {
		s.log.Warn("read base state for drain", "err", err)
		return 0
	}
	return b.Shards[s.name].Watermark
}

// drained splits m's flushed generations at the watermark: those at or
// below it leave the manifest.
func drained(m *shardmeta.Manifest, watermark uint64) (gone, kept []shardmeta.Generation) {
	i := 0
	for i < len(m.Flushed) && m.Flushed[i].Number <= watermark {
		i++
	}
	return m.Flushed[:i], m.Flushed[i:]
}

// Drain commits a manifest without the generations the base watermark
// covers and deletes their files. It returns how many it drained. Flushes
// drain as part of their own commit; Drain serves idle shards.
func (s *Shard) Drain(ctx context.Context) (int, error) {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	if err := s.err(); err != nil {
		return 0, err
	}
	if s.pending != nil {
		return 0, nil // a flush commit of unknown outcome goes first; the flush drains too
	}
	if err := s.retryPendingDrain(ctx); err != nil {
		return 0, err
	}
	gone, kept := drained(s.manifest, s.baseWatermark(ctx))
	if len(gone) == 0 {
		return 0, nil
	}
	next := s.manifest.Clone()
	next.Flushed = append([]shardmeta.Generation(nil), kept...)
	return s.commitDrain(ctx, &pendingDrain{next: next, gone: gone})
}

// pendingDrain is a drain commit whose outcome is unknown: the next commit
// repeats it byte for byte, so that a first attempt that applied late is
// recognised as done rather than taken for another writer's write.
type pendingDrain struct {
	next *shardmeta.Manifest
	gone []shardmeta.Generation
}

func (s *Shard) commitDrain(ctx context.Context, d *pendingDrain) (int, error) {
	if err := s.store.Commit(ctx, s.claim, d.next); err != nil {
		if isFenced(err) {
			s.stop(fmt.Errorf("engine: shard %s: %w", s.name, err))
		} else {
			s.drainPending = d
		}
		return 0, fmt.Errorf("engine: shard %s: drain: %w", s.name, err)
	}
	s.drainPending = nil
	s.setManifest(d.next)
	s.removeDrained(ctx, d.gone)
	return len(d.gone), nil
}

// retryPendingDrain repeats a drain commit of unknown outcome, if any. The
// caller holds flushMu.
func (s *Shard) retryPendingDrain(ctx context.Context) error {
	if s.drainPending == nil {
		return nil
	}
	_, err := s.commitDrain(ctx, s.drainPending)
	return err
}

// removeDrained deletes the files (and objects) of generations that left
// the manifest. A failure leaves garbage that the next open removes.
func (s *Shard) removeDrained(ctx context.Context, gone []shardmeta.Generation) {
	s.deleteObjects(ctx, gone)
	for _, g := range gone {
		if err := s.opts.FS.Remove(filepath.Join(s.genDir, g.File)); err != nil {
			s.log.Warn("remove drained generation", "generation", g.Number, "file", g.File, "err", err)
		}
	}
	if len(gone) > 0 {
		if err := vfs.SyncDir(s.opts.FS, s.genDir); err != nil {
			s.log.Warn("sync generation directory after drain", "err", err)
		}
		s.log.Info("drained merged generations", "count", len(gone), "through", gone[len(gone)-1].Number)
	}
}
