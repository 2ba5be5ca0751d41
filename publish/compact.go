package publish

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/apache/iceberg-go"

	"github.com/rollwal/rollwal/catalog"
	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/layout"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
)

// Compaction configures how small base files are rewritten into larger
// ones (Compact).
type Compaction struct {
	// TargetBytes is the size compacted files grow to; files below half of
	// it are small. 0 means DefaultCompactionTarget.
	TargetBytes int64
	// MinFiles is how many small files of one size tier a shard must have
	// before they are compacted; 0 means DefaultCompactionMinFiles.
	MinFiles int
	// Disabled keeps RunOnce from compacting (Compact still does).
	Disabled bool
}

// Compaction defaults.
const (
	DefaultCompactionTarget   = 128 << 20
	DefaultCompactionMinFiles = 16
)

// SummaryCompacted marks a compaction's snapshot: "<files in>-><files out>".
const SummaryCompacted = "rollwal.compacted"

// CompactResult is what one Compact did.
type CompactResult struct {
	// Groups is the number of files written, FilesIn the number they
	// replaced, Rows the rows they hold.
	Groups, FilesIn int
	Rows            int64
	// Version is the base version after the compaction (unchanged when
	// there was nothing to compact).
	Version uint64
}

// Compact rewrites groups of small base files of one shard, of like size,
// into one file each (compactionGroups): an Iceberg replace snapshot, committed as a new base
// version in the transaction that guards every base commit (the lock, the
// state's revision, the table's record). It never changes which rows the
// table holds: the rows of a group, in _seq order, become one file whose
// _seq range is the union of theirs, so the ID check stays bounded by
// positions. The new files are in the table's current schema version,
// read when Compact begins (each old file's rows are converted from its
// own), and the commit makes it the table's. Files written before base files recorded their shard and
// positions are left alone. A crash leaves the old snapshot (the new
// files are orphans) or the new one (the old files stay for the snapshots
// that still name them, until they expire); repeating it is harmless.
func (c *Coordinator) Compact(ctx context.Context) (CompactResult, error) {
	var res CompactResult
	st, rev, err := c.store.LoadBaseState(ctx)
	if err != nil {
		return res, stateErr(err)
	}
	res.Version = st.Version
	b, err := c.loadBase(ctx, st.Version)
	if err != nil {
		return res, err
	}
	groups := c.compactionGroups(b.files)
	if len(groups) == 0 {
		return res, nil
	}
	ps, err := c.loadPassSchema(ctx)
	if err != nil {
		return res, err
	}
	var adds, removes []shardmeta.BaseFile
	for _, g := range groups {
		f, err := c.compactGroup(ctx, ps, g)
		if err != nil {
			return res, err
		}
		adds, removes = append(adds, f), append(removes, g...)
		res.Rows += f.Rows
	}
	next := st.Clone()
	next.Version++
	if err := c.commitReplace(ctx, ps, rev, next, adds, removes); err != nil {
		return res, err
	}
	res.Groups, res.FilesIn, res.Version = len(adds), len(removes), next.Version
	c.metrics.compactions.Add(float64(len(adds)))
	c.log.Info("compacted base files", "version", next.Version, "files_in", len(removes), "files_out", len(adds), "rows", res.Rows)
	if c.testHookAfterCommit != nil {
		if err := c.testHookAfterCommit(); err != nil {
			return res, err
		}
	}
	return res, c.writeReaderManifest(ctx, next, nil)
}

// Tiers of compaction: files whose sizes are within tierRatio of each
// other (below tierFloor all count as tierFloor) are compacted together.
// A run of new small files therefore becomes one file of the next tier
// instead of being rewritten into the shard's growing file again and
// again, so each row is rewritten about log_MinFiles(target/size) times.
const (
	tierRatio = 4
	tierFloor = 64 << 10
)

// compactionGroups picks, per shard, groups of at least MinFiles small
// files (below half of TargetBytes, with a position range) of one size
// tier, up to TargetBytes and a quarter of the memory budget each (a group
// is read whole).
func (c *Coordinator) compactionGroups(files []shardmeta.BaseFile) [][]shardmeta.BaseFile {
	cfg := c.opts.Compaction
	limit := min(cfg.TargetBytes, max(c.opts.MemoryBudget/4, 1))
	byShard := map[string][]shardmeta.BaseFile{}
	for _, f := range files {
		if f.HasSeqRange() && f.Bytes < cfg.TargetBytes/2 {
			byShard[f.Shard] = append(byShard[f.Shard], f)
		}
	}
	var out [][]shardmeta.BaseFile
	for _, shard := range slices.Sorted(maps.Keys(byShard)) {
		small := byShard[shard]
		slices.SortFunc(small, func(a, b shardmeta.BaseFile) int {
			return cmp.Or(cmp.Compare(a.Bytes, b.Bytes), cmp.Compare(a.SeqFirst, b.SeqFirst))
		})
		var g []shardmeta.BaseFile
		var size int64
		for _, f := range small {
			if len(g) > 0 && (f.Bytes > tierRatio*max(g[0].Bytes, tierFloor) || size+f.Bytes > limit) {
				out, g, size = c.appendGroup(out, g), nil, 0
			}
			g, size = append(g, f), size+f.Bytes
		}
		out = c.appendGroup(out, g)
	}
	return out
}

