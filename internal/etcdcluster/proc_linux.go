package etcdcluster

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// sysProcAttr makes the kernel SIGKILL a member when the thread that started
// it exits, so members die with the test binary even without cleanup.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// processStopped reports whether pid is in the stopped state (SIGSTOP).
func processStopped(pid int) (bool, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false, err
	}
	// pid (comm) state ...: comm may contain spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false, fmt.Errorf("etcdcluster: malformed /proc/%d/stat", pid)
	}
	state := b[i+2]
	return state == 'T' || state == 't', nil
}
