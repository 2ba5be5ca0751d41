package generation

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"runtime"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/vfs"
)

// Defaults of Options, chosen with BenchmarkFlushShape on 100k rollout rows
// (fast Snappy, 2 cores):
//
//	page   64 KiB: ratio 0.537, +4% rows/s   (vs 256 KiB)
//	page  256 KiB: ratio 0.499
//	page    1 MiB: ratio 0.491, -3% rows/s
//	row groups of 16k, 64k, 128k rows: within 3% rows/s of each other,
//	and 12–25 MB of peak heap above the batch either way
//
// 256 KiB pages take most of the ratio at little speed. 128k-row groups make
// a typical generation (a 64–128 MiB memtable, ~100k rows) one row group,
// close to DuckDB's own 122,880, with one bloom filter to probe.
const (
	// DefaultPageBufferSize is the uncompressed size at which a column's
	// page is compressed and written.
	DefaultPageBufferSize = 256 << 10
	// DefaultRowGroupRows bounds the rows of one row group.
	DefaultRowGroupRows = 128 << 10
)

// Options configure Write.
type Options struct {
	// FS is the filesystem the file is written to; nil means vfs.Default.
	FS vfs.FS
	// Codec is the page compression: "snappy" (default), "zstd" or "none".
	Codec string
	// PageBufferSize is the uncompressed page size; 0 means
	// DefaultPageBufferSize.
	PageBufferSize int
	// RowGroupRows bounds the rows per row group; 0 means
	// DefaultRowGroupRows.
	RowGroupRows int
	// Logger receives a debug line per file written; nil discards.
	Logger *slog.Logger
	// EncodeWorkers is how many goroutines encode and compress a row
	// group's columns, each column on one of them; 0 means GOMAXPROCS, 1
	// encodes on the caller's goroutine only.
	EncodeWorkers int
	// IndexCRCInName names the file BaseName(…, IndexCRC) instead of
	// Name(…): the file then carries its own index checksum, for files
	// whose only record is a list of paths (the base table's Iceberg
	// manifests).
	IndexCRCInName bool
}

// maxEncodeWorkers bounds Options.EncodeWorkers.
const maxEncodeWorkers = 256

// EnsureDefaults fills in the zero fields.
func (o *Options) EnsureDefaults() {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.Codec == "" {
		o.Codec = CodecSnappy
	}
	if o.PageBufferSize == 0 {
		o.PageBufferSize = DefaultPageBufferSize
	}
	if o.RowGroupRows == 0 {
		o.RowGroupRows = DefaultRowGroupRows
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.EncodeWorkers == 0 {
		o.EncodeWorkers = runtime.GOMAXPROCS(0)
	}
}

// Validate checks options after EnsureDefaults.
func (o *Options) Validate() error {
	if _, err := codecFor(o.Codec); err != nil {
		return err
	}
	if o.PageBufferSize < 4<<10 || o.PageBufferSize > 64<<20 {
		return fmt.Errorf("generation: page buffer size %d is outside [4 KiB, 64 MiB]", o.PageBufferSize)
	}
	if o.EncodeWorkers < 1 || o.EncodeWorkers > maxEncodeWorkers {
		return fmt.Errorf("generation: encode workers %d is outside [1, %d]", o.EncodeWorkers, maxEncodeWorkers)
	}
	if o.RowGroupRows < 1 {
		return fmt.Errorf("generation: row group rows %d is not positive", o.RowGroupRows)
	}
	return nil
}

// Data is the content of a generation: the rows, and for each row its _seq
// and _epoch. The three are parallel: row i has Seq[i] and Epoch[i].
type Data struct {
	Rows  *schema.Batch
	Seq   []uint64
	Epoch []uint64
}

// File is a generation file that Write placed durably.
type File struct {
	Name string // base name, as Name returns it
	Path string // dir joined with Name
	Size int64  // bytes
	Meta Meta   // the metadata stored in the footer
	// IndexCRC is the file's index checksum (see IndexCRC), computed from
	// the bytes written, for whoever keeps it outside the file.
	IndexCRC uint32
}

// Write writes d as generation meta.Generation of epoch meta.Epoch into dir
// and makes it durable under a name of its own (see Name). dir must exist.
//
// Write fills in the Meta fields it knows (FormatVersion, Rows,
// SchemaFingerprint, CreatedUnixNano, and SeqFirst/SeqLast when both are
// zero) and checks those the caller set: the seq range must cover every
// _seq, and no row's _epoch may exceed meta.Epoch.
//
// On error Write removes what it created (best effort: a failed removal is
// logged), so nothing is left under a generation name; a crash while Write
// runs can leave only a temporary file (see IsTemp). Write checks ctx
// between row groups and columns, and once more before the rename.
func Write(ctx context.Context, opts Options, dir string, s *schema.Schema, meta Meta, d Data) (File, error) {
	start := time.Now()
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return File{}, err
	}
	if err := checkData(s, d); err != nil {
		return File{}, fmt.Errorf("generation: write generation %d: %w", meta.Generation, err)
	}
	if err := fillMeta(&meta, s, d); err != nil {
		return File{}, fmt.Errorf("generation: write generation %d: %w", meta.Generation, err)
	}
	lay, err := newLayout(s)
	if err != nil {
		return File{}, err
	}
	encodeTo := func(w io.Writer) error { return encode(ctx, w, opts, lay, s, &meta, d) }
	file, err := placeFile(ctx, opts, dir, meta, encodeTo, "write")
	if err != nil {
		return File{}, err
	}
	opts.Logger.Debug("generation written", "path", file.Path, "rows", meta.Rows,
		"bytes", file.Size, "codec", opts.Codec, "duration", time.Since(start))
	return file, nil
}

