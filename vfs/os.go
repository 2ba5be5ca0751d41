package vfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"
)

// Default is the operating system's filesystem.
var Default FS = osFS{}

type osFS struct{}

type osFile struct{ *os.File }

func (f osFile) Sync() error {
	// fdatasync: the data and the size, not the timestamps.
	return unix.Fdatasync(int(f.Fd()))
}

func (f osFile) Preallocate(off, n int64) error {
	err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, off, n)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		return nil
	}
	return err
}

func wrap(f *os.File, err error) (File, error) {
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Create(name string) (File, error) {
	return wrap(os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644))
}

func (osFS) Open(name string) (File, error) { return wrap(os.Open(name)) }

func (osFS) OpenReadWrite(name string) (File, error) { return wrap(os.OpenFile(name, os.O_RDWR, 0)) }

func (osFS) OpenDir(name string) (File, error) { return wrap(os.Open(name)) }

func (osFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }

// Link is link(2), which never replaces newname: EEXIST if it exists.
func (osFS) Link(oldname, newname string) error {
	return linkError(os.Link(oldname, newname))
}

// linkError marks the answers of a filesystem without hard links as
// ErrLinkUnsupported, naming the filesystem: ENOTSUP/EOPNOTSUPP and ENOSYS
// always, and EPERM unless the source is a directory (which link(2)
// refuses everywhere). Other errors, EEXIST above all, pass unchanged.
func linkError(err error) error {
	var le *os.LinkError
	if !errors.As(err, &le) {
		return err
	}
	switch {
	case errors.Is(le.Err, unix.EOPNOTSUPP), errors.Is(le.Err, unix.ENOSYS):
	case errors.Is(le.Err, unix.EPERM):
		if fi, serr := os.Lstat(le.Old); serr == nil && fi.IsDir() {
			return err
		}
	default:
		return err
	}
	dir := filepath.Dir(le.New)
	return &os.LinkError{Op: le.Op, Old: le.Old, New: le.New,
		Err: fmt.Errorf("%w: %s is on %s (%w)", ErrLinkUnsupported, dir, fsType(dir), le.Err)}
}

// fsType names the filesystem holding dir, for error messages.
func fsType(dir string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return "a filesystem statfs cannot describe (" + err.Error() + ")"
	}
	names := map[int64]string{
		unix.MSDOS_SUPER_MAGIC: "vfat/msdos", unix.EXFAT_SUPER_MAGIC: "exfat", unix.FUSE_SUPER_MAGIC: "fuse",
		unix.SMB_SUPER_MAGIC: "smb", unix.SMB2_SUPER_MAGIC: "smb2", unix.CIFS_SUPER_MAGIC: "cifs",
		unix.NFS_SUPER_MAGIC: "nfs", unix.V9FS_MAGIC: "9p",
	}
	if name, ok := names[int64(st.Type)]; ok {
		return fmt.Sprintf("%s (statfs type %#x)", name, st.Type)
	}
	return fmt.Sprintf("a filesystem of statfs type %#x", st.Type)
}

func (osFS) Remove(name string) error { return os.Remove(name) }

func (osFS) RemoveAll(name string) error { return os.RemoveAll(name) }

func (osFS) MkdirAll(dir string, perm os.FileMode) error { return os.MkdirAll(dir, perm) }

func (osFS) List(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	sort.Strings(names)
	return names, err
}

func (osFS) Stat(name string) (os.FileInfo, error) { return os.Stat(name) }
