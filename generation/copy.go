package generation

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"strings"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/bloom"
	"github.com/parquet-go/parquet-go/bloom/xxhash"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"

	"github.com/rollwal/rollwal/errs"
	"github.com/rollwal/rollwal/schema"
)

// Copying a generation. A base file is a file of this format too, and when
// a merge keeps every row of a generation already in the schema and codec
// it writes, the file it would encode holds the column chunks the
// generation holds. Copy places those chunks byte for byte under a new
// footer (the merge's Meta; the Parquet schema, row groups and chunk
// metadata unchanged) and decodes only the id, _seq and _epoch columns.
//
// What a decode would have caught is checked instead: every page of every
// chunk is walked and its CRC-32 checked, and the pages must tile the
// chunk and agree with the offset index. Bloom filters, statistics and
// page indexes are copied, and the copy's IndexCRC vouches for them
// afterwards, so the ones the merge's ID check trusts are held to the
// values decoded: every id passes its row group's bloom filter, and the
// _seq chunk bounds and column index are exactly the decoded ones. The
// statistics of the other columns are not decoded and are copied as the
// flush wrote them.

// ErrNotCopyable: the generation cannot be copied as it is (another
// schema or codec, or pages without checksums); decode and re-encode it.
// InvalidInput: the same file is refused again.
var ErrNotCopyable = errs.New(errs.InvalidInput, "generation: not copyable as it is")

// Copy is a generation opened by OpenCopy: its footer validated, its
// pages checked, and its ids, positions and epochs read.
type Copy struct {
	Meta  Meta // the generation's own footer
	IDs   []string
	Seq   []uint64
	Epoch []uint64
	// Hashes are the ids' xxhash (the bloom filter's hash), in order.
	Hashes []uint64

	g        *openFile
	schema   *schema.Schema
	size     int64
	footerAt int64  // where the Thrift footer begins
	buf      []byte // a column chunk's bytes, reused
}

// OpenCopy opens the generation held by r (size bytes, named name as in
// ReadMetaFrom) for copying into a file of schema s and codec. It returns
// an error wrapping ErrNotCopyable when the file is not in s (schema.Same)
// or not in codec, and one wrapping ErrCorrupt when it is damaged. r must
// stay readable until Place returns.
func OpenCopy(r io.ReaderAt, size int64, name string, s *schema.Schema, codec string) (*Copy, error) {
	cc, err := codecFor(codec)
	if err != nil {
		return nil, err
	}
	g, err := openReader(r, size, name, nil)
	if err != nil {
		return nil, err
	}
	cols, _ := schema.WithFieldIDs(g.schema.Columns)
	stored, err := schema.New(cols)
	if err != nil {
		return nil, corrupt(name, "the stored schema with field ids", err)
	}
	if !schema.Same(stored, s) {
		return nil, fmt.Errorf("%w: %s is in schema %s, not the one asked for", ErrNotCopyable, name, stored.Fingerprint())
	}
	for _, rg := range g.pf.Metadata().RowGroups {
		for _, c := range rg.Columns {
			if c.MetaData.Codec != cc.CompressionCodec() {
				return nil, fmt.Errorf("%w: %s has a %s column chunk, not %s", ErrNotCopyable, name, c.MetaData.Codec, cc.CompressionCodec())
			}
		}
	}
	c := &Copy{Meta: g.meta, g: g, schema: s, size: size}
	c.footerAt = size - 8 - int64(binary.LittleEndian.Uint32(c.tail(r)))
	if err := safely(c.check); err != nil {
		if errors.Is(err, ErrNotCopyable) {
			return nil, err
		}
		return nil, g.r.classify(name, "checking the file for a copy", err)
	}
	return c, nil
}

// tail returns the footer length bytes (checkFrame read them already).
func (c *Copy) tail(r io.ReaderAt) []byte {
	var b [4]byte
	_, _ = r.ReadAt(b[:], c.size-8)
	return b[:]
}

