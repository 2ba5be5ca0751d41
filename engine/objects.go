package engine

import (
	"context"
	"errors"
	"fmt"
	"path"

	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/layout"
	"github.com/rollwal/rollwal/shardmeta"
)

// Generations in an object store (Options.Store). A generation file is
// written locally as always, then uploaded under its own name — unique
// per attempt, so a retried flush never meets its earlier attempt's
// object — and only then committed: every generation a manifest names is
// in the store. Objects no commit names (a failed attempt, a fenced
// writer's) are deleted by the next open; drained ones with their files.

// objectKey is the object name of the shard's generation file.
func (s *Shard) objectKey(file string) string {
	return layout.GenerationKey(s.opts.Table, s.name, file)
}

// upload puts generation file f into the store.
func (s *Shard) upload(ctx context.Context, f generation.File) error {
	if s.opts.Store == nil {
		return nil
	}
	file, err := s.opts.FS.Open(f.Path)
	if err != nil {
		return fmt.Errorf("upload generation %d: %w", f.Meta.Generation, err)
	}
	defer file.Close()
	if err := s.opts.Store.Create(ctx, s.objectKey(f.Name), file, f.Size); err != nil {
		return fmt.Errorf("upload generation %d: %w", f.Meta.Generation, err)
	}
	return nil
}

// deleteObjects deletes the objects of generations that left the
// manifest. A failure leaves garbage that the next open deletes.
func (s *Shard) deleteObjects(ctx context.Context, gone []shardmeta.Generation) {
	if s.opts.Store == nil {
		return
	}
	for _, g := range gone {
		if err := s.opts.Store.Delete(ctx, s.objectKey(g.File)); err != nil {
			s.log.Warn("delete drained generation object", "generation", g.Number, "object", s.objectKey(g.File), "err", err)
		}
	}
}

// removeGarbageObjects deletes the shard's generation objects that the
// claimed manifest does not name. Only this writer commits the shard now:
// an object it does not name is an attempt no commit will name (a fenced
// writer's late upload included), or a drained generation's. Objects
// whose names are not generation names are left alone.
func (s *Shard) removeGarbageObjects(ctx context.Context) error {
	if s.opts.Store == nil {
		return nil
	}
	prefix := layout.GenerationPrefix(s.opts.Table, s.name)
	infos, err := s.opts.Store.List(ctx, prefix)
	if err != nil {
		return fmt.Errorf("engine: shard %s: list generation objects: %w", s.name, err)
	}
	keep := make(map[string]bool, len(s.manifest.Flushed))
	for _, g := range s.manifest.Flushed {
		keep[g.File] = true
	}
	var errs []error
	for _, info := range infos {
		name := path.Base(info.Name)
		if keep[name] || path.Dir(info.Name)+"/" != prefix {
			continue
		}
		if _, _, _, err := generation.ParseName(name); err != nil {
			continue // not ours
		}
		if err := s.opts.Store.Delete(ctx, info.Name); err != nil {
			errs = append(errs, err)
			continue
		}
		s.log.Info("deleted uncommitted generation object", "object", info.Name)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("engine: shard %s: delete uncommitted generation objects: %w", s.name, err)
	}
	return nil
}
