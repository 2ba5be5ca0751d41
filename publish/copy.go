package publish

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/layout"
	"github.com/rollwal/rollwal/shardmeta"
)

// A generation placed as it is. The base file of a lookup-free generation
// whose rows are all new to the pass, already in the pass's schema and
// codec, holds the generation's column chunks: decoding and re-encoding
// them would write the same bytes (generation.TestCopyIsTheReencodedFile).
// So such a generation is copied (generation.OpenCopy, Copy.Place): only
// its id, _seq and _epoch columns are decoded, for the pass's dedupe and
// the file's seq range, and every page's checksum is checked as a decode
// would check it. Any other generation, or one the copy finds unfit (a
// duplicate id, another codec), takes the decode path, which reads it
// again.

// copyable reports whether pg may be copied: it is lookup-free (an ID
// check may drop rows, which a copy cannot) and not in a newer schema
// version than the pass's (the decode path refuses that with
// ErrSchemaMoved).
func (c *Coordinator) copyable(ps passSchema, pg PlannedGeneration) bool {
	return !c.testNoCopy && !pg.IDCheck && generationVersion(pg.Generation) <= ps.version
}

// stageCopy stages pg by copying it, and reports false, having changed
// nothing, when it cannot be copied.
func (c *Coordinator) stageCopy(ctx context.Context, ps passSchema, shard string, pg PlannedGeneration,
	seen *passIDs, part *StagedPart, out *Staged) (int64, bool, error) {
	r, size, src, closer, err := c.openGeneration(ctx, shard, pg)
	if err != nil {
		return 0, false, nil // the decode path reports it
	}
	defer closer.Close()
	cp, err := generation.OpenCopy(r, size, src, ps.schema, c.opts.Codec)
	if errors.Is(err, generation.ErrNotCopyable) {
		c.log.Debug("generation not copyable", "shard", shard, "generation", pg.Number, "why", err)
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("publish: shard %q generation %d: %w", shard, pg.Number, err)
	}
	if cp.Meta.Generation != pg.Number {
		return 0, false, fmt.Errorf("publish: shard %q: file %s holds generation %d, the manifest says %d", shard, src, cp.Meta.Generation, pg.Number)
	}
	if !seen.claim(cp.IDs, cp.Hashes) {
		return 0, false, nil // a duplicate, which the decode path drops
	}
	n := int64(len(cp.IDs))
	out.RowsRead += n
	c.metrics.rowsIn.Add(float64(n))
	c.metrics.generations.WithLabelValues("lookup_free").Inc()
	meta := generation.Meta{Table: c.opts.Table, Shard: shard, Generation: pg.Number, Epoch: cp.Meta.Epoch}
	f, err := c.placeBaseFile(ctx, shard, func(opts generation.Options, dir string) (generation.File, error) {
		return cp.Place(ctx, opts, dir, meta)
	})
	if err != nil {
		return 0, false, fmt.Errorf("publish: shard %q generation %d: copy into a base file: %w", shard, pg.Number, err)
	}
	addGeneration(part, pg.Number)
	part.Files = append(part.Files, shardmeta.BaseFile{Path: layout.BaseFileRel(shard, f.Name), Rows: f.Meta.Rows, Bytes: f.Size,
		Shard: shard, SeqFirst: f.Meta.SeqFirst, SeqLast: f.Meta.SeqLast, IndexCRC: &f.IndexCRC})
	out.RowsStaged += f.Meta.Rows
	out.Copied++
	c.metrics.rowsOut.Add(float64(f.Meta.Rows))
	c.metrics.copied.Inc()
	c.log.Debug("staged generation file", "shard", shard, "generation", pg.Number, "path", "copy",
		"rows", n, "file", f.Name)
	return size, true, nil
}

// passIDs are the ids a pass has staged, for its dedupe: exact, for the
// generations it decoded, and for the ones it copied their xxhash (which
// the copy computes for the bloom filter check anyway) until a decoded
// generation needs them exact. A hash met twice, a duplicate or a
// collision, sends the copy to the decode path, which checks exactly.
type passIDs struct {
	exact   map[string]struct{}
	hashes  map[uint64]struct{}
	pending [][]string // copied ids not in exact yet
}

// newPassIDs is the ids of a pass of about n rows.
func newPassIDs(n int64) *passIDs {
	return &passIDs{exact: map[string]struct{}{}, hashes: make(map[uint64]struct{}, n)}
}

// add adds id and reports whether the pass had staged it already.
func (p *passIDs) add(id string) (dup bool) {
	for _, ids := range p.pending {
		for _, id := range ids {
			p.exact[id] = struct{}{}
		}
	}
	p.pending = nil
	n := len(p.exact)
	p.exact[id] = struct{}{}
	return len(p.exact) == n
}

// claim adds the ids of a copied generation (hashes[i] the hash of
// ids[i]) and reports true when none was staged before, nor is twice in
// ids; otherwise it changes nothing and reports false. One map operation
// an id: an insert that does not grow the set met its hash before.
func (p *passIDs) claim(ids []string, hashes []uint64) bool {
	if len(p.exact) > 0 {
		for _, id := range ids {
			if _, ok := p.exact[id]; ok {
				return false
			}
		}
	}
	for i, h := range hashes {
		n := len(p.hashes)
		p.hashes[h] = struct{}{}
		if len(p.hashes) == n {
			for _, back := range hashes[:i] {
				delete(p.hashes, back)
			}
			return false
		}
	}
	p.pending = append(p.pending, ids)
	return true
}

// openGeneration opens planned generation pg of shard for reading: the
// local file, or the store's object read whole (its ranged reads would
// be a GET each). src names it in errors.
func (c *Coordinator) openGeneration(ctx context.Context, shard string, pg PlannedGeneration) (r io.ReaderAt, size int64, src string, closer io.Closer, err error) {
	if c.opts.Store == nil {
		f, err := c.opts.FS.Open(pg.Path)
		if err != nil {
			return nil, 0, pg.Path, nil, err
		}
		st, err := f.Stat()
		if err != nil {
			_ = f.Close()
			return nil, 0, pg.Path, nil, err
		}
		return f, st.Size(), pg.Path, f, nil
	}
	key := layout.GenerationKey(c.opts.Table, shard, pg.File)
	src = objectURL(c.opts.Store, key)
	obj, err := c.opts.Store.Open(ctx, key)
	if err != nil {
		return nil, 0, src, nil, err
	}
	defer obj.Close()
	b, err := fetchObject(obj)
	if err != nil {
		return nil, 0, src, nil, err
	}
	return bytes.NewReader(b), int64(len(b)), src, io.NopCloser(bytes.NewReader(b)), nil
}
