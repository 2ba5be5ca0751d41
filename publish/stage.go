package publish

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/bloom"
	"github.com/parquet-go/parquet-go/bloom/xxhash"

	"github.com/rollwal/rollwal/generation"
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
// ErrSchemaMoved.
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
	base, err := c.loadBase(ctx, st.Version)
	if err != nil {
		return nil, err
	}
	idx := newBaseIndex(ctx, c, base.files)
	defer idx.close()
	out := &Staged{Plan: plan, Complete: true}
	seen := map[string]struct{}{}
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
		"base_files_opened", idx.opened, "base_row_groups_read", idx.groups)
	return out, nil
}

// stageGeneration stages one generation, its rows converted to the pass's
// schema ps, and returns the bytes it held.
func (c *Coordinator) stageGeneration(ctx context.Context, ps passSchema, shard string, pg PlannedGeneration, idx *baseIndex,
	seen map[string]struct{}, part *StagedPart, out *Staged) (int64, error) {
	meta, d, src, err := c.readGeneration(ctx, ps, shard, pg)
	if err != nil {
		return 0, fmt.Errorf("publish: shard %q generation %d: %w", shard, pg.Number, err)
	}
	if meta.Generation != pg.Number {
		return 0, fmt.Errorf("publish: shard %q: file %s holds generation %d, the manifest says %d", shard, src, meta.Generation, pg.Number)
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
		if _, dup := seen[id]; dup {
			inPass++
			continue
		}
		seen[id] = struct{}{}
		keep[i] = true
		fresh = append(fresh, id)
		lo, hi = min(lo, d.Seq[i]), max(hi, d.Seq[i])
	}
	path := "lookup_free"
	if pg.IDCheck {
		path = "id_check"
		in, err := idx.contains(idQuery{shard: shard, ids: fresh, lo: lo, hi: hi})
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
	kept := filter(ps.schema, d, keep)
	if part.First == 0 {
		part.First = pg.Number
	}
	part.Last = pg.Number
	part.Generations = append(part.Generations, pg.Number)
	if kept.Rows.Len() == 0 {
		c.log.Debug("generation holds no new rows", "shard", shard, "generation", pg.Number, "path", path)
		return size, nil
	}
	f, err := c.writeBaseFile(ctx, shard, ps.schema, generation.Meta{Table: c.opts.Table, Shard: shard, Generation: pg.Number, Epoch: meta.Epoch}, kept)
	if err != nil {
		return 0, fmt.Errorf("publish: shard %q generation %d: write base file: %w", shard, pg.Number, err)
	}
	part.Files = append(part.Files, shardmeta.BaseFile{Path: "data/" + shard + "/" + f.Name, Rows: f.Meta.Rows, Bytes: f.Size,
		Shard: shard, SeqFirst: f.Meta.SeqFirst, SeqLast: f.Meta.SeqLast, IndexCRC: &f.IndexCRC})
	out.RowsStaged += f.Meta.Rows
	c.metrics.rowsOut.Add(float64(f.Meta.Rows))
	c.log.Debug("staged generation file", "shard", shard, "generation", pg.Number, "path", path, "reason", pg.Reason,
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

// baseIndex answers "which of these ids are already in the base" for one
// Stage call. A replay keeps a row's WAL position, so an earlier copy of a
// replayed row lies in a base file of the same shard whose position range
// covers it: only those files (and legacy files without a range) are
// opened, and within them only the row groups whose _seq statistics
// overlap. That keeps the check's cost in the size of the replayed tail,
// not of the base. Candidate ids pass the row group's bloom filter, then
// the id column is streamed once to confirm them, one row group at a time.
type baseIndex struct {
	ctx    context.Context
	c      *Coordinator
	files  []shardmeta.BaseFile
	open   map[string]*baseFile
	opened int
	groups int // row groups whose id column was read
}

type baseFile struct {
	path   string
	f      io.Closer
	pf     *parquet.File
	idCol  int
	seqCol int // -1 without a _seq column
}

func newBaseIndex(ctx context.Context, c *Coordinator, files []shardmeta.BaseFile) *baseIndex {
	return &baseIndex{ctx: ctx, c: c, files: files, open: map[string]*baseFile{}}
}

func (x *baseIndex) close() {
	for _, b := range x.open {
		_ = b.f.Close()
	}
}

// idQuery is one generation's ID check: its shard, the ids to look for and
// the span of their positions.
type idQuery struct {
	shard  string
	ids    []string
	lo, hi uint64
	hashes []uint64 // xxhash of each id, the bloom filters' hash; computed once
}

func (q *idQuery) hash(i int) uint64 {
	if q.hashes == nil {
		q.hashes = make([]uint64, len(q.ids))
		for j, id := range q.ids {
			q.hashes[j] = xxhash.Sum64([]byte(id))
		}
	}
	return q.hashes[i]
}

func (q idQuery) mayHold(f shardmeta.BaseFile) bool {
	if !f.HasSeqRange() {
		return true
	}
	return f.Shard == q.shard && f.SeqFirst <= q.hi && q.lo <= f.SeqLast
}

// contains returns the ids of q that some base file holds.
func (x *baseIndex) contains(q idQuery) (map[string]struct{}, error) {
	found := map[string]struct{}{}
	if len(q.ids) == 0 {
		return found, nil
	}
	for _, bf := range x.files {
		if !q.mayHold(bf) {
			continue
		}
		b, err := x.file(bf)
		if err != nil {
			return nil, err
		}
		if err := x.search(b, &q, found); err != nil {
			return nil, err
		}
	}
	return found, nil
}

// search adds to found the ids of q that b holds.
func (x *baseIndex) search(b *baseFile, q *idQuery, found map[string]struct{}) error {
	for gi, rg := range b.pf.RowGroups() {
		chunks := rg.ColumnChunks()
		if !b.seqOverlaps(chunks, q.lo, q.hi) {
			continue
		}
		want, err := bloomCandidates(chunks[b.idCol], q, found)
		if err != nil {
			return fmt.Errorf("%s: row group %d: bloom filter: %w", b.path, gi, err)
		}
		if len(want) == 0 {
			continue
		}
		x.groups++
		if err := confirm(chunks[b.idCol], b.firstRow(chunks, q.lo, q.hi), want, found); err != nil {
			return fmt.Errorf("%s: read id column of row group %d: %w", b.path, gi, err)
		}
	}
	return nil
}

// seqOverlaps reports whether a row group's _seq range may meet [lo, hi];
// without statistics it must be read.
func (b *baseFile) seqOverlaps(chunks []parquet.ColumnChunk, lo, hi uint64) bool {
	if b.seqCol < 0 {
		return true
	}
	fc, ok := chunks[b.seqCol].(*parquet.FileColumnChunk)
	if !ok {
		return true
	}
	min, max, ok := fc.Bounds()
	if !ok || min.IsNull() || max.IsNull() {
		return true
	}
	return uint64(min.Int64()) <= hi && lo <= uint64(max.Int64())
}

// bloomCandidates returns the ids not yet found that the chunk's bloom
// filter may hold (all of them without a filter). The filter is read into
// memory once: checking it in place costs a read per id.
func bloomCandidates(chunk parquet.ColumnChunk, q *idQuery, found map[string]struct{}) (map[string]struct{}, error) {
	may, err := bloomCheck(chunk)
	if err != nil {
		return nil, err
	}
	want := map[string]struct{}{}
	for i, id := range q.ids {
		if _, done := found[id]; done {
			continue
		}
		if may(q.hash(i)) {
			want[id] = struct{}{}
		}
	}
	return want, nil
}

// bloomCheck loads the chunk's bloom filter; parquet-go returns a
// *FileBloomFilter only for the split-block xxhash filter the spec defines,
// so its bytes can be checked with the bloom package directly.
func bloomCheck(chunk parquet.ColumnChunk) (func(h uint64) bool, error) {
	fb, ok := chunk.BloomFilter().(*parquet.FileBloomFilter)
	if !ok || fb == nil {
		return func(uint64) bool { return true }, nil
	}
	buf := make([]byte, fb.Size())
	if _, err := fb.ReadAt(buf, 0); err != nil && err != io.EOF {
		return nil, err
	}
	f := bloom.MakeSplitBlockFilter(buf)
	return f.Check, nil
}

// firstRow is the first row of the row group that may hold a position in
// [lo, hi], from the _seq column's page index (0 without one). Rows are
// written in position order apart from replayed ones, and a replayed tail
// is the newest part of the shard, so reading ids from there to the end
// reads little.
func (b *baseFile) firstRow(chunks []parquet.ColumnChunk, lo, hi uint64) int64 {
	if b.seqCol < 0 {
		return 0
	}
	fc, ok := chunks[b.seqCol].(*parquet.FileColumnChunk)
	if !ok {
		return 0
	}
	ci, err := fc.ColumnIndex()
	if err != nil {
		return 0
	}
	oi, err := fc.OffsetIndex()
	if err != nil || oi.NumPages() != ci.NumPages() {
		return 0
	}
	for i := range ci.NumPages() {
		if ci.NullPage(i) || uint64(ci.MinValue(i).Int64()) <= hi && lo <= uint64(ci.MaxValue(i).Int64()) {
			return oi.FirstRowIndex(i)
		}
	}
	return 0
}

// confirm streams the chunk's ids from row from on and moves those in want
// to found; only one page of values is held at a time.
func confirm(chunk parquet.ColumnChunk, from int64, want, found map[string]struct{}) error {
	return safely(func() error {
		pages := chunk.Pages()
		defer pages.Close()
		if err := pages.SeekToRow(from); err != nil {
			return err
		}
		buf := make([]parquet.Value, 1024)
		for len(want) > 0 {
			page, err := pages.ReadPage()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			err = confirmPage(page, buf, want, found)
			parquet.Release(page)
			if err != nil {
				return err
			}
		}
		return nil
	})
}

func confirmPage(page parquet.Page, buf []parquet.Value, want, found map[string]struct{}) error {
	vals := page.Values()
	for {
		n, err := vals.ReadValues(buf)
		for _, v := range buf[:n] {
			if _, ok := want[string(v.ByteArray())]; ok {
				id := string(v.ByteArray())
				delete(want, id)
				found[id] = struct{}{}
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// file opens a base file once per Stage.
func (x *baseIndex) file(bf shardmeta.BaseFile) (*baseFile, error) {
	if b, ok := x.open[bf.Path]; ok {
		return b, nil
	}
	r, size, f, p, err := x.c.openBase(x.ctx, bf.Path)
	if err != nil {
		return nil, fmt.Errorf("open base file: %w", err)
	}
	x.opened++
	x.c.metrics.baseOpens.Inc()
	b, err := openBaseFile(p, r, size, f, bf.IndexCRC)
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("base file %s: %w", p, err)
	}
	x.open[bf.Path] = b
	return b, nil
}

// openBaseFile opens a base file for the ID check, after verifying its
// index checksum when the state records one: a damaged bloom filter or
// statistic would otherwise make the check skip a duplicate silently.
func openBaseFile(p string, r io.ReaderAt, size int64, f io.Closer, indexCRC *uint32) (*baseFile, error) {
	if indexCRC != nil {
		if err := generation.VerifyIndex(r, size, p, *indexCRC); err != nil {
			return nil, err
		}
	}
	var pf *parquet.File
	if err := safely(func() (err error) { pf, err = parquet.OpenFile(r, size); return err }); err != nil {
		return nil, err
	}
	id, ok := pf.Schema().Lookup(schema.IDColumn)
	if !ok {
		return nil, errors.New("no id column")
	}
	b := &baseFile{path: p, f: f, pf: pf, idCol: id.ColumnIndex, seqCol: -1}
	if seq, ok := pf.Schema().Lookup(schema.SeqColumn); ok {
		b.seqCol = seq.ColumnIndex
	}
	return b, nil
}

func safely(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("parquet-go panicked: %v", r)
		}
	}()
	return fn()
}
