package catalog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"sync"
	"time"

	icebergio "github.com/apache/iceberg-go/io"

	"github.com/rollwal/rollwal/errs"
	"github.com/rollwal/rollwal/objstore"
)

// metaIO is what the catalog needs of the IO its tables' metadata goes
// through: iceberg-go's read and write interfaces, and syncDirty, which
// makes every file written so far durable before a record names it.
type metaIO interface {
	icebergio.ReadFileIO
	icebergio.WriteFileIO
	syncDirty() error
}

var (
	_ metaIO = fileIO{}
	_ metaIO = objectIO{}
)

// objectIO is iceberg-go's file interface over an objstore.Store, so that
// a table's metadata (metadata JSON, manifest lists, manifests) and its
// data files live in a bucket. A location is the store's URL, a slash and
// an object name:
//
//	s3://bucket/prefix/t/base/metadata/00001-<uuid>.metadata.json
//	└── store.String() ─┘└──────────── object name ─────────────┘
//
// Readers resolve such locations themselves (pyiceberg, pyarrow, Spark);
// a file:// store's locations are file:///dir/<name>, and the bare
// absolute path /dir/<name> is accepted for them too. A location outside
// the store is refused, naming it and the store.
//
// A file being written is buffered in memory (at most maxObjectWrite
// bytes) and created at Close with If-None-Match semantics: an existing
// name is an error, never an overwrite (iceberg-go and metadataLocation
// name every file uniquely). An object is durable once Create returns, so
// syncDirty has nothing to do.
//
// Reads are ranged GETs through objstore.Object: a sequential Read fetches
// readChunk bytes ahead; ReadAt (Parquet footers and column chunks) asks
// for exactly its range; an object no larger than readChunk is fetched
// whole by its first read, so a metadata file or a manifest costs one GET
// after the HEAD of Open.
type objectIO struct {
	store objstore.Store
	// timeout bounds each store call (iceberg-go's IO takes no context).
	timeout time.Duration
	// maxWrite bounds one buffered write; maxObjectWrite but in tests.
	maxWrite int
}

const (
	// maxObjectWrite bounds one buffered write. Manifests and metadata
	// files are kilobytes to megabytes; anything near this is a bug.
	maxObjectWrite = 256 << 20
	// readChunk is the read-ahead of sequential reads.
	readChunk = 1 << 20
	// defaultObjectTimeout bounds one store call of objectIO.
	defaultObjectTimeout = 5 * time.Minute
)

// ErrOutsideStore: a location names no object of the catalog's store.
var ErrOutsideStore = errs.New(errs.InvalidInput, "catalog: location outside the object store")

func newObjectIO(s objstore.Store) objectIO {
	return objectIO{store: s, timeout: defaultObjectTimeout, maxWrite: maxObjectWrite}
}

// StoreLocation is the location of an object of s, as tables and readers
// name it: s's URL, a slash and name.
func StoreLocation(s objstore.Store, name string) string {
	return strings.TrimSuffix(s.String(), "/") + "/" + name
}

// objectName maps a location to the store's object name.
func (o objectIO) objectName(loc string) (string, error) {
	base := strings.TrimSuffix(o.store.String(), "/")
	name, ok := strings.CutPrefix(loc, base+"/")
	if !ok {
		// A file:// store also answers to its bare absolute paths.
		if root, isFile := strings.CutPrefix(base, "file://"); isFile && strings.HasPrefix(loc, "/") {
			name, ok = strings.CutPrefix(path.Clean(loc), root+"/")
		}
	}
	if !ok {
		return "", fmt.Errorf("%w: %q is not under %s/", ErrOutsideStore, loc, base)
	}
	if err := objstore.ValidateName(name); err != nil {
		return "", fmt.Errorf("catalog: location %q: %w", loc, err)
	}
	return name, nil
}

func (o objectIO) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), o.timeout)
}

func (o objectIO) syncDirty() error { return nil }

// Open opens an object for reading: one HEAD; the reads follow.
func (o objectIO) Open(loc string) (icebergio.File, error) {
	name, err := o.objectName(loc)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: loc, Err: err}
	}
	ctx, cancel := o.ctx()
	defer cancel()
	obj, err := o.store.Open(ctx, name)
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, &fs.PathError{Op: "open", Path: loc, Err: errors.Join(fs.ErrNotExist, err)}
	}
	if err != nil {
		return nil, err
	}
	return &objectFile{obj: obj, name: path.Base(name)}, nil
}

// ReadFile reads a whole object.
func (o objectIO) ReadFile(loc string) ([]byte, error) {
	f, err := o.Open(loc)
	if err != nil {
		return nil, err
	}
	obj := f.(*objectFile).obj
	buf := make([]byte, obj.Size())
	_, err = obj.ReadAt(buf, 0)
	if err == io.EOF {
		err = nil
	}
	return buf, errors.Join(err, f.Close())
}

// Remove deletes an object; an absent one is not an error.
func (o objectIO) Remove(loc string) error {
	name, err := o.objectName(loc)
	if err != nil {
		return err
	}
	ctx, cancel := o.ctx()
	defer cancel()
	return o.store.Delete(ctx, name)
}

// WriteFile creates the object at loc with data.
func (o objectIO) WriteFile(loc string, data []byte) error {
	name, err := o.objectName(loc)
	if err != nil {
		return err
	}
	return o.create(loc, name, data)
}

