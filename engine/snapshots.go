package engine

import (
	"context"
	"errors"
	"maps"
	"time"

	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/snapshot"
)

// persistSnapshots records the source offsets that a commit moved, from
// prev to next. The manifest is the truth; the snapshot store is what
// upstream consumers resume from, fenced by the offset itself, so a zombie
// whose late persist would move an offset backwards is refused there. A
// persist that fails is kept and retried, at the next commit and in the
// background, until it lands or the fence refuses it.
func (s *Shard) persistSnapshots(ctx context.Context, prev, next *shardmeta.Manifest) {
	if s.opts.Snapshots == nil {
		return
	}
	s.persistMu.Lock()
	defer s.persistMu.Unlock()
	for src, off := range next.SourceOffsets {
		if old, ok := prev.SourceOffsets[src]; !ok || old != off {
			s.unpersisted[src] = off
		}
	}
	s.persistPending(ctx)
}

// retryPersists retries the persists that failed, at most once per backoff.
func (s *Shard) retryPersists() {
	if s.opts.Snapshots == nil {
		return
	}
	s.persistMu.Lock()
	defer s.persistMu.Unlock()
	if len(s.unpersisted) == 0 || time.Now().Before(s.persistRetryAt) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*s.opts.RequestTimeout)
	defer cancel()
	s.persistPending(ctx)
}

// persistPending persists every offset not yet stored; the caller holds
// persistMu.
func (s *Shard) persistPending(ctx context.Context) {
	failed := false
	for src, off := range s.unpersisted {
		key := snapshot.Key{Table: s.opts.Table, Shard: s.name, Source: src}
		err := s.opts.Snapshots.Persist(ctx, key, snapshot.Snapshot{Offset: off})
		var conflict *snapshot.ConflictError
		switch {
		case err == nil:
			s.metrics.snapshotPersists.WithLabelValues(s.name, "ok").Inc()
			delete(s.unpersisted, src)
		case errors.As(err, &conflict):
			s.metrics.snapshotPersists.WithLabelValues(s.name, "conflict").Inc()
			s.log.Warn("snapshot persist refused: a newer writer holds a higher offset", "source", src,
				"offset", off, "stored", conflict.Stored)
			delete(s.unpersisted, src)
		default:
			failed = true
			s.metrics.snapshotPersists.WithLabelValues(s.name, "error").Inc()
			s.log.Warn("snapshot persist failed; retrying in the background", "source", src, "offset", off, "err", err)
		}
	}
	if !failed {
		s.persistBackoff = 0
		return
	}
	s.persistBackoff = min(max(2*s.persistBackoff, 100*time.Millisecond), 30*time.Second)
	s.persistRetryAt = time.Now().Add(s.persistBackoff)
}

// loadSnapshots reads the stored resume points of every source the shard
// manifest knows, so producers can ask where to resume.
func (s *Shard) loadSnapshots(ctx context.Context) {
	if s.opts.Snapshots == nil {
		return
	}
	loaded := map[string]snapshot.Snapshot{}
	for src := range s.manifest.SourceOffsets {
		snap, err := s.opts.Snapshots.Get(ctx, snapshot.Key{Table: s.opts.Table, Shard: s.name, Source: src})
		switch {
		case err == nil:
			loaded[src] = snap
		case errors.Is(err, snapshot.ErrNotFound):
		default:
			s.log.Warn("load snapshot", "source", src, "err", err)
		}
		if committed := s.manifest.SourceOffsets[src]; err != nil || snap.Offset < committed {
			// A writer died between its commit and its persist (or the
			// read failed): persist what the manifest holds.
			s.unpersisted[src] = committed
		}
	}
	s.snapshots = loaded
}

// Snapshots returns the resume points loaded when the shard was opened.
func (s *Shard) Snapshots() map[string]snapshot.Snapshot { return maps.Clone(s.snapshots) }
