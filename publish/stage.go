package publish

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/parquet-go/parquet-go"

	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/internal/vfs"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
)

// Staged is the result of Stage: new base files, written durably but not
// yet committed, for a prefix of the plan.
type Staged struct {
	Plan  *Plan
	Parts []StagedPart
	// Complete reports that the whole plan was staged; otherwise the memory
	// budget stopped staging and a later pass (after a replan) takes the
	// rest.
	Complete bool
	// RowsRead, RowsStaged; DroppedInBase, DroppedInPass count duplicates
	// removed by the ID check and by the pass's own dedupe.
	RowsRead, RowsStaged, DroppedInBase, DroppedInPass int64
	// BaseFilesOpened counts base files opened for ID checks.
	BaseFilesOpened int
}

// StagedPart is one shard's staged prefix: generations First..Last of the
// plan (ascending, whole generations) and the files holding their new rows.
type StagedPart struct {
	Shard       string
	First, Last uint64
	Generations []uint64
	Files       []shardmeta.BaseFile
}

// Stage reads the planned generations in ascending order per shard and
// writes their new rows as base files under <base>/data/<shard>/. Rows of
// ID-check generations whose id is already in the base are dropped (bloom
// filter probe, then an exact read of the id column of the candidate row
// groups); every generation is deduplicated within itself and against the
// generations staged before it in this pass. Staging stops at a whole
// generation once MemoryBudget is used (at least one generation is staged).
func (c *Coordinator) Stage(ctx context.Context, plan *Plan) (*Staged, error) {
	st, _, err := c.store.LoadBaseState(ctx)
	if err != nil {
		return nil, err
	}
	if st.Version != plan.BaseVersion {
		return nil, fmt.Errorf("%w: plan at base version %d, state at %d", ErrBaseMoved, plan.BaseVersion, st.Version)
	}
	for _, sp := range plan.Shards {
		ms := st.Shards[sp.Shard]
		if ms.ObservedEpoch == nil || *ms.ObservedEpoch != sp.Epoch || ms.Cutoff == nil || *ms.Cutoff != sp.Cutoff {
			return nil, fmt.Errorf("%w: shard %q: plan does not match the durable cutoff", ErrBaseMoved, sp.Shard)
		}
	}
	idx := &baseIndex{c: c, files: st.Files}
	defer idx.close()
	out := &Staged{Plan: plan, Complete: true}
	seen := map[string]struct{}{}
	var used int64
	defer func() { out.BaseFilesOpened = idx.opened }()
stage:
	for _, sp := range plan.Shards {
		part := StagedPart{Shard: sp.Shard}
		for _, pg := range sp.Generations {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if used >= c.opts.MemoryBudget && (len(part.Generations) > 0 || len(out.Parts) > 0) {
				out.Complete = false
				if len(part.Generations) > 0 {
					out.Parts = append(out.Parts, part)
				}
				break stage
			}
			n, err := c.stageGeneration(ctx, sp.Shard, pg, idx, seen, &part, out)
			if err != nil {
				return nil, err
			}
			used += n
		}
		if len(part.Generations) > 0 {
			out.Parts = append(out.Parts, part)
		}
	}
	c.log.Info("staged", "parts", len(out.Parts), "complete", out.Complete, "rows_read", out.RowsRead,
		"rows_staged", out.RowsStaged, "dropped_in_base", out.DroppedInBase, "dropped_in_pass", out.DroppedInPass,
		"base_files_opened", idx.opened)
	return out, nil
}

// stageGeneration stages one generation and returns the bytes it held.
func (c *Coordinator) stageGeneration(ctx context.Context, shard string, pg PlannedGeneration, idx *baseIndex,
	seen map[string]struct{}, part *StagedPart, out *Staged) (int64, error) {
	meta, d, err := generation.Read(c.opts.FS, pg.Path, c.opts.Schema)
	if err != nil {
		return 0, fmt.Errorf("publish: shard %q generation %d: %w", shard, pg.Number, err)
	}
	if meta.Generation != pg.Number {
		return 0, fmt.Errorf("publish: shard %q: file %s holds generation %d, the manifest says %d", shard, pg.Path, meta.Generation, pg.Number)
	}
	size := d.Rows.Size()
	n := d.Rows.Len()
	out.RowsRead += int64(n)
	c.metrics.rowsIn.Add(float64(n))
	keep := make([]bool, n)
	var fresh []string
	var inPass, inBase int64
	defer func() {
		out.DroppedInPass += inPass
		out.DroppedInBase += inBase
		c.metrics.dropped.WithLabelValues("in_pass").Add(float64(inPass))
		c.metrics.dropped.WithLabelValues("in_base").Add(float64(inBase))
	}()
	for i, id := range d.Rows.IDs {
		if _, dup := seen[id]; dup {
			inPass++
			continue
		}
		seen[id] = struct{}{}
		keep[i] = true
		fresh = append(fresh, id)
	}
	path := "lookup_free"
	if pg.IDCheck {
		path = "id_check"
		in, err := idx.contains(fresh)
		if err != nil {
			return 0, fmt.Errorf("publish: shard %q generation %d: ID check: %w", shard, pg.Number, err)
		}
		for i, id := range d.Rows.IDs {
			if keep[i] {
				if _, ok := in[id]; ok {
					keep[i] = false
					inBase++
				}
			}
		}
	}
	c.metrics.generations.WithLabelValues(path).Inc()
	kept := filter(c.opts.Schema, d, keep)
	if part.First == 0 {
		part.First = pg.Number
	}
	part.Last = pg.Number
	part.Generations = append(part.Generations, pg.Number)
	if kept.Rows.Len() == 0 {
		c.log.Debug("generation holds no new rows", "shard", shard, "generation", pg.Number, "path", path)
		return size, nil
	}
	dir := filepath.Join(c.baseDir, "data", shard)
	if err := vfs.MkdirAllDurable(c.opts.FS, dir, 0o755); err != nil {
		return 0, fmt.Errorf("publish: %w", err)
	}
	f, err := generation.Write(ctx, generation.Options{FS: c.opts.FS, Codec: c.opts.Codec, Logger: c.opts.Logger}, dir, c.opts.Schema,
		generation.Meta{Table: c.opts.Table, Shard: shard, Generation: pg.Number, Epoch: meta.Epoch}, kept)
	if err != nil {
		return 0, fmt.Errorf("publish: shard %q generation %d: write base file: %w", shard, pg.Number, err)
	}
	part.Files = append(part.Files, shardmeta.BaseFile{Path: "data/" + shard + "/" + f.Name, Rows: f.Meta.Rows, Bytes: f.Size})
	out.RowsStaged += f.Meta.Rows
	c.metrics.rowsOut.Add(float64(f.Meta.Rows))
	c.log.Debug("staged generation", "shard", shard, "generation", pg.Number, "path", path, "reason", pg.Reason,
		"rows", n, "kept", f.Meta.Rows, "file", f.Name)
	return size, nil
}

