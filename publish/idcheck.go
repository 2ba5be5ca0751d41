package publish

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/bloom"
	"github.com/parquet-go/parquet-go/bloom/xxhash"

	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
)

// The ID check: which of a generation's ids the base already holds, so
// that a row a restarted writer replayed is never appended twice. Only
// generations at or below a shard's cutoff are checked (see plan.go), and
// only against the base files whose position ranges may hold them.

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
	files  func() ([]shardmeta.BaseFile, error)
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

func newBaseIndex(ctx context.Context, c *Coordinator, files func() ([]shardmeta.BaseFile, error)) *baseIndex {
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
	files, err := x.files()
	if err != nil {
		return nil, err
	}
	for _, bf := range files {
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
	// A base file's id column is required: a page's ids are one byte
	// slice and its offsets, read without a parquet.Value each.
	v := page.Data()
	if data, offsets := v.ByteArray(); page.NumNulls() == 0 && len(offsets) == int(page.NumValues())+1 {
		for i := range len(offsets) - 1 {
			confirmID(data[offsets[i]:offsets[i+1]], want, found)
		}
		return nil
	}
	vals := page.Values()
	for {
		n, err := vals.ReadValues(buf)
		for _, v := range buf[:n] {
			confirmID(v.ByteArray(), want, found)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// confirmID moves id from want to found when want holds it.
func confirmID(id []byte, want, found map[string]struct{}) {
	if _, ok := want[string(id)]; ok {
		delete(want, string(id))
		found[string(id)] = struct{}{}
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
