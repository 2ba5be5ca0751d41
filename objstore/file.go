package objstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rollwal/rollwal/vfs"
)

// fileStore keeps each object as a file below root.
type fileStore struct {
	fs   vfs.FS
	root string
	m    *metrics
}

const fileBackend = "file"

func openFile(dir string, o Options) (Store, error) {
	if !path.IsAbs(dir) || path.Clean(dir) != dir {
		return nil, fmt.Errorf("objstore: open file://%s: want a clean absolute path (file:///abs/dir)", dir)
	}
	s := &fileStore{fs: o.FS, root: dir, m: newMetrics(o.Registerer)}
	if err := vfs.MkdirAllDurable(s.fs, filepath.FromSlash(dir), 0o755); err != nil {
		return nil, fmt.Errorf("objstore: open %s: %w", s, err)
	}
	return s, nil
}

func (s *fileStore) String() string { return "file://" + s.root }

func (s *fileStore) path(name string) string {
	return filepath.Join(filepath.FromSlash(s.root), filepath.FromSlash(name))
}

// done records an operation's metrics and names it in its error.
func (s *fileStore) done(op, name string, start time.Time, bytes int64, err error) error {
	s.m.observe(fileBackend, op, fileOutcome(err), start, bytes)
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrInvalidName) {
		return opError(op, s.String(), err)
	}
	return opError(op, joinURL(s.String(), name), err)
}

func fileOutcome(err error) string {
	switch {
	case err == nil:
		return outcomeOK
	case errors.Is(err, ErrExists):
		return outcomeExists
	case errors.Is(err, ErrNotFound):
		return outcomeNotFound
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return outcomeCanceled
	}
	return outcomeClient
}

func (s *fileStore) Create(ctx context.Context, name string, r io.ReaderAt, size int64) error {
	start := time.Now()
	written, err := s.create(ctx, name, r, size)
	return s.done("create", name, start, written, err)
}

func (s *fileStore) create(ctx context.Context, name string, r io.ReaderAt, size int64) (int64, error) {
	if err := ValidateName(name); err != nil {
		return 0, err
	}
	if size < 0 {
		return 0, fmt.Errorf("negative size %d", size)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	final := s.path(name)
	dir := filepath.Dir(final)
	if err := vfs.MkdirAllDurable(s.fs, dir, 0o755); err != nil {
		return 0, err
	}
	if err := s.absent(final); err != nil {
		return 0, err // taken already: write nothing
	}
	tmp, err := s.writeTemp(final, r, size)
	if err != nil {
		return 0, err
	}
	if err = ctx.Err(); err == nil { // the last chance to abandon the create
		err = s.link(tmp, final)
	}
	// The temporary name goes either way. A failure to remove it leaves a
	// second name of the object, which List skips, and does not undo the
	// create.
	_ = s.fs.Remove(tmp)
	if err != nil {
		return 0, err
	}
	// The object is visible; until its directory is synced a crash may
	// undo the link. The data is synced, so it is whole either way.
	if err := vfs.SyncDir(s.fs, dir); err != nil {
		return 0, mark(ErrUnknownOutcome, err)
	}
	return size, nil
}

// link gives the synced temporary file tmp its final name. Link never
// replaces, so of creates racing on one name, in this process or in others
// sharing the directory, exactly one wins; the others get ErrExists.
func (s *fileStore) link(tmp, final string) error {
	err := s.fs.Link(tmp, final)
	if !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := s.absent(final); err != nil && !errors.Is(err, ErrExists) {
		return err // a directory, say
	}
	return ErrExists // taken when we linked, even if deleted since
}

// absent returns nil if nothing is named final, ErrExists if an object
// is, and another error otherwise.
func (s *fileStore) absent(final string) error {
	fi, err := s.fs.Stat(final)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.IsDir():
		return errors.New("a directory holds objects below this name")
	}
	return ErrExists
}

