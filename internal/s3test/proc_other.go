//go:build !linux

package s3test

import (
	"os"
	"syscall"
)

// sysProcAttr: without Pdeathsig, the server outlives a test binary that dies
// before its cleanup runs.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// tryLock: no cross-process lock here; concurrent test binaries may each
// build, and the rename into place keeps the result whole.
func tryLock(*os.File) (bool, error) { return true, nil }

func unlock(*os.File) {}

// checkXattrs cannot probe here; versitygw reports a filesystem without
// xattrs itself when it starts.
func checkXattrs(string) error { return nil }
