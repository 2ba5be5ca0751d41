package vfs

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// Fault injection: Inject wraps an FS so that tests can fail the n-th
// operation of a kind, kill the "process" at the k-th mutating operation, or
// run out of space. Nothing inside is random; a test picks n or k (often
// every k in turn: run the workload once, read Ops, then crash at each
// k ≤ Ops on a fresh MemFS, take its CrashClone, reopen and check
// invariants).
//
// A failed or crashed operation is not performed: nothing of a failed
// Write reaches the file. Torn writes are the MemFS's business — bytes
// written but not synced are what a crash cuts.

var (
	// ErrInjected is the error of an armed FailAt without an error of its
	// own; ErrCrashed wraps it, so errors.Is(err, ErrInjected) recognises
	// every failure the Injector made up, except ENOSPC, which must look
	// like the real thing.
	ErrInjected = errors.New("vfs: injected error")
	// ErrCrashed is returned by every operation from the crash point on.
	ErrCrashed = fmt.Errorf("vfs: injected crash, the process is dead: %w", ErrInjected)
)

// OpKind is a class of mutating operation the Injector counts.
type OpKind uint8

const (
	OpWrite    OpKind = iota // File.Write and File.WriteAt
	OpSync                   // File.Sync, of files and of directories
	OpRename                 // FS.Rename
	OpCreate                 // FS.Create
	OpRemove                 // FS.Remove and FS.RemoveAll
	OpMkdirAll               // FS.MkdirAll
	OpTruncate               // File.Truncate
	OpLink                   // FS.Link
	numOpKinds
)

var opKindNames = [numOpKinds]string{"write", "sync", "rename", "create", "remove", "mkdirall", "truncate", "link"}

func (k OpKind) String() string {
	if k < numOpKinds {
		return opKindNames[k]
	}
	return fmt.Sprintf("OpKind(%d)", uint8(k))
}

// Injector counts the mutating operations of the FS it is given to and
// fails the ones it is armed for. Reads (Open, OpenReadWrite, OpenDir,
// List, Stat, Read, ReadAt, File.Stat, Preallocate, Close) are not counted;
// they fail only after a crash. The zero value counts and fails nothing.
// An Injector is safe for concurrent use; with concurrent callers the
// numbering follows the order in which operations reach it.
type Injector struct {
	ops    atomic.Int64
	byKind [numOpKinds]atomic.Int64

	mu        sync.Mutex // orders counting with the arms below
	crashed   atomic.Bool
	crashAt   int64 // 0: never
	fails     []armedFailure
	limited   bool
	spaceLeft int64
}

type armedFailure struct {
	n    int64
	kind OpKind
	err  error
}

// Ops returns how many mutating operations have been attempted, the failed
// ones included.
func (inj *Injector) Ops() int64 { return inj.ops.Load() }

// Count returns how many operations of kind have been attempted.
func (inj *Injector) Count(kind OpKind) int64 { return inj.byKind[kind].Load() }

// Crashed reports whether the crash point has been reached.
func (inj *Injector) Crashed() bool { return inj.crashed.Load() }

// FailAt fails the n-th operation of kind (counting from 1 since the
// Injector was made) once, with err, or with ErrInjected if err is nil.
func (inj *Injector) FailAt(n int64, kind OpKind, err error) {
	if err == nil {
		err = ErrInjected
	}
	inj.mu.Lock()
	defer inj.mu.Unlock()
	inj.fails = append(inj.fails, armedFailure{n: n, kind: kind, err: err})
}

// CrashAt kills the process at the k-th mutating operation of any kind
// (counting from 1 since the Injector was made, or at the next one if k
// has passed): that operation and every operation after it, reads
// included, fail with ErrCrashed.
func (inj *Injector) CrashAt(k int64) {
	inj.mu.Lock()
	defer inj.mu.Unlock()
	inj.crashAt = max(k, 1)
}

// NoSpaceAfter lets writes total at most bytes from now on; a write that
// does not fit fails whole with ENOSPC, and later writes that fit succeed.
// Preallocate takes space too, as fallocate does: it fails with ENOSPC when
// the range does not fit, and a write into a reserved range takes nothing
// more. A later call replaces the budget: a test frees space by raising it.
func (inj *Injector) NoSpaceAfter(bytes int64) {
	inj.mu.Lock()
	defer inj.mu.Unlock()
	inj.limited, inj.spaceLeft = true, bytes
}

