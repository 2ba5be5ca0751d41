package publish

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/rollwal/rollwal/catalog"
	"github.com/rollwal/rollwal/layout"
	"github.com/rollwal/rollwal/shardmeta"
)

// KeepReaderManifests is how many of the newest readers' manifests stay
// (with every file they name) when orphans are removed: a reader that
// listed _manifest/ a moment ago still finds its version.
const KeepReaderManifests = 16

// Orphans is what RemoveOrphans found and deleted.
type Orphans struct {
	// DataFiles, MetadataFiles, ReaderManifests count the files deleted:
	// base files no live snapshot (nor a kept readers' manifest) names,
	// Iceberg files the current metadata does not reach (those of expired
	// snapshots, failed attempts and metadata past the log), and readers'
	// manifests older than the newest KeepReaderManifests.
	DataFiles, MetadataFiles, ReaderManifests int
}

// RemoveOrphans deletes every file under the base directory that nothing
// live refers to and that is older than Options.OrphanGrace. Live is: the current metadata file and those its
// metadata log lists; every snapshot of the current metadata with its
// manifest list, manifests and data files; the newest KeepReaderManifests
// readers' manifests and the files they name. Only the lock holder writes
// under the base, and it does not write while it sweeps, so an unnamed
// file is the garbage of a failed attempt, an expired snapshot or a
// compaction — never a commit in flight: a zombie's commit would fail its
// guard. The grace covers the one exception: this coordinator's own commit
// whose answer was lost may still be applied by etcd a moment later, and
// must find its files. Deleting is idempotent, so a crash in the middle leaves only less
// garbage for the next sweep. Without the lock it fails with ErrLockLost
// and deletes nothing.
func (c *Coordinator) RemoveOrphans(ctx context.Context) (Orphans, error) {
	var out Orphans
	st, _, err := c.store.LoadBaseState(ctx)
	if err != nil {
		return out, stateErr(err)
	}
	b, err := c.loadBase(ctx, st.Version)
	if err != nil {
		return out, err
	}
	live, err := c.liveFiles(ctx, b.tbl)
	if err != nil {
		return out, err
	}
	if err := c.checkLock(ctx); err != nil {
		return out, err
	}
	if c.opts.Store != nil {
		for _, f := range st.Files {
			live[c.fileLocation(f.Path)] = true // a legacy state's own list
		}
		if out, err = c.sweepStore(ctx, live); err != nil {
			return out, err
		}
	} else if err := c.sweepLocal(&out, live); err != nil {
		return out, err
	}
	c.table.commitsSinceSweep = 0
	c.metrics.orphans.WithLabelValues("data").Add(float64(out.DataFiles))
	c.metrics.orphans.WithLabelValues("metadata").Add(float64(out.MetadataFiles))
	c.metrics.orphans.WithLabelValues("readers_manifest").Add(float64(out.ReaderManifests))
	if out != (Orphans{}) {
		c.log.Info("removed orphan files", "data_files", out.DataFiles, "metadata_files", out.MetadataFiles, "readers_manifests", out.ReaderManifests)
	}
	return out, nil
}

// liveFiles is the set of absolute paths that must stay.
func (c *Coordinator) liveFiles(ctx context.Context, tbl *table.Table) (map[string]bool, error) {
	live := map[string]bool{tbl.MetadataLocation(): true}
	for e := range tbl.Metadata().PreviousFiles() {
		live[e.MetadataFile] = true
	}
	fio, err := tbl.FS(ctx)
	if err != nil {
		return nil, err
	}
	manifests, lists := map[string]bool{}, map[string]bool{}
	for _, snap := range tbl.Metadata().Snapshots() {
		live[snap.ManifestList], lists[snap.ManifestList] = true, true
		mfs, err := c.table.manifestList(fio, snap)
		if err != nil {
			return nil, err
		}
		for _, mf := range mfs {
			if manifests[mf.FilePath()] {
				continue
			}
			manifests[mf.FilePath()] = true
			live[mf.FilePath()] = true
			files, err := c.table.manifestFiles(fio, mf, c.baseLocation())
			if err != nil {
				return nil, err
			}
			for _, f := range files {
				live[c.fileLocation(f.Path)] = true
			}
		}
	}
	c.table.keepManifests(manifests)
	for p := range c.table.lists {
		if !lists[p] {
			delete(c.table.lists, p)
		}
	}
	return live, nil
}

// sweepLocal is RemoveOrphans' sweep of the local base directory.
func (c *Coordinator) sweepLocal(out *Orphans, live map[string]bool) error {
	var err error
	if out.ReaderManifests, err = c.pruneReaderManifests(live); err != nil {
		return err
	}
	if out.DataFiles, err = c.sweepData(live); err != nil {
		return err
	}
	out.MetadataFiles, err = c.sweep(layout.MetadataDir(c.baseDir), live)
	return err
}

