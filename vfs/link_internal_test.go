package vfs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestLinkErrorNamesUnsupportedFilesystems: the answers of a filesystem
// without hard links become ErrLinkUnsupported naming the directory and
// its filesystem, keeping the errno; EEXIST, and EPERM for a directory
// source, pass unchanged.
func TestLinkErrorNamesUnsupportedFilesystems(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	newname := filepath.Join(dir, "g")
	for _, errno := range []syscall.Errno{syscall.EOPNOTSUPP, syscall.ENOSYS, syscall.EPERM} {
		err := linkError(&os.LinkError{Op: "link", Old: file, New: newname, Err: errno})
		var le *os.LinkError
		if !errors.Is(err, ErrLinkUnsupported) || !errors.Is(err, errno) || !errors.As(err, &le) {
			t.Errorf("%v: %v, want ErrLinkUnsupported wrapping the errno in an *os.LinkError", errno, err)
		}
		if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "statfs type") {
			t.Errorf("%v: %q does not name the directory and its filesystem", errno, err)
		}
	}
	for _, tc := range []struct {
		old   string
		errno syscall.Errno
	}{{file, syscall.EEXIST}, {dir, syscall.EPERM}, {file, syscall.EXDEV}} {
		in := &os.LinkError{Op: "link", Old: tc.old, New: newname, Err: tc.errno}
		if err := linkError(in); err != error(in) {
			t.Errorf("%v on %s: %v, want it unchanged", tc.errno, tc.old, err)
		}
	}
}
