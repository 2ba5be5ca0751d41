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
	"sync"

	icebergio "github.com/apache/iceberg-go/io"

	"github.com/rollwal/rollwal/vfs"
)

// fileIO is iceberg-go's file interface over a vfs.FS, so that every
// metadata file iceberg-go writes (manifests, manifest lists) and every
// metadata JSON this package writes is placed durably: a temporary name,
// fsync, rename, and an fsync of the directory before any record names it. A crash leaves either the whole
// file under its name or only a temporary file (see isTemp). Locations are
// absolute local paths, optionally as file:// URIs.
type fileIO struct {
	fs vfs.FS
	// dirty holds the directories whose renames are not synced yet: one
	// commit writes its manifests, manifest list and metadata file into
	// one directory, which is synced once, before the commit's
	// transaction (syncDirty), instead of after every file.
	dirty *dirtyDirs
}

type dirtyDirs struct {
	mu    sync.Mutex
	dirs  map[string]bool
	files []vfs.File // placed, not synced yet
}

func newFileIO(fs vfs.FS) fileIO { return fileIO{fs: fs, dirty: &dirtyDirs{dirs: map[string]bool{}}} }

func (d *dirtyDirs) add(dir string, f vfs.File) {
	d.mu.Lock()
	d.dirs[dir] = true
	d.files = append(d.files, f)
	d.mu.Unlock()
}

// syncDirty makes every placed file durable: the files and their
// directories are synced at once, so the disk commits them together (the
// renames happened at Close; until every sync returned, no etcd record may
// name the files). A crash before leaves files no record names, which
// orphan removal deletes unread.
func (f fileIO) syncDirty() error {
	f.dirty.mu.Lock()
	defer f.dirty.mu.Unlock()
	files, dirs := f.dirty.files, f.dirty.dirs
	f.dirty.files, f.dirty.dirs = nil, map[string]bool{}
	errs := make([]error, len(files)+len(dirs))
	var wg sync.WaitGroup
	for i, file := range files {
		wg.Go(func() {
			if err := errors.Join(file.Sync(), file.Close()); err != nil {
				errs[i] = fmt.Errorf("catalog: sync metadata file: %w", err)
			}
		})
	}
	slot := len(files)
	for dir := range dirs {
		i := slot // each sync its own slot: slot moves on before the goroutine runs
		wg.Go(func() {
			if err := vfs.SyncDir(f.fs, dir); err != nil {
				errs[i] = fmt.Errorf("catalog: sync %s: %w", dir, err)
			}
		})
		slot++
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		// Unsynced directories stay dirty: the next sync retries them.
		for dir := range dirs {
			f.dirty.dirs[dir] = true
		}
		return err
	}
	return nil
}

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
	return &writeFile{fs: f.fs, file: file, tmp: tmp, path: p, dirty: f.dirty}, nil
}

// writeTemp writes data to path, to be synced with the placed files by
// the next syncDirty; it is not renamed, and its directory is not synced
// (the caller renames it later and syncs that).
func (f fileIO) writeTemp(path string, data []byte) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("temporary file %q: want an absolute path", path)
	}
	if err := vfs.MkdirAllDurable(f.fs, filepath.Dir(path), 0o755); err != nil {
		return err
	}
	file, err := f.fs.Create(path)
	if err != nil {
		return err
	}
	if _, err := file.Write(data); err != nil {
		return errors.Join(err, file.Close(), f.fs.Remove(path))
	}
	f.dirty.mu.Lock()
	f.dirty.files = append(f.dirty.files, file)
	f.dirty.mu.Unlock()
	return nil
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
	dirty     *dirtyDirs
}

func (w *writeFile) Write(p []byte) (int, error) { return w.file.Write(p) }

func (w *writeFile) ReadFrom(r io.Reader) (int64, error) {
	return io.Copy(struct{ io.Writer }{w.file}, r)
}

// Close renames the file into place (readable at once); syncDirty makes
// it and its directory durable.
func (w *writeFile) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	if err := w.fs.Rename(w.tmp, w.path); err != nil {
		return errors.Join(err, w.file.Close(), w.fs.Remove(w.tmp))
	}
	w.dirty.add(filepath.Dir(w.path), w.file)
	return nil
}

func (w *writeFile) abort() error {
	w.closed = true
	return errors.Join(w.file.Close(), w.fs.Remove(w.tmp))
}