// placeFile writes the file of generation meta into dir with write,
// durably (writeDurably), under its final name: with the index checksum in
// it when opts say so. Write and Copy.Place share it; verb names the work
// in errors.
func placeFile(ctx context.Context, opts Options, dir string, meta Meta, write func(io.Writer) error, verb string) (File, error) {
	attempt := newAttempt()
	name := Name(meta.Generation, meta.Epoch, attempt)
	file := File{Meta: meta}
	seal := func(f vfs.File, size int64) (final string, err error) {
		if file.IndexCRC, err = IndexCRC(f, size); err != nil || !opts.IndexCRCInName {
			return name, err
		}
		return BaseName(meta.Generation, meta.Epoch, attempt, file.IndexCRC), nil
	}
	var err error
	if file.Size, file.Name, err = writeDurably(ctx, opts, dir, name, write, seal); err != nil {
		return File{}, fmt.Errorf("generation: %s %s: %w", verb, filepath.Join(dir, name), err)
	}
	file.Path = filepath.Join(dir, file.Name)
	return file, nil
}

// writeDurably places a file atomically: it writes a temporary file in dir,
// syncs it, lets seal read it back and choose the final name, closes it,
// renames it and syncs dir. The temporary file is removed on error; so is
// the final one when the directory sync fails, since its entry may not be
// durable.
func writeDurably(ctx context.Context, opts Options, dir, name string, write func(io.Writer) error,
	seal func(vfs.File, int64) (string, error)) (int64, string, error) {
	fs := opts.FS
	tmp := filepath.Join(dir, tempName(name))
	f, err := fs.Create(tmp)
	if err != nil {
		return 0, "", err
	}
	cw := &countingWriter{w: f}
	err = write(cw)
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		name, err = seal(f, cw.n)
	}
	final := filepath.Join(dir, name)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = ctx.Err() // the last chance to abandon the attempt
	}
	if err == nil {
		err = fs.Rename(tmp, final)
	}
	if err != nil {
		removeQuietly(opts, tmp)
		return 0, "", err
	}
	if err := vfs.SyncDir(fs, dir); err != nil {
		removeQuietly(opts, final)
		return 0, "", fmt.Errorf("syncing directory: %w", err)
	}
	return cw.n, name, nil
}