// check reads ids, positions and epochs and checks every page.
func (c *Copy) check() error {
	g := c.g
	n := int(g.meta.Rows)
	c.IDs, c.Seq, c.Epoch, c.Hashes = make([]string, 0, n), make([]uint64, 0, n), make([]uint64, 0, n), make([]uint64, 0, n)
	for r, rg := range g.pf.RowGroups() {
		if err := c.checkRowGroup(r, rg); err != nil {
			return fmt.Errorf("row group %d: %w", r, err)
		}
	}
	if len(c.IDs) != n {
		return fmt.Errorf("%d rows read, footer says %d", len(c.IDs), n)
	}
	d := Data{Rows: &schema.Batch{IDs: c.IDs}, Seq: c.Seq, Epoch: c.Epoch}
	return g.checkSystemColumns(d)
}

func (c *Copy) checkRowGroup(r int, rg parquet.RowGroup) error {
	chunks := rg.ColumnChunks()
	meta := c.g.pf.Metadata().RowGroups[r]
	for i, chunk := range chunks {
		if err := c.walkPages(chunk, &meta.Columns[i], rg.NumRows()); err != nil {
			return fmt.Errorf("column %d: %w", i, err)
		}
	}
	id, seq, epoch := chunks[0], chunks[c.g.lay.seqIndex], chunks[c.g.lay.epochIndex]
	if err := c.readIDs(id, rg.NumRows()); err != nil {
		return fmt.Errorf("id: %w", err)
	}
	err := readPages(epoch, rg.NumRows(), func(p parquet.Page) error {
		v := p.Data()
		c.Epoch = append(c.Epoch, v.Uint64()...)
		return nil
	})
	if err != nil {
		return fmt.Errorf("_epoch: %w", err)
	}
	if err := c.checkSeq(seq, rg.NumRows()); err != nil {
		return fmt.Errorf("_seq: %w", err)
	}
	return nil
}

// readPages calls add with every page of a required, flat column chunk
// (a value a row, no nulls) and checks that they hold rows rows. The page
// is released when add returns.
func readPages(chunk parquet.ColumnChunk, rows int64, add func(parquet.Page) error) error {
	pages := chunk.Pages()
	defer pages.Close()
	var got int64
	for {
		page, err := pages.ReadPage()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		n := page.NumRows()
		if page.NumValues() != n || page.NumNulls() != 0 {
			err = fmt.Errorf("a page of %d rows holds %d values, %d of them null", n, page.NumValues(), page.NumNulls())
		} else {
			err = add(page)
		}
		parquet.Release(page)
		if err != nil {
			return err
		}
		got += n
	}
	if got != rows {
		return fmt.Errorf("%d values for %d rows", got, rows)
	}
	return nil
}

// readIDs appends the id chunk's ids to c.IDs, one string a page, and
// checks that its bloom filter holds every one: the ID check takes a
// miss for "not in this file".
func (c *Copy) readIDs(chunk parquet.ColumnChunk, rows int64) error {
	f, err := bloomFilter(chunk)
	if err != nil {
		return err
	}
	return readPages(chunk, rows, func(p parquet.Page) error {
		v := p.Data()
		data, offsets := v.ByteArray()
		if len(offsets) != int(p.NumValues())+1 {
			return fmt.Errorf("%d offsets for %d values", len(offsets), p.NumValues())
		}
		all := string(data[offsets[0]:offsets[len(offsets)-1]])
		for i := range len(offsets) - 1 {
			lo, hi := offsets[i], offsets[i+1]
			h := xxhash.Sum64(data[lo:hi])
			if !f.Check(h) {
				return fmt.Errorf("id %q is not in the bloom filter", data[lo:hi])
			}
			c.IDs, c.Hashes = append(c.IDs, all[lo-offsets[0]:hi-offsets[0]]), append(c.Hashes, h)
		}
		return nil
	})
}