// writeTemp writes size bytes of r to a fresh temporary file beside final
// and syncs it, returning its path. It removes the file on failure.
func (s *fileStore) writeTemp(final string, r io.ReaderAt, size int64) (string, error) {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := final + "." + hex.EncodeToString(rnd[:]) + TempSuffix
	f, err := s.fs.Create(tmp)
	if err != nil {
		return "", err
	}
	n, err := io.Copy(f, io.NewSectionReader(r, 0, size))
	if err == nil && n != size {
		err = fmt.Errorf("the reader holds %d bytes, not the %d announced", n, size)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = s.fs.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

func (s *fileStore) Open(ctx context.Context, name string) (Object, error) {
	start := time.Now()
	o, err := s.open(ctx, name)
	return o, s.done("open", name, start, 0, err)
}

func (s *fileStore) open(ctx context.Context, name string) (Object, error) {
	if _, err := s.stat(ctx, name); err != nil {
		return nil, err
	}
	f, err := s.fs.Open(s.path(name))
	if err != nil {
		return nil, notFound(err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return &fileObject{s: s, name: name, f: f, size: fi.Size()}, nil
}

func notFound(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return mark(ErrNotFound, err)
	}
	return err
}

func (s *fileStore) Stat(ctx context.Context, name string) (Info, error) {
	start := time.Now()
	info, err := s.stat(ctx, name)
	return info, s.done("stat", name, start, 0, err)
}

func (s *fileStore) stat(ctx context.Context, name string) (Info, error) {
	if err := ValidateName(name); err != nil {
		return Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return Info{}, err
	}
	fi, err := s.fs.Stat(s.path(name))
	if err != nil {
		return Info{}, notFound(err)
	}
	if !fi.Mode().IsRegular() {
		return Info{}, ErrNotFound
	}
	return Info{Name: name, Size: fi.Size(), ModTime: fi.ModTime()}, nil
}

func (s *fileStore) List(ctx context.Context, prefix string) ([]Info, error) {
	start := time.Now()
	infos, err := s.list(ctx, prefix)
	return infos, s.done("list", prefix, start, 0, err)
}

func (s *fileStore) list(ctx context.Context, prefix string) ([]Info, error) {
	if err := validatePrefix(prefix); err != nil {
		return nil, err
	}
	// Walk from the deepest directory every match lies below.
	base := ""
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		base = prefix[:i]
	}
	var infos []Info
	if err := s.walk(ctx, base, prefix, &infos); err != nil {
		return nil, err
	}
	slices.SortFunc(infos, func(a, b Info) int { return strings.Compare(a.Name, b.Name) })
	return infos, nil
}

// walk appends the objects below the directory rel (a slash name, "" for
// the root) whose names begin with prefix.
func (s *fileStore) walk(ctx context.Context, rel, prefix string, infos *[]Info) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dir := filepath.FromSlash(s.root)
	if rel != "" {
		dir = s.path(rel)
	}
	entries, err := s.fs.List(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e
		if rel != "" {
			name = rel + "/" + e
		}
		if strings.HasSuffix(e, TempSuffix) || checkName(name) != nil {
			continue // a create's temporary file, or a file no name can reach
		}
		fi, err := s.fs.Stat(filepath.Join(dir, e))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted since the listing
		}
		if err != nil {
			return err
		}
		switch {
		case fi.IsDir() && (strings.HasPrefix(name+"/", prefix) || strings.HasPrefix(prefix, name+"/")):
			if err := s.walk(ctx, name, prefix, infos); err != nil {
				return err
			}
		case fi.Mode().IsRegular() && strings.HasPrefix(name, prefix):
			*infos = append(*infos, Info{Name: name, Size: fi.Size(), ModTime: fi.ModTime()})
		}
	}
	return nil
}

func (s *fileStore) Delete(ctx context.Context, name string) error {
	start := time.Now()
	return s.done("delete", name, start, 0, s.delete(ctx, name))
}

func (s *fileStore) delete(ctx context.Context, name string) error {
	if _, err := s.stat(ctx, name); errors.Is(err, ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	final := s.path(name)
	if err := s.fs.Remove(final); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return vfs.SyncDir(s.fs, filepath.Dir(final))
}

// fileObject is an open file:// object.
type fileObject struct {
	s    *fileStore
	name string
	f    vfs.File
	size int64
}

func (o *fileObject) Size() int64 { return o.size }

func (o *fileObject) ReadAt(p []byte, off int64) (int, error) {
	start := time.Now()
	n, err := o.f.ReadAt(p, off)
	if err == io.EOF {
		o.s.m.observe(fileBackend, "read", outcomeOK, start, int64(n))
		return n, io.EOF // io.ReaderAt's end, not a failure: unwrapped
	}
	return n, o.s.done("read", o.name, start, int64(n), err)
}

func (o *fileObject) Close() error {
	if err := o.f.Close(); err != nil {
		return opError("close", joinURL(o.s.String(), o.name), err)
	}
	return nil
}
