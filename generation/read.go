package generation

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"sync"

	"github.com/parquet-go/parquet-go"

	"github.com/rollwal/rollwal/errs"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/vfs"
)

// ErrCorrupt marks every error about the content of a generation file: not
// Parquet, truncated, a footer whose rollwal.* metadata is missing, malformed
// or inconsistent, columns that do not match the stored schema, a schema that
// is not the caller's. Test with errors.Is; the *CorruptError names the file.
var ErrCorrupt = errs.New(errs.Corruption, "generation: corrupt file")

// CorruptError is the error of a corrupt generation file.
type CorruptError struct {
	Path   string
	Reason string
	Err    error // the underlying error, if any
}

func (e *CorruptError) Error() string {
	msg := fmt.Sprintf("generation: corrupt file %s: %s", e.Path, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap makes errors.Is(err, ErrCorrupt) hold, and exposes the cause.
func (e *CorruptError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrCorrupt}
	}
	return []error{ErrCorrupt, e.Err}
}

func corrupt(path, reason string, err error) error {
	return &CorruptError{Path: path, Reason: reason, Err: err}
}

// parquetMagic opens and closes every Parquet file.
const parquetMagic = "PAR1"

// ReadMeta reads and validates the footer of the generation file at path.
// A file that cannot be opened gives the filesystem's error; a file that is
// not a valid generation gives an error wrapping ErrCorrupt.
func ReadMeta(fs vfs.FS, path string) (Meta, error) {
	g, err := open(fs, path, nil)
	if err != nil {
		return Meta{}, err
	}
	defer g.close()
	return g.meta, nil
}

// Read reads a whole generation file: its Meta and its rows. s must be the
// schema the file was written with (same fingerprint), or the read fails
// with ErrCorrupt; ReadStored reads a file of any schema version.
func Read(fs vfs.FS, path string, s *schema.Schema) (Meta, Data, error) {
	if s == nil {
		return Meta{}, Data{}, fmt.Errorf("generation: read %s: no schema", path)
	}
	g, err := open(fs, path, s)
	if err != nil {
		return Meta{}, Data{}, err
	}
	defer g.close()
	return g.readAll()
}

// ReadStored reads a whole generation file with the schema stored in its
// own footer, whichever version of the table's schema that is: Data.Rows.Schema
// is that schema, with its field ids. A footer written before columns
// carried ids is version 1 of its table, and gets the ids
// schema.WithFieldIDs derives. The caller converts the rows to the schema
// it needs (schema.Convert).
func ReadStored(fs vfs.FS, path string) (Meta, Data, error) {
	g, err := open(fs, path, nil)
	if err != nil {
		return Meta{}, Data{}, err
	}
	defer g.close()
	return g.readStored()
}

// ReadMetaFrom is ReadMeta of a generation held by r (size bytes), such as
// an object of an objstore.Store. name stands for the file in errors, and
// its last element (after / or the OS separator) is checked against the
// footer as a file's name is (a generation file name must agree with the
// footer's generation and epoch). Errors reading r are reported as read
// errors, not as ErrCorrupt, exactly as a failing disk is.
func ReadMetaFrom(r io.ReaderAt, size int64, name string) (Meta, error) {
	g, err := openReader(r, size, name, nil)
	if err != nil {
		return Meta{}, err
	}
	return g.meta, nil
}

// ReadStoredFrom is ReadStored of a generation held by r (size bytes); see
// ReadMetaFrom for name. Every check ReadStored makes of a file it makes of
// r: the two share one code path.
func ReadStoredFrom(r io.ReaderAt, size int64, name string) (Meta, Data, error) {
	g, err := openReader(r, size, name, nil)
	if err != nil {
		return Meta{}, Data{}, err
	}
	return g.readStored()
}

// openFile is a generation whose footer has been validated.
type openFile struct {
	path   string    // the file's path, or the name a ReaderAt stands for
	closer io.Closer // the file open opened; nil for openReader's
	r      *ioErrorReader
	pf     *parquet.File
	meta   Meta
	schema *schema.Schema
	lay    *layout
}

func (g *openFile) close() {
	if g.closer != nil {
		_ = g.closer.Close()
	}
}

// readAll decodes the rows with g.schema.
func (g *openFile) readAll() (Meta, Data, error) {
	d, err := g.readData()
	if err != nil {
		return Meta{}, Data{}, err
	}
	return g.meta, d, nil
}

// readStored decodes the rows with the footer's schema, field ids added
// where a footer predates them.
func (g *openFile) readStored() (Meta, Data, error) {
	cols, _ := schema.WithFieldIDs(g.schema.Columns)
	s, err := schema.New(cols)
	if err != nil {
		return Meta{}, Data{}, corrupt(g.path, "the stored schema with field ids", err)
	}
	g.schema = s
	return g.readAll()
}

// open opens path, validates its footer and, when want is not nil, checks
// that the file's schema is want.
func open(fs vfs.FS, path string, want *schema.Schema) (*openFile, error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, fmt.Errorf("generation: open %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("generation: stat %s: %w", path, err)
	}
	g, err := openReader(f, st.Size(), path, want)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	g.closer = f
	return g, nil
}