// walkPages checks that the pages of a column chunk tile its byte range,
// each with a CRC-32 that matches its data, that they hold the row group's
// rows, and that the offset index locates exactly them.
func (c *Copy) walkPages(chunk parquet.ColumnChunk, cc *format.ColumnChunk, rows int64) error {
	m := &cc.MetaData
	if m.DictionaryPageOffset != 0 {
		return fmt.Errorf("%w: a dictionary page", ErrNotCopyable)
	}
	if m.DataPageOffset < 4 || m.TotalCompressedSize < 0 || m.DataPageOffset+m.TotalCompressedSize > c.footerAt {
		return fmt.Errorf("column chunk [%d, +%d) outside the file's data", m.DataPageOffset, m.TotalCompressedSize)
	}
	if int64(cap(c.buf)) < m.TotalCompressedSize {
		c.buf = make([]byte, m.TotalCompressedSize)
	}
	data := c.buf[:m.TotalCompressedSize]
	if _, err := c.g.r.ReadAt(data, m.DataPageOffset); err != nil {
		return err
	}
	fc, ok := chunk.(*parquet.FileColumnChunk)
	if !ok {
		return errors.New("not a file column chunk")
	}
	oi, err := fc.OffsetIndex()
	if err != nil {
		return fmt.Errorf("offset index: %w", err)
	}
	var row, values int64
	page := 0
	for at := 0; at < len(data); page++ {
		h, n, err := pageHeader(data[at:])
		if err != nil {
			return fmt.Errorf("page %d: %w", page, err)
		}
		if !h.DataPageHeaderV2.Valid || h.Type != format.DataPageV2 {
			return fmt.Errorf("%w: a page of type %s", ErrNotCopyable, h.Type)
		}
		end := at + n + int(h.CompressedPageSize)
		switch {
		case h.CompressedPageSize < 0 || end > len(data):
			return fmt.Errorf("page %d ends past its column chunk", page)
		case h.CRC == 0:
			return fmt.Errorf("%w: page %d has no checksum", ErrNotCopyable, page)
		case uint32(h.CRC) != crc32.ChecksumIEEE(data[at+n:end]):
			return fmt.Errorf("page %d: crc32 checksum mismatch: %w", page, parquet.ErrCorrupted)
		case page >= oi.NumPages() || oi.Offset(page) != m.DataPageOffset+int64(at) ||
			oi.CompressedPageSize(page) != int64(end-at) || oi.FirstRowIndex(page) != row:
			return fmt.Errorf("page %d disagrees with the offset index", page)
		}
		row += int64(h.DataPageHeaderV2.V.NumRows)
		values += int64(h.DataPageHeaderV2.V.NumValues)
		at = end
	}
	if page != oi.NumPages() || row != rows || values != m.NumValues {
		return fmt.Errorf("%d pages of %d rows and %d values; the offset index has %d pages, the row group %d rows, the chunk %d values",
			page, row, values, oi.NumPages(), rows, m.NumValues)
	}
	return nil
}

// pageHeader decodes the page header at the start of b and returns its
// length.
func pageHeader(b []byte) (*format.PageHeader, int, error) {
	pr := new(thrift.CompactProtocol).NewReaderFromBytes(b)
	h := new(format.PageHeader)
	if err := thrift.NewDecoder(pr).Decode(h); err != nil {
		return nil, 0, err
	}
	return h, pr.BytesRead(), nil
}

// checkSeq reads the _seq chunk into c.Seq and holds its statistics and
// column index, which the ID check lets skip row groups and pages, to
// the values read.
func (c *Copy) checkSeq(chunk parquet.ColumnChunk, rows int64) error {
	first := len(c.Seq)
	err := readPages(chunk, rows, func(p parquet.Page) error {
		v := p.Data()
		c.Seq = append(c.Seq, v.Uint64()...)
		return nil
	})
	if err != nil {
		return err
	}
	fc := chunk.(*parquet.FileColumnChunk) // walkPages checked
	seq := c.Seq[first:]
	lo, hi := bounds(seq)
	low, high, ok := fc.Bounds()
	if !ok || low.IsNull() || high.IsNull() || low.Uint64() != lo || high.Uint64() != hi {
		return fmt.Errorf("statistics %v..%v, the values span %d..%d", low, high, lo, hi)
	}
	ci, err := fc.ColumnIndex()
	if err != nil {
		return fmt.Errorf("column index: %w", err)
	}
	oi, _ := fc.OffsetIndex() // walkPages read it
	if ci.NumPages() != oi.NumPages() {
		return fmt.Errorf("column index of %d pages, offset index of %d", ci.NumPages(), oi.NumPages())
	}
	for p := range ci.NumPages() {
		from, to := oi.FirstRowIndex(p), rows
		if p+1 < oi.NumPages() {
			to = oi.FirstRowIndex(p + 1)
		}
		lo, hi := bounds(seq[from:to])
		if ci.NullPage(p) || ci.MinValue(p).Uint64() != lo || ci.MaxValue(p).Uint64() != hi {
			return fmt.Errorf("column index page %d: %v..%v, the values span %d..%d", p, ci.MinValue(p), ci.MaxValue(p), lo, hi)
		}
	}
	return nil
}

