package publish

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/layout"
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
	// BaseFilesOpened counts base files opened for ID checks, and
	// BaseRowGroupsRead the row groups whose id column was read to confirm
	// bloom-filter hits.
	BaseFilesOpened, BaseRowGroupsRead int
	// Copied counts the generations placed as they are, their column
	// chunks copied rather than decoded and re-encoded (copy.go).
	Copied int
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
// Each generation is read with the schema in its own footer and its rows
// converted to the plan's (plan.Schema), in which the base files are
// written; a generation in a newer schema version fails the pass with
// ErrSchemaMoved. A lookup-free generation whose rows are all new, already
// in the pass's schema and codec, is copied into its base file instead
// (copy.go).
func (c *Coordinator) Stage(ctx context.Context, plan *Plan) (*Staged, error) {
	if plan.Schema == nil || plan.SchemaVersion < 1 {
		return nil, fmt.Errorf("publish: the plan has no schema (schema version %d); make plans with Plan", plan.SchemaVersion)
	}
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
	// Only the ID check needs the base's files: they load while
	// lookup-free generations stage, and the stage fails, as before, when
	// they do not.
	base := c.loadBaseFiles(ctx, st.Version)
	defer base.wait()
	idx := newBaseIndex(ctx, c, base.wait)
	defer idx.close()
	out := &Staged{Plan: plan, Complete: true}
	// Sized for the whole plan (up to a million ids): growing it a
	// generation at a time costs more than a lookup-free generation's copy.
	seen := newPassIDs(min(plan.rowCount(), c.opts.MemoryBudget/64))
	var used int64
	done, total := 0, plan.generationCount()
	defer func() { out.BaseFilesOpened, out.BaseRowGroupsRead = idx.opened, idx.groups }()
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
			n, err := c.stageGeneration(ctx, plan.passSchema(), sp.Shard, pg, idx, seen, &part, out)
			if err != nil {
				return nil, err
			}
			used += n
			done++
			c.log.Info("staged generation", "shard", sp.Shard, "generation", pg.Number, "n", done, "of", total,
				"id_check", pg.IDCheck, "rows_staged", out.RowsStaged)
		}
		if len(part.Generations) > 0 {
			out.Parts = append(out.Parts, part)
		}
	}
	c.log.Info("staged", "parts", len(out.Parts), "complete", out.Complete, "rows_read", out.RowsRead,
		"rows_staged", out.RowsStaged, "dropped_in_base", out.DroppedInBase, "dropped_in_pass", out.DroppedInPass,
		"base_files_opened", idx.opened, "base_row_groups_read", idx.groups, "copied", out.Copied)
	if _, err := base.wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// stageGeneration stages one generation, its rows converted to the pass's
// schema ps, and returns the bytes it held (a copied one: its file size).
func (c *Coordinator) stageGeneration(ctx context.Context, ps passSchema, shard string, pg PlannedGeneration, idx *baseIndex,
	seen *passIDs, part *StagedPart, out *Staged) (int64, error) {
	src := c.openSource(ctx, shard, pg)
	defer src.close()
	var found map[string]struct{} // the ID check's answer, when the copy asked it
	if src.err == nil && c.copyable(ps, pg) {
		n, ok, in, err := c.stageCopy(ctx, ps, src, shard, pg, idx, seen, part, out)
		if ok || err != nil {
			return n, err
		}
		found = in
	}
	meta, d, err := ps.convertRead(src.name, generationVersion(pg.Generation), src.read)
	if err != nil {
		return 0, fmt.Errorf("publish: shard %q generation %d: %w", shard, pg.Number, err)
	}
	if meta.Generation != pg.Number {
		return 0, wrongGeneration(shard, src.name, meta.Generation, pg.Number)
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
	lo, hi := uint64(math.MaxUint64), uint64(0)
	for i, id := range d.Rows.IDs {
		if seen.add(id) {
			inPass++
			continue
		}
		keep[i] = true
		fresh = append(fresh, id)
		lo, hi = min(lo, d.Seq[i]), max(hi, d.Seq[i])
	}
	path := "lookup_free"
	if pg.IDCheck {
		path = "id_check"
		if found == nil {
			in, err := idx.contains(idQuery{shard: shard, ids: fresh, lo: lo, hi: hi})
			if err != nil {
				return 0, fmt.Errorf("publish: shard %q generation %d: ID check: %w", shard, pg.Number, err)
			}
			found = in
		}
		for i, id := range d.Rows.IDs {
			if keep[i] {
				if _, ok := found[id]; ok {
					keep[i] = false
					inBase++
				}
			}
		}
	}
	c.metrics.generations.WithLabelValues(path).Inc()
	kept := filter(ps.schema, d, keep)
	addGeneration(part, pg.Number)
	if kept.Rows.Len() == 0 {
		c.log.Debug("generation holds no new rows", "shard", shard, "generation", pg.Number, "path", path)
		return size, nil
	}
	f, err := c.writeBaseFile(ctx, shard, ps.schema, generation.Meta{Table: c.opts.Table, Shard: shard, Generation: pg.Number, Epoch: meta.Epoch}, kept)
	if err != nil {
		return 0, fmt.Errorf("publish: shard %q generation %d: write base file: %w", shard, pg.Number, err)
	}
	c.addBaseFile(part, out, shard, f)
	c.log.Debug("staged generation file", "shard", shard, "generation", pg.Number, "path", path, "reason", pg.Reason,
		"rows", n, "kept", f.Meta.Rows, "file", f.Name)
	return size, nil
}

// addBaseFile adds base file f, staged for shard, to part and counts its
// rows.
func (c *Coordinator) addBaseFile(part *StagedPart, out *Staged, shard string, f generation.File) {
	part.Files = append(part.Files, shardmeta.BaseFile{Path: layout.BaseFileRel(shard, f.Name), Rows: f.Meta.Rows, Bytes: f.Size,
		Shard: shard, SeqFirst: f.Meta.SeqFirst, SeqLast: f.Meta.SeqLast, IndexCRC: &f.IndexCRC})
	out.RowsStaged += f.Meta.Rows
	c.metrics.rowsOut.Add(float64(f.Meta.Rows))
}

// wrongGeneration is the error for a generation file that holds another
// generation than the manifest names.
func wrongGeneration(shard, name string, got, want uint64) error {
	return fmt.Errorf("publish: shard %q: file %s holds generation %d, the manifest says %d", shard, name, got, want)
}

// pendingBase is the base's files, loading.
type pendingBase struct {
	done  chan struct{}
	files []shardmeta.BaseFile
	err   error
}

// loadBaseFiles starts loading the files of the base at version.
func (c *Coordinator) loadBaseFiles(ctx context.Context, version uint64) *pendingBase {
	p := &pendingBase{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		b, err := c.loadBase(ctx, version)
		if err == nil {
			p.files = b.files
		}
		p.err = err
	}()
	return p
}

// wait returns the files once loaded.
func (p *pendingBase) wait() ([]shardmeta.BaseFile, error) {
	<-p.done
	return p.files, p.err
}

// addGeneration adds generation g, the next of the plan, to part.
func addGeneration(part *StagedPart, g uint64) {
	if part.First == 0 {
		part.First = g
	}
	part.Last = g
	part.Generations = append(part.Generations, g)
}

// filter returns the rows of d that keep marks, in schema s.
func filter(s *schema.Schema, d generation.Data, keep []bool) generation.Data {
	if d.Rows.Schema == s && !slices.Contains(keep, false) {
		return d // the common case: a generation of new rows, written as it was read
	}
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