// openReader validates the footer of the generation held by r (size
// bytes, named path in errors and in the name check) and, when want is not
// nil, checks that its schema is want. open and the ReaderAt functions
// share it: every corruption check is made here, once.
func openReader(ra io.ReaderAt, size int64, path string, want *schema.Schema) (*openFile, error) {
	r := &ioErrorReader{r: ra}
	if err := checkFrame(r, size); err != nil {
		return nil, r.classify(path, err.Error(), nil)
	}
	pf, err := openParquet(r, size)
	if err != nil {
		return nil, r.classify(path, "not a readable Parquet file", err)
	}
	g := &openFile{path: path, r: r, pf: pf}
	if err := safely(func() error { return g.validate(want) }); err != nil {
		return nil, r.classify(path, err.Error(), nil)
	}
	return g, nil
}

// ioErrorReader remembers the first error of the file other than io.EOF,
// so that a failing disk is reported as what it is, not as a corrupt file:
// the two call for different reactions (retry or alert, versus fail closed).
type ioErrorReader struct {
	r   io.ReaderAt
	mu  sync.Mutex
	err error
}

func (e *ioErrorReader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		// A damaged offset in the file, not a failing disk.
		return 0, fmt.Errorf("read at negative offset %d", off)
	}
	n, err := e.r.ReadAt(p, off)
	if err != nil && err != io.EOF {
		e.mu.Lock()
		if e.err == nil {
			e.err = err
		}
		e.mu.Unlock()
	}
	return n, err
}

// classify returns the I/O error seen while reading, if any, or else a
// *CorruptError.
func (e *ioErrorReader) classify(path, reason string, cause error) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return fmt.Errorf("generation: read %s: %w", path, e.err)
	}
	return corrupt(path, reason, cause)
}

// checkFrame checks the magic bytes and the footer length before parquet-go
// sees the file, so that a flipped length cannot make it allocate gigabytes.
func checkFrame(r io.ReaderAt, size int64) error {
	const frame = int64(2*len(parquetMagic) + 4)
	if size < frame {
		return fmt.Errorf("%d bytes is too short for Parquet", size)
	}
	var head [4]byte
	var tail [8]byte
	if _, err := r.ReadAt(head[:], 0); err != nil {
		return fmt.Errorf("reading the header: %v", err)
	}
	if _, err := r.ReadAt(tail[:], size-8); err != nil {
		return fmt.Errorf("reading the trailer: %v", err)
	}
	if string(head[:]) != parquetMagic || string(tail[4:]) != parquetMagic {
		return errors.New("no Parquet magic at the start and end (not Parquet, or truncated)")
	}
	if n := int64(binary.LittleEndian.Uint32(tail[:4])); n > size-frame {
		return fmt.Errorf("footer length %d exceeds the file size %d", n, size)
	}
	return nil
}

// openParquet calls parquet.OpenFile, turning a panic on malformed input
// into an error.
func openParquet(r io.ReaderAt, size int64) (pf *parquet.File, err error) {
	err = safely(func() (err error) { pf, err = parquet.OpenFile(r, size); return err })
	return pf, err
}

// safely runs fn, turning a panic into an error. parquet-go trusts the
// Thrift footer it decodes; a damaged one can make it index out of range or
// dereference nil, and a reader of files must survive that.
func safely(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("parquet-go panicked: %v", r)
		}
	}()
	return fn()
}

// baseName is the last element of a path or an object name: an object
// name's separator is always /, a path's is the OS's.
func baseName(name string) string {
	return path.Base(filepath.ToSlash(name))
}

func (g *openFile) validate(want *schema.Schema) error {
	lookup := g.pf.Lookup
	m, err := parseMeta(lookup)
	if err != nil {
		return err
	}
	stored, err := parseSchema(lookup)
	if err != nil {
		return err
	}
	if err := checkChecksum(lookup); err != nil {
		return err
	}
	if err := m.validate(stored, g.pf.NumRows()); err != nil {
		return err
	}
	if want != nil && want.Fingerprint() != stored.Fingerprint() {
		return fmt.Errorf("written with schema %s, read with schema %s", stored.Fingerprint(), want.Fingerprint())
	}
	if gen, epoch, _, err := ParseName(baseName(g.path)); err == nil && (gen != m.Generation || epoch != m.Epoch) {
		return fmt.Errorf("named for generation %d epoch %d, footer says generation %d epoch %d", gen, epoch, m.Generation, m.Epoch)
	}
	lay, err := newLayout(stored)
	if err != nil {
		return err
	}
	if !parquet.EqualNodes(g.pf.Schema(), lay.schema) {
		return fmt.Errorf("parquet columns do not match the stored schema: file has %v", g.pf.Schema())
	}
	g.meta, g.schema, g.lay = m, stored, lay
	if want != nil {
		g.schema = want // the caller's schema object in the Batch it gets
	}
	return nil
}