// bounds returns the least and greatest of a non-empty slice.
func bounds(v []uint64) (lo, hi uint64) {
	lo, hi = v[0], v[0]
	for _, x := range v {
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}

// bloomFilter loads the id chunk's bloom filter.
func bloomFilter(chunk parquet.ColumnChunk) (bloom.SplitBlockFilter, error) {
	fb, ok := chunk.BloomFilter().(*parquet.FileBloomFilter)
	if !ok || fb == nil {
		return nil, errors.New("no bloom filter")
	}
	b := make([]byte, fb.Size())
	if _, err := fb.ReadAt(b, 0); err != nil && err != io.EOF {
		return nil, fmt.Errorf("bloom filter: %w", err)
	}
	return bloom.MakeSplitBlockFilter(b), nil
}

// Place writes the copy into dir, durably and atomically as Write does,
// and returns it. meta is completed as Write completes it, from the
// positions and epochs read (its seq range, when zero, is theirs); the
// footer is the generation's with meta in place of its rollwal.* pairs.
func (c *Copy) Place(ctx context.Context, opts Options, dir string, meta Meta) (File, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return File{}, err
	}
	d := Data{Rows: &schema.Batch{Schema: c.schema, IDs: c.IDs}, Seq: c.Seq, Epoch: c.Epoch}
	if err := fillMeta(&meta, c.schema, d); err != nil {
		return File{}, fmt.Errorf("generation: copy generation %d: %w", meta.Generation, err)
	}
	footer, err := c.footer(&meta)
	if err != nil {
		return File{}, err
	}
	write := func(w io.Writer) error {
		if _, err := io.Copy(w, io.NewSectionReader(c.g.r, 0, c.footerAt)); err != nil {
			return err
		}
		_, err := w.Write(footer)
		return err
	}
	file, err := placeFile(ctx, opts, dir, meta, write, "copy")
	if err != nil {
		return File{}, err
	}
	opts.Logger.Debug("generation copied", "path", file.Path, "from", c.g.path, "rows", meta.Rows, "bytes", file.Size)
	return file, nil
}

// footer is the generation's Thrift footer with the rollwal.* pairs of
// meta, then its length and the magic.
func (c *Copy) footer(meta *Meta) ([]byte, error) {
	kv, err := keyValues(meta, c.schema)
	if err != nil {
		return nil, err
	}
	md := *c.g.pf.Metadata()
	md.KeyValueMetadata = make([]format.KeyValue, 0, len(kv))
	for _, p := range kv {
		md.KeyValueMetadata = append(md.KeyValueMetadata, format.KeyValue{Key: p[0], Value: p[1]})
	}
	// Sorted by key, as parquet-go's writer sorts them (its reader sorts
	// them again): the footer is then the one Write writes.
	slices.SortFunc(md.KeyValueMetadata, func(a, b format.KeyValue) int { return strings.Compare(a.Key, b.Key) })
	b, err := thrift.Marshal(new(thrift.CompactProtocol), &md)
	if err != nil {
		return nil, fmt.Errorf("generation: encoding the footer: %w", err)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(b)))
	return append(b, parquetMagic...), nil
}
