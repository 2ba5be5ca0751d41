package sim

import (
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/rollwal/rollwal/vfs"
)

// procFS is one writer process's view of the shared storage. It can stall
// the process at one of its next filesystem calls (descheduled, a GC pause,
// a slow disk: the others run on meanwhile), and it dies with the process:
// once killed, every call fails, so a killed writer acknowledges nothing
// more, as after a SIGKILL, while the storage keeps what it wrote.
type procFS struct {
	fs     vfs.FS
	killed atomic.Bool
	// calls counts every call; the stall hits the call numbered stallAt
	// (0: none armed) and sleeps stallFor.
	calls, stallAt atomic.Int64
	stallFor       atomic.Int64
	// beforeSync, if set, is told of every File.Sync before it runs.
	beforeSync func(name string)
}

// errKilled is what a killed process's filesystem calls return; it wraps
// vfs.ErrInjected, which the checker knows as a fault.
var errKilled = fmt.Errorf("sim: the writer process was killed: %w", vfs.ErrInjected)

func newProcFS(fs vfs.FS) *procFS { return &procFS{fs: fs} }

// stall arms a stall of d at the n-th call from now.
func (p *procFS) stall(n int64, d time.Duration) {
	p.stallFor.Store(int64(d))
	p.stallAt.Store(p.calls.Load() + n)
}

func (p *procFS) kill() { p.killed.Store(true) }

// enter runs before every call: the stall, then the death check.
func (p *procFS) enter(op, name string) error {
	if n := p.calls.Add(1); n == p.stallAt.Load() {
		time.Sleep(time.Duration(p.stallFor.Load()))
	}
	if p.killed.Load() {
		return &os.PathError{Op: op, Path: name, Err: errKilled}
	}
	return nil
}

func (p *procFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &procFile{File: f, p: p, name: name}, nil
}

func (p *procFS) Create(name string) (vfs.File, error) {
	if err := p.enter("create", name); err != nil {
		return nil, err
	}
	f, err := p.fs.Create(name)
	return p.wrap(name, f, err)
}

func (p *procFS) Open(name string) (vfs.File, error) {
	if err := p.enter("open", name); err != nil {
		return nil, err
	}
	f, err := p.fs.Open(name)
	return p.wrap(name, f, err)
}

func (p *procFS) OpenReadWrite(name string) (vfs.File, error) {
	if err := p.enter("open", name); err != nil {
		return nil, err
	}
	f, err := p.fs.OpenReadWrite(name)
	return p.wrap(name, f, err)
}

func (p *procFS) OpenDir(name string) (vfs.File, error) {
	if err := p.enter("open", name); err != nil {
		return nil, err
	}
	f, err := p.fs.OpenDir(name)
	return p.wrap(name, f, err)
}

func (p *procFS) Rename(oldname, newname string) error {
	if err := p.enter("rename", oldname); err != nil {
		return err
	}
	return p.fs.Rename(oldname, newname)
}

func (p *procFS) Link(oldname, newname string) error {
	if err := p.enter("link", newname); err != nil {
		return err
	}
	return p.fs.Link(oldname, newname)
}

func (p *procFS) Remove(name string) error {
	if err := p.enter("remove", name); err != nil {
		return err
	}
	return p.fs.Remove(name)
}

func (p *procFS) RemoveAll(name string) error {
	if err := p.enter("remove", name); err != nil {
		return err
	}
	return p.fs.RemoveAll(name)
}

func (p *procFS) MkdirAll(dir string, perm os.FileMode) error {
	if err := p.enter("mkdir", dir); err != nil {
		return err
	}
	return p.fs.MkdirAll(dir, perm)
}

func (p *procFS) List(dir string) ([]string, error) {
	if err := p.enter("open", dir); err != nil {
		return nil, err
	}
	return p.fs.List(dir)
}

func (p *procFS) Stat(name string) (os.FileInfo, error) {
	if err := p.enter("stat", name); err != nil {
		return nil, err
	}
	return p.fs.Stat(name)
}

// procFile is a File opened through a procFS.
type procFile struct {
	vfs.File
	p    *procFS
	name string
}

func (f *procFile) Read(b []byte) (int, error) {
	if err := f.p.enter("read", f.name); err != nil {
		return 0, err
	}
	return f.File.Read(b)
}

func (f *procFile) ReadAt(b []byte, off int64) (int, error) {
	if err := f.p.enter("readat", f.name); err != nil {
		return 0, err
	}
	return f.File.ReadAt(b, off)
}

func (f *procFile) Write(b []byte) (int, error) {
	if err := f.p.enter("write", f.name); err != nil {
		return 0, err
	}
	return f.File.Write(b)
}

func (f *procFile) WriteAt(b []byte, off int64) (int, error) {
	if err := f.p.enter("write", f.name); err != nil {
		return 0, err
	}
	return f.File.WriteAt(b, off)
}

func (f *procFile) Sync() error {
	if err := f.p.enter("sync", f.name); err != nil {
		return err
	}
	if f.p.beforeSync != nil {
		f.p.beforeSync(f.name)
	}
	return f.File.Sync()
}

func (f *procFile) Stat() (os.FileInfo, error) {
	if err := f.p.enter("stat", f.name); err != nil {
		return nil, err
	}
	return f.File.Stat()
}

func (f *procFile) Preallocate(off, n int64) error {
	if err := f.p.enter("fallocate", f.name); err != nil {
		return err
	}
	return f.File.Preallocate(off, n)
}

func (f *procFile) Truncate(size int64) error {
	if err := f.p.enter("truncate", f.name); err != nil {
		return err
	}
	return f.File.Truncate(size)
}

// Close always closes the underlying file, killed or not.
func (f *procFile) Close() error { return f.File.Close() }