// Create starts an object that is created, whole, when the writer is
// closed.
func (o objectIO) Create(loc string) (icebergio.FileWriter, error) {
	name, err := o.objectName(loc)
	if err != nil {
		return nil, err
	}
	return &objectWriter{io: o, loc: loc, name: name}, nil
}

func (o objectIO) create(loc, name string, data []byte) error {
	if len(data) > o.maxWrite {
		return fmt.Errorf("catalog: write %s: %d bytes, more than the %d an object write buffers", loc, len(data), o.maxWrite)
	}
	ctx, cancel := o.ctx()
	defer cancel()
	if err := o.store.Create(ctx, name, bytes.NewReader(data), int64(len(data))); err != nil {
		return fmt.Errorf("catalog: write %s: %w", loc, err)
	}
	return nil
}

// objectWriter buffers a file until Close creates it.
type objectWriter struct {
	io        objectIO
	loc, name string
	buf       bytes.Buffer
	closed    bool
	err       error
}

func (w *objectWriter) Write(p []byte) (int, error) {
	if w.closed {
		return 0, fmt.Errorf("catalog: write %s: closed", w.loc)
	}
	if w.err == nil && w.buf.Len()+len(p) > w.io.maxWrite {
		w.err = fmt.Errorf("catalog: write %s: more than the %d bytes an object write buffers", w.loc, w.io.maxWrite)
	}
	if w.err != nil {
		return 0, w.err
	}
	return w.buf.Write(p)
}

func (w *objectWriter) ReadFrom(r io.Reader) (int64, error) {
	return io.Copy(struct{ io.Writer }{w}, r)
}

// Close creates the object; a writer that failed creates nothing.
func (w *objectWriter) Close() error {
	if w.closed {
		return w.err
	}
	w.closed = true
	if w.err == nil {
		w.err = w.io.create(w.loc, w.name, w.buf.Bytes())
	}
	w.buf = bytes.Buffer{}
	return w.err
}

// objectFile is an open object as iceberg-go reads it: ReadAt, and Read
// and Seek over it with a read-ahead chunk.
type objectFile struct {
	obj  objstore.Object
	name string

	mu       sync.Mutex
	pos      int64
	chunk    []byte
	chunkOff int64
}

// ReadAt serves a range from the chunk when it holds it, fetches the whole
// object into the chunk when it is small, and otherwise issues one ranged
// GET.
func (f *objectFile) ReadAt(p []byte, off int64) (int, error) {
	f.mu.Lock()
	if f.chunk == nil && f.obj.Size() <= readChunk {
		if err := f.fill(0); err != nil {
			f.mu.Unlock()
			return 0, err
		}
	}
	if n, ok := f.fromChunk(p, off); ok {
		f.mu.Unlock()
		if n < len(p) {
			return n, io.EOF
		}
		return n, nil
	}
	f.mu.Unlock()
	return f.obj.ReadAt(p, off)
}

// fromChunk copies p from the chunk if the chunk covers off and either
// all of p or the object's end.
func (f *objectFile) fromChunk(p []byte, off int64) (int, bool) {
	end := f.chunkOff + int64(len(f.chunk))
	if f.chunk == nil || off < f.chunkOff || off > end {
		return 0, false
	}
	n := copy(p, f.chunk[off-f.chunkOff:])
	return n, n == len(p) || end == f.obj.Size()
}

// fill reads the chunk at off; the caller holds mu.
func (f *objectFile) fill(off int64) error {
	buf := make([]byte, min(readChunk, f.obj.Size()-off))
	n, err := f.obj.ReadAt(buf, off)
	if err != nil && !(err == io.EOF && n == len(buf)) {
		return err
	}
	f.chunk, f.chunkOff = buf, off
	return nil
}

func (f *objectFile) Read(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pos >= f.obj.Size() {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	if _, ok := f.fromChunk(p[:1], f.pos); !ok || f.pos == f.chunkOff+int64(len(f.chunk)) {
		if err := f.fill(f.pos); err != nil {
			return 0, err
		}
	}
	n := copy(p, f.chunk[f.pos-f.chunkOff:])
	f.pos += int64(n)
	return n, nil
}

func (f *objectFile) Seek(offset int64, whence int) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch whence {
	case io.SeekCurrent:
		offset += f.pos
	case io.SeekEnd:
		offset += f.obj.Size()
	case io.SeekStart:
	default:
		return 0, fmt.Errorf("catalog: seek %s: whence %d", f.name, whence)
	}
	if offset < 0 {
		return 0, fmt.Errorf("catalog: seek %s: negative position %d", f.name, offset)
	}
	f.pos = offset
	return offset, nil
}

func (f *objectFile) Stat() (fs.FileInfo, error) { return objectInfo{f}, nil }
func (f *objectFile) Close() error               { return f.obj.Close() }

type objectInfo struct{ f *objectFile }

func (i objectInfo) Name() string       { return i.f.name }
func (i objectInfo) Size() int64        { return i.f.obj.Size() }
func (i objectInfo) Mode() fs.FileMode  { return 0o444 }
func (i objectInfo) ModTime() time.Time { return time.Time{} }
func (i objectInfo) IsDir() bool        { return false }
func (i objectInfo) Sys() any           { return nil }