// removeQuietly removes a file of a failed attempt. Failing to remove it is
// logged, not returned: the attempt's own error matters more, and the file
// is garbage that a later cleanup of temporary files deletes.
func removeQuietly(opts Options, path string) {
	if err := opts.FS.Remove(path); err != nil {
		opts.Logger.Warn("generation: cannot remove the file of a failed write", "path", path, "err", err)
	}
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// checkData checks that d is a well-formed, non-empty set of rows of s.
func checkData(s *schema.Schema, d Data) error {
	b := d.Rows
	switch {
	case s == nil:
		return errors.New("no schema")
	case b == nil || b.Len() == 0:
		return errors.New("no rows (a generation holds at least one)")
	case b.Schema != nil && b.Schema != s && b.Schema.Fingerprint() != s.Fingerprint():
		return fmt.Errorf("batch schema %s differs from the table schema %s", b.Schema.Fingerprint(), s.Fingerprint())
	case len(b.Cols) != len(s.Columns):
		return fmt.Errorf("batch has %d columns, the schema %d", len(b.Cols), len(s.Columns))
	case len(d.Seq) != b.Len() || len(d.Epoch) != b.Len():
		return fmt.Errorf("%d rows but %d _seq and %d _epoch values", b.Len(), len(d.Seq), len(d.Epoch))
	}
	for i, id := range b.IDs {
		if id == "" || len(id) > schema.MaxIDBytes {
			return fmt.Errorf("row %d: id of %d bytes (want 1..%d)", i, len(id), schema.MaxIDBytes)
		}
	}
	for i, c := range s.Columns {
		if err := b.Cols[i].Check(c, b.Len()); err != nil {
			return fmt.Errorf("column %q: %w", c.Name, err)
		}
	}
	return nil
}

// fillMeta completes the caller's Meta from the data and checks what the
// caller set.
func fillMeta(m *Meta, s *schema.Schema, d Data) error {
	n := int64(d.Rows.Len())
	fp := s.Fingerprint()
	switch {
	case m.FormatVersion != 0 && m.FormatVersion != FormatVersion:
		return fmt.Errorf("meta has format version %d; this build writes %d", m.FormatVersion, FormatVersion)
	case m.Rows != 0 && m.Rows != n:
		return fmt.Errorf("meta says %d rows, data has %d", m.Rows, n)
	case m.SchemaFingerprint != "" && m.SchemaFingerprint != fp:
		return fmt.Errorf("meta has schema fingerprint %s, the schema is %s", m.SchemaFingerprint, fp)
	}
	m.FormatVersion, m.Rows, m.SchemaFingerprint = FormatVersion, n, fp
	if m.CreatedUnixNano == 0 {
		m.CreatedUnixNano = time.Now().UnixNano()
	}
	lo, hi := d.Seq[0], d.Seq[0]
	for _, q := range d.Seq {
		lo, hi = min(lo, q), max(hi, q)
	}
	if m.SeqFirst == 0 && m.SeqLast == 0 {
		m.SeqFirst, m.SeqLast = lo, hi
	} else if lo < m.SeqFirst || hi > m.SeqLast {
		return fmt.Errorf("_seq spans [%d, %d], outside the meta range [%d, %d]", lo, hi, m.SeqFirst, m.SeqLast)
	}
	for i, e := range d.Epoch {
		if e > m.Epoch {
			return fmt.Errorf("row %d has _epoch %d, above the file's epoch %d", i, e, m.Epoch)
		}
	}
	return nil
}

// encode writes the Parquet file to w.
func encode(ctx context.Context, w io.Writer, opts Options, lay *layout, s *schema.Schema, m *Meta, d Data) error {
	kv, err := keyValues(m, s)
	if err != nil {
		return err
	}
	codec, _ := codecFor(opts.Codec)
	options := []parquet.WriterOption{
		// Byte-array bounds truncated to StatisticsPrefixBytes in page
		// headers, column index and chunk statistics (see stats.go). No
		// column index limit: parquet-go's own byte-wise cut would leave
		// the bounds alone, but turn a max that has no shorter bound into
		// one that is not a bound.
		parquet.NewSchema(parquetSchemaName, truncatedStats(lay.schema)),
		parquet.ColumnIndexSizeLimit(func([]string) int { return 0 }),
		parquet.Compression(codec),
		parquet.PageBufferSize(opts.PageBufferSize),
		parquet.BloomFilters(parquet.SplitBlockFilter(bloomBitsPerValue, schema.IDColumn)),
	}
	for _, path := range lay.binaryLeaves() {
		options = append(options, parquet.SkipPageStatistics(path...))
	}
	for _, p := range kv {
		options = append(options, parquet.KeyValueMetadata(p[0], p[1]))
	}
	config, err := parquet.NewWriterConfig(options...)
	if err != nil {
		return err
	}
	pw := parquet.NewGenericWriter[any](w, config)
	enc := newEncoderPool(opts.PageBufferSize, opts.EncodeWorkers)
	for lo := 0; lo < d.Rows.Len(); lo += opts.RowGroupRows {
		if err := ctx.Err(); err != nil {
			return err
		}
		hi := min(lo+opts.RowGroupRows, d.Rows.Len())
		if err := enc.writeRowGroup(ctx, pw.ColumnWriters(), lay, s, d, lo, hi); err != nil {
			return err
		}
		if err := pw.Flush(); err != nil {
			return err
		}
	}
	return pw.Close()
}