// SpaceLeft is what is left of the budget NoSpaceAfter set.
func (inj *Injector) SpaceLeft() int64 {
	inj.mu.Lock()
	defer inj.mu.Unlock()
	return inj.spaceLeft
}

// before counts an operation of kind and returns the error to fail it
// with, or nil to let it through.
func (inj *Injector) before(kind OpKind) error {
	inj.mu.Lock()
	defer inj.mu.Unlock()
	total := inj.ops.Add(1)
	nth := inj.byKind[kind].Add(1)
	if inj.crashed.Load() {
		return ErrCrashed
	}
	if inj.crashAt > 0 && total >= inj.crashAt {
		inj.crashed.Store(true)
		return ErrCrashed
	}
	for i, f := range inj.fails {
		if f.kind == kind && f.n == nth {
			inj.fails = append(inj.fails[:i], inj.fails[i+1:]...)
			return f.err
		}
	}
	return nil
}

// alive fails a read after the crash.
func (inj *Injector) alive() error {
	if inj.crashed.Load() {
		return ErrCrashed
	}
	return nil
}

// reserve takes n bytes of the space budget, or answers ENOSPC.
func (inj *Injector) reserve(n int64) error {
	inj.mu.Lock()
	defer inj.mu.Unlock()
	if !inj.limited || n == 0 {
		return nil
	}
	if n > inj.spaceLeft {
		return syscall.ENOSPC
	}
	inj.spaceLeft -= n
	return nil
}

// release returns n reserved bytes that were not written.
func (inj *Injector) release(n int64) {
	inj.mu.Lock()
	defer inj.mu.Unlock()
	if inj.limited {
		inj.spaceLeft += n
	}
}

// Inject returns fs with inj's faults. A nil inj returns fs unchanged.
func Inject(fs FS, inj *Injector) FS {
	if inj == nil {
		return fs
	}
	return &injFS{fs: fs, inj: inj}
}

var _ FS = (*injFS)(nil)

type injFS struct {
	fs  FS
	inj *Injector
}

// mutate runs op unless the Injector fails it.
func (fs *injFS) mutate(kind OpKind, name string, op func() error) error {
	if err := fs.inj.before(kind); err != nil {
		return pathErr(kind.String(), name, err)
	}
	return op()
}

// openFile opens name through open, unless the process has crashed.
func (fs *injFS) openFile(name string, open func(string) (File, error)) (File, error) {
	if err := fs.inj.alive(); err != nil {
		return nil, pathErr("open", name, err)
	}
	return fs.wrap(name)(open(name))
}

// wrap returns a function that puts an opened File behind the Injector.
func (fs *injFS) wrap(name string) func(File, error) (File, error) {
	return func(f File, err error) (File, error) {
		if err != nil {
			return nil, err
		}
		jf := &injFile{File: f, inj: fs.inj, name: name}
		if info, err := f.Stat(); err == nil && !info.IsDir() {
			jf.allocated = info.Size() // what a file holds is allocated already
		}
		return jf, nil
	}
}

func (fs *injFS) Create(name string) (File, error) {
	if err := fs.inj.before(OpCreate); err != nil {
		return nil, pathErr("create", name, err)
	}
	return fs.wrap(name)(fs.fs.Create(name))
}

func (fs *injFS) Open(name string) (File, error) { return fs.openFile(name, fs.fs.Open) }

func (fs *injFS) OpenReadWrite(name string) (File, error) {
	return fs.openFile(name, fs.fs.OpenReadWrite)
}

func (fs *injFS) OpenDir(name string) (File, error) { return fs.openFile(name, fs.fs.OpenDir) }

func (fs *injFS) Rename(oldname, newname string) error {
	return fs.mutate(OpRename, oldname, func() error { return fs.fs.Rename(oldname, newname) })
}

func (fs *injFS) Link(oldname, newname string) error {
	return fs.mutate(OpLink, newname, func() error { return fs.fs.Link(oldname, newname) })
}

func (fs *injFS) Remove(name string) error {
	return fs.mutate(OpRemove, name, func() error { return fs.fs.Remove(name) })
}

