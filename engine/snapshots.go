package engine

import (
	"context"
	"errors"
	"maps"

	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/snapshot"
)

// persistSnapshots records the source offsets that a commit moved, from
// prev to next. The manifest is the truth; the snapshot store is what
// upstream consumers resume from, fenced by the offset itself, so a zombie
// whose late persist would move an offset backwards is refused there.
func (s *Shard) persistSnapshots(ctx context.Context, prev, next *shardmeta.Manifest) {
	if s.opts.Snapshots == nil {
		return
	}
	for src, off := range next.SourceOffsets {
		if old, ok := prev.SourceOffsets[src]; ok && old == off {
			continue
		}
		key := snapshot.Key{Table: s.opts.Table, Shard: s.name, Source: src}
		err := s.opts.Snapshots.Persist(ctx, key, snapshot.Snapshot{Offset: off})
		var conflict *snapshot.ConflictError
		switch {
		case err == nil:
			s.metrics.snapshotPersists.WithLabelValues(s.name, "ok").Inc()
		case errors.As(err, &conflict):
			s.metrics.snapshotPersists.WithLabelValues(s.name, "conflict").Inc()
			s.log.Warn("snapshot persist refused: a newer writer holds a higher offset", "source", src,
				"offset", off, "stored", conflict.Stored)
		default:
			s.metrics.snapshotPersists.WithLabelValues(s.name, "error").Inc()
			s.log.Warn("snapshot persist failed; the next commit persists again", "source", src, "offset", off, "err", err)
		}
	}
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
	}
	s.snapshots = loaded
}

// Snapshots returns the resume points loaded when the shard was opened.
func (s *Shard) Snapshots() map[string]snapshot.Snapshot { return maps.Clone(s.snapshots) }
