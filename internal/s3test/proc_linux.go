package s3test

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// sysProcAttr makes the kernel SIGKILL the server when the thread that
// started it exits, so it dies with the test binary even without cleanup.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// tryLock takes an exclusive flock on f without blocking.
func tryLock(f *os.File) (bool, error) {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}

func unlock(f *os.File) { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }

// checkXattrs sets and removes a user xattr on dir: versitygw's posix
// backend keeps object metadata (ETags, content types) in xattrs and cannot
// serve from a filesystem without them.
func checkXattrs(dir string) error {
	const name = "user.s3test.probe"
	err := syscall.Setxattr(dir, name, []byte("1"), 0)
	if err == nil {
		_ = syscall.Removexattr(dir, name)
		return nil
	}
	var fs syscall.Statfs_t
	fsType := "unknown"
	if syscall.Statfs(dir, &fs) == nil {
		fsType = fmt.Sprintf("0x%x", fs.Type)
	}
	return fmt.Errorf("s3test: the filesystem of %s (statfs type %s; TMPDIR=%q) does not support user "+
		"extended attributes (setxattr: %v), which versitygw's posix backend needs for object metadata; "+
		"point TMPDIR at ext4, xfs, btrfs or a tmpfs with user xattrs", dir, fsType, os.Getenv("TMPDIR"), err)
}