func (fs *injFS) RemoveAll(name string) error {
	return fs.mutate(OpRemove, name, func() error { return fs.fs.RemoveAll(name) })
}

func (fs *injFS) MkdirAll(dir string, perm os.FileMode) error {
	return fs.mutate(OpMkdirAll, dir, func() error { return fs.fs.MkdirAll(dir, perm) })
}

func (fs *injFS) List(dir string) ([]string, error) {
	if err := fs.inj.alive(); err != nil {
		return nil, pathErr("open", dir, err)
	}
	return fs.fs.List(dir)
}

func (fs *injFS) Stat(name string) (os.FileInfo, error) {
	if err := fs.inj.alive(); err != nil {
		return nil, pathErr("stat", name, err)
	}
	return fs.fs.Stat(name)
}

// injFile is a File of an injFS. pos mirrors the file offset and
// allocated is the end of the bytes written or reserved, so that writes
// into a preallocated range take no space from the budget.
type injFile struct {
	File
	inj  *Injector
	name string

	mu        sync.Mutex // pos and allocated, over a whole read, write or reservation
	pos       int64
	allocated int64
}

// charge is how many bytes of [off, off+n) are not allocated yet.
func (f *injFile) charge(off, n int64) int64 { return max(0, off+n-max(off, f.allocated)) }

func (f *injFile) fail(op string, err error) error { return pathErr(op, f.name, err) }

func (f *injFile) Read(p []byte) (int, error) {
	if err := f.inj.alive(); err != nil {
		return 0, f.fail("read", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n, err := f.File.Read(p)
	f.pos += int64(n)
	return n, err
}

func (f *injFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.inj.alive(); err != nil {
		return 0, f.fail("readat", err)
	}
	return f.File.ReadAt(p, off)
}

func (f *injFile) Write(p []byte) (int, error) {
	if err := f.inj.before(OpWrite); err != nil {
		return 0, f.fail("write", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	charge := f.charge(f.pos, int64(len(p)))
	if err := f.inj.reserve(charge); err != nil {
		return 0, f.fail("write", err)
	}
	n, err := f.File.Write(p)
	f.inj.release(charge - f.charge(f.pos, int64(n)))
	f.pos += int64(n)
	f.allocated = max(f.allocated, f.pos)
	return n, err
}

// WriteAt is Write at an explicit offset, charged the same way: bytes
// past what the file holds or reserved take space. Bytes of a gap it
// skips are counted as allocated though no space was taken for them, as a
// sparse file's hole would read; callers that need exact accounting write
// contiguously.
func (f *injFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.inj.before(OpWrite); err != nil {
		return 0, f.fail("writeat", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	charge := f.charge(off, int64(len(p)))
	if err := f.inj.reserve(charge); err != nil {
		return 0, f.fail("writeat", err)
	}
	n, err := f.File.WriteAt(p, off)
	f.inj.release(charge - f.charge(off, int64(n)))
	f.allocated = max(f.allocated, off+int64(n))
	return n, err
}

func (f *injFile) Sync() error {
	if err := f.inj.before(OpSync); err != nil {
		return f.fail("sync", err)
	}
	return f.File.Sync()
}

func (f *injFile) Truncate(size int64) error {
	if err := f.inj.before(OpTruncate); err != nil {
		return f.fail("truncate", err)
	}
	return f.File.Truncate(size)
}

func (f *injFile) Stat() (os.FileInfo, error) {
	if err := f.inj.alive(); err != nil {
		return nil, f.fail("stat", err)
	}
	return f.File.Stat()
}

func (f *injFile) Preallocate(off, n int64) error {
	if err := f.inj.alive(); err != nil {
		return f.fail("fallocate", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	charge := f.charge(off, n)
	if err := f.inj.reserve(charge); err != nil {
		return f.fail("fallocate", err)
	}
	if err := f.File.Preallocate(off, n); err != nil {
		f.inj.release(charge)
		return err
	}
	f.allocated = max(f.allocated, off+n)
	return nil
}

// Close always closes the underlying file, so a crashed test leaks no
// descriptors, and reports the crash.
func (f *injFile) Close() error {
	err := f.File.Close()
	if crashed := f.inj.alive(); crashed != nil {
		return f.fail("close", crashed)
	}
	return err
}
