//go:build !linux

package etcdcluster

import (
	"errors"
	"syscall"
)

// sysProcAttr: without Pdeathsig, members outlive a test binary that dies
// before its cleanup runs.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// processStopped cannot observe the process state here; Pause and Resume
// then trust the signal.
func processStopped(int) (bool, error) {
	return false, errors.New("etcdcluster: process state not observable on this platform")
}