func filter(s *schema.Schema, d generation.Data, keep []bool) generation.Data {
	out := generation.Data{Rows: s.NewBatch(len(keep))}
	for i, k := range keep {
		if k {
			out.Rows.AppendRow(d.Rows, i)
			out.Seq = append(out.Seq, d.Seq[i])
			out.Epoch = append(out.Epoch, d.Epoch[i])
		}
	}
	return out
}

// baseIndex answers "which of these ids are in the base" for one Stage
// call: it opens the base files lazily, once, probes their id bloom
// filters, and confirms hits by reading the id column of the row groups
// that matched.
type baseIndex struct {
	c      *Coordinator
	files  []shardmeta.BaseFile
	open   []*baseFile
	loaded bool
	opened int
}

type baseFile struct {
	path string
	f    vfs.File
	pf   *parquet.File
	col  int
	ids  map[int]map[string]struct{} // row group → its ids, read on demand
}

func (x *baseIndex) close() {
	for _, b := range x.open {
		_ = b.f.Close()
	}
}

func (x *baseIndex) load() error {
	if x.loaded {
		return nil
	}
	x.loaded = true
	for _, bf := range x.files {
		p := filepath.Join(x.c.baseDir, filepath.FromSlash(bf.Path))
		f, err := x.c.opts.FS.Open(p)
		if err != nil {
			return fmt.Errorf("open base file: %w", err)
		}
		x.opened++
		x.c.metrics.baseOpens.Inc()
		st, err := f.Stat()
		if err == nil {
			var pf *parquet.File
			err = safely(func() (err error) { pf, err = parquet.OpenFile(f, st.Size()); return err })
			if err == nil {
				leaf, ok := pf.Schema().Lookup(schema.IDColumn)
				if !ok {
					err = errors.New("no id column")
				} else {
					x.open = append(x.open, &baseFile{path: p, f: f, pf: pf, col: leaf.ColumnIndex, ids: map[int]map[string]struct{}{}})
					continue
				}
			}
		}
		_ = f.Close()
		return fmt.Errorf("base file %s: %w", p, err)
	}
	return nil
}

// contains returns the ids among ids that some base file holds.
func (x *baseIndex) contains(ids []string) (map[string]struct{}, error) {
	found := map[string]struct{}{}
	if len(ids) == 0 || len(x.files) == 0 {
		return found, nil // an empty base holds nothing: no reads
	}
	if err := x.load(); err != nil {
		return nil, err
	}
	for _, b := range x.open {
		for gi, rg := range b.pf.RowGroups() {
			chunk := rg.ColumnChunks()[b.col]
			bloom := chunk.BloomFilter()
			for _, id := range ids {
				if _, done := found[id]; done {
					continue
				}
				if bloom != nil {
					hit, err := bloom.Check(parquet.ByteArrayValue([]byte(id)))
					if err != nil {
						return nil, fmt.Errorf("%s: bloom filter: %w", b.path, err)
					}
					if !hit {
						continue
					}
				}
				set, err := b.rowGroupIDs(gi, chunk)
				if err != nil {
					return nil, err
				}
				if _, ok := set[id]; ok {
					found[id] = struct{}{}
				}
			}
		}
	}
	return found, nil
}

func (b *baseFile) rowGroupIDs(gi int, chunk parquet.ColumnChunk) (map[string]struct{}, error) {
	if set, ok := b.ids[gi]; ok {
		return set, nil
	}
	set := make(map[string]struct{}, chunk.NumValues())
	err := safely(func() error {
		pages := chunk.Pages()
		defer pages.Close()
		buf := make([]parquet.Value, 1024)
		for {
			page, err := pages.ReadPage()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			vals := page.Values()
			for {
				n, err := vals.ReadValues(buf)
				for _, v := range buf[:n] {
					set[string(v.ByteArray())] = struct{}{}
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					parquet.Release(page)
					return err
				}
			}
			parquet.Release(page)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("%s: read id column of row group %d: %w", b.path, gi, err)
	}
	b.ids[gi] = set
	return set, nil
}

func safely(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("parquet-go panicked: %v", r)
		}
	}()
	return fn()
}
