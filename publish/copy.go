package publish

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/rollwal/rollwal/generation"
)

// A generation placed as it is. The base file of a generation whose rows
// are all new to the pass and, for an ID-check generation, to the base,
// already in the pass's schema and codec, holds the generation's column
// chunks: decoding and re-encoding them would write the same bytes
// (generation.TestCopyIsTheReencodedFile). So such a generation is copied
// (generation.OpenCopy, Copy.Place): only its id, _seq and _epoch columns
// are decoded, for the ID check, the pass's dedupe and the file's seq
// range, and every page's checksum is checked as a decode would check it.
// Any other generation, or one the copy finds unfit (an id already in the
// base or the pass, another codec), takes the decode path, which reads it
// again; the ID check's answer is handed to it, not asked twice.

// copyable reports whether pg may be copied: it is not in a newer schema
// version than the pass's (the decode path refuses that with
// ErrSchemaMoved).
func (c *Coordinator) copyable(ps passSchema, pg PlannedGeneration) bool {
	return !c.testNoCopy && generationVersion(pg.Generation) <= ps.version
}

// stageCopy stages pg by copying it, and reports false, having changed
// nothing, when it cannot be copied; then inBase, when not nil, is the
// ID check's answer for pg's ids, for the decode path.
func (c *Coordinator) stageCopy(ctx context.Context, ps passSchema, src *source, shard string, pg PlannedGeneration, idx *baseIndex,
	seen *passIDs, part *StagedPart, out *Staged) (_ int64, copied bool, inBase map[string]struct{}, _ error) {
	cp, err := generation.OpenCopy(src.r, src.size, src.name, ps.schema, c.opts.Codec)
	if errors.Is(err, generation.ErrNotCopyable) {
		c.log.Debug("generation not copyable", "shard", shard, "generation", pg.Number, "why", err)
		return 0, false, nil, nil
	}
	if err != nil {
		return 0, false, nil, fmt.Errorf("publish: shard %q generation %d: %w", shard, pg.Number, err)
	}
	if cp.Meta.Generation != pg.Number {
		return 0, false, nil, wrongGeneration(shard, src.name, cp.Meta.Generation, pg.Number)
	}
	path := "lookup_free"
	if pg.IDCheck {
		path = "id_check"
		in, err := idx.contains(copyQuery(shard, cp))
		if err != nil {
			return 0, false, nil, fmt.Errorf("publish: shard %q generation %d: ID check: %w", shard, pg.Number, err)
		}
		if len(in) > 0 {
			return 0, false, in, nil // rows to drop: the decode path drops them
		}
		inBase = in
	}
	if !seen.claim(cp.IDs, cp.Hashes) {
		return 0, false, inBase, nil // a duplicate, which the decode path drops
	}
	n := int64(len(cp.IDs))
	out.RowsRead += n
	c.metrics.rowsIn.Add(float64(n))
	c.metrics.generations.WithLabelValues(path).Inc()
	meta := generation.Meta{Table: c.opts.Table, Shard: shard, Generation: pg.Number, Epoch: cp.Meta.Epoch}
	f, err := c.placeBaseFile(ctx, shard, func(opts generation.Options, dir string) (generation.File, error) {
		return cp.Place(ctx, opts, dir, meta)
	})
	if err != nil {
		return 0, false, nil, fmt.Errorf("publish: shard %q generation %d: copy into a base file: %w", shard, pg.Number, err)
	}
	addGeneration(part, pg.Number)
	c.addBaseFile(part, out, shard, f)
	out.Copied++
	c.metrics.copied.Inc()
	c.log.Debug("staged generation file", "shard", shard, "generation", pg.Number, "path", path, "copied", true,
		"rows", n, "file", f.Name)
	return src.size, true, nil, nil
}

// copyQuery is the ID check of copied generation cp: all its ids, their
// hashes as the copy computed them.
func copyQuery(shard string, cp *generation.Copy) idQuery {
	q := idQuery{shard: shard, ids: cp.IDs, hashes: cp.Hashes, lo: math.MaxUint64}
	for _, s := range cp.Seq {
		q.lo, q.hi = min(q.lo, s), max(q.hi, s)
	}
	return q
}

// passIDs are the ids a pass has staged, for its dedupe: exact, for the
// generations it decoded, and for the ones it copied their xxhash (which
// the copy computes for the bloom filter check anyway) until a decoded
// generation needs them exact. A hash met twice, a duplicate or a
// collision, sends the copy to the decode path, which checks exactly.
type passIDs struct {
	exact   map[string]struct{}
	hashes  *hashSet
	pending [][]string // copied ids not in exact yet
}

// newPassIDs is the ids of a pass of about n rows. The hash set is made
// for at most a million of them (16 MiB) and grows past that: made for
// the whole of a large plan it would take a third of the memory budget
// before the first generation is read.
func newPassIDs(n int64) *passIDs {
	return &passIDs{exact: map[string]struct{}{}, hashes: newHashSet(int(min(n, 1<<20)))}
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
// ids; otherwise it changes nothing and reports false. One insert an id:
// an insert that adds nothing met its hash before.
func (p *passIDs) claim(ids []string, hashes []uint64) bool {
	if len(p.exact) > 0 {
		for _, id := range ids {
			if _, ok := p.exact[id]; ok {
				return false
			}
		}
	}
	for i, h := range hashes {
		if !p.hashes.add(h) {
			for _, back := range hashes[:i] {
				p.hashes.remove(back)
			}
			return false
		}
	}
	p.pending = append(p.pending, ids)
	return true
}
