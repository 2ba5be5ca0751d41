package publish

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/rollwal/rollwal/catalog"
	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/layout"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/vfs"
)

// Where the base lives. Without Options.Store: the local directory
// <data>/<table>/base, its files named by absolute path. With it: the
// store, under the object prefix <table>/base/, its files named by store
// location (catalog.StoreLocation):
//
//	s3://bucket/prefix/<table>/base/data/<shard>/<base file>.parquet
//	s3://bucket/prefix/<table>/base/metadata/...     (the catalog's, objectIO)
//	s3://bucket/prefix/<table>/base/_manifest/<version>.json
//
// Either way a base file is known by its path relative to the base
// ("data/<shard>/<name>"), as base/state and the readers' manifest name it.
// With a store nothing of the base is written locally: a base file is
// written into memory, uploaded with objstore Create (its name carries an
// attempt id, so two attempts never meet), and registered at its store
// location. An upload whose outcome is unknown fails the pass; the object,
// if it landed, is an orphan that no commit names and RemoveOrphans deletes.

// baseKey is the object name of the base file at rel.
func (c *Coordinator) baseKey(rel string) string { return layout.BaseKey(c.opts.Table, rel) }

// baseLocation is where the base's Iceberg table lives.
func (c *Coordinator) baseLocation() string {
	if c.opts.Store == nil {
		return c.baseDir
	}
	return catalog.StoreLocation(c.opts.Store, layout.BaseRoot(c.opts.Table))
}

// fileLocation is the location of the base file at rel, as the table
// registers it.
func (c *Coordinator) fileLocation(rel string) string {
	if c.opts.Store == nil {
		return filepath.Join(c.baseDir, filepath.FromSlash(rel))
	}
	return catalog.StoreLocation(c.opts.Store, c.baseKey(rel))
}

// relOf maps a data file location to its path relative to the base at
// base (a directory, or a store location with a scheme).
func relOf(loc, base string) (string, error) {
	if strings.Contains(base, "://") {
		rel, ok := strings.CutPrefix(loc, base+"/")
		if !ok || !strings.HasPrefix(rel, layout.BaseDataRel) {
			return "", fmt.Errorf("data file %s is not under %s/data", loc, base)
		}
		return rel, nil
	}
	rel, err := filepath.Rel(base, strings.TrimPrefix(loc, "file://"))
	if err != nil || !strings.HasPrefix(rel, filepath.FromSlash(layout.BaseDataRel)) {
		return "", fmt.Errorf("data file %s is not under %s", loc, layout.BaseDataDir(base))
	}
	return filepath.ToSlash(rel), nil
}

// writeBaseFile writes d as a base file of shard under data/<shard>/: into
// the local base directory, or, with a store, into memory and then as an
// object of the store. The error names the object.
func (c *Coordinator) writeBaseFile(ctx context.Context, shard string, s *schema.Schema, meta generation.Meta, d generation.Data) (generation.File, error) {
	return c.placeBaseFile(ctx, shard, func(opts generation.Options, dir string) (generation.File, error) {
		return generation.Write(ctx, opts, dir, s, meta, d)
	})
}

// placeBaseFile places the base file that write writes (with the base
// files' options, into dir) as writeBaseFile does.
func (c *Coordinator) placeBaseFile(ctx context.Context, shard string, write func(generation.Options, string) (generation.File, error)) (generation.File, error) {
	gopts := generation.Options{FS: c.opts.FS, Codec: c.opts.Codec, Logger: c.opts.Logger, IndexCRCInName: true}
	if c.opts.Store == nil {
		dir := layout.BaseShardDataDir(c.baseDir, shard)
		if err := vfs.MkdirAllDurable(c.opts.FS, dir, 0o755); err != nil {
			return generation.File{}, err
		}
		return write(gopts, dir)
	}
	mem := vfs.NewStrictMem()
	const dir = "/stage"
	if err := vfs.MkdirAllDurable(mem, dir, 0o755); err != nil {
		return generation.File{}, err
	}
	gopts.FS = mem
	f, err := write(gopts, dir)
	if err != nil {
		return f, err
	}
	data, err := vfs.ReadFile(mem, f.Path)
	if err != nil {
		return f, err
	}
	rel := layout.BaseFileRel(shard, f.Name)
	if err := c.opts.Store.Create(ctx, c.baseKey(rel), bytes.NewReader(data), int64(len(data))); err != nil {
		return f, fmt.Errorf("upload base file: %w", err)
	}
	f.Path = c.fileLocation(rel)
	return f, nil
}

// openBase opens the base file at rel for reading: the local file or the
// store's object (one HEAD; each read is a ranged GET).
func (c *Coordinator) openBase(ctx context.Context, rel string) (r io.ReaderAt, size int64, closer io.Closer, loc string, err error) {
	loc = c.fileLocation(rel)
	if c.opts.Store == nil {
		f, err := c.opts.FS.Open(loc)
		if err != nil {
			return nil, 0, nil, loc, err
		}
		st, err := f.Stat()
		if err != nil {
			_ = f.Close()
			return nil, 0, nil, loc, err
		}
		return f, st.Size(), f, loc, nil
	}
	obj, err := c.opts.Store.Open(ctx, c.baseKey(rel))
	if err != nil {
		return nil, 0, nil, loc, err
	}
	return obj, obj.Size(), obj, loc, nil
}

// readBase reads the base file at rel whole, converted to the pass's schema.
func (c *Coordinator) readBase(ctx context.Context, ps passSchema, rel string) (generation.Meta, generation.Data, error) {
	if c.opts.Store == nil {
		return ps.readInto(c, c.fileLocation(rel), 0)
	}
	loc := c.fileLocation(rel)
	return ps.convertRead(loc, 0, func() (generation.Meta, generation.Data, error) {
		obj, err := c.opts.Store.Open(ctx, c.baseKey(rel))
		if err != nil {
			return generation.Meta{}, generation.Data{}, err
		}
		defer obj.Close()
		b, err := fetchObject(obj)
		if err != nil {
			return generation.Meta{}, generation.Data{}, err
		}
		return generation.ReadStoredFrom(bytes.NewReader(b), int64(len(b)), loc)
	})
}

// checkBaseHome refuses a store for a base that already lives in the local
// base directory (or anywhere but the store): no silent migration.
func (c *Coordinator) checkBaseHome(ctx context.Context) error {
	if c.opts.Store == nil {
		return nil
	}
	want := c.baseLocation()
	if _, err := c.opts.FS.Stat(c.baseDir); err == nil {
		return fmt.Errorf("publish: table %s: a base exists in the local directory %s, and Options.Store puts the base at %s; "+
			"refusing to start a second base (rollwal does not migrate a base; see docs/objstore.md)", c.opts.Table, c.baseDir, want)
	}
	rec, err := c.table.cat.LoadTable(ctx, c.table.ident)
	switch {
	case errors.Is(err, catalog.ErrOutsideStore):
		return fmt.Errorf("publish: table %s: the base's Iceberg table is outside the store, which puts the base at %s: %w; "+
			"refusing (rollwal does not migrate a base; see docs/objstore.md)", c.opts.Table, want, err)
	case err != nil:
		return nil // ensureTable reports it, or creates the table
	case rec.Location() != want:
		return fmt.Errorf("publish: table %s: the base's Iceberg table is at %s, and Options.Store puts the base at %s; "+
			"refusing (rollwal does not migrate a base; see docs/objstore.md)", c.opts.Table, rec.Location(), want)
	}
	return nil
}
