package catalog

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"

	icebergio "github.com/apache/iceberg-go/io"

	"github.com/rollwal/rollwal/internal/vfs"
)

// fileIO is iceberg-go's file interface over a vfs.FS, so that every
// metadata file iceberg-go writes (manifests, manifest lists) and every
// metadata JSON this package writes is placed durably: a temporary name,
// fsync, rename, fsync of the directory. A crash leaves either the whole
// file under its name or only a temporary file (see isTemp). Locations are
// absolute local paths, optionally as file:// URIs.
type fileIO struct{ fs vfs.FS }

var _ icebergio.WriteFileIO = fileIO{}
var _ icebergio.ReadFileIO = fileIO{}

// tempMarker is in the name of every file being written.
const tempMarker = ".tmp-"

// isTemp reports whether a base name is a file fileIO has not placed yet.
func isTemp(name string) bool {
	return strings.HasPrefix(name, ".") && strings.Contains(name, tempMarker)
}

func localPath(loc string) (string, error) {
	p := strings.TrimPrefix(loc, "file://")
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("catalog: location %q is not an absolute local path", loc)
	}
	return filepath.Clean(p), nil
}

func (f fileIO) Open(name string) (icebergio.File, error) {
	p, err := localPath(name)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	file, err := f.fs.Open(p)
	if err != nil {
		return nil, err
	}
	info, err := file.Stat()
	if err != nil {
		return nil, errors.Join(err, file.Close())
	}
	return &readFile{SectionReader: io.NewSectionReader(file, 0, info.Size()), file: file, info: info}, nil
}

func (f fileIO) ReadFile(name string) ([]byte, error) {
	p, err := localPath(name)
	if err != nil {
		return nil, err
	}
	return vfs.ReadFile(f.fs, p)
}

func (f fileIO) Remove(name string) error {
	p, err := localPath(name)
	if err != nil {
		return err
	}
	return f.fs.Remove(p)
}

func (f fileIO) WriteFile(name string, data []byte) error {
	w, err := f.Create(name)
	if err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		return errors.Join(err, w.(*writeFile).abort())
	}
	return w.Close()
}

// Create starts a file that appears under name, durably, when the writer
// is closed.
func (f fileIO) Create(name string) (icebergio.FileWriter, error) {
	p, err := localPath(name)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(p)
	if err := vfs.MkdirAllDurable(f.fs, dir, 0o755); err != nil {
		return nil, err
	}
	var r [4]byte
	_, _ = rand.Read(r[:])
	tmp := filepath.Join(dir, "."+filepath.Base(p)+tempMarker+hex.EncodeToString(r[:]))
	file, err := f.fs.Create(tmp)
	if err != nil {
		return nil, err
	}
	return &writeFile{fs: f.fs, file: file, tmp: tmp, path: p}, nil
}

type readFile struct {
	*io.SectionReader
	file vfs.File
	info fs.FileInfo
}

func (r *readFile) Stat() (fs.FileInfo, error) { return r.info, nil }
func (r *readFile) Close() error               { return r.file.Close() }

type writeFile struct {
	fs        vfs.FS
	file      vfs.File
	tmp, path string
	closed    bool
}

func (w *writeFile) Write(p []byte) (int, error) { return w.file.Write(p) }

func (w *writeFile) ReadFrom(r io.Reader) (int64, error) {
	return io.Copy(struct{ io.Writer }{w.file}, r)
}

// Close syncs the file, renames it into place and syncs its directory.
func (w *writeFile) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	if err := w.file.Sync(); err != nil {
		return errors.Join(fmt.Errorf("catalog: sync %s: %w", w.path, err), w.file.Close(), w.fs.Remove(w.tmp))
	}
	if err := w.file.Close(); err != nil {
		return errors.Join(err, w.fs.Remove(w.tmp))
	}
	if err := w.fs.Rename(w.tmp, w.path); err != nil {
		return errors.Join(err, w.fs.Remove(w.tmp))
	}
	return vfs.SyncDir(w.fs, filepath.Dir(w.path))
}

func (w *writeFile) abort() error {
	w.closed = true
	return errors.Join(w.file.Close(), w.fs.Remove(w.tmp))
}
