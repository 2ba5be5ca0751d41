package publish

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/apache/iceberg-go"

	"github.com/rollwal/rollwal/catalog"
	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/vfs"
)

// SummaryMigrated marks the snapshot that took over the file list of a
// base/state written before the base was an Iceberg table.
const SummaryMigrated = "rollwal.migrated-from"

// migrate moves a legacy base state's files (base/state format 1, which
// listed them itself) into the Iceberg table, once: one snapshot holding
// exactly those files, committed as the state's own version in the
// transaction that drops the list from the state. A legacy state is one
// with files, or a version above 0 while the table has no base version
// (its commits kept no rows). It fails closed — nothing written — when a file
// is missing, has another size, or fails its index checksum, and when the
// table already has a snapshot as well as the state a file list.
func (c *Coordinator) migrate(ctx context.Context) error {
	st, rev, err := c.store.LoadBaseState(ctx)
	if errors.Is(err, shardmeta.ErrInvalidBaseState) {
		return nil // Plan fails closed on it
	} else if err != nil {
		return err
	}
	tbl, err := c.table.cat.LoadTable(ctx, c.table.ident)
	if err != nil {
		return fmt.Errorf("publish: load table %v: %w", c.table.ident, err)
	}
	tv, err := tableVersion(tbl)
	if err != nil {
		return err
	}
	hasSnap := tbl.CurrentSnapshot() != nil || tv > 0
	switch {
	case len(st.Files) > 0 && hasSnap:
		return fmt.Errorf("%w: base/state lists %d files and the Iceberg table %s has snapshots too; refusing to merge two file lists",
			ErrInvalidState, len(st.Files), tbl.MetadataLocation())
	case len(st.Files) == 0 && (st.Version == 0 || hasSnap):
		return nil
	}
	files, err := c.verifyLegacyFiles(st.Files)
	if err != nil {
		return err
	}
	v := strconv.FormatUint(st.Version, 10)
	summary := iceberg.Properties{BaseVersionProperty: v, SummaryMigrated: "base/state format 1"}
	tc, err := c.table.cat.PrepareBaseCommit(ctx, c.table.ident, catalog.BaseCommit{Files: c.icebergFiles(files), Summary: summary,
		Properties: iceberg.Properties{BaseVersionProperty: v}})
	if err != nil {
		return fmt.Errorf("publish: migrate base version %d: %w", st.Version, err)
	}
	next := st.Clone()
	next.Files = nil
	data, err := next.Encode()
	if err != nil {
		return err
	}
	if _, err := c.putState(ctx, rev, data, nil, tc); err != nil {
		return fmt.Errorf("publish: migrate base version %d: %w", st.Version, err)
	}
	c.log.Info("moved the base state's file list into the Iceberg table", "version", st.Version, "files", len(files), "metadata", tc.Location)
	// The previous version's readers' manifest of this version has no
	// iceberg_metadata: replace it.
	return c.replaceReaderManifest(ctx, next, nil)
}

// verifyLegacyFiles checks every file a legacy state names before the
// Iceberg table takes it over, and returns them with their sizes on disk
// (Iceberg needs a size; format 1 allowed 0).
func (c *Coordinator) verifyLegacyFiles(files []shardmeta.BaseFile) ([]shardmeta.BaseFile, error) {
	out := make([]shardmeta.BaseFile, 0, len(files))
	for _, f := range files {
		p := filepath.Join(c.baseDir, filepath.FromSlash(f.Path))
		size, err := checkLegacyFile(c.opts.FS, p, f)
		if err != nil {
			return nil, fmt.Errorf("%w: migrate: base/state names %s: %w", ErrInvalidState, f.Path, err)
		}
		f.Bytes = size
		out = append(out, f)
	}
	return out, nil
}

// checkLegacyFile returns the file's size after checking it against what
// the state recorded: the size when it recorded one, the index checksum
// when it recorded one (the name carries none, so this is the last time it
// can be checked).
func checkLegacyFile(fs vfs.FS, p string, f shardmeta.BaseFile) (int64, error) {
	h, err := fs.Open(p)
	if err != nil {
		return 0, err
	}
	defer h.Close()
	info, err := h.Stat()
	if err != nil {
		return 0, err
	}
	if f.Bytes > 0 && info.Size() != f.Bytes {
		return 0, fmt.Errorf("%d bytes on disk, the state recorded %d", info.Size(), f.Bytes)
	}
	if f.IndexCRC != nil {
		if err := generation.VerifyIndex(h, info.Size(), p, *f.IndexCRC); err != nil {
			return 0, err
		}
	}
	return info.Size(), nil
}