// pruneReaderManifests deletes all but the newest KeepReaderManifests
// readers' manifests and adds the files the kept ones name to live.
func (c *Coordinator) pruneReaderManifests(live map[string]bool) (int, error) {
	dir := layout.ReaderManifestDir(c.baseDir)
	names, err := c.opts.FS.List(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	} else if err != nil {
		return 0, fmt.Errorf("publish: list %s: %w", dir, err)
	}
	var versions []string
	for _, n := range names {
		if len(n) == len(ReaderManifestName(0)) && strings.HasSuffix(n, ".json") {
			versions = append(versions, n)
		}
	}
	slices.Sort(versions)
	cut := max(len(versions)-KeepReaderManifests, 0)
	kept := map[string][]string{}
	for _, n := range versions[cut:] {
		paths, ok := c.table.readers[n]
		if !ok {
			m, err := readReaderManifest(c.opts.FS, filepath.Join(dir, n))
			if err != nil {
				return 0, err
			}
			for _, f := range m.Files {
				paths = append(paths, filepath.Join(c.baseDir, filepath.FromSlash(f.Path)))
			}
		}
		kept[n] = paths
		for _, p := range paths {
			live[p] = true
		}
	}
	c.table.readers = kept
	removed := 0
	for _, n := range versions[:cut] {
		if err := c.opts.FS.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return removed, fmt.Errorf("publish: remove readers' manifest %s: %w", n, err)
		}
		removed++
	}
	return removed, nil
}

// sweepData sweeps base/data/<shard>/ for every shard directory.
func (c *Coordinator) sweepData(live map[string]bool) (int, error) {
	dataDir := layout.BaseDataDir(c.baseDir)
	shards, err := c.opts.FS.List(dataDir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	} else if err != nil {
		return 0, fmt.Errorf("publish: list %s: %w", dataDir, err)
	}
	total := 0
	for _, s := range shards {
		if shardmeta.ValidateShard(s) != nil {
			continue // not ours
		}
		n, err := c.sweep(filepath.Join(dataDir, s), live)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// sweep deletes the files of dir that live does not hold and that are
// older than the grace.
func (c *Coordinator) sweep(dir string, live map[string]bool) (int, error) {
	names, err := c.opts.FS.List(dir)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return 0, nil // gone, or a file where a shard directory would be
	} else if err != nil {
		return 0, fmt.Errorf("publish: list %s: %w", dir, err)
	}
	removed := 0
	for _, n := range names {
		p := filepath.Join(dir, n)
		if live[p] || c.young(p) {
			continue
		}
		if err := c.opts.FS.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return removed, fmt.Errorf("publish: remove orphan %s: %w", p, err)
		}
		c.log.Debug("removed orphan file", "file", p)
		removed++
	}
	return removed, nil
}

// young reports whether p was modified within the orphan grace.
func (c *Coordinator) young(p string) bool {
	if c.opts.OrphanGrace < 0 {
		return false
	}
	info, err := c.opts.FS.Stat(p)
	return err == nil && time.Since(info.ModTime()) < c.opts.OrphanGrace
}

// sweepStore is RemoveOrphans' sweep of a base in the object store: it
// lists the objects under <table>/base/, prunes the readers' manifests
// (adding the files the kept ones name to live), then deletes every
// object under data/ and metadata/ that live does not hold and that is
// older than the grace. An object a failed or unknown-outcome upload left
// is named by no commit, so it goes once it is past the grace.
func (c *Coordinator) sweepStore(ctx context.Context, live map[string]bool) (Orphans, error) {
	var out Orphans
	store, prefix := c.opts.Store, layout.BasePrefix(c.opts.Table)
	infos, err := store.List(ctx, prefix)
	if err != nil {
		return out, fmt.Errorf("publish: list orphans: %w", err)
	}
	var versions []string
	for _, in := range infos {
		n, ok := strings.CutPrefix(in.Name, layout.ReaderManifestPrefix(c.opts.Table))
		if ok && len(n) == len(ReaderManifestName(0)) && strings.HasSuffix(n, ".json") {
			versions = append(versions, n)
		}
	}
	slices.Sort(versions)
	cut := max(len(versions)-KeepReaderManifests, 0)
	kept := map[string][]string{}
	for _, n := range versions[cut:] {
		paths, ok := c.table.readers[n]
		if !ok {
			m, err := readStoreReaderManifest(ctx, store, layout.ReaderManifestKey(c.opts.Table, n))
			if err != nil {
				return out, err
			}
			for _, f := range m.Files {
				paths = append(paths, c.fileLocation(f.Path))
			}
		}
		kept[n] = paths
		for _, p := range paths {
			live[p] = true
		}
	}
	c.table.readers = kept
	for _, n := range versions[:cut] {
		if err := store.Delete(ctx, layout.ReaderManifestKey(c.opts.Table, n)); err != nil {
			return out, fmt.Errorf("publish: remove readers' manifest: %w", err)
		}
		out.ReaderManifests++
	}
	for _, in := range infos {
		rel := strings.TrimPrefix(in.Name, prefix)
		count := &out.DataFiles
		switch {
		case strings.HasPrefix(rel, layout.BaseDataRel):
		case strings.HasPrefix(rel, layout.MetadataRel):
			count = &out.MetadataFiles
		default:
			continue // the readers' manifests (above), or not ours
		}
		loc := catalog.StoreLocation(store, in.Name)
		if live[loc] || c.opts.OrphanGrace >= 0 && time.Since(in.ModTime) < c.opts.OrphanGrace {
			continue
		}
		if err := store.Delete(ctx, in.Name); err != nil {
			return out, fmt.Errorf("publish: remove orphan: %w", err)
		}
		c.log.Debug("removed orphan object", "object", loc)
		*count++
	}
	return out, nil
}