func (c *Coordinator) appendGroup(out [][]shardmeta.BaseFile, g []shardmeta.BaseFile) [][]shardmeta.BaseFile {
	if len(g) < c.opts.Compaction.MinFiles {
		return out
	}
	return append(out, g)
}

// compactGroup writes the rows of g, in _seq order, as one base file in
// the pass's schema ps (each file's rows converted from its own).
func (c *Coordinator) compactGroup(ctx context.Context, ps passSchema, g []shardmeta.BaseFile) (shardmeta.BaseFile, error) {
	shard := g[0].Shard
	all := generation.Data{Rows: ps.schema.NewBatch(0)}
	var meta generation.Meta
	var want int64
	for _, bf := range g {
		m, d, err := c.readBase(ctx, ps, bf.Path)
		if err != nil {
			return shardmeta.BaseFile{}, fmt.Errorf("publish: compact shard %q: %w", shard, err)
		}
		for i := range d.Rows.Len() {
			all.Rows.AppendRow(d.Rows, i)
		}
		all.Seq, all.Epoch = append(all.Seq, d.Seq...), append(all.Epoch, d.Epoch...)
		meta.Generation, meta.Epoch = max(meta.Generation, m.Generation), max(meta.Epoch, m.Epoch)
		want += bf.Rows
	}
	if int64(all.Rows.Len()) != want {
		return shardmeta.BaseFile{}, fmt.Errorf("%w: compact shard %q: the files hold %d rows, the table says %d", ErrInvalidState, shard, all.Rows.Len(), want)
	}
	sorted := bySeq(ps.schema, all)
	meta.Table, meta.Shard = c.opts.Table, shard
	f, err := c.writeBaseFile(ctx, shard, ps.schema, meta, sorted)
	if err != nil {
		return shardmeta.BaseFile{}, fmt.Errorf("publish: compact shard %q: %w", shard, err)
	}
	return shardmeta.BaseFile{Path: layout.BaseFileRel(shard, f.Name), Rows: f.Meta.Rows, Bytes: f.Size,
		Shard: shard, SeqFirst: f.Meta.SeqFirst, SeqLast: f.Meta.SeqLast, IndexCRC: &f.IndexCRC}, nil
}

// bySeq returns d's rows (of schema s) ordered by _seq (stable).
func bySeq(s *schema.Schema, d generation.Data) generation.Data {
	order := make([]int, d.Rows.Len())
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(d.Seq[a], d.Seq[b]) })
	out := generation.Data{Rows: s.NewBatch(len(order)), Seq: make([]uint64, 0, len(order)), Epoch: make([]uint64, 0, len(order))}
	for _, i := range order {
		out.Rows.AppendRow(d.Rows, i)
		out.Seq, out.Epoch = append(out.Seq, d.Seq[i]), append(out.Epoch, d.Epoch[i])
	}
	return out
}

// commitReplace commits next (a new version, same merge state) with a
// replace snapshot of removes by adds, whose files are in schema ps.
func (c *Coordinator) commitReplace(ctx context.Context, ps passSchema, rev int64, next *shardmeta.BaseState, adds, removes []shardmeta.BaseFile) error {
	data, err := next.Encode()
	if err != nil {
		return err
	}
	v := strconv.FormatUint(next.Version, 10)
	tc, err := c.table.cat.PrepareBaseCommit(ctx, c.table.ident, catalog.BaseCommit{
		Files: c.icebergFiles(adds), Remove: c.icebergFiles(removes),
		Summary:    iceberg.Properties{BaseVersionProperty: v, SummaryCompacted: fmt.Sprintf("%d->%d", len(removes), len(adds))},
		Properties: iceberg.Properties{BaseVersionProperty: v}, Retention: c.opts.SnapshotRetention,
		Schema: ps.catalogVersion()})
	if err != nil {
		return fmt.Errorf("publish: compaction to base version %s: %w", v, err)
	}
	if c.testHookCompactTxn != nil {
		if err := c.testHookCompactTxn(); err != nil {
			return err
		}
	}
	if _, err := c.putState(ctx, rev, data, nil, tc); err != nil {
		return fmt.Errorf("publish: compaction to base version %s: %w", v, err)
	}
	return nil
}
